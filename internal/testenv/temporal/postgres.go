package temporaltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Postgres is a throwaway PostgreSQL with Temporal's schema, run by
// tools/postgres.sh in Dir on 127.0.0.1:Port.
type Postgres struct {
	Dir  string
	Port int
	// Tools is tools/build.sh's directory (ToolsDir).
	Tools string
	// Command makes the command that runs a program (default
	// exec.Command): a test that runs PostgreSQL elsewhere, in a network
	// namespace say, wraps it.
	Command func(name string, args ...string) *exec.Cmd
}

// NewPostgres returns a Postgres on port in a new directory under the
// system's temporary directory (the postgres user, who runs PostgreSQL
// for root, cannot enter a test's own temporary directory).
func NewPostgres(tools string, port int) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "wdc-temporal-pg-")
	if err != nil {
		return nil, err
	}
	return &Postgres{Dir: dir, Port: port, Tools: tools}, nil
}

// Start creates the cluster, starts it and sets up Temporal's databases
// (tools/postgres.sh start).
func (p *Postgres) Start() error { return p.run("start", p.Dir, strconv.Itoa(p.Port)) }

// Stop stops it at once, as a crash would (it recovers on Restart).
func (p *Postgres) Stop() error { return p.run("stop", p.Dir) }

// Restart starts a stopped cluster again.
func (p *Postgres) Restart() error { return p.run("restart", p.Dir, strconv.Itoa(p.Port)) }

// Remove stops the cluster and removes its directory.
func (p *Postgres) Remove() error {
	stopErr := p.Stop()
	return errors.Join(stopErr, os.RemoveAll(p.Dir))
}

func (p *Postgres) run(args ...string) error {
	_, self, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(self), "..", "..", "..", "tools", "postgres.sh")
	command := p.Command
	if command == nil {
		command = exec.Command
	}
	cmd := command(script, args...)
	cmd.Dir = p.Dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", EnvTools + "=" + p.Tools}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("tools/postgres.sh %s: %w\n%s", args[0], err, out)
	}
	return nil
}

// RegisterNamespace registers namespace ns at the frontend address
// (retention one day) unless it exists, as temporalio/auto-setup does, and
// waits until the frontend serves calls in it.
func RegisterNamespace(ctx context.Context, address, ns string) error {
	nc, err := client.NewNamespaceClient(client.Options{HostPort: address, Logger: quiet{}})
	if err != nil {
		return err
	}
	defer nc.Close()
	err = nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("register namespace %s: %w", ns, err)
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: address, Namespace: ns, Logger: quiet{}})
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		// A call in the namespace: the frontend's namespace cache has it.
		if _, err = c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: ns}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s not served: %w", ns, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type quiet struct{}

func (quiet) Debug(string, ...interface{}) {}
func (quiet) Info(string, ...interface{})  {}
func (quiet) Warn(string, ...interface{})  {}
func (quiet) Error(string, ...interface{}) {}
