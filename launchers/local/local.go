package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// Options configures a Launcher.
type Options struct {
	// WorkerID is the fleet worker this launcher runs attempts for.
	WorkerID string
	// WorkDir is the root of task directories: WorkDir/<task>/<attempt>-<fence>.
	WorkDir string
	// Blobs holds inputs and the staging area (the data dir shared with the
	// control plane).
	Blobs   *blobstore.Store
	Control executor.Control
	Limits  executor.OutputLimits
	Faults  executor.Faults
	Logger  *slog.Logger
	// OnReport is called with every attempt's final report.
	OnReport func(executor.Report)
	// Metrics is the executors' metrics handler (executor.Options.Metrics).
	Metrics client.MetricsHandler
	// Liveness is the worker's liveness deadline (executor.Options.Liveness;
	// the agent's Heartbeater.LivenessDeadline). Nil: attempts are fenced
	// by their lease TTL only.
	Liveness func() time.Time
	// RunAs is the user the commands run as (executor.Options.RunAs).
	RunAs *executor.RunAs
	// UIDs, when set instead of RunAs, gives each attempt a uid of its
	// own from the range for as long as it runs (executor.UIDRange); an
	// attempt that finds every uid taken is not started.
	UIDs *executor.UIDRange
	// Signer, when set, is the worker's identity: each attempt's executor
	// signs its result with a key it delegates to that attempt alone.
	Signer *identity.Signer
}

// Launcher runs Local attempts. Its lock guards only its maps: staging an
// attempt's inputs and starting its command run outside it, so a slow
// launch never holds up Running (the agent's heartbeats), Cancel or
// another launch.
type Launcher struct {
	opts Options

	mu       sync.Mutex
	attempts map[lease.Claim]*executor.Execution
	starting map[lease.Claim]*start
	// uids are the uids of Options.UIDs in use, by attempt.
	uids map[lease.Claim]uint32
	// shutDown is why Shutdown ran: Submit then starts nothing.
	shutDown string
}

// start is an attempt whose executor is starting (staging its inputs).
type start struct {
	done   chan struct{}
	cancel context.CancelCauseFunc
	sub    launchers.Submission
	err    error
}

var _ launchers.Launcher = (*Launcher)(nil)

