package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"golang.org/x/sys/unix"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/logrepeat"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// Environment variables the executor sets for every command.
const (
	EnvTaskID  = "WDC_TASK_ID"
	EnvAttempt = "WDC_ATTEMPT"
	EnvFence   = "WDC_FENCE"
	EnvTaskDir = "WDC_TASK_DIR"
)

// DefaultSearchPath resolves a command name when the envelope sets no PATH.
// It is used for the lookup only; the command's environment gets no PATH
// unless the envelope sets one.
const DefaultSearchPath = "/usr/local/bin:/usr/bin:/bin"

// ExitInfraKilled is the exit status a shell reports for a child killed by
// SIGKILL (128+9). The program's own exit 137 is its result; only with an
// OOM kill counted in the attempt's memory cgroup is it oom_killed.
const ExitInfraKilled = 137

// ExitTimedOut is the exit code a result gets when the command ran past
// the envelope's timeouts.execution_seconds (as GNU timeout(1)).
const ExitTimedOut = 124

// Outcome is how an attempt ended, from the executor's side.
type Outcome string

const (
	// OutcomeAccepted: the result was submitted and accepted.
	OutcomeAccepted Outcome = "accepted"
	// OutcomeRejected: the result was submitted and refused (Reason says
	// why, e.g. stale_fence); its staging was removed.
	OutcomeRejected Outcome = "rejected"
	// OutcomeInfraKilled: the command was stopped from outside without a
	// result (the executor's Kill, or a stop signal it did not send, see
	// StopSignals), or its outputs could not be staged because the
	// artifact store failed (StoreError); the attempt was reported as
	// infra_killed.
	OutcomeInfraKilled Outcome = "infra_killed"
	// OutcomeOOMKilled: the OOM killer killed the command in the
	// attempt's memory cgroup; the attempt was reported as oom_killed.
	OutcomeOOMKilled Outcome = "oom_killed"
	// OutcomeSelfFenced: the executor killed the command because its lease
	// was lost or Temporal was unreachable for a whole TTL.
	OutcomeSelfFenced Outcome = "self_fenced"
	// OutcomeCancelled: the control plane cancelled the attempt.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeSubmitFailed: the result could not be delivered at all.
	OutcomeSubmitFailed Outcome = "submit_failed"
)

