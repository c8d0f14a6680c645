package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
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
// launched, and is watched with one timer per TTL window — or, from its
// first heartbeat signal on (generation 3), by Temporal, on a lease
// activity that the executor heartbeats by ID (see armLeaseActivity). A
// result accepted
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
// task-ended signal. Its input is validated by whoever starts it (the run's
// add-task validator), never again here, so a stricter rule in a later
// version cannot change what a replayed history did.
func WdcTask(ctx workflow.Context, in api.TaskInput) (api.TaskOutcome, error) {
	t := newTaskWorkflow(in)
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
	opts   api.TaskOptions
	carry  api.TaskCarry
	state  api.TaskState
	phase  taskPhase
	// gen is the task's api.TaskInput.Generation.
	gen int

	// ledger aliases carry.Ledger for brevity.
	ledger *lease.Ledger

	// waiting explains a PENDING task that found no worker.
	waiting string
	// selectInterval is the wait before the next look for a worker; it
	// grows while none fits and resets on a grant.
	selectInterval time.Duration
	// attemptDir is the launched attempt's task directory.
	attemptDir string
	// result is set once a result was ingested.
	result *api.TaskResult

	// Lease watch: the launch activity (nil once done) and its cancel, the
	// one timer of the current TTL window, and what ended the lease.
	launch       workflow.Future
	launchCancel workflow.CancelFunc
	timer        workflow.Future
	timerCancel  workflow.CancelFunc
	directive    *lease.RetryDirective

	// Lease activity (generation 3, see armLeaseActivity): the activity
	// holding the current lease (nil when none is pending), its fence and
	// its cancel. leaseSignalled is set when a heartbeat signal of the
	// current lease was accepted since the last one was scheduled;
	// leaseHalted is a fence for which none is scheduled again (its holder
	// heartbeats by signal only).
	leaseAct       workflow.Future
	leaseActFence  int64
	leaseActCancel workflow.CancelFunc
	leaseSignalled bool
	leaseHalted    int64

	// sub is the submission whose result is pending (at most one: the
	// lease refuses a second while one is pending).
	sub *submission
	// inflight are commands not awaited where they were issued (cancel of
	// an ended attempt, reservation releases); the task does not continue
	// as new before they are done, so none is dropped. releases are the
	// release signals among them, which the task also awaits before it
	// ends (a best-effort cancel is not awaited then: the attempt's own
	// lease check stops it once the task has ended).
	inflight []workflow.Future
	releases []workflow.Future

	wake        workflow.Channel
	heartbeatCh workflow.ReceiveChannel
	lostCh      workflow.ReceiveChannel
	failedCh    workflow.ReceiveChannel

	published taskSA
}

// submission is one accepted submit-result update waiting for its answer:
// its own claim's outcome, whatever happens to the lease meanwhile.
type submission struct {
	in     api.SubmitResultInput
	done   bool
	result *api.TaskResult
	err    error
}

type taskSA struct {
	state          api.TaskState
	worker         string
	attempt, fence int64
}

func newTaskWorkflow(in api.TaskInput) *taskWorkflow {
	t := &taskWorkflow{env: in.Envelope, digest: in.EnvelopeDigest, opts: in.Options.WithDefaults(), state: api.TaskPending, gen: in.Generation}
	if in.Carry != nil {
		t.carry = *in.Carry
	} else {
		t.carry.Ledger = lease.NewLedger(in.Envelope.TaskID, in.EnvelopeDigest)
		if t.gen >= 1 {
			// The parent started the task with kind, run and state
			// PENDING (api.TaskGeneration).
			t.published = taskSA{state: api.TaskPending}
		}
	}
	t.ledger = &t.carry.Ledger
	t.attemptDir = t.carry.AttemptDir
	t.selectInterval = t.opts.SelectInterval
	return t
}

