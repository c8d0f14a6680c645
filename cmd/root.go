package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/internal/devopts"
)

// Deps are what the command tree needs from outside: the standard streams,
// the environment, and the embedded dev server (injected so that only the
// binary links go.temporal.io/server).
type Deps struct {
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads environment variables (os.Getenv by default).
	Getenv func(string) string
	// StartDevServer starts an embedded Temporal server; nil disables
	// `wdc server start-dev` and the self-contained demo.
	StartDevServer devopts.StartFunc
	// ClockOffset, when set, is how far `wdc agent`'s wall clock is off
	// in the times it signs at (identity.Signer.ClockOffset); nil: not
	// off. A process's own wall clock cannot be skewed alone, so tests
	// play a skewed agent with it.
	ClockOffset func() time.Duration
}

// Exit codes.
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitUsage    = 2
	ExitNoResult = 3
	// ExitProgramFailed: the task COMPLETED (a result was accepted) but the
	// program exited non-zero or its outputs were rejected.
	ExitProgramFailed = 4
	// ExitUnavailable: the process the command needs is not there — no
	// control plane (or agent) polls its task queue, so nothing was sent;
	// or it did not answer within --control-plane-timeout, so the request
	// was sent and may still take effect (see wdcclient.UnavailableError).
	ExitUnavailable = 5
	// ExitNotCurrent: `wdc exec` was refused by the fence — its claim does
	// not hold the task's current lease (nothing was started), or its
	// result was rejected.
	ExitNotCurrent = 6
)

// usageError is bad input: exit code 2, nothing was changed.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// exitError carries a specific exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// app is the state shared by every command.
type app struct {
	deps   Deps
	global globalOptions
	// metrics, when set (--metrics-address), is every client's SDK
	// metrics handler.
	metrics client.MetricsHandler
	// heartbeat is the most frequent heartbeat this process sends to
	// Temporal; every connection's keepalive follows it (worker.KeepAlive).
	// Zero: fleet.DefaultHeartbeatInterval.
	heartbeat time.Duration
	// identity is every client's SDK identity (the identity of the events
	// it causes); empty: api.CLIIdentity of this host.
	identity string
}

// Main runs the wdc CLI with args (without the program name) and returns
// the exit code. SIGINT and SIGTERM cancel the command's context.
func Main(deps Deps, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return MainContext(ctx, deps, args)
}

// MainContext is Main with the command's context given: cancelling ctx
// stops the command as Ctrl-C would (tests use it to stop a command that
// waits).
func MainContext(ctx context.Context, deps Deps, args []string) int {
	if deps.Stdout == nil {
		deps.Stdout = os.Stdout
	}
	if deps.Stderr == nil {
		deps.Stderr = os.Stderr
	}
	if deps.Getenv == nil {
		deps.Getenv = os.Getenv
	}
	root := NewRootCommand(deps)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	format := ""
	if f := root.PersistentFlags().Lookup("log-format"); f != nil {
		format = f.Value.String()
	}
	writeNotice(deps.Stderr, format, slog.LevelError, oneLine(err.Error()))
	return exitCode(err)
}

// exitCode is the one mapping from a command's error to the exit code
// (non-nil err; see the Exit constants).
func exitCode(err error) int {
	var ue usageError
	var ee exitError
	var unavailable *wdcclient.UnavailableError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue), strings.HasPrefix(err.Error(), "required flag(s)"):
		return ExitUsage
	case errors.As(err, &unavailable):
		return ExitUnavailable
	}
	return ExitFailure
}

// NewRootCommand builds the command tree.
func NewRootCommand(deps Deps) *cobra.Command {
	a := &app{deps: deps}
	root := &cobra.Command{
		Use:   "wdc",
		Short: "wdc runs compute tasks on a fleet of workers, on Temporal, with leases and fencing tokens",
		Long: `wdc is a control plane for a fleet of compute workers, built on Temporal.

A run hands out tasks; each task runs as attempts on workers, each attempt
under a lease with a fencing token. When a worker dies, stalls or comes back
late, wdc retries the same envelope on a new attempt with a new fence, and
only the attempt holding the current fence may hand its result to the run.

Start here:
  wdc demo worker-leases            the reference retry demo, self-contained
  wdc server start-dev              an embedded Temporal server with Web UI
  wdc control-plane                 the workflows and control activities
  wdc agent --worker-id worker-a    a fleet worker (Local attempts; --launcher ray|k8s|external)
  wdc exec --task-id T ...          run one granted attempt here (what Ray jobs, Kubernetes pods, external launchers run)
  wdc tasks submit FILE --wait      submit a task and follow its leases`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Settings a flag or TEMPORAL_* variable left unset come from the
		// Temporal CLI's profile.
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			return a.global.applyProfile(c.Flags(), deps.Getenv)
		},
	}
	root.SetOut(deps.Stdout)
	root.SetErr(deps.Stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%v (see '%s --help')", err, c.CommandPath())}
	})
	a.global.bind(root, deps.Getenv)
	var showVersion bool
	root.Flags().BoolVar(&showVersion, "version", false, "print wdc's version and exit (what 'wdc version' prints)")
	root.AddCommand(
		a.newServerCommand(),
		a.newWorkersCommand(),
		a.newTasksCommand(),
		a.newRunsCommand(),
		a.newAgentCommand(),
		a.newExecCommand(),
		a.newControlPlaneCommand(),
		a.newDemoCommand(),
		a.newBenchCommand(),
		a.newVersionCommand(),
	)
	// Unknown subcommands and bad arguments are usage errors too; a group
	// without a subcommand prints its help.
	for _, c := range allCommands(root) {
		if c.HasSubCommands() && c.RunE == nil && c.Run == nil {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(c *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usagef("unknown command %q for %q (see '%s --help')", args[0], c.CommandPath(), c.CommandPath())
				}
				return c.Help()
			}
			continue
		}
		c.Args = wrapArgs(c.Args)
	}
	groupRunE := root.RunE
	root.RunE = func(c *cobra.Command, args []string) error {
		if showVersion {
			if len(args) > 0 {
				return usagef("--version takes no arguments (see 'wdc --help')")
			}
			return a.printVersion()
		}
		return groupRunE(c, args)
	}
	return root
}

func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, allCommands(sub)...)
	}
	return out
}

func wrapArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if v == nil {
			return nil
		}
		if err := v(c, args); err != nil {
			return usagef("%v (see '%s --help')", err, c.CommandPath())
		}
		return nil
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