// Report is what an attempt's executor did; it is also written to
// result.json in the task directory.
type Report struct {
	Claim   lease.Claim `json:"claim"`
	Outcome Outcome     `json:"outcome"`
	// Reason is the rejection reason or the self-fencing cause.
	Reason string `json:"reason,omitempty"`
	// Message explains Reason.
	Message string `json:"message,omitempty"`
	// ExitCode is the command's exit code; 128 + the signal's number when
	// killed by a signal (as a shell reports it).
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the command, if any (e.g.
	// "SIGSEGV").
	Signal string `json:"signal,omitempty"`
	// OOMKills is how many processes of the attempt the OOM killer killed
	// in its memory cgroup (0 without one).
	OOMKills int64 `json:"oom_kills,omitempty"`
	// Containment is how the attempt's processes were held (Containment).
	Containment Containment `json:"containment,omitempty"`
	// TimedOut is set when the command ran past timeouts.execution_seconds
	// and was killed (ExitCode is then 124).
	TimedOut bool `json:"timed_out,omitempty"`
	// Artifacts are the staged outputs that were submitted.
	Artifacts   []api.Artifact `json:"artifacts,omitempty"`
	OutputError string         `json:"output_error,omitempty"`
	StartedAt   time.Time      `json:"started_at"`
	FinishedAt  time.Time      `json:"finished_at"`
	// Result is the parent's copy of an accepted result.
	Result *api.TaskResult `json:"result,omitempty"`
}

// Faults injects failures for demos and tests. The zero value injects none.
type Faults struct {
	// Freeze, when set, is called after the command has exited and before
	// its outputs are staged and its result submitted. While it blocks the
	// executor is frozen (a GC pause, SIGSTOP, a VM pause): no heartbeats, no
	// submission. The demo uses it to let a lease expire before ingest, then
	// thaws the stale attempt so that its result is refused by the fence.
	Freeze func(c lease.Claim)
	// Stall, when set, is called once the task directory and inputs are
	// in place and before BeforeExec (the check that the lease is still
	// current), with Options.Context. While it blocks the launch is
	// stalled, as by a slow input download: the lease may end meanwhile,
	// and the check must then start nothing.
	Stall func(ctx context.Context, c lease.Claim)
}

// Options configures one attempt's execution.
type Options struct {
	Attempt launchers.Attempt
	// Root is the work directory; the task directory is
	// Root/<task>/<attempt>-<fence>.
	Root string
	// Blobs holds the inputs and the staging area.
	Blobs   *blobstore.Store
	Control Control
	Limits  OutputLimits
	Faults  Faults
	Logger  *slog.Logger
	// OnReport, when set, is called once with the final report.
	OnReport func(Report)
	// Metrics receives api.MetricResultsRejected for a result refused
	// because its task had already ended, which no control plane sees
	// (nil: not counted).
	Metrics client.MetricsHandler
	// Context, when set, bounds the start: staging inputs stops once it is
	// done (a launch cancelled while its inputs download), and Start then
	// starts nothing and returns its cause. Nil: not bounded.
	Context context.Context
	// BeforeExec, when set, is called once the task directory and inputs
	// are in place, right before the command starts. An error aborts the
	// start: nothing runs, the task directory is removed and Start returns
	// the error. Launchers use it to refuse an attempt whose launch is past
	// its deadline or whose lease is no longer current (CheckLease).
	BeforeExec func() error
	// LeaseCheckInterval is how often the executor also asks the control
	// plane (one `lease` query) whether its claim still holds the current
	// lease, on top of its heartbeats. Zero: never — the executor learns
	// of a lost fence from the cancel the task sends when it ends the
	// lease (the agent or the cluster launcher kills the command) and,
	// when no cancel can arrive, from its own deadline. An executor that
	// nothing can cancel (`wdc exec` run by a system wdc cannot reach)
	// sets it, typically to the lease TTL, so a heartbeat costs one
	// signal and a query is sent at most once per interval.
	LeaseCheckInterval time.Duration
	// Liveness, when set, returns the moment the attempt's worker may go
	// STALE in the registry, which revokes its leases: the send time of
	// its last accepted worker heartbeat plus its stale-after window. The
	// command is killed then at the latest, as at the lease TTL, so a
	// revocation never finds it running (the Local launcher sets it).
	Liveness func() time.Time
	// RunAs, when set, runs the command as another user (RunAs); nil runs
	// it as the executor's own user.
	RunAs *RunAs
	// AttemptKey, when set, signs the attempt's result and failure reports
	// (Signed): the key its worker delegated to this attempt alone
	// (identity.Signer.Delegate). Nil sends them unsigned, which a control
	// plane with identity required refuses (unauthenticated).
	AttemptKey identity.AttemptSigner
}

// Execution is a running attempt.
type Execution struct {
	opts    Options
	claim   lease.Claim
	taskDir string
	cmd     *exec.Cmd
	started time.Time
	log     *slog.Logger
	cell    *cell // holds the command's processes (contain.go)
	// logs are the command's stdout and stderr as the executor opened
	// them before the start; closed when the attempt ends.
	logs Logs

	// seq numbers heartbeats across both phases (running, submitting);
	// the submission reports it (api.SubmitResultInput.HeartbeatSeq).
	seq atomic.Int64
	// signalled: a heartbeat signal of this attempt was accepted, so the
	// task may hold a lease activity for it: heartbeats go by ID first
	// (see send). Only the heartbeat loop of the current phase touches it.
	signalled bool
	// lastAccepted is the send time of the last accepted heartbeat
	// (before the first one: the lease's grant, see leaseReference); the
	// executor fences itself a TTL after it. The heartbeat loop of the
	// current phase writes it under mu; the fence keeper reads it.
	lastAccepted time.Time
	// fromGrant: lastAccepted started as the lease's grant. When it did
	// not (a clock too far from the control plane's), the first heartbeat
	// is sent at once, as the self-fencing deadline then counts from a
	// time later than the grant.
	fromGrant bool

	mu sync.Mutex
	// heartbeatErr is the last heartbeat's error, for the fence
	// watchdog's report.
	heartbeatErr error
	exited       bool    // the command has exited; Cancel is then a no-op
	stopCause    Outcome // set when the executor itself kills the command
	stopMsg      string
	stopAt       time.Time // when stopCause was set
	done         chan struct{}
	report       Report
}

// TaskDir returns Root/<task>/<attempt>-<fence>.
func TaskDir(root string, c lease.Claim) string {
	return filepath.Join(root, c.TaskID, strconv.FormatInt(c.Attempt, 10)+"-"+strconv.FormatInt(c.Fence, 10))
}

// CheckAttempt is what an attempt must be before anything is created for
// it, whoever sent it: a valid sealed envelope (IDs, input names, sizes),
// a lease of the envelope's task whose IDs are valid, and the envelope's
// digest the lease's. Errors name the field.
func CheckAttempt(a launchers.Attempt) error {
	if err := a.Envelope.Validate(true); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	for _, id := range []struct{ field, value string }{{"lease.task_id", a.Lease.TaskID}, {"lease.worker_id", a.Lease.WorkerID}} {
		if err := fleet.ValidateID(id.field, id.value); err != nil {
			return err
		}
	}
	if a.Lease.TaskID != a.Envelope.TaskID {
		return fmt.Errorf("lease.task_id %q is not the envelope's task %q", a.Lease.TaskID, a.Envelope.TaskID)
	}
	if a.Lease.Attempt < 1 || a.Lease.Fence < 1 {
		return fmt.Errorf("lease: attempt %d and fence %d must be positive", a.Lease.Attempt, a.Lease.Fence)
	}
	digest, err := a.Envelope.Digest()
	if err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	if digest != a.Lease.EnvelopeDigest {
		return fmt.Errorf("lease.envelope_digest %s does not match the envelope (%s)", a.Lease.EnvelopeDigest, digest)
	}
	return nil
}

// Start lays out the task directory, stages the inputs from the blob store,
// starts the command and returns; heartbeating, fencing and submission run
// in the background until the attempt ends (Done).
//
// Errors (nothing is left running): the task directory exists already, an
// input is missing from the blob store or fails its digest, BeforeExec
// refused, the command cannot be found or started. Callers report these as
// launch_failed.
func Start(opts Options) (*Execution, error) {
	a := opts.Attempt
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if a.HeartbeatInterval <= 0 || a.HeartbeatInterval >= a.Lease.TTL {
		return nil, fmt.Errorf("heartbeat interval %s must be positive and below the lease TTL %s", a.HeartbeatInterval, a.Lease.TTL)
	}
	if err := CheckAttempt(a); err != nil {
		return nil, fmt.Errorf("attempt refused: %w", err)
	}
	claim := a.Claim()
	opts.Control = Signed(opts.Control, opts.AttemptKey)
	e := &Execution{
		opts:         opts,
		claim:        claim,
		taskDir:      TaskDir(opts.Root, claim),
		done:         make(chan struct{}),
		log:          opts.Logger.With("task", claim.TaskID, "attempt", claim.Attempt, "fence", claim.Fence),
		lastAccepted: leaseReference(a.Lease, time.Now()),
		fromGrant:    leaseReferenceIsGrant(a.Lease, time.Now()),
	}
	if err := e.prepare(); err != nil {
		if !errors.Is(err, os.ErrExist) { // never remove another launch's directory
			e.removeTaskDir()
		}
		return nil, err
	}
	if f := opts.Faults.Stall; f != nil {
		f(e.ctx(), claim)
	}
	if err := context.Cause(e.ctx()); err != nil {
		e.removeTaskDir()
		return nil, err
	}
	if opts.BeforeExec != nil {
		if err := opts.BeforeExec(); err != nil {
			e.removeTaskDir()
			return nil, err
		}
	}
	// A launch that staged (or was stopped) past its fence deadline
	// starts nothing: the lease may have ended by then, and the retry may
	// already run.
	if d, why := e.awaitFenceLeft(); time.Until(d) < minFenceLeft {
		e.removeTaskDir()
		return nil, fmt.Errorf("not started: its fence deadline is %s away (%s)", time.Until(d).Round(time.Millisecond), why)
	}
	if err := e.startCommand(); err != nil {
		e.takeBack() // its uid may serve another attempt next
		return nil, err
	}
	go e.supervise()
	return e, nil
}

// ctx is Options.Context, or the background context.
func (e *Execution) ctx() context.Context {
	if e.opts.Context != nil {
		return e.opts.Context
	}
	return context.Background()
}

// removeTaskDir removes the task directory of an attempt that did not
// start, and its task's directory if that is left empty.
func (e *Execution) removeTaskDir() {
	os.RemoveAll(e.taskDir)
	_ = os.Remove(filepath.Dir(e.taskDir)) // only if empty
}

// leaseReference is where the self-fencing deadline counts from before the
// first heartbeat is accepted: the lease's grant (GrantedAt, a control-plane
// time) when this machine's clock puts it less than a TTL before now, else
// now. The lease cannot have been renewed before it was granted, so the
// grant is the conservative choice; a clock that disagrees with the
// control plane's by more than a TTL falls back to now.
func leaseReference(l lease.Lease, now time.Time) time.Time {
	if leaseReferenceIsGrant(l, now) {
		return now.Add(-now.Sub(l.GrantedAt)) // keeps now's monotonic reading
	}
	return now
}

// leaseReferenceIsGrant reports whether leaseReference counts from the
// grant.
func leaseReferenceIsGrant(l lease.Lease, now time.Time) bool {
	g := l.GrantedAt
	return !g.IsZero() && g.Before(now) && now.Sub(g) < l.TTL
}

// prepare creates the task directory with envelope.json, inputs/ and
// outputs/.
func (e *Execution) prepare() error {
	if err := os.MkdirAll(filepath.Dir(e.taskDir), 0o755); err != nil {
		return err
	}
	// 0700 until it is complete: no other user reads envelope.json (its
	// env) meanwhile; the end of prepare opens it as its user needs.
	if err := os.Mkdir(e.taskDir, 0o700); err != nil {
		return fmt.Errorf("task dir %s: %w", e.taskDir, err)
	}
	env := e.opts.Attempt.Envelope // its digest is the lease's (CheckAttempt)
	canon, err := env.CanonicalJSON()
	if err != nil {
		return err
	}
	if err := blobstore.WriteFileAtomic(filepath.Join(e.taskDir, "envelope.json"), 0o644, func(w io.Writer) error {
		_, err := w.Write(canon)
		return err
	}); err != nil {
		return err
	}
	for _, d := range []string{"inputs", "outputs"} {
		if err := os.Mkdir(filepath.Join(e.taskDir, d), 0o755); err != nil {
			return err
		}
	}
	if r := e.opts.RunAs; r != nil {
		if err := r.handOver(e.taskDir); err != nil {
			return err
		}
	} else if err := os.Chmod(e.taskDir, 0o755); err != nil {
		return err
	}
	for i, in := range env.Inputs {
		dst := filepath.Join(e.taskDir, "inputs", filepath.FromSlash(in.Name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := e.opts.Blobs.CopyTo(e.ctx(), in.Digest, dst, 0o444); err != nil {
			return fmt.Errorf("inputs[%d] %s: %w", i, in.Name, err)
		}
	}
	return nil
}

// Environ is the command's whole environment: the envelope's variables plus
// the four WDC_* ones, sorted. Nothing comes from the executor's own
// environment.
func Environ(env envelope.Envelope, c lease.Claim, taskDir string) []string {
	out := make([]string, 0, len(env.Env)+4)
	for k, v := range env.Env {
		out = append(out, k+"="+v)
	}
	out = append(out,
		EnvTaskID+"="+c.TaskID,
		EnvAttempt+"="+strconv.FormatInt(c.Attempt, 10),
		EnvFence+"="+strconv.FormatInt(c.Fence, 10),
		EnvTaskDir+"="+taskDir,
	)
	sort.Strings(out)
	return out
}

// ResolveCommand finds the program: a name with a '/' is taken as is
// (relative to the task directory), any other name is looked up in the
// envelope's PATH, or DefaultSearchPath when it sets none.
func ResolveCommand(env envelope.Envelope, taskDir string) (string, error) {
	prog := env.Command[0]
	if strings.Contains(prog, "/") {
		if !filepath.IsAbs(prog) {
			prog = filepath.Join(taskDir, prog)
		}
		return prog, nil
	}
	search := env.Env["PATH"]
	if search == "" {
		search = DefaultSearchPath
	}
	for _, dir := range filepath.SplitList(search) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command[0]: %q not found in PATH %q", prog, search)
}

func (e *Execution) startCommand() error {
	env := e.opts.Attempt.Envelope
	prog, err := ResolveCommand(env, e.taskDir)
	if err != nil {
		return err
	}
	stdout, err := createLog(filepath.Join(e.taskDir, api.LogStdout))
	if err != nil {
		return err
	}
	stderr, err := createLog(filepath.Join(e.taskDir, api.LogStderr))
	if err != nil {
		stdout.Close()
		return err
	}
	cmd := &exec.Cmd{
		Path:   prog,
		Args:   env.Command,
		Env:    Environ(env, e.claim, e.taskDir),
		Dir:    e.taskDir,
		Stdout: stdout,
		Stderr: stderr,
		// Own process group (killed as a whole); SIGKILL if the agent dies.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	if r := e.opts.RunAs; r != nil {
		cmd.SysProcAttr.Credential = r.credential()
	}
	// Its own cgroup (or, without one, the agent as subreaper): nothing
	// the command starts outlives the attempt.
	e.cell = newCell(e.taskDir, env.Resources.MemoryBytes, e.log)
	if err := e.cell.start(cmd); err != nil {
		stdout.Close()
		stderr.Close()
		e.cell.remove()
		return fmt.Errorf("start %s: %w", prog, err)
	}
	// The logs are read back through these descriptors, never by path:
	// the command may replace the paths (with a symlink to a secret).
	e.logs = Logs{api.LogStdout: stdout, api.LogStderr: stderr}
	e.cmd = cmd
	e.started = time.Now()
	e.log.Info("attempt started", "pid", cmd.Process.Pid, "dir", e.taskDir, "containment", e.cell.host.mode)
	return nil
}

// takeBack gives a private attempt's task directory back (RunAs.takeBack)
// once its command and report are done, before Done.
func (e *Execution) takeBack() {
	if r := e.opts.RunAs; r != nil {
		if err := r.takeBack(e.taskDir); err != nil {
			e.log.Warn("task directory not given back from the attempt's uid", "dir", e.taskDir, "error", err)
		}
	}
}

// createLog creates a log file the command will write, refusing one that
// exists or is a symlink.
func createLog(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
}

// PID is the command's process (and process group) ID.
func (e *Execution) PID() int { return e.cmd.Process.Pid }

// Dir is the task directory.
func (e *Execution) Dir() string { return e.taskDir }

// Done is closed when the attempt has ended and its report is final.
func (e *Execution) Done() <-chan struct{} { return e.done }

// Report returns the final report (valid after Done).
func (e *Execution) Report() Report {
	<-e.done
	return e.report
}

// Cancel kills the command's process group; the attempt ends as cancelled
// and submits nothing. Once the command has exited Cancel does nothing: the
// result, if any, is still submitted and the fence decides.
func (e *Execution) Cancel(reason string) {
	e.stop(OutcomeCancelled, reason)
}

// Kill kills the command's process group because its worker is going away
// (the agent is stopping): the attempt is reported infra_killed so the task
// retries at once instead of waiting for the lease to expire.
func (e *Execution) Kill(reason string) {
	e.stop(OutcomeInfraKilled, reason)
}

// stop kills the running process group once, recording why.
func (e *Execution) stop(cause Outcome, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.exited {
		return
	}
	if e.stopCause == "" {
		e.stopCause, e.stopMsg, e.stopAt = cause, msg, time.Now()
		e.log.Warn("killing attempt", "cause", cause, "detail", msg)
	}
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
}

func (e *Execution) stopped() (Outcome, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopCause, e.stopMsg
}

// supervise runs the attempt to its end.
func (e *Execution) supervise() {
	defer close(e.done)
	defer e.takeBack()
	defer e.logs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	waited := make(chan error, 1)
	go func() { waited <- e.cmd.Wait() }()
	first, _, _ := e.fenceDeadline()
	wd, err := startWatchdog(e.cmd.Process.Pid, first, e.cell.killFile())
	if err != nil {
		e.log.Warn("no fence watchdog: the command is fenced only while the executor runs", "error", err)
	}
	kctx, stopKeeper := context.WithCancel(ctx)
	defer stopKeeper()
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		e.keepFence(kctx, wd)
	}()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		e.heartbeatLoop(ctx, time.Time{}, func(why string, _ bool) { e.stop(OutcomeSelfFenced, why) })
	}()

	var deadline <-chan time.Time
	if secs := e.opts.Attempt.Envelope.Timeouts.ExecutionSeconds; secs > 0 {
		t := time.NewTimer(time.Duration(secs) * time.Second)
		defer t.Stop()
		deadline = t.C
	}
	var waitErr error
	timedOut := false
	select {
	case waitErr = <-waited:
	case <-deadline:
		timedOut = true
		e.log.Warn("execution timeout; killing the command", "seconds", e.opts.Attempt.Envelope.Timeouts.ExecutionSeconds)
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
		waitErr = <-waited
	}
	finished := time.Now()
	// The command is reaped: its process group ID may be reused from now
	// on, so its watchdog goes first.
	stopKeeper()
	<-keeperDone
	if wd != nil {
		wd.stop()
	}
	e.mu.Lock()
	e.exited = true
	e.mu.Unlock()
	// The attempt is over: nothing it started may linger, in its process
	// group or out of it (setsid, double fork, env -i): its cgroup is
	// killed, then its process group, session, descendants and whatever
	// carries its WDC_TASK_DIR.
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	oomKills := e.cell.end()
	if pids, _ := KillProcessesUnder(e.taskDir); len(pids) > 0 {
		e.log.Info("killed processes the command left behind", "pids", pids)
	}
	cancel()
	<-hbDone
	if f := e.opts.Faults.Freeze; f != nil {
		f(e.claim)
	}

	rep := Report{Claim: e.claim, StartedAt: e.started, FinishedAt: finished, OOMKills: oomKills, Containment: e.cell.host.mode}
	rep.ExitCode, rep.Signal = exitStatus(e.cmd.ProcessState, waitErr)
	if e.fencedByWatchdog(wd, rep.Signal, finished) {
		_, why, _ := e.fenceDeadline()
		e.mu.Lock()
		// A cancel taken once the deadline had passed came after the
		// watchdog's kill: an executor that was stopped with its agent
		// learns of the cancel and of the command's end in either order.
		if e.stopCause == "" || e.stopCause == OutcomeCancelled && !e.stopAt.Before(wd.deadline.Add(-watchdogMargin)) {
			e.stopCause, e.stopMsg = OutcomeSelfFenced, "killed by its fence watchdog: "+why
		}
		e.mu.Unlock()
	}
	if timedOut {
		rep.ExitCode, rep.Signal, rep.TimedOut = ExitTimedOut, "", true
	}
	e.finish(&rep)
	e.report = rep
	if err := writeReport(e.taskDir, rep); err != nil {
		e.log.Warn("write result.json", "error", err)
	}
	e.log.Info("attempt ended", "outcome", rep.Outcome, "reason", rep.Reason, "exit_code", rep.ExitCode)
	if e.opts.OnReport != nil {
		e.opts.OnReport(rep)
	}
}

// finish decides what the ended command means and tells the control plane.
// While it stages and submits, the lease keeps being heartbeated (a slow
// submission must not let a finished attempt's lease expire); if the lease
// is lost meanwhile, the submission is abandoned.
func (e *Execution) finish(rep *Report) {
	ctx, cancel := context.WithTimeout(context.Background(), submitTimeout)
	defer cancel()
	if cause, msg := e.stopped(); cause != "" {
		rep.Outcome, rep.Reason, rep.Message = cause, string(cause), msg
		if cause == OutcomeInfraKilled {
			err := e.opts.Control.ReportFailure(ctx, api.AttemptFailedSignal{Claim: e.claim, Reason: lease.ReasonInfraKilled, Detail: msg})
			if err != nil {
				e.log.Warn("report infra kill", "error", err)
			}
		}
		return
	}
	if !rep.TimedOut {
		switch reason := classifyExit(rep.ExitCode, rep.Signal, rep.OOMKills); reason {
		case lease.ReasonOOMKilled, lease.ReasonInfraKilled:
			detail := fmt.Sprintf("command killed (%s) without a result, not by the executor", describeExit(rep))
			rep.Outcome = OutcomeInfraKilled
			if reason == lease.ReasonOOMKilled {
				detail = fmt.Sprintf("OOM killed (%s; %d OOM kill(s) in the attempt's memory cgroup, memory_bytes %d)",
					describeExit(rep), rep.OOMKills, e.opts.Attempt.Envelope.Resources.MemoryBytes)
				rep.Outcome = OutcomeOOMKilled
			}
			rep.Reason, rep.Message = string(reason), detail
			if err := e.opts.Control.ReportFailure(ctx, api.AttemptFailedSignal{Claim: e.claim, Reason: reason, Detail: detail}); err != nil {
				e.log.Warn("report "+string(reason), "error", err)
			}
			return
		}
	}

	var lostMu sync.Mutex
	lost := ""
	hbCtx, hbCancel := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		// The command has exited: nothing is left to fence, so the
		// submission gets a whole TTL of its own to reach Temporal (after a
		// freeze the lease may be long gone; the fence then refuses the
		// result, which is the answer to report).
		e.heartbeatLoop(hbCtx, time.Now(), func(why string, fenced bool) {
			if fenced {
				// Our result may be pending ingest already (no longer an
				// ACTIVE lease to renew), or it will be refused: either way
				// the submission gets the authoritative answer.
				return
			}
			lostMu.Lock()
			lost = why
			lostMu.Unlock()
			cancel()
		})
	}()
	var stopOnce sync.Once
	stopHeartbeats := func() { stopOnce.Do(func() { hbCancel(); <-hbDone }) }
	defer stopHeartbeats()

	staging := blobstore.StagingPrefix(e.claim.TaskID, e.claim.Attempt, e.claim.Fence)
	arts, err := StageOutputs(ctx, filepath.Join(e.taskDir, "outputs"), e.opts.Blobs, staging, e.opts.Limits)
	var outErr *OutputError
	var storeErr *StoreError
	switch {
	case errors.As(err, &storeErr) && ctx.Err() == nil:
		// The store failed, not the program: infrastructure trouble. The
		// attempt's staging was removed (as far as the store allows); the
		// task retries it, on another worker when one fits.
		stopHeartbeats()
		detail := "staging outputs: " + storeErr.Error()
		e.log.Warn("artifact store failed; reporting infra_killed", "error", storeErr)
		rep.Outcome, rep.Reason, rep.Message = OutcomeInfraKilled, string(lease.ReasonInfraKilled), detail
		if err := e.opts.Control.ReportFailure(ctx, api.AttemptFailedSignal{Claim: e.claim, Reason: lease.ReasonInfraKilled, Detail: detail}); err != nil {
			e.log.Warn("report infra kill", "error", err)
		}
		return
	case errors.As(err, &outErr):
		rep.OutputError = outErr.Error()
		e.log.Warn("outputs rejected", "error", outErr)
	case err != nil:
		rep.OutputError = "staging outputs: " + err.Error()
	}
	rep.Artifacts = arts
	logs, err := StageLogs(ctx, e.logs, e.opts.Blobs, blobstore.LogStagingPrefix(e.claim.TaskID, e.claim.Attempt, e.claim.Fence))
	if err != nil {
		e.log.Warn("logs not kept with the result", "error", err)
		logs = nil
	}
	in := api.SubmitResultInput{
		Claim: e.claim, ExitCode: rep.ExitCode, Signal: rep.Signal, TimedOut: rep.TimedOut, Artifacts: arts, Logs: logs, OutputError: rep.OutputError,
		StartedAt: rep.StartedAt, FinishedAt: rep.FinishedAt, HeartbeatSeq: e.seq.Load(),
	}
	// Once accepted for ingest the lease cannot expire: heartbeats stop.
	res, err := e.submitWithRetry(ctx, in, func() { go stopHeartbeats() })
	var rej *Rejected
	switch {
	case err == nil:
		rep.Outcome = OutcomeAccepted
		r := res.Result
		rep.Result = &r
		return
	case errors.As(err, &rej):
		rep.Outcome, rep.Reason, rep.Message = OutcomeRejected, rej.Reason, rej.Message
	case errors.Is(err, ErrTaskGone):
		rep.Outcome = OutcomeRejected
		rep.Reason, rep.Message = e.closedTaskRejection(context.Background(), err)
		if m := e.opts.Metrics; m != nil {
			m.WithTags(map[string]string{api.MetricTagReason: rep.Reason}).Counter(api.MetricResultsRejected).Inc(1)
		}
	default:
		lostMu.Lock()
		why := lost
		lostMu.Unlock()
		rep.Outcome, rep.Reason, rep.Message = OutcomeSubmitFailed, "unreachable", err.Error()
		if why != "" {
			rep.Message = why
		}
		// The submission may have reached Temporal and still be delivered
		// when the control plane is back: keep the staged outputs for its
		// ingest. The task removes its staging when it ends.
		return
	}
	cleanCtx, cleanCancel := context.WithTimeout(context.Background(), time.Minute)
	defer cleanCancel()
	_ = e.opts.Blobs.RemoveStaging(cleanCtx, e.claim.TaskID, e.claim.Attempt, e.claim.Fence)
}