func (t *taskWorkflow) setup(ctx workflow.Context) error {
	t.wake = workflow.NewBufferedChannel(ctx, 1)
	t.heartbeatCh = workflow.GetSignalChannel(ctx, api.SignalLeaseHeartbeat)
	t.lostCh = workflow.GetSignalChannel(ctx, api.SignalWorkerLost)
	t.failedCh = workflow.GetSignalChannel(ctx, api.SignalAttemptFailed)
	if err := workflow.SetQueryHandler(ctx, api.QueryLease, func() (api.TaskView, error) { return t.view(), nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateSubmitResult, t.submitResult, workflow.UpdateHandlerOptions{
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
		Validator: func(ctx workflow.Context, in api.CancelTaskInput) error {
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
		t.sub == nil && t.launch == nil && t.directive == nil && !t.carry.Cancelled && t.leaseAct == nil && t.inflightDone()
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

// selectAndGrant is the Selecting phase: one request for a worker; on a
// reservation, the lease is granted and launched; otherwise the task waits
// (handling signals) before decide runs again. The wait grows from
// SelectInterval by half each time, to at most 5 s (or SelectInterval if
// longer).
func (t *taskWorkflow) selectAndGrant(ctx workflow.Context) error {
	t.setState(ctx, api.TaskPending)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           api.ControlTaskQueue,
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
	})
	in := api.SelectWorkerInput{
		TaskID:       t.env.TaskID,
		Fence:        t.ledger.Fence + 1,
		Requirements: t.env.Requirements(),
		AvoidWorkers: t.lostWorkers(),
	}
	if cur := t.ledger.Current(); cur != nil {
		in.AvoidWorker = cur.WorkerID
	}
	var res api.SelectWorkerResult
	var err error
	if t.gen >= 2 {
		// In the workflow task that asks for it: a marker in the history
		// instead of three activity events and a workflow task.
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: 30 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
		})
		err = workflow.ExecuteLocalActivity(lctx, controlActs.SelectWorker, in).Get(ctx, &res)
	} else {
		err = workflow.ExecuteActivity(actx, controlActs.SelectWorker, in).Get(ctx, &res)
	}
	if err == nil && res.WorkerID != "" && t.carry.Cancelled &&
		t.changed(ctx, versionNoGrantAfterCancel) {
		// Cancelled while the worker was being reserved: hand the
		// reservation back instead of granting and launching.
		t.release(ctx, lease.Lease{TaskID: t.env.TaskID, WorkerID: res.WorkerID, Fence: in.Fence})
		return nil
	}
	if err == nil && res.WorkerID != "" {
		t.waiting = ""
		t.selectInterval = t.opts.SelectInterval
		return t.grant(ctx, res)
	}
	if err != nil {
		t.waiting = "cannot select a worker: " + errorMessage(err)
	} else {
		t.waiting = "no eligible worker: " + res.Waiting
	}
	workflow.GetLogger(ctx).Info("no worker yet", "task", t.env.TaskID, "reason", t.waiting)
	// The control plane spaces the looks of many waiting tasks
	// (RetryAfter, recorded with the selection's result).
	t.sleep(ctx, max(t.selectInterval, res.RetryAfter))
	maxInterval := 5 * time.Second
	if maxInterval < t.opts.SelectInterval {
		maxInterval = t.opts.SelectInterval
	}
	if t.selectInterval = t.selectInterval * 3 / 2; t.selectInterval > maxInterval {
		t.selectInterval = maxInterval
	}
	return nil
}

// lostWorkers lists the workers that lost a lease of this task (expired or
// revoked for a retry reason), oldest first, each once. Selection passes
// them over while another eligible worker exists.
func (t *taskWorkflow) lostWorkers() []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range t.ledger.Leases {
		if (l.State == lease.Expired || l.State == lease.Revoked) && lease.RetryReason(l.EndReason).Valid() && !seen[l.WorkerID] {
			seen[l.WorkerID] = true
			out = append(out, l.WorkerID)
		}
	}
	return out
}

// grant issues the lease to the reserved worker and launches the attempt.
func (t *taskWorkflow) grant(ctx workflow.Context, sel api.SelectWorkerResult) error {
	l, err := t.ledger.Grant(sel.WorkerID, t.opts.LeaseTTL, workflow.Now(ctx))
	if err != nil {
		return err // a broken invariant: fail loudly
	}
	workflow.GetLogger(ctx).Info("lease granted", "task", l.TaskID, "worker", l.WorkerID, "attempt", l.Attempt, "fence", l.Fence)
	count(ctx, api.MetricLeasesGranted, "")
	t.attemptDir = ""
	t.leaseSignalled = false
	t.setState(ctx, api.TaskLeased)
	lctx, cancel := workflow.WithCancel(ctx)
	actx := workflow.WithActivityOptions(lctx, t.launchOptions(l.WorkerID))
	t.launch = workflow.ExecuteActivity(actx, agentActs.LaunchAttempt, api.LaunchInput{
		Envelope: t.env, Lease: l, HeartbeatInterval: t.opts.HeartbeatInterval,
		// endLease cancels the launch (versionCancelLaunch), so the agent
		// may judge the lease by the launch activity.
		CancelledWhenLeaseEnds: t.gen >= 1,
	})
	t.launchCancel = cancel
	return nil
}

// launchOptions routes the launch to the launcher's queue: the worker's
// agent for Local attempts. The schedule-to-close timeout bounds waiting
// for a dead agent.
func (t *taskWorkflow) launchOptions(worker string) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		TaskQueue:              api.AgentTaskQueue(worker),
		ScheduleToCloseTimeout: t.opts.LaunchTimeout,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
	}
}

// watch is the Launching and Running phases: it ends the lease when a
// cancel or a retry directive was recorded, and otherwise waits for one
// event (a signal, the launch, the lease timer or lease activity, an
// update's wake-up).
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
	t.armLeaseActivity(ctx)
	t.armTimer(ctx)
	sel := workflow.NewSelector(ctx)
	t.addSignals(ctx, sel)
	if t.leaseAct != nil {
		sel.AddFuture(t.leaseAct, func(f workflow.Future) { t.leaseActEnded(ctx, f.Get(ctx, nil)) })
	}
	if t.launch != nil {
		sel.AddFuture(t.launch, func(f workflow.Future) {
			t.launch, t.launchCancel = nil, nil
			var res api.LaunchResult
			if err := f.Get(ctx, &res); err != nil {
				// Refused while a result is pending: the attempt ran.
				t.revoke(ctx, lease.ReasonLaunchFailed, errorMessage(err))
				return
			}
			t.attemptDir = res.TaskDir
		})
	}
	if t.timer != nil {
		sel.AddFuture(t.timer, func(workflow.Future) {
			t.timer = nil
			t.onTimer(ctx)
		})
	}
	sel.Select(ctx)
}

