package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

// Typed nils through which workflows name activities.
var (
	controlActs *activities.Control
	agentActs   *activities.Agent
)

// WdcTask is one logical task (workflow ID api.TaskWorkflowID): the lease
// loop (docs/architecture.md, "The lease loop"). Each attempt reserves a
// worker, is granted a lease (attempt+1, fence+1, same envelope digest), is
// launched, and is watched by a leaseWatch (one timer per TTL window, then
// a lease activity that the executor heartbeats by ID). A result accepted
// through the submit-result update (validator: lease.Check) is ingested and
// the lease completes; expiry, worker loss, launch failure or an
// infrastructure kill end the lease with a retry directive and, after
// backoff, a new attempt.
//
// The loop is a phase machine: decide is the one place that picks the next
// phase from the task's state; handlers and signal callbacks only record
// what happened and wake the loop.
//
// It returns COMPLETED, RETRIES_EXHAUSTED or CANCELLED — never a failure for
// an attempt's fate (invariant 1) — and tells its run through the
// task-ended signal: from the local ingest of a result, in the workflow
// task that then keeps or abandons it, else itself once it decided. The
// run believes only what the task's own query says. Whoever started it,
// a first run checks its own input (authorizeStart: its envelope, and its
// submitter's signature) and runs nothing it refuses.
func WdcTask(ctx workflow.Context, in api.TaskInput) (api.TaskOutcome, error) {
	in, err := admitInput(ctx, in)
	if err != nil {
		return api.TaskOutcome{}, err
	}
	t := newTaskWorkflow(in)
	if startedByReset(ctx) {
		t.carry.AfterReset = true
	}
	if err := t.setup(ctx); err != nil {
		return api.TaskOutcome{}, err
	}
	// Cancelling the workflow (Temporal UI, `temporal workflow cancel`) is
	// a cancel request: the task still cleans up and reports CANCELLED, so
	// its work runs on a context the cancellation does not reach.
	workflow.Go(ctx, func(gctx workflow.Context) {
		gctx.Done().Receive(gctx, nil)
		t.carry.Cancelled = true
		t.wake.SendAsync(true)
	})
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	return t.run(dctx)
}

// taskPhase is where the lease loop is. Phases are not persisted: decide
// derives the phase from the ledger and the carried state, so a continued
// run resumes in the right one.
type taskPhase string

const (
	// phaseSelecting: no lease; asking the control plane for a worker.
	phaseSelecting taskPhase = "Selecting"
	// phaseLaunching: a lease is ACTIVE and its launch activity runs.
	phaseLaunching taskPhase = "Launching"
	// phaseRunning: the attempt was launched; the lease is watched.
	phaseRunning taskPhase = "Running"
	// phaseIngesting: a result passed the fence check; parent ingest
	// decides it before anything can end the lease.
	phaseIngesting taskPhase = "Ingesting"
	// phaseBackoff: a lease ended with a retry directive; waiting before
	// the next attempt.
	phaseBackoff taskPhase = "Backoff"
	// phaseContinuing: at a quiet point with continue-as-new suggested.
	phaseContinuing taskPhase = "ContinuingAsNew"
	// phaseEnded: the task has an outcome.
	phaseEnded taskPhase = "Ended"
)

type taskWorkflow struct {
	env    envelope.Envelope
	digest string
	// authority is the submitter's signature the task was started with,
	// handed to every launch.
	authority *identity.Proof
	opts      api.TaskOptions
	carry     api.TaskCarry
	state     api.TaskState
	phase     taskPhase

	// ledger aliases carry.Ledger for brevity.
	ledger *lease.Ledger

	// waiting explains a PENDING task that found no worker.
	waiting string
	// selectInterval is the wait before the next look for a worker; it
	// grows while none fits and resets on a grant.
	selectInterval time.Duration
	// attemptDir is the launched attempt's task directory.
	attemptDir string
	// result is set once a result was ingested; reported says the local
	// ingest that kept it also reported it to the run.
	result   *api.TaskResult
	reported bool

	// The launch activity (nil once done) and its cancel; the watch of the
	// ACTIVE lease; what ended the lease, once something did.
	launch       workflow.Future
	launchCancel workflow.CancelFunc
	lease        leaseWatch
	directive    *lease.RetryDirective

	// sub is the submission whose result is pending (at most one: the
	// lease refuses a second while one is pending).
	sub *submission
	// unawaited are the cancels and releases not awaited where issued.
	unawaited unawaited

	wake        workflow.Channel
	heartbeatCh workflow.ReceiveChannel
	lostCh      workflow.ReceiveChannel
	failedCh    workflow.ReceiveChannel

	published taskSA
	// shown is what the current details last showed (showDetails).
	shown taskDetailsKey
}