// closedTaskRejection explains a submission to a task workflow that has
// already ended (it accepts no update): the task's final lease, read with
// the lease query, is run through the same fence check, so a late result
// from an old attempt is reported as stale_fence. Without an answer it is
// lease_not_active.
func (e *Execution) closedTaskRejection(ctx context.Context, cause error) (reason, message string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	view, err := e.opts.Control.Lease(ctx, e.claim.TaskID)
	if err != nil {
		return string(lease.RejectLeaseNotActive), cause.Error()
	}
	if rej := lease.Check(view.Lease, e.claim); rej != nil {
		return string(rej.Reason), fmt.Sprintf("task %s already ended %s; %s", e.claim.TaskID, view.State, rej.Message)
	}
	return string(lease.RejectLeaseNotActive), fmt.Sprintf("task %s already ended %s", e.claim.TaskID, view.State)
}

// submitWithRetry retries transport failures (never rejections) until ctx
// ends: the update ID makes retries safe, and the heartbeats of the submit
// phase keep the lease alive meanwhile (or cancel ctx when it is lost).
func (e *Execution) submitWithRetry(ctx context.Context, in api.SubmitResultInput, onAccepted func()) (api.SubmitResultResult, error) {
	wait := 200 * time.Millisecond
	failLog := &logrepeat.Failure{Log: e.log, Msg: "submit failed; retrying", Recovered: "submit answered"}
	for {
		res, err := e.opts.Control.SubmitResult(ctx, in, onAccepted)
		var rej *Rejected
		if err == nil || errors.As(err, &rej) || errors.Is(err, ErrTaskGone) {
			failLog.OK()
			return res, err
		}
		failLog.Fail(err)
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait):
		}
		if wait < 5*time.Second {
			wait *= 2
		}
	}
}