// New returns a Launcher, after killing processes orphaned by a previous
// agent on the same work directory (ReapOrphans). Errors: missing WorkerID,
// WorkDir, Blobs or Control.
func New(opts Options) (*Launcher, error) {
	switch {
	case opts.WorkerID == "":
		return nil, errors.New("local launcher: worker ID is required")
	case opts.WorkDir == "":
		return nil, errors.New("local launcher: work dir is required")
	case opts.Blobs == nil:
		return nil, errors.New("local launcher: blob store is required")
	case opts.Control == nil:
		return nil, errors.New("local launcher: control is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Logger.Info("local attempts are contained by " + executor.DescribeContainment())
	if killed, err := ReapOrphans(opts.WorkDir); err != nil {
		opts.Logger.Warn("could not look for orphaned attempts", "error", err)
	} else if len(killed) > 0 {
		opts.Logger.Warn("killed processes orphaned by a previous agent", "work_dir", opts.WorkDir, "pids", describePIDs(killed))
	}
	if opts.UIDs != nil && opts.RunAs != nil {
		return nil, errors.New("local launcher: give RunAs or UIDs, not both")
	}
	if opts.UIDs != nil {
		// A previous agent may have died before it gave an attempt's
		// directory back: nothing a uid of the range wrote stays its.
		if err := executor.TakeBackFromRange(opts.WorkDir, *opts.UIDs); err != nil {
			return nil, fmt.Errorf("local launcher: give back the work dir from --run-as-uid-range: %w", err)
		}
	}
	return &Launcher{opts: opts, attempts: map[lease.Claim]*executor.Execution{}, starting: map[lease.Claim]*start{}, uids: map[lease.Claim]uint32{}}, nil
}

// Submit starts the attempt's executor and returns its task directory and
// process group. Submitting an attempt that already runs (or is starting)
// returns it again. A Cancel while it starts stops its staging at once and
// it starts nothing (lease_not_active).
//
// Right before the command starts (after the inputs are in place) Submit
// makes sure the attempt may still run, and otherwise starts nothing and
// leaves no task directory: ctx must not be done or past its deadline (the
// launch activity's schedule-to-close deadline; the control plane has
// given up on the launch), and one lease query judged by lease.Check
// (executor.CheckLease) must say the attempt's claim holds the current
// ACTIVE lease — or, when the agent set a.StillCurrent, that check
// (a heartbeat of the launch activity, which the task cancels when the
// lease ends). A check that fails refuses the launch too: an attempt
// whose lease cannot be verified may have been revoked, and running a
// revoked attempt is worse than retrying the task. Errors: those of
// executor.Start, a *executor.Rejected (stale_fence, lease_not_active, ...),
// executor.ErrTaskGone, executor.ErrLeaseUnverified, or ErrLaunchExpired
// (all wrapped).
func (l *Launcher) Submit(ctx context.Context, a launchers.Attempt) (launchers.Submission, error) {
	claim := a.Claim()
	if claim.WorkerID != l.opts.WorkerID {
		return launchers.Submission{}, fmt.Errorf("attempt is for worker %q, this is %q", claim.WorkerID, l.opts.WorkerID)
	}
	l.mu.Lock()
	if ex, ok := l.attempts[claim]; ok {
		l.mu.Unlock()
		return launchers.Submission{TaskDir: ex.Dir(), PID: ex.PID()}, nil
	}
	if st, ok := l.starting[claim]; ok {
		l.mu.Unlock()
		select {
		case <-st.done:
			return st.sub, st.err
		case <-ctx.Done():
			return launchers.Submission{}, ctx.Err()
		}
	}
	if l.shutDown != "" {
		l.mu.Unlock()
		return launchers.Submission{}, fmt.Errorf("attempt %s not started: agent shutting down (%s)", claim, l.shutDown)
	}
	// Staging is stopped by a Cancel; the launch deadline is BeforeExec's.
	sctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	runAs, err := l.takeUID(claim)
	if err != nil {
		l.mu.Unlock()
		return launchers.Submission{}, err
	}
	st := &start{done: make(chan struct{}), cancel: cancel}
	l.starting[claim] = st
	l.mu.Unlock()

	var key identity.AttemptSigner
	if l.opts.Signer != nil {
		key = l.opts.Signer.ForAttempt(claim)
	}
	ex, err := executor.Start(executor.Options{
		AttemptKey: key,
		Attempt:    a, Root: l.opts.WorkDir, Blobs: l.opts.Blobs, Control: l.opts.Control,
		Limits: l.opts.Limits, Faults: l.opts.Faults, Logger: l.opts.Logger, OnReport: l.opts.OnReport, Liveness: l.opts.Liveness,
		Metrics: l.opts.Metrics, Context: sctx, RunAs: runAs,
		BeforeExec: l.beforeExec(ctx, a),
	})
	var cancelled *executor.Rejected
	if err != nil && errors.As(context.Cause(sctx), &cancelled) {
		err = fmt.Errorf("attempt %s not started: %w", claim, cancelled)
	}

	l.mu.Lock()
	delete(l.starting, claim)
	if err != nil {
		delete(l.uids, claim)
	}
	if err == nil {
		st.sub = launchers.Submission{TaskDir: ex.Dir(), PID: ex.PID()}
		l.attempts[claim] = ex
		if l.shutDown != "" {
			// Shutdown ran while it started: it waits for this kill.
			ex.Kill(l.shutDown)
		}
		go func() {
			<-ex.Done()
			l.forget(claim, ex)
		}()
	}
	st.err = err
	close(st.done)
	l.mu.Unlock()
	return st.sub, err
}

// beforeExec is the check right before a's command starts: the launch
// deadline, then a.StillCurrent when the agent gave one, else one lease
// query (executor.CheckLease).
func (l *Launcher) beforeExec(ctx context.Context, a launchers.Attempt) func() error {
	deadline := func() error { return launchers.CheckDeadline(ctx) }
	current := func() error { return executor.CheckLease(ctx, l.opts.Control, a.Claim()) }
	if a.StillCurrent != nil {
		current = func() error { return a.StillCurrent(ctx) }
	}
	return executor.StartCheck(a.Claim(), deadline, current)
}

// Status reports RUNNING for an attempt this launcher runs, else
// ErrUnknownAttempt (finished attempts are forgotten; their report is in
// result.json of the task directory).
func (l *Launcher) Status(ctx context.Context, c lease.Claim) (launchers.Status, error) {
	l.mu.Lock()
	ex, ok := l.attempts[c]
	l.mu.Unlock()
	if !ok {
		return launchers.Status{Phase: launchers.PhaseUnknown}, launchers.ErrUnknownAttempt
	}
	return launchers.Status{Phase: launchers.PhaseRunning, Detail: fmt.Sprintf("pid %d in %s", ex.PID(), ex.Dir())}, nil
}

// Cancel kills the attempt's process group, or stops an attempt that is
// still starting before its command runs; unknown attempts are ignored.
func (l *Launcher) Cancel(ctx context.Context, c lease.Claim, reason string) error {
	l.mu.Lock()
	ex, ok := l.attempts[c]
	st, starting := l.starting[c]
	l.mu.Unlock()
	switch {
	case ok:
		ex.Cancel(reason)
	case starting:
		st.cancel(&executor.Rejected{Reason: string(lease.RejectLeaseNotActive), Message: "cancelled while it was starting (" + reason + ")"})
	}
	return nil
}

// Running returns how many attempts run or are starting now.
func (l *Launcher) Running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.attempts) + len(l.starting)
}