func newTaskWorkflow(in api.TaskInput) *taskWorkflow {
	t := &taskWorkflow{env: in.Envelope, digest: in.EnvelopeDigest, authority: in.Authority, opts: in.Options.WithDefaults(), state: api.TaskPending}
	if in.Carry != nil {
		t.carry = *in.Carry
	} else {
		t.carry.Ledger = lease.NewLedger(in.Envelope.TaskID, in.EnvelopeDigest)
		// The run started the task with kind, run and state PENDING
		// (TaskStart).
		t.published = taskSA{state: api.TaskPending}
	}
	t.ledger = &t.carry.Ledger
	t.lease = leaseWatch{ledger: t.ledger, stats: &t.carry.Stats}
	t.attemptDir = t.carry.AttemptDir
	t.selectInterval = t.opts.SelectInterval
	return t
}

func (t *taskWorkflow) setup(ctx workflow.Context) error {
	t.wake = workflow.NewBufferedChannel(ctx, 1)
	t.heartbeatCh = workflow.GetSignalChannelWithOptions(ctx, api.SignalLeaseHeartbeat, workflow.SignalChannelOptions{Description: descLeaseHeartbeat})
	t.lostCh = workflow.GetSignalChannelWithOptions(ctx, api.SignalWorkerLost, workflow.SignalChannelOptions{Description: descWorkerLost})
	t.failedCh = workflow.GetSignalChannelWithOptions(ctx, api.SignalAttemptFailed, workflow.SignalChannelOptions{Description: descAttemptFailed})
	if err := workflow.SetQueryHandlerWithOptions(ctx, api.QueryLease, func() (api.TaskView, error) { return t.view(), nil },
		workflow.QueryHandlerOptions{Description: descLeaseQuery}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateSubmitResult, t.submitResult, workflow.UpdateHandlerOptions{
		Description: descSubmitResult,
		Validator: func(ctx workflow.Context, in api.SubmitResultInput) error {
			err := t.validateSubmitResult(ctx, in)
			if err != nil {
				countRejected(ctx, err)
			}
			return err
		},
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateCancelTask, t.cancel, workflow.UpdateHandlerOptions{
		Description: descCancelTask,
		Validator: func(ctx workflow.Context, in api.CancelTaskInput) error {
			unsigned := in
			unsigned.Proof = nil
			if err := authenticateSubmitter(ctx, api.UpdateCancelTask, unsigned, in.Proof); err != nil {
				return err
			}
			if t.state.Terminal() {
				return temporal.NewApplicationError(fmt.Sprintf("task %s already ended %s", t.env.TaskID, t.state), api.ErrTypeConflict)
			}
			return nil
		},
	})
}

// run drives the phase machine until the task ends or continues as new.
func (t *taskWorkflow) run(ctx workflow.Context) (api.TaskOutcome, error) {
	if cur := t.ledger.Current(); cur != nil && cur.State == lease.Active {
		// Continued as new while an attempt held its lease: keep watching it.
		t.setState(ctx, api.TaskLeased)
	}
	for {
		t.phase = t.decide(ctx)
		t.showDetails(ctx)
		switch t.phase {
		case phaseEnded:
			return t.finish(ctx, t.outcomeState())
		case phaseContinuing:
			if t.settleForContinueAsNew(ctx) {
				return api.TaskOutcome{}, t.continueAsNew(ctx)
			}
		case phaseIngesting:
			t.ingest(ctx)
		case phaseBackoff:
			t.backoff(ctx)
		case phaseSelecting:
			if err := t.selectAndGrant(ctx); err != nil {
				return api.TaskOutcome{}, err
			}
		case phaseLaunching, phaseRunning:
			t.watch(ctx)
		}
	}
}

// decide is the one place that chooses the loop's next phase, from the
// ledger and what the handlers recorded. The order is the contract:
//
//  1. an ingested result ends the task COMPLETED;
//  2. a pending result is decided before anything else — neither a cancel,
//     an expiry nor a revocation can end a lease whose result is pending;
//  3. a lease that ended with a retry directive, or an ACTIVE lease of a
//     cancelled task, goes to the watch, which releases what it held; an
//     ACTIVE lease is watched (or, at a quiet point, carried into a
//     continue-as-new);
//  4. a cancelled task, or one whose attempts are used up, ends;
//  5. a retry directive waits its backoff;
//  6. at a quiet point with continue-as-new suggested, the run continues
//     as new; otherwise the next worker is selected.
func (t *taskWorkflow) decide(ctx workflow.Context) taskPhase {
	cur := t.ledger.Current()
	active := cur != nil && cur.State == lease.Active
	watching := phaseRunning
	if t.launch != nil {
		watching = phaseLaunching
	}
	switch {
	case t.result != nil:
		return phaseEnded
	case t.sub != nil:
		return phaseIngesting
	case t.directive != nil, active && t.carry.Cancelled:
		return watching // the watch ends the lease
	case active && t.quiet(ctx):
		return phaseContinuing
	case active:
		return watching
	case t.carry.Cancelled, t.ledger.Attempt >= t.opts.MaxAttempts:
		return phaseEnded
	case t.carry.Pending != nil:
		return phaseBackoff
	case t.quiet(ctx):
		return phaseContinuing
	}
	return phaseSelecting
}

// quiet reports whether continue-as-new is suggested and nothing is in
// flight: no update handler running, no launch, submission, lease end or
// cancel pending, no lease activity holding the lease (heartbeats by ID
// reach it and not the ledger, so a new run could not tell when they
// stopped; they add nothing to the history either), no unawaited command.
func (t *taskWorkflow) quiet(ctx workflow.Context) bool {
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested() && workflow.AllHandlersFinished(ctx) &&
		t.sub == nil && t.launch == nil && t.directive == nil && !t.carry.Cancelled && !t.lease.holding() && t.unawaited.done()
}

// outcomeState is the ended task's state.
func (t *taskWorkflow) outcomeState() api.TaskState {
	switch {
	case t.result != nil:
		return api.TaskCompleted
	case t.carry.Cancelled:
		return api.TaskCancelled
	}
	return api.TaskRetriesExhausted
}

// watch is the Launching and Running phases: it ends the lease when a
// cancel or a retry directive was recorded, and otherwise waits for one
// event (a signal, the launch, the lease watch, an update's wake-up).
func (t *taskWorkflow) watch(ctx workflow.Context) {
	// A lease that already ended with a directive is released first, even
	// when a cancel arrived with it: decide then ends the cancelled task.
	if t.directive != nil {
		t.endLease(ctx, t.directive)
		return
	}
	if t.carry.Cancelled {
		t.endLease(ctx, nil)
		return
	}
	t.lease.arm(ctx)
	sel := workflow.NewSelector(ctx)
	t.addSignals(ctx, sel)
	t.lease.addTo(ctx, sel, func() { t.drainHeartbeats(ctx) }, func(d lease.RetryDirective, by string) {
		workflow.GetLogger(ctx).Info("lease expired", append(t.attemptAttrs(), "by", by)...)
		count(ctx, api.MetricLeasesExpired, "")
		t.directive = &d
	})
	if t.launch != nil {
		sel.AddFuture(t.launch, func(f workflow.Future) {
			t.launch, t.launchCancel = nil, nil
			var res api.LaunchResult
			if err := f.Get(ctx, &res); err != nil {
				t.launchFailed(ctx, err)
				return
			}
			t.attemptDir = res.TaskDir
		})
	}
	sel.Select(ctx)
}

// revoke ends the ACTIVE lease for reason; the ledger refuses while a
// result is pending, and then nothing happens. A lease revoked before its
// launch answered waits a lock-delay of its TTL.
func (t *taskWorkflow) revoke(ctx workflow.Context, reason lease.RetryReason, detail string) {
	cur := t.ledger.Current()
	if cur == nil {
		return
	}
	ttl := cur.TTL
	d, err := t.ledger.Revoke(reason, detail, workflow.Now(ctx))
	if err != nil {
		return
	}
	if t.launch != nil {
		// The launch may still start its command: its last check (the
		// launch activity's cancellation) sees this revocation only once
		// the workflow task completes. The command then runs at most a
		// TTL without an accepted heartbeat.
		d.LockDelayUntil = workflow.Now(ctx).Add(ttl)
	}
	workflow.GetLogger(ctx).Info("lease revoked", append(t.attemptAttrs(), "reason", reason, "detail", detail)...)
	count(ctx, api.MetricLeasesRevoked, string(reason))
	t.directive = &d
}

// endLease releases what the ended lease held: its lease watch, its
// launch (if still running: cancelled, so a slow agent does not start it),
// the worker's reservation and (best effort) the running attempt. A directive is queued for the backoff that precedes the next
// attempt; nil means the task was cancelled.
func (t *taskWorkflow) endLease(ctx workflow.Context, d *lease.RetryDirective) {
	t.lease.stop()
	cur := t.ledger.Current()
	if d == nil {
		t.ledger.Cancel(workflow.Now(ctx))
	}
	claim := lease.ClaimOf(*cur)
	reason := "cancelled"
	if d != nil {
		reason = string(d.Reason)
		t.carry.Directives = append(t.carry.Directives, *d)
		t.carry.Pending = d
		t.directive = nil
	}
	// Best effort, not awaited here: the old agent may be gone. The task
	// awaits it before it ends or continues as new.
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              api.AgentTaskQueue(cur.WorkerID),
		ScheduleToCloseTimeout: 30 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                cancelSummary(*cur, reason),
	})
	t.unawaited.add(workflow.ExecuteActivity(actx, agentActs.CancelAttempt, api.CancelAttemptInput{Claim: claim, Reason: reason}))
	t.release(ctx, *cur)
	if t.launch != nil {
		t.launchCancel()
	}
	t.launch, t.launchCancel = nil, nil
}