// submitTimeout bounds how long a finished attempt tries to hand over its
// result while its lease stays valid.
const submitTimeout = 10 * time.Minute

// HeartbeatRetryDivisor sets how hard a failing heartbeat is retried:
// while heartbeats fail, the executor tries again every
// HeartbeatInterval/HeartbeatRetryDivisor, each try bounded by the same
// fraction, so that once the network heals the lease is renewed within a
// fraction of the interval (plus the client's reconnect delay) instead of a
// whole interval later.
const HeartbeatRetryDivisor = 4

// heartbeatLoop renews the lease every interval (counted from the last
// accepted heartbeat, or the grant) until ctx ends, and calls onLost
// (once, then returns) when the lease is no longer this attempt's
// (fenced: the task cancelled the lease activity its heartbeat by ID went
// to, the lease query after a heartbeat signal found another lease, the
// task has ended, or — with Options.LeaseCheckInterval — the periodic
// lease query fails the fence check) or when no heartbeat was accepted
// for a whole lease TTL, counted from the later of the last accepted
// heartbeat's send time and notBefore.
//
// A heartbeat is accepted when the task counted it as a renewal of this
// claim's current lease (see send): its record on the task's lease
// activity by ID, or a delivered signal that a lease query confirmed. The
// self-fencing deadline is the SEND time of the last accepted heartbeat
// plus the TTL: the task renews the lease when Temporal takes the
// heartbeat, which is never before it was sent, so the command is killed
// no later than the control plane expires the lease. A try still in
// flight at the deadline is abandoned. While heartbeats fail they are
// retried every interval/HeartbeatRetryDivisor, so a partition shorter
// than TTL − 2 × interval is ridden out (given a client that redials
// within a fraction of the interval, see worker.DialOptions).
//
// So a lease that ended reaches an executor that can reach Temporal at
// its next heartbeat, within one interval, whatever the launcher: by ID
// it finds the lease activity cancelled or gone, and the signal that
// follows is not confirmed. A cancel (Execution.Cancel, from the agent's
// CancelAttempt or the cluster launcher's kill) only makes it sooner. A
// periodic lease query (LeaseCheckInterval) that fails while the
// heartbeat by ID got through is tolerated: the control plane may be
// down, and then the lease cannot expire either.
func (e *Execution) heartbeatLoop(ctx context.Context, notBefore time.Time, onLost func(why string, fenced bool)) {
	interval := e.opts.Attempt.HeartbeatInterval
	ttl := e.opts.Attempt.Lease.TTL
	retry := interval / HeartbeatRetryDivisor
	// The next beat is due an interval after the last accepted one (or
	// the lease's grant), not at once: an attempt that ends within its
	// first interval sends no heartbeat at all.
	next := e.lastAccepted.Add(interval)
	if !e.fromGrant && e.seq.Load() == 0 {
		next = time.Now()
	}
	var failingSince time.Time // zero while heartbeats get through
	var lastErr error
	var lastCheck time.Time
	for {
		base := e.lastAccepted
		if base.Before(notBefore) {
			base = notBefore
		}
		deadline := base.Add(ttl)
		if wait := time.Until(next); wait > 0 {
			t := time.NewTimer(min(wait, time.Until(deadline)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		sent := time.Now()
		if !sent.Before(deadline) {
			why := fmt.Sprintf("Temporal unreachable: no heartbeat accepted for %s (lease TTL %s, counted from the send time of the last accepted heartbeat)",
				sent.Sub(base).Round(time.Millisecond), ttl)
			if lastErr != nil {
				why += ": " + lastErr.Error()
			}
			onLost(why, false)
			return
		}
		seq := e.seq.Add(1)
		tryEnd := sent.Add(retry)
		if deadline.Before(tryEnd) {
			tryEnd = deadline
		}
		check := e.opts.LeaseCheckInterval > 0 && sent.Sub(lastCheck) >= e.opts.LeaseCheckInterval
		accepted, err := e.beat(ctx, seq, tryEnd, deadline, check)
		if check && accepted {
			lastCheck = sent
		}
		if ctx.Err() != nil {
			return
		}
		if accepted {
			e.mu.Lock()
			e.lastAccepted = sent
			e.mu.Unlock()
			next = sent.Add(interval)
			if !failingSince.IsZero() {
				e.log.Info("heartbeat accepted again", "failing_for", sent.Sub(failingSince).Round(time.Millisecond))
				failingSince = time.Time{}
			}
		} else {
			next = sent.Add(retry)
			if failingSince.IsZero() {
				failingSince = sent
				e.log.Warn("heartbeat failed; retrying every "+retry.String(), "error", err,
					"gives_up_in", time.Until(deadline).Round(time.Millisecond))
			} else {
				e.log.Debug("heartbeat failed", "error", err)
			}
			lastErr = err
			e.mu.Lock()
			e.heartbeatErr = err
			e.mu.Unlock()
		}
		switch {
		case errors.Is(err, errFenced):
			onLost(err.Error(), true)
			return
		case accepted && err != nil:
			e.log.Warn("heartbeat", "error", err)
		}
	}
}

var errFenced = errors.New("fenced")

// beat sends one heartbeat (send) and, when check is set and send did
// not query the lease already, checks the fence with one lease query,
// both before tryEnd; the query that confirms a delivered signal may take
// until confirmBy (the fence deadline). accepted reports whether the
// heartbeat counts: the task took it as a renewal of this claim's
// current lease.
func (e *Execution) beat(ctx context.Context, seq int64, tryEnd, confirmBy time.Time, check bool) (accepted bool, err error) {
	cctx, cancel := context.WithDeadline(ctx, tryEnd)
	defer cancel()
	qctx, qcancel := context.WithDeadline(ctx, confirmBy)
	defer qcancel()
	checked, err := e.send(cctx, qctx, seq)
	if errors.Is(err, ErrTaskGone) || errors.Is(err, ErrLeaseEnded) {
		return true, fmt.Errorf("%w: %v", errFenced, err)
	}
	if err != nil {
		return false, err
	}
	if !check || checked {
		return true, nil
	}
	var rej *Rejected
	switch err := CheckLease(cctx, e.opts.Control, e.claim); {
	case errors.Is(err, ErrTaskGone):
		return true, fmt.Errorf("%w: %v", errFenced, err)
	case errors.As(err, &rej):
		return true, fmt.Errorf("%w: lease lost: %v", errFenced, rej)
	case err != nil:
		return true, fmt.Errorf("lease query (is the control plane running?): %w", err)
	}
	return true, nil
}

// send delivers heartbeat seq and reports whether it counts (nil error).
// Once a heartbeat of this attempt counted, the task holds the lease on a
// lease activity for the fence, so the heartbeat goes to that activity by
// ID first: one RPC the server answers alone, which succeeds only while
// the task holds the activity uncancelled, i.e. the lease is current.
// When the task holds no started lease activity for the fence (not
// started yet, timed out, an ended workflow) it goes as the
// lease-heartbeat signal. A delivered signal is not yet a renewal — the
// task counts a stale claim's signal and ignores it — so it counts only
// once the lease query that follows finds this claim's lease current
// (checked is then set): the lease cannot have ended between the signal
// and the answer, fences never come back. Errors: ErrLeaseEnded (the
// task cancelled the activity, or the query found another lease:
// fenced), ErrTaskGone (no running task), ErrLeaseUnverified (signal
// delivered, query unanswered: not counted), or Temporal's. The
// heartbeat is bounded by ctx, the confirming query by confirmCtx: a
// delivered signal need not be sent again, and a query that a busy control
// plane answers after ctx's retry period still confirms it.
func (e *Execution) send(ctx, confirmCtx context.Context, seq int64) (checked bool, err error) {
	hb := api.LeaseHeartbeatSignal{Claim: e.claim, Seq: seq}
	if e.signalled {
		if err := e.opts.Control.HeartbeatByID(ctx, hb); !errors.Is(err, ErrNoLeaseActivity) {
			return false, err
		}
	}
	if err := e.opts.Control.Heartbeat(ctx, hb); err != nil {
		return false, err
	}
	var rej *Rejected
	switch err := CheckLease(confirmCtx, e.opts.Control, e.claim); {
	case errors.As(err, &rej):
		return true, fmt.Errorf("%w: heartbeat signal delivered, but %v", ErrLeaseEnded, rej)
	case err != nil:
		return true, err
	}
	e.signalled = true
	return true, nil
}

// exitStatus is the command's exit code and the name of the signal that
// killed it, if one did (the code is then 128 + its number, as a shell
// reports it); -1 when it was not waited for.
func exitStatus(ps *os.ProcessState, waitErr error) (code int, signal string) {
	if ps == nil {
		return -1, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return ps.ExitCode(), ""
}

func describeExit(r *Report) string {
	if r.Signal != "" {
		return "signal: " + r.Signal
	}
	return "exit " + strconv.Itoa(r.ExitCode)
}

func writeReport(dir string, r Report) error {
	return blobstore.WriteFileAtomic(filepath.Join(dir, "result.json"), 0o644, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	})
}