// armTimer keeps one timer for the current TTL window: it is armed for the
// lease's expiry and, when it fires while heartbeats moved the expiry,
// re-armed for the remainder — never once per heartbeat. None is armed
// while a lease activity holds the lease: Temporal keeps the time then.
func (t *taskWorkflow) armTimer(ctx workflow.Context) {
	cur := t.ledger.Current()
	if t.timer != nil || t.leaseAct != nil || cur == nil || cur.State != lease.Active || cur.ResultPending {
		return
	}
	d := cur.ExpiresAt.Sub(workflow.Now(ctx))
	if d < time.Millisecond {
		d = time.Millisecond
	}
	tctx, cancel := workflow.WithCancel(ctx)
	t.timer = workflow.NewTimer(tctx, d)
	t.timerCancel = cancel
	t.carry.Stats.TimersStarted++
}

func (t *taskWorkflow) stopTimer() {
	if t.timer != nil {
		t.timerCancel()
		t.timer = nil
	}
}

// LeaseActivityLifetime is the start-to-close timeout of a lease
// activity. One that lives this long (its executor heartbeated throughout)
// is replaced by a new one; the timeout exists because Temporal requires
// one.
const LeaseActivityLifetime = 24 * time.Hour

// armLeaseActivity hands the current lease's time to Temporal (generation
// 3): once a heartbeat signal of the ACTIVE lease was accepted, it
// schedules the lease activity (api.LeaseActivityID, activities.Control.
// HoldLease) with the lease TTL as its heartbeat timeout and stops the
// lease timer. The executor then heartbeats the activity by ID — one RPC
// the server answers alone, no workflow task, no history event — and the
// server times the activity out when the heartbeats stop (see
// leaseActEnded). It is not scheduled at the grant: most attempts end
// before their first heartbeat and never pay for one. None is scheduled
// while a result is pending, for a fence whose holder heartbeats by signal
// only (leaseHalted), or until a new signal after one that ended without
// expiring the lease.
func (t *taskWorkflow) armLeaseActivity(ctx workflow.Context) {
	cur := t.ledger.Current()
	if t.gen < 3 || t.leaseAct != nil || !t.leaseSignalled || cur == nil || cur.State != lease.Active || cur.ResultPending || cur.Fence == t.leaseHalted {
		return
	}
	t.leaseSignalled = false
	t.stopTimer()
	actx, cancel := heldActivity(ctx, api.LeaseActivityID(cur.Fence), cur.TTL, LeaseActivityLifetime)
	t.leaseAct = workflow.ExecuteActivity(actx, controlActs.HoldLease, api.LeaseHoldInput{
		TaskID: cur.TaskID, WorkerID: cur.WorkerID, Attempt: cur.Attempt, Fence: cur.Fence,
	})
	t.leaseActFence, t.leaseActCancel = cur.Fence, cancel
}

// stopLeaseActivity cancels the pending lease activity, if any: the
// executor's next heartbeat by ID then learns that its lease ended.
func (t *taskWorkflow) stopLeaseActivity() {
	if t.leaseAct != nil {
		t.leaseActCancel()
		t.leaseAct, t.leaseActCancel = nil, nil
	}
	t.leaseSignalled = false
}

// leaseActEnded applies the end of the lease activity; the ledger decides
// the lease. A heartbeat timeout means Temporal saw no heartbeat for a
// TTL, so the last one was a TTL ago (lease.Ledger.Heard): after the
// heartbeat signals already delivered are applied, the lease expires —
// unless a signal renewed it since (its holder heartbeats by signal: the
// lease is judged by signals and the timer from then on, leaseHalted) or
// a result is pending (the ingest decides). One not started within a TTL
// leaves the lease to heartbeat signals (the executor sends them while its
// heartbeats by ID find no started activity) until the next accepted one
// schedules another. Its lifetime running out means the executor
// heartbeated throughout (the heartbeat timeout is shorter): a new one
// replaces it. A cancellation is the task's own. Anything else is
// unexpected: the lease counts as heard now and is judged by signals
// until the next accepted one.
func (t *taskWorkflow) leaseActEnded(ctx workflow.Context, err error) {
	fence := t.leaseActFence
	t.leaseAct, t.leaseActCancel = nil, nil
	cur := t.ledger.Current()
	if cur == nil || cur.Fence != fence {
		return
	}
	now := workflow.Now(ctx)
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT:
		t.drainHeartbeats(ctx)
		t.ledger.Heard(fence, now.Add(-cur.TTL))
		d, err := t.ledger.Expire(now)
		switch {
		case err == nil:
			workflow.GetLogger(ctx).Info("lease expired", append(t.attemptAttrs(), "by", "lease activity heartbeat timeout")...)
			count(ctx, api.MetricLeasesExpired, "")
			t.directive = &d
		case errors.Is(err, lease.ErrNotExpired):
			t.leaseHalted = fence
		}
		t.leaseSignalled = false
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		t.leaseSignalled = false
	case errors.As(err, &timeout):
		t.ledger.Heard(fence, now)
		t.leaseSignalled = true
	case temporal.IsCanceledError(err):
	default:
		workflow.GetLogger(ctx).Warn("lease activity ended unexpectedly; judging heartbeat signals until the next one", append(t.attemptAttrs(), "error", err)...)
		t.ledger.Heard(fence, now)
		t.leaseSignalled = false
	}
}

