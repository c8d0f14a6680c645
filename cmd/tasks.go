package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/lease"
)

func (a *app) newTasksCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "tasks",
		Short: "Submit, follow, inspect and cancel tasks",
		Long: `A task is one WdcTask workflow (ID wdc-task/<task-id>), a child of its run. It
runs as attempts, each under a lease with a fencing token; a task ends COMPLETED
(a result was accepted, whatever the program's exit code), RETRIES_EXHAUSTED (no
attempt produced a result within --max-attempts) or CANCELLED. Never FAILED:
losing a worker or a lease is a retry, not a failure.`,
	}
	c.AddCommand(a.newTasksSubmitCommand(), a.newTasksWaitCommand(), a.newTasksStatusCommand(), a.newTasksListCommand(),
		a.newTasksResultCommand(), a.newTasksLogsCommand(), a.newTasksCancelCommand())
	return c
}

// taskOptionFlags are the retry and liveness policy flags.
type taskOptionFlags struct {
	leaseTTL          time.Duration
	heartbeatInterval time.Duration
	maxAttempts       int64
	backoffInitial    time.Duration
	backoffMax        time.Duration
	launchTimeout     time.Duration
}

func (t *taskOptionFlags) bind(c *cobra.Command) {
	f := c.Flags()
	f.DurationVar(&t.leaseTTL, "lease-ttl", api.DefaultLeaseTTL, "a lease without a heartbeat for this long expires (retry, not failure); 1s to 168h")
	f.DurationVar(&t.heartbeatInterval, "heartbeat-interval", 0, "how often the executor heartbeats (default: lease TTL / 3)")
	f.Int64Var(&t.maxAttempts, "max-attempts", api.DefaultMaxAttempts, "attempts before the task ends RETRIES_EXHAUSTED")
	f.DurationVar(&t.backoffInitial, "backoff-initial", lease.DefaultBackoff.Initial, "wait before the first retry (doubles per retry, with jitter)")
	f.DurationVar(&t.backoffMax, "backoff-max", lease.DefaultBackoff.Max, "longest wait between retries")
	f.DurationVar(&t.launchTimeout, "launch-timeout", 0, "how long a launch may wait for the worker's agent (default: lease TTL)")
}

func (t *taskOptionFlags) options() (api.TaskOptions, error) {
	// Zero means "default" in api.TaskOptions; on the command line it is a
	// mistake.
	switch {
	case t.leaseTTL < time.Second:
		return api.TaskOptions{}, usagef("--lease-ttl %s: must be at least 1s", t.leaseTTL)
	case t.maxAttempts < 1:
		return api.TaskOptions{}, usagef("--max-attempts %d: must be at least 1", t.maxAttempts)
	case t.backoffInitial <= 0:
		return api.TaskOptions{}, usagef("--backoff-initial %s: must be positive", t.backoffInitial)
	case t.heartbeatInterval < 0:
		return api.TaskOptions{}, usagef("--heartbeat-interval %s: must not be negative", t.heartbeatInterval)
	case t.launchTimeout < 0:
		return api.TaskOptions{}, usagef("--launch-timeout %s: must not be negative", t.launchTimeout)
	}
	o := api.TaskOptions{
		LeaseTTL: t.leaseTTL, HeartbeatInterval: t.heartbeatInterval, MaxAttempts: t.maxAttempts,
		Backoff:       lease.Backoff{Initial: t.backoffInitial, Max: t.backoffMax, Multiplier: lease.DefaultBackoff.Multiplier, Jitter: lease.DefaultBackoff.Jitter},
		LaunchTimeout: t.launchTimeout,
	}
	if err := o.WithDefaults().Validate(); err != nil {
		return o, usagef("%v", flagNames(err.Error()))
	}
	return o, nil
}

// flagNames rewrites option field names to their flags in messages.
func flagNames(msg string) string {
	r := strings.NewReplacer("lease_ttl", "--lease-ttl", "heartbeat_interval", "--heartbeat-interval", "max_attempts", "--max-attempts",
		"backoff.initial", "--backoff-initial", "backoff.max", "--backoff-max", "launch_timeout", "--launch-timeout")
	return r.Replace(msg)
}

