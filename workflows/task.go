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
	"github.com/wdc-runtime/wdc/internal/envelope"
	"github.com/wdc-runtime/wdc/internal/lease"
)

// Typed nils through which workflows name activities (STYLE 3).
var (
	controlActs *activities.Control
	agentActs   *activities.Agent
)

// WdcTask is one logical task (workflow ID api.TaskWorkflowID): the lease
// loop of DESIGN §4. Each attempt reserves a worker, is granted a lease
// (attempt+1, fence+1, same envelope digest), is launched, and is watched
// with one timer per TTL window. A result accepted through the
// submit-result update (validator: lease.Check) is ingested and the lease
// completes; expiry, worker loss, launch failure or an infrastructure kill
// end the lease with a retry directive and, after backoff, a new attempt.
//
// It returns COMPLETED, RETRIES_EXHAUSTED or CANCELLED — never a failure for
// an attempt's fate (invariant 1) — and tells its run through the
// task-ended signal.
func WdcTask(ctx workflow.Context, in api.TaskInput) (api.TaskOutcome, error) {
	t, err := newTaskWorkflow(in)
	if err != nil {
		return api.TaskOutcome{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeInvalidArgument, nil)
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

type taskWorkflow struct {
	env    envelope.Envelope
	digest string
	opts   api.TaskOptions
	carry  api.TaskCarry
	state  api.TaskState

	// ledger aliases carry.Ledger for brevity.
	ledger *lease.Ledger

	// waiting explains a PENDING task that found no worker.
	waiting string
	// attemptDir is the launched attempt's task directory.
	attemptDir string
	// result is set once a result was ingested.
	result *api.TaskResult

	// Lease watch: the launch activity (nil once done), the one timer of
	// the current TTL window, and what ended the lease.
	launch      workflow.Future
	timer       workflow.Future
	timerCancel workflow.CancelFunc
	directive   *lease.RetryDirective

	// Submission handling between the update handler and the main loop.
	submission *api.SubmitResultInput
	ingestDone bool
	ingestErr  error

	wake        workflow.Channel
	heartbeatCh workflow.ReceiveChannel
	lostCh      workflow.ReceiveChannel
	failedCh    workflow.ReceiveChannel

	published taskSA
}

type taskSA struct {
	state          api.TaskState
	worker         string
	attempt, fence int64
}

func newTaskWorkflow(in api.TaskInput) (*taskWorkflow, error) {
	if err := in.Envelope.Validate(true); err != nil {
		return nil, err
	}
	digest, err := in.Envelope.Digest()
	if err != nil {
		return nil, err
	}
	if digest != in.EnvelopeDigest {
		return nil, fmt.Errorf("envelope_digest: %s does not match the envelope (%s)", in.EnvelopeDigest, digest)
	}
	opts := in.Options.WithDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	t := &taskWorkflow{env: in.Envelope, digest: digest, opts: opts, state: api.TaskPending}
	if in.Carry != nil {
		t.carry = *in.Carry
	} else {
		t.carry.Ledger = lease.NewLedger(in.Envelope.TaskID, digest)
	}
	t.ledger = &t.carry.Ledger
	return t, nil
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
		Validator: t.validateSubmitResult,
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

func (t *taskWorkflow) run(ctx workflow.Context) (api.TaskOutcome, error) {
	if cur := t.ledger.Current(); cur != nil && cur.State == lease.Active {
		// Continued as new while an attempt held its lease: keep watching it.
		t.state = api.TaskLeased
		t.publish(ctx)
		if err := t.watch(ctx); err != nil {
			return api.TaskOutcome{}, err
		}
		if t.result != nil {
			return t.finish(ctx, api.TaskCompleted)
		}
	}
	for {
		if t.carry.Cancelled {
			return t.finish(ctx, api.TaskCancelled)
		}
		if t.ledger.Attempt >= t.opts.MaxAttempts {
			return t.finish(ctx, api.TaskRetriesExhausted)
		}
		if d := t.carry.Pending; d != nil {
			t.setState(ctx, api.TaskBackoff)
			delay, _ := t.opts.Backoff.Delay(t.ledger.Attempt, t.env.TaskID)
			t.sleep(ctx, delay)
			t.carry.Pending = nil
			continue
		}
		if t.canContinueAsNew(ctx) {
			return api.TaskOutcome{}, t.continueAsNew(ctx)
		}
		t.setState(ctx, api.TaskPending)
		sel, ok := t.selectWorker(ctx)
		if !ok {
			continue // cancelled, or time to continue as new
		}
		if err := t.grant(ctx, sel); err != nil {
			return api.TaskOutcome{}, err
		}
		if err := t.watch(ctx); err != nil {
			return api.TaskOutcome{}, err
		}
		if t.result != nil {
			return t.finish(ctx, api.TaskCompleted)
		}
	}
}

// selectWorker asks the control plane for a worker until one is reserved.
// The wait between tries grows from SelectInterval by half each time, to at
// most 5 s (or SelectInterval if longer). It returns
// false when the task was cancelled or should continue as new first.
func (t *taskWorkflow) selectWorker(ctx workflow.Context) (api.SelectWorkerResult, bool) {
	avoid := ""
	if cur := t.ledger.Current(); cur != nil {
		avoid = cur.WorkerID
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           api.ControlTaskQueue,
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
	})
	interval := t.opts.SelectInterval
	maxInterval := 5 * time.Second
	if maxInterval < t.opts.SelectInterval {
		maxInterval = t.opts.SelectInterval
	}
	for {
		var res api.SelectWorkerResult
		err := workflow.ExecuteActivity(actx, controlActs.SelectWorker, api.SelectWorkerInput{
			TaskID:       t.env.TaskID,
			Fence:        t.ledger.Fence + 1,
			Requirements: t.env.Requirements(),
			AvoidWorker:  avoid,
		}).Get(ctx, &res)
		if err == nil && res.WorkerID != "" {
			t.waiting = ""
			return res, true
		}
		if err != nil {
			t.waiting = "cannot select a worker: " + errorMessage(err)
		} else {
			t.waiting = "no eligible worker: " + res.Waiting
		}
		workflow.GetLogger(ctx).Info("no worker yet", "task", t.env.TaskID, "reason", t.waiting)
		t.sleep(ctx, interval)
		if t.carry.Cancelled || t.canContinueAsNew(ctx) {
			return api.SelectWorkerResult{}, false
		}
		if interval = interval * 3 / 2; interval > maxInterval {
			interval = maxInterval
		}
	}
}

// grant issues the lease to the reserved worker and launches the attempt.
func (t *taskWorkflow) grant(ctx workflow.Context, sel api.SelectWorkerResult) error {
	l, err := t.ledger.Grant(sel.WorkerID, t.opts.LeaseTTL, workflow.Now(ctx))
	if err != nil {
		return err // a broken invariant: fail loudly
	}
	workflow.GetLogger(ctx).Info("lease granted", "task", l.TaskID, "worker", l.WorkerID, "attempt", l.Attempt, "fence", l.Fence)
	t.attemptDir = ""
	t.setState(ctx, api.TaskLeased)
	actx := workflow.WithActivityOptions(ctx, t.launchOptions(l.WorkerID))
	t.launch = workflow.ExecuteActivity(actx, agentActs.LaunchAttempt, api.LaunchInput{
		Envelope: t.env, Lease: l, HeartbeatInterval: t.opts.HeartbeatInterval,
	})
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

// watch waits on the ACTIVE lease until it completes (t.result set), ends
// with a retry directive (carry.Pending set) or the task is cancelled.
func (t *taskWorkflow) watch(ctx workflow.Context) error {
	for {
		cur := t.ledger.Current()
		if t.carry.Cancelled {
			t.endLease(ctx, nil)
			return nil
		}
		if t.directive != nil {
			t.endLease(ctx, t.directive)
			return nil
		}
		if cur.ResultPending && t.submission != nil && !t.ingestDone {
			t.ingest(ctx)
			if t.result != nil {
				return nil
			}
			continue
		}
		if t.launch == nil && t.canContinueAsNew(ctx) {
			return t.continueAsNew(ctx)
		}
		t.armTimer(ctx)
		sel := workflow.NewSelector(ctx)
		t.addSignals(ctx, sel)
		if t.launch != nil {
			sel.AddFuture(t.launch, func(f workflow.Future) {
				t.launch = nil
				var res api.LaunchResult
				if err := f.Get(ctx, &res); err != nil {
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
}

// armTimer keeps one timer for the current TTL window (DESIGN §4 step 3):
// it is armed for the lease's expiry and, when it fires while heartbeats
// moved the expiry, re-armed for the remainder — never once per heartbeat.
func (t *taskWorkflow) armTimer(ctx workflow.Context) {
	cur := t.ledger.Current()
	if t.timer != nil || cur == nil || cur.State != lease.Active || cur.ResultPending {
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

func (t *taskWorkflow) onTimer(ctx workflow.Context) {
	cur := t.ledger.Current()
	if cur == nil || cur.State != lease.Active || cur.ResultPending {
		return
	}
	d, err := t.ledger.Expire(workflow.Now(ctx))
	if errors.Is(err, lease.ErrNotExpired) {
		return // renewed meanwhile; armTimer re-arms for the remainder
	}
	if err != nil {
		return
	}
	workflow.GetLogger(ctx).Info("lease expired", "task", t.env.TaskID, "attempt", d.NextAttempt-1, "fence", d.NextFence-1)
	t.directive = &d
}

func (t *taskWorkflow) revoke(ctx workflow.Context, reason lease.RetryReason, detail string) {
	d, err := t.ledger.Revoke(reason, detail, workflow.Now(ctx))
	if err != nil {
		return
	}
	workflow.GetLogger(ctx).Info("lease revoked", "task", t.env.TaskID, "reason", reason, "detail", detail)
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

func (t *taskWorkflow) onHeartbeat(ctx workflow.Context, hb api.LeaseHeartbeatSignal) {
	if rej := t.ledger.Renew(hb.Claim, hb.Seq, workflow.Now(ctx)); rej != nil {
		if t.carry.Stats.HeartbeatsRejected == nil {
			t.carry.Stats.HeartbeatsRejected = map[string]int64{}
		}
		t.carry.Stats.HeartbeatsRejected[string(rej.Reason)]++
		return
	}
	t.carry.Stats.HeartbeatsAccepted++
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
	reason := f.Reason
	if !reason.Valid() {
		reason = lease.ReasonInfraKilled
	}
	t.revoke(ctx, reason, f.Detail)
}

// endLease releases what the ended lease held: its timer, the worker's
// reservation and (best effort) the running attempt. A directive is queued
// for the backoff that precedes the next attempt.
func (t *taskWorkflow) endLease(ctx workflow.Context, d *lease.RetryDirective) {
	t.stopTimer()
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
	// Best effort, not awaited: the old agent may be gone.
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              api.AgentTaskQueue(cur.WorkerID),
		ScheduleToCloseTimeout: 30 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	workflow.ExecuteActivity(actx, agentActs.CancelAttempt, api.CancelAttemptInput{Claim: claim, Reason: reason})
	t.release(ctx, *cur)
	t.launch = nil
}

func (t *taskWorkflow) release(ctx workflow.Context, l lease.Lease) {
	workflow.SignalExternalWorkflow(ctx, api.WorkerWorkflowID(l.WorkerID), "", api.SignalRelease,
		api.ReleaseSignal{TaskID: l.TaskID, Fence: l.Fence})
}

// validateSubmitResult is the submit-result validator: the shared fence
// check, then the result's shape. A rejection writes no history.
func (t *taskWorkflow) validateSubmitResult(ctx workflow.Context, in api.SubmitResultInput) error {
	if rej := lease.Check(t.ledger.Current(), in.Claim); rej != nil {
		return temporal.NewApplicationError(rej.Message, string(rej.Reason), rej)
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

// submitResult accepts the result for ingest and waits for the main loop to
// ingest it; it answers with the result as the parent received it, or the
// ingest error (the lease then stays ACTIVE and will expire).
func (t *taskWorkflow) submitResult(ctx workflow.Context, in api.SubmitResultInput) (api.SubmitResultResult, error) {
	if rej := t.ledger.Accept(in.Claim); rej != nil {
		return api.SubmitResultResult{}, temporal.NewApplicationError(rej.Message, string(rej.Reason), rej)
	}
	t.stopTimer()
	t.submission = &in
	t.ingestDone, t.ingestErr = false, nil
	t.wake.SendAsync(true)
	if err := workflow.Await(ctx, func() bool { return t.ingestDone }); err != nil {
		return api.SubmitResultResult{}, err
	}
	if t.ingestErr != nil {
		return api.SubmitResultResult{}, t.ingestErr
	}
	return api.SubmitResultResult{Accepted: true, Result: *t.result}, nil
}

// ingest runs parent ingest for the pending submission and completes the
// lease on success.
func (t *taskWorkflow) ingest(ctx workflow.Context) {
	sub := t.submission
	t.setState(ctx, api.TaskIngesting)
	var ingested api.IngestResult
	var err error
	if len(sub.Artifacts) > 0 || len(sub.Logs) > 0 {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           api.ControlTaskQueue,
			StartToCloseTimeout: 10 * time.Minute,
			HeartbeatTimeout:    time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		})
		err = workflow.ExecuteActivity(actx, controlActs.Ingest, api.IngestInput{Claim: sub.Claim, Artifacts: sub.Artifacts, Logs: sub.Logs}).Get(ctx, &ingested)
	}
	now := workflow.Now(ctx)
	if err != nil {
		workflow.GetLogger(ctx).Warn("ingest failed", "task", t.env.TaskID, "fence", sub.Fence, "error", err)
		t.ledger.AbandonResult(now)
		t.ingestErr = temporal.NewApplicationError("ingest failed: "+errorMessage(err), api.ErrTypeArtifactMismatch)
		t.ingestDone = true
		t.submission = nil
		t.setState(ctx, api.TaskLeased)
		return
	}
	if err := t.ledger.Complete(now); err != nil {
		t.ingestErr = temporal.NewApplicationError(err.Error(), string(lease.RejectLeaseNotActive))
		t.ingestDone = true
		return
	}
	t.result = &api.TaskResult{
		TaskID: sub.TaskID, RunID: t.env.RunID, WorkerID: sub.WorkerID,
		Attempt: sub.Attempt, Fence: sub.Fence, EnvelopeDigest: sub.EnvelopeDigest,
		ExitCode: sub.ExitCode, TimedOut: sub.TimedOut, OutputError: sub.OutputError, Artifacts: ingested.Artifacts, Logs: ingested.Logs,
		StartedAt: sub.StartedAt, FinishedAt: sub.FinishedAt,
	}
	t.ingestDone = true
	if cur := t.ledger.Current(); cur != nil {
		t.release(ctx, *cur)
	}
	workflow.GetLogger(ctx).Info("result accepted", "task", t.env.TaskID, "attempt", sub.Attempt, "fence", sub.Fence, "exit_code", sub.ExitCode)
}

func (t *taskWorkflow) cancel(ctx workflow.Context, in api.CancelTaskInput) (api.TaskView, error) {
	t.carry.Cancelled = true
	t.carry.CancelReason = in.Reason
	t.wake.SendAsync(true)
	return t.view(), nil
}

// sleep waits for d or until an update wakes the task, handling signals.
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

// finish ends the task: cleans the staging area, reports to the run, waits
// for update handlers, and returns the outcome.
func (t *taskWorkflow) finish(ctx workflow.Context, state api.TaskState) (api.TaskOutcome, error) {
	t.stopTimer()
	t.waiting = ""
	t.setState(ctx, state)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           api.ControlTaskQueue,
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	_ = workflow.ExecuteActivity(actx, controlActs.CleanupStaging, api.CleanupInput{TaskID: t.env.TaskID}).Get(ctx, nil)
	out := api.TaskOutcome{TaskID: t.env.TaskID, RunID: t.env.RunID, State: state, Attempts: t.ledger.Attempt, Result: t.result}
	err := workflow.SignalExternalWorkflow(ctx, api.RunWorkflowID(t.env.RunID), "", api.SignalTaskEnded, out).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("could not report to run", "run", t.env.RunID, "error", err)
	}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
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
		Options: t.opts, Stats: t.carry.Stats, Result: t.result, Waiting: t.waiting, AttemptDir: t.attemptDir, CancelReason: t.carry.CancelReason,
	}
	if cur := t.ledger.Current(); cur != nil {
		c := *cur
		v.Lease = &c
	}
	return v
}

func (t *taskWorkflow) canContinueAsNew(ctx workflow.Context) bool {
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested() && workflow.AllHandlersFinished(ctx) && t.submission == nil
}

// continueAsNew carries the ledger (attempt, fence, every lease), the
// directives and counters into a new run, after applying every buffered
// signal so none is lost.
func (t *taskWorkflow) continueAsNew(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	for {
		var hb api.LeaseHeartbeatSignal
		if !t.heartbeatCh.ReceiveAsync(&hb) {
			break
		}
		t.onHeartbeat(ctx, hb)
	}
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
	if t.directive != nil {
		t.endLease(ctx, t.directive)
	}
	t.stopTimer()
	t.carry.Stats.ContinuedAsNew++
	carry := t.carry
	return workflow.NewContinueAsNewError(ctx, WdcTask, api.TaskInput{
		Envelope: t.env, EnvelopeDigest: t.digest, Options: t.opts, Carry: &carry,
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