func (t *taskWorkflow) onTimer(ctx workflow.Context) {
	// Heartbeats already delivered are applied before the expiry is
	// judged: after the control plane was down, the timer and the
	// heartbeats the executor sent meanwhile arrive together, and taking
	// the timer first would expire a lease that was kept alive.
	if t.changed(ctx, versionHeartbeatsBeforeExpiry) {
		t.drainHeartbeats(ctx)
	}
	d, err := t.ledger.Expire(workflow.Now(ctx))
	if err != nil {
		// Renewed meanwhile (armTimer re-arms for the remainder), ended,
		// or a result is pending (the ingest decides).
		return
	}
	workflow.GetLogger(ctx).Info("lease expired", t.attemptAttrs()...)
	count(ctx, api.MetricLeasesExpired, "")
	t.directive = &d
}

// revoke ends the ACTIVE lease for reason; the ledger refuses while a
// result is pending, and then nothing happens.
func (t *taskWorkflow) revoke(ctx workflow.Context, reason lease.RetryReason, detail string) {
	d, err := t.ledger.Revoke(reason, detail, workflow.Now(ctx))
	if err != nil {
		return
	}
	workflow.GetLogger(ctx).Info("lease revoked", append(t.attemptAttrs(), "reason", reason, "detail", detail)...)
	count(ctx, api.MetricLeasesRevoked, string(reason))
	t.directive = &d
}

// addSignals adds the task's signal channels to a selector. Every phase
// listens to all of them, so late messages from old attempts are consumed
// (and counted) rather than piling up.
func (t *taskWorkflow) addSignals(ctx workflow.Context, sel workflow.Selector) {
	sel.AddReceive(t.heartbeatCh, func(c workflow.ReceiveChannel, _ bool) {
		var hb api.LeaseHeartbeatSignal
		c.Receive(ctx, &hb)
		t.onHeartbeat(ctx, hb)
	})
	sel.AddReceive(t.lostCh, func(c workflow.ReceiveChannel, _ bool) {
		var lost api.WorkerLostSignal
		c.Receive(ctx, &lost)
		t.onWorkerLost(ctx, lost)
	})
	sel.AddReceive(t.failedCh, func(c workflow.ReceiveChannel, _ bool) {
		var f api.AttemptFailedSignal
		c.Receive(ctx, &f)
		t.onAttemptFailed(ctx, f)
	})
	sel.AddReceive(t.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
}

// drainHeartbeats applies every buffered lease heartbeat without blocking.
func (t *taskWorkflow) drainHeartbeats(ctx workflow.Context) {
	for {
		var hb api.LeaseHeartbeatSignal
		if !t.heartbeatCh.ReceiveAsync(&hb) {
			return
		}
		t.onHeartbeat(ctx, hb)
	}
}

// drainSignals applies every buffered signal without blocking.
func (t *taskWorkflow) drainSignals(ctx workflow.Context) {
	t.drainHeartbeats(ctx)
	for {
		var lost api.WorkerLostSignal
		if !t.lostCh.ReceiveAsync(&lost) {
			break
		}
		t.onWorkerLost(ctx, lost)
	}
	for {
		var f api.AttemptFailedSignal
		if !t.failedCh.ReceiveAsync(&f) {
			break
		}
		t.onAttemptFailed(ctx, f)
	}
	for t.wake.ReceiveAsync(nil) {
	}
}

func (t *taskWorkflow) onHeartbeat(ctx workflow.Context, hb api.LeaseHeartbeatSignal) {
	if rej := t.ledger.Renew(hb.Claim, hb.Seq, workflow.Now(ctx)); rej != nil {
		if t.carry.Stats.HeartbeatsRejected == nil {
			t.carry.Stats.HeartbeatsRejected = map[string]int64{}
		}
		t.carry.Stats.HeartbeatsRejected[string(rej.Reason)]++
		return
	}
	t.carry.Stats.HeartbeatsAccepted++
	t.leaseSignalled = true
}

// onWorkerLost revokes the lease when the lost reservation is the current
// lease's (same task, worker and fence, lease ACTIVE with no result being
// ingested), judged by the shared fence check; older fences are history.
// The registry's reservation names no attempt or digest, so those are the
// current lease's.
func (t *taskWorkflow) onWorkerLost(ctx workflow.Context, lost api.WorkerLostSignal) {
	cur := t.ledger.Current()
	if cur == nil {
		return
	}
	claim := lease.Claim{TaskID: lost.TaskID, WorkerID: lost.WorkerID, Fence: lost.Fence, Attempt: cur.Attempt, EnvelopeDigest: cur.EnvelopeDigest}
	if rej := lease.Check(cur, claim); rej != nil {
		return
	}
	t.revoke(ctx, lease.ReasonWorkerLost, fmt.Sprintf("worker %s is %s", lost.WorkerID, lost.State))
}

// onAttemptFailed applies an executor's report of an attempt that ended
// without a result, after the fence check.
func (t *taskWorkflow) onAttemptFailed(ctx workflow.Context, f api.AttemptFailedSignal) {
	if rej := lease.Check(t.ledger.Current(), f.Claim); rej != nil {
		return
	}
	// An executor reports only what it can know: the attempt was killed
	// or could not start. Expiry and worker loss are the task's own
	// judgement, never taken from a report.
	reason := f.Reason
	if reason != lease.ReasonLaunchFailed {
		reason = lease.ReasonInfraKilled
	}
	t.revoke(ctx, reason, f.Detail)
}

// endLease releases what the ended lease held: its timer or lease
// activity, its launch (if
// still running), the worker's reservation and (best effort) the running
// attempt. A directive is queued for the backoff that precedes the next
// attempt; nil means the task was cancelled.
func (t *taskWorkflow) endLease(ctx workflow.Context, d *lease.RetryDirective) {
	t.stopTimer()
	t.stopLeaseActivity()
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
	})
	t.inflight = append(t.inflight, workflow.ExecuteActivity(actx, agentActs.CancelAttempt, api.CancelAttemptInput{Claim: claim, Reason: reason}))
	t.release(ctx, *cur)
	if t.launch != nil {
		// A launch still running for an ended lease is cancelled, so a
		// slow agent does not start it (the agent also checks the lease
		// before it starts a command). Histories from before this change
		// never cancelled it.
		if t.changed(ctx, versionCancelLaunch) {
			t.launchCancel()
		}
	}
	t.launch, t.launchCancel = nil, nil
}