func (a *app) newTasksSubmitCommand() *cobra.Command {
	var (
		opts    taskOptionFlags
		dataDir string
		blobURL string
		wait    bool
		batch   string
		svid    svidFlags
	)
	c := &cobra.Command{
		Use:   "submit ENVELOPE | --batch FILE",
		Short: "Submit a task (a JSON envelope) to its run; --wait follows it to the end",
		Long: `Submit the task described by an envelope file ("-" reads stdin). The envelope
is decoded strictly: unknown fields, wrong types and missing required fields are
refused with the field named (exit 2), and nothing is started.

Input files given by "path" are copied into the blob store (--blob-url, default
under --data-dir) and named by their SHA-256 digest in the sealed envelope, whose
digest every attempt carries. The task joins run <run_id>, which is created if needed.

With --wait, progress lines follow the task: lease granted, attempt running,
lease expired / worker lost, retry, result accepted. Exit codes: 0 when the
task COMPLETED with the program's exit code 0; 4 when it COMPLETED but the
program failed (non-zero exit code, or outputs rejected); 3 when it ended
RETRIES_EXHAUSTED or CANCELLED. With -o json, progress goes to stderr and the
final task view to stdout.

A control plane must be polling wdc-control: without one the command exits 5
within a few seconds and nothing is submitted. Once submitted, --wait is not
bounded: if the control plane goes away, a warning goes to stderr and
following goes on (the task resumes when a control plane is back).

With --batch FILE, FILE holds one envelope per line (JSON Lines; "-" reads
stdin; blank lines are skipped). Every line is checked first — fields,
launcher, input paths, task IDs repeated in the file — and if any line is bad
all bad lines are listed ("line N: field: why", exit 2) and nothing is
submitted. Then the tasks are added to their runs up to 100 per update, in
file order, with a progress bar (a line per batch when stderr is not a
terminal). The options (--lease-ttl, ...) apply to every task. A task whose ID
was used by another run is reported with its line (exit 1); the others are
submitted. --wait does not apply to a batch: follow the run with
'wdc runs status RUN_ID'.

A control plane with identity required takes tasks only from a submitter:
give your submitter SVID (--svid-dir, --spiffe-socket), or --ca-dir
(WDC_CA_DIR) to sign as submitter $USER from 'wdc server start-dev''s issuer.`,
		Example: `  wdc tasks submit examples/checksum.json --wait
  wdc tasks submit task.json --lease-ttl 1m --max-attempts 3 -o json
  cat task.json | wdc tasks submit -
  wdc tasks submit --batch sweep.jsonl
  generate-envelopes | wdc tasks submit --batch - -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			o, err := opts.options()
			if err != nil {
				return err
			}
			if err := a.global.validate(); err != nil {
				return err
			}
			switch {
			case batch != "" && len(args) > 0:
				return usagef("give an ENVELOPE or --batch FILE, not both")
			case batch != "" && wait:
				return usagef("--wait follows one task; with --batch, follow the run with 'wdc runs status RUN_ID'")
			case batch != "":
				return a.submitBatch(c.Context(), batch, o, dataDir, blobURL, &svid)
			case len(args) == 0:
				return usagef("give an ENVELOPE file (\"-\" for stdin) or --batch FILE")
			}
			env, base, err := decodeEnvelopeFile(args[0])
			if err != nil {
				return err
			}
			ctx := c.Context()
			return a.withControlPlane(ctx, func(wc *wdcclient.Client) error {
				put := blobstore.HashFile
				var store *blobstore.Store
				if len(env.Inputs) > 0 {
					if store, err = a.openStore(ctx, dataDir, blobURL); err != nil {
						return err
					}
					defer store.Close()
					put = putFile(ctx, store)
					for i, in := range env.Inputs {
						if in.Digest == "" {
							continue
						}
						ok, err := store.Has(ctx, in.Digest)
						if err != nil {
							return fmt.Errorf("%s: inputs[%d].digest: %w", args[0], i, err)
						}
						if !ok {
							return usagef("%s: inputs[%d].digest: %s is not in the blob store %s (give a path instead, or use the blob store that holds it)", args[0], i, in.Digest, store)
						}
					}
				}
				sealed, err := sealEnvelope(env, base, put)
				if err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				if err := storeEnvelope(ctx, store, sealed); err != nil {
					return fmt.Errorf("%s: %w", args[0], err)
				}
				var res api.AddTaskResult
				err = svid.withSigner(ctx, wc, func() (err error) {
					res, err = wc.SubmitTask(ctx, sealed, o)
					return err
				})
				if err != nil {
					return appError(err)
				}
				if !res.Existing {
					a.warnIfNoWorkerCanFit(ctx, wc, sealed)
				}
				note := ""
				if res.Existing {
					note = "already exists with this envelope; not started again"
					if v, err := wc.Task(ctx, res.TaskID); err == nil && v.State.Terminal() {
						note = fmt.Sprintf("already exists and ended %s; task IDs are never reused: give it a new task_id to run it again", v.State)
					}
				}
				if !wait {
					return a.emit(res, func(w io.Writer) error {
						if note != "" {
							fmt.Fprintf(w, "task %s %s\n", res.TaskID, note)
							return nil
						}
						fmt.Fprintf(w, "task %s submitted to run %s\n  workflow %s\n  envelope %s\n", res.TaskID, sealed.RunID, res.WorkflowID, res.EnvelopeDigest)
						return nil
					})
				}
				if note != "" {
					fmt.Fprintf(a.deps.Stderr, "wdc: task %s %s\n", res.TaskID, note)
				} else if a.global.output == "text" {
					fmt.Fprintf(a.deps.Stdout, "task %s submitted to run %s (envelope %s)\n", res.TaskID, sealed.RunID, res.EnvelopeDigest)
				}
				return a.follow(ctx, wc, res.TaskID, false)
			})
		},
	}
	opts.bind(c)
	c.Flags().StringVar(&dataDir, "data-dir", "", dataDirHelp)
	c.Flags().StringVar(&blobURL, "blob-url", "", blobURLHelp)
	c.Flags().BoolVar(&wait, "wait", false, "follow the task with progress lines until it ends")
	c.Flags().StringVar(&batch, "batch", "", "submit every envelope of a JSON Lines file (one per line; - for stdin)")
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}

// warnIfNoWorkerCanFit warns on stderr when no registered worker could
// ever take the task, even idle and ACTIVE: its capacity, capabilities or
// labels do not match, so the task will wait until such a worker joins.
func (a *app) warnIfNoWorkerCanFit(ctx context.Context, wc *wdcclient.Client, env envelope.Envelope) {
	views, err := wc.ListWorkers(ctx, "")
	if err != nil {
		return
	}
	idle := make([]fleet.Worker, 0, len(views))
	for _, v := range views {
		w := v.Worker
		w.State, w.Reservations = fleet.Active, nil
		idle = append(idle, w)
	}
	fit, passed := fleet.Rank(idle, env.Requirements(), "")
	if len(fit) > 0 {
		a.warnIfNoAgentPolls(ctx, wc, env.TaskID, fit)
		return
	}
	why := "no worker is registered"
	fleet.SortByRelevance(passed)
	if len(passed) > 0 {
		var parts []string
		for i, p := range passed {
			if i == 3 {
				parts = append(parts, fmt.Sprintf("and %d more", len(passed)-3))
				break
			}
			parts = append(parts, p.WorkerID+": "+p.Reason+" ("+strings.ReplaceAll(p.Detail, "free", "capacity")+")")
		}
		why = "no registered worker could ever take it: " + strings.Join(parts, "; ")
	}
	fmt.Fprintf(a.deps.Stderr, "wdc: warning: task %s will wait: %s\n", env.TaskID, why)
}

// maxAgentChecks bounds the agent queues warnIfNoAgentPolls describes.
const maxAgentChecks = 3

// warnIfNoAgentPolls warns on stderr when none of the first few workers
// that fit the task has an agent polling its queue (a worker registered
// with `workers register` and no `wdc agent`): a lease granted there waits
// for the launch until --launch-timeout, then retries as launch_failed.
// The queues are checked in parallel, so this takes at most one
// wdcclient.PollerGrace.
func (a *app) warnIfNoAgentPolls(ctx context.Context, wc *wdcclient.Client, taskID string, fit []fleet.Worker) {
	if len(fit) > maxAgentChecks {
		return // the others might be fine; do not guess
	}
	errs := make([]error, len(fit))
	var wg sync.WaitGroup
	for i, w := range fit {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = wc.RequirePoller(ctx, api.AgentTaskQueue(w.WorkerID))
		}()
	}
	wg.Wait()
	var missing []string
	for _, err := range errs {
		var unavailable *wdcclient.UnavailableError
		if !errors.As(err, &unavailable) {
			return // an agent polls (or we cannot tell): no warning
		}
		missing = append(missing, unavailable.Error())
	}
	fmt.Fprintf(a.deps.Stderr, "wdc: warning: task %s will wait for an agent: %s\n", taskID, strings.Join(missing, "; "))
}

func hasInputPaths(env envelope.Envelope) bool {
	for _, in := range env.Inputs {
		if in.Path != "" {
			return true
		}
	}
	return false
}

// followQueryTimeout bounds each lease query while following: a live
// control plane answers in milliseconds; without one the query is retried.
const followQueryTimeout = 5 * time.Second

// follow prints progress lines as the task's lease view changes, until the
// task ends; then the outcome. Progress goes to stdout, or to stderr with
// -o json (stdout then carries only the final JSON view).
//
// Following is not bounded: when the control plane goes away (or, with
// missing set, is already away) a warning goes to stderr once and
// following goes on — the task is durable and resumes when a control plane
// is back; "contact restored" marks its return. Ctrl-C stops following,
// not the task.
func (a *app) follow(ctx context.Context, wc *wdcclient.Client, taskID string, missing bool) error {
	p := &progress{w: a.deps.Stdout}
	if a.global.output == "json" {
		p.w = a.deps.Stderr
	}
	var last api.TaskView
	lostContact := missing
	for {
		qctx, cancel := context.WithTimeout(ctx, followQueryTimeout)
		v, err := wc.Task(qctx, taskID)
		cancel()
		switch {
		case err == nil && lostContact:
			p.line(time.Time{}, "contact restored")
			p.flush()
			lostContact = false
		case err != nil && ctx.Err() == nil && !errors.Is(err, wdcclient.ErrNotFound) && !lostContact:
			// A server or control-plane restart: the task goes on; keep
			// following.
			var unavailable *wdcclient.UnavailableError
			if perr := wc.RequirePoller(ctx, api.ControlTaskQueue); errors.As(perr, &unavailable) {
				a.warnFollowing(unavailable, taskID)
			} else {
				p.line(time.Time{}, "lost contact (%v); still following", err)
				p.flush()
			}
			lostContact = true
		}
		if err == nil {
			p.diff(last, v)
			last = v
			if v.State.Terminal() {
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopped following task %s (it keeps running): %w", taskID, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	if a.global.output == "json" {
		if err := printJSON(a.deps.Stdout, last); err != nil {
			return err
		}
	} else if last.Result != nil {
		printResult(a.deps.Stdout, *last.Result)
	}
	return outcomeError(last)
}

// warnFollowing says on stderr that the control plane is away while a
// task is followed, and that following goes on.
func (a *app) warnFollowing(unavailable *wdcclient.UnavailableError, taskID string) {
	fmt.Fprintf(a.deps.Stderr, "wdc: warning: %v; still following task %s: it resumes when a control plane is back (Ctrl-C stops following, not the task)\n", unavailable, taskID)
}

// outcomeError maps a task's end to the exit code: 0 for a result with
// exit code 0 and accepted outputs, 4 for a result of a program that
// failed, 3 for no result.
func outcomeError(v api.TaskView) error {
	switch {
	case v.ClosedAs != "":
		return exitError{ExitNoResult, fmt.Errorf("task %s ended %s after %d attempt(s): its workflow was %s in Temporal", v.TaskID, v.State, len(v.Leases), v.ClosedAs)}
	case v.State != api.TaskCompleted:
		return exitError{ExitNoResult, fmt.Errorf("task %s ended %s after %d attempt(s)", v.TaskID, v.State, len(v.Leases))}
	case v.Result != nil && v.Result.OutputError != "":
		return exitError{ExitProgramFailed, fmt.Errorf("task %s COMPLETED, but its outputs were rejected: %s", v.TaskID, v.Result.OutputError)}
	case v.Result != nil && v.Result.Signal != "":
		return exitError{ExitProgramFailed, fmt.Errorf("task %s COMPLETED: the program was killed by %s (exit code %d)", v.TaskID, v.Result.Signal, v.Result.ExitCode)}
	case v.Result != nil && v.Result.ExitCode != 0:
		return exitError{ExitProgramFailed, fmt.Errorf("task %s COMPLETED with the program's exit code %d", v.TaskID, v.Result.ExitCode)}
	}
	return nil
}

// progress turns successive task views into progress lines, each stamped
// with the time the event happened (lease times), so following a task
// that started earlier shows its real history.
type progress struct {
	w       io.Writer
	pending []progressLine
}

type progressLine struct {
	at   time.Time
	text string
}

// line queues a line; diff prints a view's lines in time order.
func (p *progress) line(at time.Time, format string, args ...any) {
	if at.IsZero() {
		at = time.Now()
	}
	p.pending = append(p.pending, progressLine{at, fmt.Sprintf(format, args...)})
}

func (p *progress) flush() {
	sort.SliceStable(p.pending, func(i, j int) bool { return p.pending[i].at.Before(p.pending[j].at) })
	for _, l := range p.pending {
		fmt.Fprintf(p.w, "%s  %s\n", l.at.Local().Format("15:04:05.000"), l.text)
	}
	p.pending = p.pending[:0]
}

func (p *progress) diff(old, cur api.TaskView) {
	defer p.flush()
	for i := range cur.Leases {
		l := cur.Leases[i]
		if i >= len(old.Leases) {
			p.line(l.GrantedAt, "lease granted: attempt %d, fence %d, worker %s (ttl %s)", l.Attempt, l.Fence, l.WorkerID, l.TTL)
		}
		was := lease.Active
		if i < len(old.Leases) {
			was = old.Leases[i].State
		}
		if i == len(cur.Leases)-1 && cur.AttemptDir != "" && cur.AttemptDir != old.AttemptDir && l.State == lease.Active {
			p.line(time.Time{}, "attempt %d running on %s in %s", l.Attempt, l.WorkerID, cur.AttemptDir)
		}
		if was == lease.Active && l.State != lease.Active {
			switch l.State {
			case lease.Expired:
				p.line(l.EndedAt, "lease expired: attempt %d, fence %d on %s", l.Attempt, l.Fence, l.WorkerID)
			case lease.Revoked:
				p.line(l.EndedAt, "lease revoked (%s): attempt %d, fence %d on %s", l.EndReason, l.Attempt, l.Fence, l.WorkerID)
			}
		}
	}
	for i := len(old.Directives); i < len(cur.Directives); i++ {
		d := cur.Directives[i]
		var at time.Time
		if n := int(d.NextAttempt) - 2; n >= 0 && n < len(cur.Leases) {
			at = cur.Leases[n].EndedAt
		}
		p.line(at, "%s", describeDirective(d, cur.Options.MaxAttempts))
	}
	if cur.Waiting != "" && cur.Waiting != old.Waiting {
		p.line(time.Time{}, "waiting: %s", cur.Waiting)
	}
	if cur.Result != nil && old.Result == nil {
		r := cur.Result
		p.line(r.FinishedAt, "result accepted: attempt %d, fence %d from %s, exit code %d%s, %d artifact(s)", r.Attempt, r.Fence, r.WorkerID, r.ExitCode, killedBy(r), len(r.Artifacts))
	}
	if cur.State.Terminal() && cur.State != old.State {
		extra := ""
		if cur.CancelReason != "" {
			extra = " (" + cur.CancelReason + ")"
		}
		p.line(time.Time{}, "task %s %s after %d attempt(s)%s", cur.TaskID, cur.State, len(cur.Leases), extra)
	}
}

// killedBy is " (killed by SIGSEGV)" for a result whose program died of a
// signal, else "".
func killedBy(r *api.TaskResult) string {
	if r.Signal == "" {
		return ""
	}
	return " (killed by " + r.Signal + ")"
}

func printResult(w io.Writer, r api.TaskResult) {
	timedOut := ""
	if r.TimedOut {
		timedOut = " (killed at timeouts.execution_seconds)"
	}
	fmt.Fprintf(w, "result of %s: attempt %d, fence %d, worker %s, exit code %d%s%s\n", r.TaskID, r.Attempt, r.Fence, r.WorkerID, r.ExitCode, killedBy(&r), timedOut)
	if r.OutputError != "" {
		fmt.Fprintf(w, "  outputs rejected: %s\n", r.OutputError)
	}
	for _, art := range r.Artifacts {
		fmt.Fprintf(w, "  %s  %s  %d bytes\n", art.Digest, art.Name, art.SizeBytes)
	}
	for _, l := range r.Logs {
		fmt.Fprintf(w, "  %s  (%s, %d bytes: wdc tasks logs %s%s)\n", l.Digest, l.Name, l.SizeBytes, r.TaskID, map[bool]string{true: " --stderr"}[l.Name == api.LogStderr])
	}
}

func (a *app) newTasksWaitCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "wait TASK_ID",
		Short: "Follow a task already submitted, like 'submit --wait' (re-attach after Ctrl-C)",
		Long: `Follow a task with progress lines until it ends; its history so far is
printed first, stamped with the times things happened. Exit codes as for
'submit --wait': 0 COMPLETED with exit code 0, 4 COMPLETED but the program
failed, 3 RETRIES_EXHAUSTED or CANCELLED.

Waiting is not bounded: when no control plane polls wdc-control (now or
later), a warning goes to stderr and waiting goes on, since the task resumes
when a control plane is back. Ctrl-C stops waiting, not the task.`,
		Example: `  wdc tasks wait slow-1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			ctx := c.Context()
			return a.withClient(ctx, func(wc *wdcclient.Client) error {
				if err := wc.TaskExists(ctx, args[0]); err != nil {
					return err
				}
				var unavailable *wdcclient.UnavailableError
				err := wc.RequirePoller(ctx, api.ControlTaskQueue)
				switch {
				case errors.As(err, &unavailable):
					a.warnFollowing(unavailable, args[0])
				case err != nil:
					return err
				}
				return a.follow(ctx, wc, args[0], unavailable != nil)
			})
		},
	}
}

