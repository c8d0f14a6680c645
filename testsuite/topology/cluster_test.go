package topology

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	wdcclient "github.com/wdc-runtime/wdc/client"
	temporaltest "github.com/wdc-runtime/wdc/internal/testenv/temporal"
	"github.com/wdc-runtime/wdc/worker"
)

// namespace is the namespace the cluster creates and wdc uses.
const namespace = temporaltest.Namespace

// cluster is a running production topology: PostgreSQL, the official
// temporal-server, and wdc processes started with spawn.
type cluster struct {
	t         *testing.T
	tools     string // tools/build.sh's directory
	root      string // temporal-server --root: config/development.yaml
	frontend  int    // frontend gRPC port; the other services' ports are in the config
	server    *exec.Cmd
	serverLog string
	dataDir   string // the wdc processes' shared --data-dir (blob store, task dirs)
	client    client.Client
	wdc       *wdcclient.Client
}

// proc is a wdc subprocess.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

// startCluster starts PostgreSQL with Temporal's schema, the official
// temporal-server on free ports, and creates the namespace. Everything
// stops when the test ends.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	tools, err := temporaltest.ToolsDir()
	require.NoError(t, err)
	c := &cluster{t: t, tools: tools, dataDir: t.TempDir()}
	ports := freePorts(t, 10)
	cfg := temporaltest.Config{PostgresPort: ports[0], Frontend: ports[1], FrontendMembership: ports[2], FrontendHTTP: ports[3],
		History: ports[4], HistoryMembership: ports[5], Matching: ports[6], MatchingMembership: ports[7],
		Worker: ports[8], WorkerMembership: ports[9]}
	c.frontend = cfg.Frontend

	pg, err := temporaltest.NewPostgres(c.tools, cfg.PostgresPort)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Remove() })
	began := time.Now()
	require.NoError(t, pg.Start(), "PostgreSQL with Temporal's schema")
	t.Logf("PostgreSQL with Temporal's schema on 127.0.0.1:%d in %s", cfg.PostgresPort, time.Since(began).Round(100*time.Millisecond))

	c.root = t.TempDir()
	require.NoError(t, temporaltest.WriteRoot(c.root, cfg))
	c.serverLog = filepath.Join(t.TempDir(), "temporal-server.log")
	t.Cleanup(func() {
		c.killServer()
		if t.Failed() {
			t.Logf("temporal-server log (last lines):\n%s", tail(c.serverLog, 40))
		}
	})
	c.startServer()

	c.client, err = client.Dial(client.Options{HostPort: c.address(), Namespace: namespace, Logger: quietLogger{},
		ConnectionOptions: client.ConnectionOptions{DialOptions: worker.DialOptions()}})
	require.NoError(t, err)
	t.Cleanup(c.client.Close)
	c.wdc = &wdcclient.Client{C: c.client}

	// What temporalio/auto-setup does after the schema: create the namespace.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, temporaltest.RegisterNamespace(ctx, c.address(), namespace))
	return c
}

// address is the frontend's host:port.
func (c *cluster) address() string { return fmt.Sprintf("127.0.0.1:%d", c.frontend) }

// startServer starts temporal-server on the cluster's config and waits
// until the frontend serves.
func (c *cluster) startServer() {
	t := c.t
	t.Helper()
	logf, err := os.OpenFile(c.serverLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer logf.Close()
	c.server = exec.Command(filepath.Join(c.tools, "bin", "temporal-server"), temporaltest.ServerArgs(c.root)...)
	c.server.Stdout, c.server.Stderr = logf, logf
	c.server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	began := time.Now()
	require.NoError(t, c.server.Start())
	exited := make(chan error, 1)
	go func(s *exec.Cmd) { exited <- s.Wait() }(c.server)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("temporal-server exited: %v\n%s", err, tail(c.serverLog, 40))
		default:
		}
		if serving(c.address()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("temporal-server not serving on %s after 60 s\n%s", c.address(), tail(c.serverLog, 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("temporal-server (pid %d) serving on %s after %s", c.server.Process.Pid, c.address(), time.Since(began).Round(100*time.Millisecond))
}

// serving reports whether a Temporal frontend answers on address.
func serving(address string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: address, Logger: quietLogger{}})
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err == nil
}

// killServer kills temporal-server (SIGKILL, no shutdown) and waits until
// its frontend port is free.
func (c *cluster) killServer() {
	if c.server == nil {
		return
	}
	_ = syscall.Kill(-c.server.Process.Pid, syscall.SIGKILL)
	c.server = nil
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		l, err := net.Listen("tcp", c.address())
		if err == nil {
			l.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// spawn starts this test binary as `wdc ARGS --address … --data-dir …`;
// its output goes to a log that the test prints if it fails.
func (c *cluster) spawn(name string, args ...string) *proc {
	t := c.t
	t.Helper()
	p := &proc{name: name, log: filepath.Join(t.TempDir(), name+".log")}
	logf, err := os.Create(p.log)
	require.NoError(t, err)
	p.cmd = c.wdcCmd(args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_, _ = p.cmd.Process.Wait()
		logf.Close()
		if t.Failed() {
			t.Logf("%s log (last lines):\n%s", name, tail(p.log, 30))
		}
	})
	return p
}

// waitLog waits until p's log contains s.
func (p *proc) waitLog(t *testing.T, timeout time.Duration, s string) {
	t.Helper()
	waitFor(t, timeout, fmt.Sprintf("%q in %s's log", s, p.name), func() bool {
		b, _ := os.ReadFile(p.log)
		return strings.Contains(string(b), s)
	})
}

// freePorts returns n distinct free TCP ports on 127.0.0.1 below 32768:
// Temporal's SQL schema stores membership ports as smallint, so the
// kernel's ephemeral ports (from 32768) make the server fail to start.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for try := 0; len(ports) < n; try++ {
		require.Less(t, try, 1000, "no free ports in 20000-32767")
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12768)))
		if err != nil {
			continue
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// waitFor polls cond every 100 ms until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if len(line) > 300 { // the server's JSON lines carry stack traces
			line = line[:300] + "…"
		}
		lines = append(lines, line)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}