func (t *taskWorkflow) release(ctx workflow.Context, l lease.Lease) {
	f := workflow.SignalExternalWorkflow(ctx, api.WorkerWorkflowID(l.WorkerID), "", api.SignalRelease,
		api.ReleaseSignal{TaskID: l.TaskID, Fence: l.Fence})
	t.inflight = append(t.inflight, f)
	t.releases = append(t.releases, f)
}

// inflightDone reports whether every unawaited command has completed,
// forgetting those that have.
func (t *taskWorkflow) inflightDone() bool {
	t.inflight = pending(t.inflight)
	return len(t.inflight) == 0
}

// releasesDone reports whether every release signal was delivered (or
// failed: the worker's entry is gone).
func (t *taskWorkflow) releasesDone() bool {
	t.releases = pending(t.releases)
	return len(t.releases) == 0
}

// pending keeps the futures that are not ready yet.
func pending(fs []workflow.Future) []workflow.Future {
	n := 0
	for _, f := range fs {
		if !f.IsReady() {
			fs[n] = f
			n++
		}
	}
	return fs[:n]
}

// changed reports whether this execution has behaviour change id. A task
// of generation 1 or later (api.TaskGeneration) has every change below
// from its start and records no version marker; an older one asks
// workflow.GetVersion, as its history recorded. The changes of
// generations 2 and 3 are gated on the generation alone (t.gen >= 2,
// t.gen >= 3: see api.TaskGeneration).
func (t *taskWorkflow) changed(ctx workflow.Context, id string) bool {
	if t.gen >= 1 {
		return true
	}
	return workflow.GetVersion(ctx, id, workflow.DefaultVersion, 1) == 1
}

// Change IDs for workflow.GetVersion: each names a behaviour that differs
// from histories recorded before it (docs/architecture.md, "Versioning").
const (
	// versionCancelLaunch: ending a lease cancels its running launch.
	versionCancelLaunch = "cancel-launch-on-lease-end"
	// versionAwaitReleases: an ending task waits until its reservation
	// releases are delivered.
	versionAwaitReleases = "await-releases-at-end"
	// versionNoGrantAfterCancel: a worker reserved for a task cancelled
	// meanwhile is released, not granted.
	versionNoGrantAfterCancel = "no-grant-after-cancel"
	// versionHeartbeatsBeforeExpiry: buffered heartbeats are applied
	// before the lease timer is judged.
	versionHeartbeatsBeforeExpiry = "heartbeats-before-expiry"
	// versionDisruptionNoBackoff: an infra_killed retry waits no backoff
	// and does not count towards the backoff's growth.
	versionDisruptionNoBackoff = "disruption-no-backoff"
	// versionNoCleanupAfterFirstAttempt: a task completed by its first
	// attempt skips the CleanupStaging activity (ingest already removed
	// that attempt's staging, and no other attempt staged anything).
	versionNoCleanupAfterFirstAttempt = "no-cleanup-after-first-attempt"
)