func (t *taskWorkflow) release(ctx workflow.Context, l lease.Lease) {
	f := workflow.SignalExternalWorkflow(ctx, api.WorkerWorkflowID(l.WorkerID), "", api.SignalRelease,
		api.ReleaseSignal{TaskID: l.TaskID, Fence: l.Fence})
	t.unawaited.addRelease(f)
}

// backoff is the Backoff phase: wait the directive's backoff (deterministic
// jitter) and at least until its lock-delay ends, handling signals, then
// select again. A disruption
// (infra_killed: the attempt was killed from outside — an eviction, a
// preemption, a lost node, an agent shutting down — not by its own
// doing) is retried at once and does not grow the backoff: the delay of
// the other retries counts only the retries that were not disruptions.
// An OOM kill (oom_killed) is the program's use of memory, so it waits its
// backoff like any other retry.
func (t *taskWorkflow) backoff(ctx workflow.Context) {
	t.setState(ctx, api.TaskBackoff)
	n := t.ledger.Attempt
	for _, d := range t.carry.Directives {
		if d.Reason == lease.ReasonInfraKilled {
			n--
		}
	}
	var delay time.Duration
	if t.carry.Pending == nil || t.carry.Pending.Reason != lease.ReasonInfraKilled {
		delay, _ = t.opts.Backoff.Delay(max(n, 1), t.env.TaskID)
	}
	if p := t.carry.Pending; p != nil && !p.LockDelayUntil.IsZero() {
		delay = max(delay, p.LockDelayUntil.Sub(workflow.Now(ctx)))
	}
	if delay > 0 {
		reason := lease.RetryReason("")
		if p := t.carry.Pending; p != nil {
			reason = p.Reason
		}
		t.sleep(ctx, delay, backoffSummary(delay, reason))
	}
	t.carry.Pending = nil
}