func (a *app) newTasksStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "status TASK_ID",
		Short:   "Show a task's state, current lease, lease history and retry directives",
		Example: `  wdc tasks status checksum-1 -o json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				v, err := wc.Task(c.Context(), args[0])
				if err != nil {
					return err
				}
				return a.emit(v, func(w io.Writer) error {
					fmt.Fprintf(w, "task      %s\nrun       %s\nstate     %s\nenvelope  %s\nattempts  %d of %d\n", v.TaskID, v.RunID, v.State, v.EnvelopeDigest, len(v.Leases), v.Options.MaxAttempts)
					if v.Waiting != "" {
						fmt.Fprintf(w, "waiting   %s\n", v.Waiting)
					}
					if v.CancelReason != "" {
						fmt.Fprintf(w, "cancelled %s\n", v.CancelReason)
					}
					if err := printLeases(w, v); err != nil {
						return err
					}
					if v.Result != nil {
						printResult(w, *v.Result)
					}
					return nil
				})
			})
		},
	}
}

func printLeases(w io.Writer, v api.TaskView) error {
	if len(v.Leases) == 0 {
		if v.State.Terminal() {
			fmt.Fprintln(w, "no lease was granted")
		} else {
			fmt.Fprintln(w, "no lease granted yet")
		}
		return nil
	}
	tw := table(w)
	fmt.Fprintln(tw, "ATTEMPT\tFENCE\tWORKER\tSTATE\tGRANTED\tEXPIRES/ENDED\tREASON")
	for _, l := range v.Leases {
		end := l.ExpiresAt
		if !l.EndedAt.IsZero() {
			end = l.EndedAt
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\n", l.Attempt, l.Fence, l.WorkerID, l.State,
			l.GrantedAt.Local().Format("15:04:05.000"), end.Local().Format("15:04:05.000"), l.EndReason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if v.LeaseActivity != "" && v.Lease != nil {
		fmt.Fprintf(w, "lease of fence %d held by its lease activity %s: Temporal renews it with each heartbeat by ID (last at %s)\n", v.Lease.Fence, v.LeaseActivity, v.Lease.RenewedAt.Local().Format("15:04:05.000"))
	}
	for _, d := range v.Directives {
		fmt.Fprintln(w, describeDirective(d, v.Options.MaxAttempts))
	}
	return nil
}

// describeDirective renders a retry directive, or, when the attempts are
// used up, the end of the last attempt (no retry follows).
func describeDirective(d lease.RetryDirective, maxAttempts int64) string {
	if maxAttempts > 0 && d.NextAttempt > maxAttempts {
		return fmt.Sprintf("attempt %d on %s ended: %s (%s); no attempts left (max %d)", d.NextAttempt-1, d.PreviousWorker, d.Reason, d.Detail, maxAttempts)
	}
	return fmt.Sprintf("retry: %s from %s -> attempt %d, fence %d, same envelope (%s)", d.Reason, d.PreviousWorker, d.NextAttempt, d.NextFence, d.Detail)
}

func (a *app) newTasksListCommand() *cobra.Command {
	var state, run string
	c := &cobra.Command{
		Use:   "list",
		Short: "List tasks from visibility",
		Example: `  wdc tasks list --state LEASED
  wdc tasks list --run demo-run -o json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			state = strings.ToUpper(state)
			switch api.TaskState(state) {
			case "", api.TaskPending, api.TaskLeased, api.TaskIngesting, api.TaskBackoff, api.TaskCompleted, api.TaskRetriesExhausted, api.TaskCancelled, api.TaskAborted:
			default:
				return usagef("--state %q: want PENDING, LEASED, INGESTING, BACKOFF, COMPLETED, RETRIES_EXHAUSTED, CANCELLED or ABORTED", state)
			}
			return a.withClient(c.Context(), func(wc *wdcclient.Client) error {
				tasks, err := wc.ListTasks(c.Context(), state, run)
				if err != nil {
					return err
				}
				return emitTable(a, tasks, "no tasks", "TASK\tRUN\tSTATE\tATTEMPT\tFENCE\tWORKER\tSTARTED", func(t wdcclient.TaskSummary) string {
					return fmt.Sprintf("%s\t%s\t%s\t%d\t%d\t%s\t%s", t.TaskID, t.RunID, t.State, t.Attempt, t.Fence, t.WorkerID, t.Started.Local().Format(time.DateTime))
				})
			})
		},
	}
	c.Flags().StringVar(&state, "state", "", "only tasks in this state (ABORTED: closed without an outcome, e.g. terminated)")
	c.Flags().StringVar(&run, "run", "", "only tasks of this run")
	return c
}