// validateSubmitResult is the submit-result validator: the shared fence
// check, then the result's shape. A rejection writes no history.
func (t *taskWorkflow) validateSubmitResult(ctx workflow.Context, in api.SubmitResultInput) error {
	if rej := lease.Check(t.ledger.Current(), in.Claim); rej != nil {
		return temporal.NewApplicationError(rej.Message, string(rej.Reason), rej)
	}
	if t.carry.Cancelled {
		return temporal.NewApplicationError(fmt.Sprintf("task %s is being cancelled", t.env.TaskID), string(lease.RejectLeaseNotActive))
	}
	if len(in.Artifacts) > api.MaxArtifacts {
		return temporal.NewApplicationError(fmt.Sprintf("artifacts: at most %d (got %d)", api.MaxArtifacts, len(in.Artifacts)), api.ErrTypeInvalidArgument)
	}
	manifest := 0
	for _, a := range in.Artifacts {
		manifest += api.ArtifactManifestBytes(a.Name)
	}
	if manifest > api.MaxManifestBytes {
		return temporal.NewApplicationError(fmt.Sprintf("artifacts: the list takes %d bytes, over the %d-byte cap", manifest, api.MaxManifestBytes), api.ErrTypeInvalidArgument)
	}
	names := make(map[string]bool, len(in.Artifacts))
	for i, a := range in.Artifacts {
		if err := envelope.ValidateRelativePath(a.Name); err != nil {
			return temporal.NewApplicationError(fmt.Sprintf("artifacts[%d].name: %v", i, err), api.ErrTypeInvalidArgument)
		}
		if names[a.Name] {
			return temporal.NewApplicationError(fmt.Sprintf("artifacts[%d].name: duplicate %q", i, a.Name), api.ErrTypeInvalidArgument)
		}
		names[a.Name] = true
		if !envelope.DigestPattern.MatchString(a.Digest) {
			return temporal.NewApplicationError(fmt.Sprintf("artifacts[%d].digest: %q is not sha256:<hex>", i, a.Digest), api.ErrTypeInvalidArgument)
		}
		if a.SizeBytes < 0 {
			return temporal.NewApplicationError(fmt.Sprintf("artifacts[%d].size_bytes: negative", i), api.ErrTypeInvalidArgument)
		}
	}
	for i, l := range in.Logs {
		if (l.Name != api.LogStdout && l.Name != api.LogStderr) || !envelope.DigestPattern.MatchString(l.Digest) || l.SizeBytes < 0 || l.SizeBytes > api.MaxLogBytes {
			return temporal.NewApplicationError(fmt.Sprintf("logs[%d]: want %s or %s, a sha256 digest and at most %d bytes", i, api.LogStdout, api.LogStderr, api.MaxLogBytes), api.ErrTypeInvalidArgument)
		}
	}
	return nil
}

// submitResult takes a result that passed the validator (the fence check)
// for ingest and waits for the ingest to decide it. It answers with this
// submission's own outcome: the result as the parent received it, or the
// ingest error (the lease then stays ACTIVE and will expire unless the
// attempt heartbeats). It does not re-run the fence check: that is the
// validator's, and replay must not depend on it.
func (t *taskWorkflow) submitResult(ctx workflow.Context, in api.SubmitResultInput) (api.SubmitResultResult, error) {
	if err := t.ledger.MarkResultPending(in.Fence); err != nil {
		return api.SubmitResultResult{}, temporal.NewApplicationError(err.Error(), string(lease.RejectLeaseNotActive))
	}
	sub := &submission{in: in}
	t.sub = sub
	t.wake.SendAsync(true)
	// Wait on a context that cancelling the workflow does not reach: the
	// ingest goes on after a cancel request, and the submission must get
	// its outcome, not "canceled".
	wctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.Await(wctx, func() bool { return sub.done }); err != nil {
		return api.SubmitResultResult{}, err
	}
	if sub.err != nil {
		return api.SubmitResultResult{}, sub.err
	}
	return api.SubmitResultResult{Accepted: true, Result: *sub.result}, nil
}

// ingest is the Ingesting phase: parent ingest of the pending submission.
// On success the lease completes; on failure the result is abandoned and
// the lease stays ACTIVE. Either way the submission gets its answer.
func (t *taskWorkflow) ingest(ctx workflow.Context) {
	if t.gen >= 2 {
		t.ingestAndHandOn(ctx)
		return
	}
	sub := t.sub
	t.stopTimer()
	t.setState(ctx, api.TaskIngesting)
	var ingested api.IngestResult
	var err error
	if len(sub.in.Artifacts) > 0 || len(sub.in.Logs) > 0 {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           api.ControlTaskQueue,
			StartToCloseTimeout: 10 * time.Minute,
			HeartbeatTimeout:    time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		})
		err = workflow.ExecuteActivity(actx, controlActs.Ingest, api.IngestInput{Claim: sub.in.Claim, Artifacts: sub.in.Artifacts, Logs: sub.in.Logs}).Get(ctx, &ingested)
	}
	t.ingested(ctx, sub, ingested, err, true)
}

// LocalIngestMaxBytes is the most a result's artifacts and logs may hold
// together for a generation-2 task to ingest them in the workflow task
// that accepted the result (a local activity: a marker in the history,
// and no workflow task of its own). Larger results are ingested by an
// activity that heartbeats by bytes.
const LocalIngestMaxBytes = 8 << 20