// finish is the Ended phase: cleans the staging area, reports the outcome
// to the run (a compact result reference, not the full result) unless the
// local ingest of the kept result reported it, waits for the reservation
// releases and every update handler, and returns the outcome.
//
// A completed task's lease watch ends with the workflow. A task completed
// by its first attempt has nothing staged any more (ingest removed that
// attempt's staging) and skips the cleanup activity; every other ending
// cleans up, so refused and abandoned attempts leave nothing behind.
func (t *taskWorkflow) finish(ctx workflow.Context, state api.TaskState) (api.TaskOutcome, error) {
	if state != api.TaskCompleted {
		t.lease.stop()
	}
	t.waiting = ""
	t.setState(ctx, state)
	if state != api.TaskCompleted || t.ledger.Attempt != 1 {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           api.ControlTaskQueue,
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
			Summary:             fmt.Sprintf("CleanupStaging task %s · %d attempts", t.env.TaskID, t.ledger.Attempt),
		})
		_ = workflow.ExecuteActivity(actx, controlActs.CleanupStaging, api.CleanupInput{TaskID: t.env.TaskID}).Get(ctx, nil)
	}
	out := api.TaskOutcome{TaskID: t.env.TaskID, RunID: t.env.RunID, State: state, Attempts: t.ledger.Attempt, Result: t.result}
	if state != api.TaskCompleted || !t.reported {
		err := workflow.SignalExternalWorkflow(ctx, api.RunWorkflowID(t.env.RunID), "", api.SignalTaskEnded, *t.reportOf(state, t.result)).Get(ctx, nil)
		if err != nil {
			workflow.GetLogger(ctx).Warn("could not report to run", "run", t.env.RunID, "error", err)
		}
	}
	if err := workflow.Await(ctx, func() bool {
		return t.unawaited.releasesDone() && workflow.AllHandlersFinished(ctx)
	}); err != nil {
		return out, err
	}
	return out, nil
}