func (a *app) newTasksResultCommand() *cobra.Command {
	var outDir, dataDir, blobURL string
	c := &cobra.Command{
		Use:   "result TASK_ID",
		Short: "Show a completed task's accepted result; --output-dir copies its artifacts out of the blob store",
		Long: `Show the accepted result of a task: the attempt, fence and worker that produced
it, the program's exit code, and its artifacts and logs in the blob store.
--output-dir copies the artifacts out (verified against their digests).
Exit codes as for 'submit --wait': 0, or 4 when the program failed (non-zero
exit code or rejected outputs), 3 when there is no accepted result.`,
		Example: `  wdc tasks result checksum-1
  wdc tasks result checksum-1 --output-dir ./results`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				v, err := wc.Task(c.Context(), args[0])
				if err != nil {
					return err
				}
				if v.Result == nil {
					return exitError{ExitNoResult, fmt.Errorf("task %s has no accepted result (state %s)", v.TaskID, v.State)}
				}
				if outDir != "" {
					store, err := a.openStore(c.Context(), dataDir, blobURL)
					if err != nil {
						return err
					}
					defer store.Close()
					if err := copyArtifacts(c.Context(), store, outDir, v.Result.Artifacts); err != nil {
						return err
					}
				}
				if err := a.emit(v.Result, func(w io.Writer) error {
					printResult(w, *v.Result)
					if outDir != "" {
						fmt.Fprintf(w, "artifacts copied to %s\n", outDir)
					}
					return nil
				}); err != nil {
					return err
				}
				return outcomeError(v)
			})
		},
	}
	c.Flags().StringVar(&outDir, "output-dir", "", "copy the artifacts here (verified against their digests)")
	c.Flags().StringVar(&dataDir, "data-dir", "", dataDirHelp)
	c.Flags().StringVar(&blobURL, "blob-url", "", blobURLHelp)
	return c
}