// ingestAndHandOn is the Ingesting phase of a generation-2 task. The
// ingest always runs (it is what hands the result on): the release of
// the reservation and the task-ended report go from the ingest activity
// once the result is stored, not from this workflow. A small result is
// ingested by a local activity in the workflow task that accepted it; the
// lease timer is left to the workflow's end (a result pending is never
// expired), so a single-attempt task ends in that same workflow task.
func (t *taskWorkflow) ingestAndHandOn(ctx workflow.Context) {
	sub := t.sub
	in := sub.in
	var size int64
	for _, a := range append(append([]api.Artifact(nil), in.Artifacts...), in.Logs...) {
		size += a.SizeBytes
	}
	report := &api.IngestReport{Result: t.resultOf(in, api.IngestResult{}), Attempts: t.ledger.Attempt}
	input := api.IngestInput{Claim: in.Claim, Artifacts: in.Artifacts, Logs: in.Logs, Report: report}
	var ingested api.IngestResult
	var err error
	t.state = api.TaskIngesting
	if size <= LocalIngestMaxBytes {
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		})
		err = workflow.ExecuteLocalActivity(lctx, controlActs.Ingest, input).Get(ctx, &ingested)
	} else {
		t.publish(ctx)
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           api.ControlTaskQueue,
			StartToCloseTimeout: 10 * time.Minute,
			HeartbeatTimeout:    time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		})
		err = workflow.ExecuteActivity(actx, controlActs.Ingest, input).Get(ctx, &ingested)
	}
	t.ingested(ctx, sub, ingested, err, false)
}

// resultOf is the accepted result of submission in with what the ingest
// stored.
func (t *taskWorkflow) resultOf(in api.SubmitResultInput, ingested api.IngestResult) api.TaskResult {
	return api.TaskResult{
		TaskID: in.TaskID, RunID: t.env.RunID, WorkerID: in.WorkerID,
		Attempt: in.Attempt, Fence: in.Fence, EnvelopeDigest: in.EnvelopeDigest,
		ExitCode: in.ExitCode, TimedOut: in.TimedOut, OutputError: in.OutputError, Artifacts: ingested.Artifacts, Logs: ingested.Logs,
		StartedAt: in.StartedAt, FinishedAt: in.FinishedAt,
	}
}

// ingested decides the submission from the ingest's outcome: on success
// the lease completes and the result is the task's (release: this
// workflow sends the reservation's release itself, as tasks before
// generation 2 do); on failure the result is abandoned and the lease
// stays ACTIVE. Either way the submission gets its answer.
func (t *taskWorkflow) ingested(ctx workflow.Context, sub *submission, ingested api.IngestResult, err error, release bool) {
	now := workflow.Now(ctx)
	t.sub = nil
	sub.done = true
	if err == nil {
		err = t.ledger.Complete(now)
	}
	if err != nil {
		workflow.GetLogger(ctx).Warn("ingest failed", "task", t.env.TaskID, "worker", sub.in.WorkerID, "attempt", sub.in.Attempt, "fence", sub.in.Fence, "error", err)
		count(ctx, api.MetricResultsRejected, rejectReasonIngestFailed)
		t.ledger.AbandonResult(now)
		sub.err = temporal.NewApplicationError("ingest failed: "+errorMessage(err), api.ErrTypeArtifactMismatch)
		t.setState(ctx, api.TaskLeased)
		return
	}
	in := sub.in
	res := t.resultOf(in, ingested)
	t.result = &res
	sub.result = t.result
	if cur := t.ledger.Current(); cur != nil && release {
		t.release(ctx, *cur)
	}
	workflow.GetLogger(ctx).Info("result accepted", "task", t.env.TaskID, "worker", in.WorkerID, "attempt", in.Attempt, "fence", in.Fence, "exit_code", in.ExitCode)
	count(ctx, api.MetricResultsAccepted, "")
}

func (t *taskWorkflow) cancel(ctx workflow.Context, in api.CancelTaskInput) (api.TaskView, error) {
	t.carry.Cancelled = true
	t.carry.CancelReason = in.Reason
	t.wake.SendAsync(true)
	return t.view(), nil
}

// backoff is the Backoff phase: wait the directive's backoff (deterministic
// jitter), handling signals, then select again. A disruption
// (infra_killed: the attempt was killed from outside — an eviction, a
// preemption, a lost node, an agent shutting down — not by its own
// doing) is retried at once and does not grow the backoff: the delay of
// the other retries counts only the retries that were not disruptions.
func (t *taskWorkflow) backoff(ctx workflow.Context) {
	t.setState(ctx, api.TaskBackoff)
	n := t.ledger.Attempt
	var delay time.Duration
	if t.changed(ctx, versionDisruptionNoBackoff) {
		for _, d := range t.carry.Directives {
			if d.Reason == lease.ReasonInfraKilled {
				n--
			}
		}
		if t.carry.Pending == nil || t.carry.Pending.Reason != lease.ReasonInfraKilled {
			delay, _ = t.opts.Backoff.Delay(max(n, 1), t.env.TaskID)
		}
		if delay > 0 {
			t.sleep(ctx, delay)
		}
	} else {
		delay, _ = t.opts.Backoff.Delay(n, t.env.TaskID)
		t.sleep(ctx, delay)
	}
	t.carry.Pending = nil
}