// Shutdown kills every running or starting attempt, reporting each as
// infra_killed (its task retries elsewhere at once), and waits for their
// reports, or for ctx. Submit starts nothing after it.
func (l *Launcher) Shutdown(ctx context.Context, reason string) {
	l.mu.Lock()
	l.shutDown = reason
	running := make([]*executor.Execution, 0, len(l.attempts))
	for _, ex := range l.attempts {
		running = append(running, ex)
	}
	starting := make([]*start, 0, len(l.starting))
	for _, st := range l.starting {
		st.cancel(errors.New("agent shutting down: " + reason))
		starting = append(starting, st)
	}
	l.mu.Unlock()
	for _, ex := range running {
		ex.Kill(reason)
	}
	// A start past its cancel check runs its command; Submit kills it.
	for _, st := range starting {
		select {
		case <-st.done:
		case <-ctx.Done():
			return
		}
	}
	l.mu.Lock()
	all := maps.Clone(l.attempts)
	l.mu.Unlock()
	for claim, ex := range all {
		select {
		case <-ex.Done():
		case <-ctx.Done():
			return
		}
		l.forget(claim, ex)
	}
}

// forget drops ex, once done, from the running attempts.
func (l *Launcher) forget(claim lease.Claim, ex *executor.Execution) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attempts[claim] == ex {
		delete(l.attempts, claim)
		delete(l.uids, claim)
	}
}

// takeUID is the user claim's command runs as: Options.RunAs, or the
// lowest uid of Options.UIDs no other attempt holds (l.mu held). Errors:
// every uid of the range is taken.
func (l *Launcher) takeUID(claim lease.Claim) (*executor.RunAs, error) {
	r := l.opts.UIDs
	if r == nil {
		return l.opts.RunAs, nil
	}
	taken := make(map[uint32]bool, len(l.uids))
	for _, u := range l.uids {
		taken[u] = true
	}
	for u := r.First; ; u++ {
		if !taken[u] {
			l.uids[claim] = u
			return r.RunAs(u), nil
		}
		if u == r.Last {
			return nil, fmt.Errorf("attempt %s not started: all %d uids of --run-as-uid-range %d-%d are in use", claim, r.Size(), r.First, r.Last)
		}
	}
}