func copyArtifacts(ctx context.Context, store *blobstore.Store, outDir string, arts []api.Artifact) error {
	for _, art := range arts {
		dst := filepath.Join(outDir, filepath.FromSlash(art.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := store.CopyTo(ctx, art.Digest, dst, 0o644); err != nil {
			return fmt.Errorf("artifact %s: %w", art.Name, err)
		}
	}
	return nil
}

func (a *app) newTasksLogsCommand() *cobra.Command {
	var (
		stderr  bool
		dataDir string
		blobURL string
	)
	c := &cobra.Command{
		Use:   "logs TASK_ID",
		Short: "Print the accepted attempt's stdout (or --stderr) from the blob store",
		Long: `Print the command output of the attempt whose result was accepted: the last
16 MiB of its stdout (or stderr with --stderr), kept with the result in the blob
store (--blob-url, default under --data-dir). For a task still running, the live log is
stdout.log/stderr.log in the attempt's task directory on its worker (shown).`,
		Example: `  wdc tasks logs checksum-1
  wdc tasks logs checksum-1 --stderr`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			name := api.LogStdout
			if stderr {
				name = api.LogStderr
			}
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				v, err := wc.Task(c.Context(), args[0])
				if err != nil {
					return err
				}
				if v.Result == nil {
					where := ""
					if v.AttemptDir != "" && v.Lease != nil {
						where = fmt.Sprintf("; the attempt's log is %s/%s on worker %s", v.AttemptDir, name, v.Lease.WorkerID)
					}
					if v.State.Terminal() {
						return exitError{ExitNoResult, fmt.Errorf("task %s ended %s without an accepted result%s", v.TaskID, v.State, where)}
					}
					return exitError{ExitNoResult, fmt.Errorf("task %s has no accepted result yet (state %s)%s", v.TaskID, v.State, where)}
				}
				for _, l := range v.Result.Logs {
					if l.Name != name {
						continue
					}
					store, err := a.openStore(c.Context(), dataDir, blobURL)
					if err != nil {
						return err
					}
					defer store.Close()
					f, err := store.Open(c.Context(), l.Digest)
					if err != nil {
						return fmt.Errorf("%s of %s: %w (is this the control plane's --blob-url / --data-dir?)", name, v.TaskID, err)
					}
					defer f.Close()
					_, err = io.Copy(a.deps.Stdout, f)
					return err
				}
				return fmt.Errorf("task %s kept no %s", v.TaskID, name)
			})
		},
	}
	c.Flags().BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	c.Flags().StringVar(&dataDir, "data-dir", "", dataDirHelp)
	c.Flags().StringVar(&blobURL, "blob-url", "", blobURLHelp)
	return c
}