// sleep waits for d or until the task is cancelled, handling signals.
func (t *taskWorkflow) sleep(ctx workflow.Context, d time.Duration) {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	timer := workflow.NewTimer(tctx, d)
	for done := false; !done; {
		sel := workflow.NewSelector(ctx)
		t.addSignals(ctx, sel)
		sel.AddFuture(timer, func(workflow.Future) { done = true })
		sel.Select(ctx)
		if t.carry.Cancelled {
			return
		}
	}
}

// finish is the Ended phase: cleans the staging area, reports to the run
// (a compact result reference, not the full result), waits for every
// unawaited command and update handler, and returns the outcome.
//
// A task completed by its first attempt has nothing staged any more:
// ingest removed that attempt's staging, and there was no other attempt.
// It skips the cleanup activity (three history events and a workflow
// task fewer on the common path); every other ending cleans up, so
// refused and abandoned attempts leave nothing behind.
func (t *taskWorkflow) finish(ctx workflow.Context, state api.TaskState) (api.TaskOutcome, error) {
	// A generation-2 task's ingest reported a completion to the run (and
	// its lease timer, if any, ends with the workflow).
	reported := t.gen >= 2 && state == api.TaskCompleted
	if !reported {
		t.stopTimer()
	}
	t.waiting = ""
	t.setState(ctx, state)
	clean := true
	if state == api.TaskCompleted && t.ledger.Attempt == 1 {
		clean = !t.changed(ctx, versionNoCleanupAfterFirstAttempt)
	}
	if clean {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           api.ControlTaskQueue,
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		})
		_ = workflow.ExecuteActivity(actx, controlActs.CleanupStaging, api.CleanupInput{TaskID: t.env.TaskID}).Get(ctx, nil)
	}
	out := api.TaskOutcome{TaskID: t.env.TaskID, RunID: t.env.RunID, State: state, Attempts: t.ledger.Attempt, Result: t.result}
	report := out
	if t.result != nil {
		if ref, err := api.ResultRefOf(*t.result); err == nil {
			report.Result, report.Ref = nil, &ref
		}
	}
	if !reported {
		err := workflow.SignalExternalWorkflow(ctx, api.RunWorkflowID(t.env.RunID), "", api.SignalTaskEnded, report).Get(ctx, nil)
		if err != nil {
			workflow.GetLogger(ctx).Warn("could not report to run", "run", t.env.RunID, "error", err)
		}
	}
	awaitReleases := t.changed(ctx, versionAwaitReleases)
	if err := workflow.Await(ctx, func() bool {
		return (!awaitReleases || t.releasesDone()) && workflow.AllHandlersFinished(ctx)
	}); err != nil {
		return out, err
	}
	return out, nil
}

func (t *taskWorkflow) setState(ctx workflow.Context, s api.TaskState) {
	t.state = s
	t.publish(ctx)
}

// publish keeps the search attributes current (written only on change).
func (t *taskWorkflow) publish(ctx workflow.Context) {
	now := taskSA{state: t.state}
	if cur := t.ledger.Current(); cur != nil {
		now.worker, now.attempt, now.fence = cur.WorkerID, cur.Attempt, cur.Fence
	}
	if now == t.published {
		return
	}
	t.published = now
	updates := []temporal.SearchAttributeUpdate{
		api.SAKind.ValueSet(api.KindTask),
		api.SARunID.ValueSet(t.env.RunID),
		api.SATaskState.ValueSet(string(now.state)),
		api.SAAttempt.ValueSet(now.attempt),
		api.SAFence.ValueSet(now.fence),
	}
	if now.worker != "" {
		updates = append(updates, api.SAWorkerID.ValueSet(now.worker))
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

func (t *taskWorkflow) view() api.TaskView {
	v := api.TaskView{
		TaskID: t.env.TaskID, RunID: t.env.RunID, State: t.state, EnvelopeDigest: t.digest,
		Leases: append([]lease.Lease{}, t.ledger.Leases...), Directives: append([]lease.RetryDirective{}, t.carry.Directives...),
		Options: t.opts, Stats: t.carry.Stats, Result: t.result, Waiting: t.waiting, AttemptDir: t.attemptDir, CancelReason: t.carry.CancelReason, Phase: string(t.phase),
	}
	if cur := t.ledger.Current(); cur != nil {
		c := *cur
		v.Lease = &c
	}
	if t.leaseAct != nil {
		v.LeaseActivity = api.LeaseActivityID(t.leaseActFence)
	}
	return v
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
// no command but the continue-as-new itself (the timer of an ACTIVE lease
// is re-armed by the new run from the carried expiry).
func (t *taskWorkflow) continueAsNew(ctx workflow.Context) error {
	t.carry.Stats.ContinuedAsNew++
	t.carry.AttemptDir = ""
	if cur := t.ledger.Current(); cur != nil && cur.State == lease.Active {
		t.carry.AttemptDir = t.attemptDir
	}
	carry := t.carry
	return workflow.NewContinueAsNewError(ctx, WdcTask, api.TaskInput{
		Envelope: t.env, EnvelopeDigest: t.digest, Options: t.opts, Carry: &carry, Generation: t.gen,
	})
}

// errorMessage unwraps activity errors to the application message.
func errorMessage(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		switch timeoutErr.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
			return "the agent did not pick up the launch in time (is it running?)"
		}
		return "timed out: " + timeoutErr.TimeoutType().String()
	}
	return err.Error()
}