// reportOf is the task-ended report of an outcome: a compact reference to
// the result, not the result.
func (t *taskWorkflow) reportOf(state api.TaskState, result *api.TaskResult) *api.TaskEndedSignal {
	report := api.TaskOutcome{TaskID: t.env.TaskID, RunID: t.env.RunID, State: state, Attempts: t.ledger.Attempt, Result: result}
	if result != nil {
		if ref, err := api.ResultRefOf(*result); err == nil {
			report.Result, report.Ref = nil, &ref
		}
	}
	return &report
}

// settleForContinueAsNew is the ContinuingAsNew phase's last look. decide
// chose it only at a quiet point (no update handler running, every
// unawaited command done), so nothing blocks here: it applies every
// buffered signal and reports whether the task is still at a quiet point.
// false sends the loop back to decide (a drained signal ended the lease, a
// cancel arrived, ...).
func (t *taskWorkflow) settleForContinueAsNew(ctx workflow.Context) bool {
	t.drainSignals(ctx)
	return t.decide(ctx) == phaseContinuing
}

// continueAsNew carries the ledger (attempt, fence, every lease), the
// directives, a pending retry and the counters into a new run. It issues
// no command but the continue-as-new itself (the lease watch of an ACTIVE
// lease is re-armed by the new run from the carried expiry).
func (t *taskWorkflow) continueAsNew(ctx workflow.Context) error {
	t.carry.Stats.ContinuedAsNew++
	t.carry.AttemptDir = ""
	if cur := t.ledger.Current(); cur != nil && cur.State == lease.Active {
		t.carry.AttemptDir = t.attemptDir
	}
	carry := t.carry
	return workflow.NewContinueAsNewError(ctx, WdcTask, api.TaskInput{
		Envelope: t.env, EnvelopeDigest: t.digest, Options: t.opts, Authority: t.authority, Carry: &carry,
	})
}