func (a *app) newTasksCancelCommand() *cobra.Command {
	var (
		reason string
		svid   svidFlags
	)
	c := &cobra.Command{
		Use:   "cancel TASK_ID",
		Short: "Cancel a task: its lease is revoked, its attempt killed, and it ends CANCELLED",
		Long: `Cancel a task: its lease is revoked (its fence retired, so a late result is
refused), its running attempt is killed, and the task ends CANCELLED; the
command waits for that end. A control plane with identity required believes
the cancel only when a submitter signs it (--svid-dir, or --ca-dir /
WDC_CA_DIR with the dev issuer).`,
		Example: `  wdc tasks cancel checksum-1 --reason "wrong input"
  wdc tasks cancel checksum-1 --svid-dir ~/.wdc/alice -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.withControlPlane(c.Context(), func(wc *wdcclient.Client) error {
				err := svid.withSigner(c.Context(), wc, func() error {
					_, err := wc.CancelTask(c.Context(), args[0], reason)
					return err
				})
				if err != nil {
					return err
				}
				out, err := wc.WaitEnded(c.Context(), args[0])
				if err != nil {
					return err
				}
				return a.emitf(out, "task %s %s", out.TaskID, out.State)
			})
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why, kept with the cancellation")
	svid.bindSubmitter(c.Flags(), a.deps.Getenv)
	return c
}
