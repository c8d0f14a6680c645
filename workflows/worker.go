package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

// WdcWorker is the registry entry of one fleet worker (workflow ID
// api.WorkerWorkflowID). It is started by the first register update
// (UpdateWithStart) and continues as new when Temporal suggests it,
// carrying the record.
//
// Liveness is judged by Temporal while the worker is ACTIVE or DRAINING:
// the entry keeps one liveness activity pending (api.LivenessActivityID,
// heartbeat timeout = the stale-after window; see
// activities.Control.HoldLiveness) and the agent heartbeats it by ID, so
// a heartbeat costs the server one RPC and the entry nothing: no signal,
// workflow task or history event. When the server times the activity out
// the worker is STALE. Heartbeat signals remain for what the activity
// cannot do: bringing a STALE worker back, and judging the worker while no
// activity is started (the control plane is down or cannot hold it). Then
// liveness uses one timer per window: it fires at the next
// STALE/OFFLINE boundary and is re-armed for the remainder when
// heartbeats moved the boundary.
//
// It ends when deregistered, returning the final record (whose
// incarnation a later entry of the same worker continues from), or
// UnregisteredLifetime after its start when no registration was accepted.
func WdcWorker(ctx workflow.Context, in api.WorkerInput) (api.WorkerView, error) {
	if err := startedAsWdcStartsIt(ctx); err != nil {
		return api.WorkerView{}, err
	}
	if (in.State != nil || len(in.Lost) > 0 || !in.ReconciledAt.IsZero()) && !continued(ctx) {
		workflow.GetLogger(ctx).Warn("state ignored: only continue-as-new carries a worker's record", "worker", in.WorkerID)
		in.State, in.Lost, in.ReconciledAt = nil, nil, time.Time{}
	}
	w := &workerWorkflow{id: in.WorkerID, lost: in.Lost, reconciledAt: in.ReconciledAt}
	w.rec.Incarnation = in.IncarnationFloor
	if in.State != nil {
		w.rec = *in.State
		w.registered = true
	}
	if err := w.setup(ctx); err != nil {
		return api.WorkerView{}, err
	}
	if err := w.run(ctx); err != nil {
		return api.WorkerView{}, err
	}
	return w.view(), nil
}

type workerWorkflow struct {
	id         string
	rec        fleet.Worker
	registered bool
	// unregistered is the UnregisteredLifetime timer of an entry not
	// registered yet; unregisteredEnded that it fired.
	unregistered      workflow.Future
	unregisteredEnded bool

	// timer is the armed liveness timer and timerAt its deadline.
	timer       workflow.Future
	timerAt     time.Time
	timerCancel workflow.CancelFunc

	// wake is signalled by update handlers so the main loop re-evaluates.
	wake workflow.Channel
	// lost are worker-lost notifications not yet sent; continue-as-new
	// carries them.
	lost []api.WorkerLostSignal

	// reconcileTimer is armed while a reservation is older than
	// the check period; reconciledAt is when the last check ran.
	reconcileTimer workflow.Future
	reconciledAt   time.Time

	// shown is what the current details last showed (showDetails).
	shown workerDetailsKey
	// saState is the state last written to the search attributes.
	saState fleet.State
	// memoIncarnation is the incarnation whose fleet.Profile this run
	// published in the memo.
	memoIncarnation int64

	// liveness is the liveness activity kept pending while the worker is
	// live (nil when none is pending), livenessCancel cancels it, and
	// livenessHalted stops scheduling another after one ended in a way
	// the entry did not expect, until a later heartbeat signal.
	liveness       workflow.Future
	livenessCancel workflow.CancelFunc
	livenessHalted bool
	// livenessHaltedAt is when the halt began: a heartbeat signal lifts it
	// no sooner than a stale-after window later, so a control plane that
	// cannot hold the activity is asked at most once per window.
	livenessHaltedAt time.Time

	heartbeatCh workflow.ReceiveChannel
	releaseCh   workflow.ReceiveChannel
	sweepCh     workflow.ReceiveChannel
}

func (w *workerWorkflow) setup(ctx workflow.Context) error {
	w.wake = workflow.NewBufferedChannel(ctx, 1)
	w.heartbeatCh = workflow.GetSignalChannelWithOptions(ctx, api.SignalWorkerHeartbeat, workflow.SignalChannelOptions{Description: descHeartbeat})
	w.releaseCh = workflow.GetSignalChannelWithOptions(ctx, api.SignalRelease, workflow.SignalChannelOptions{Description: descRelease})
	w.sweepCh = workflow.GetSignalChannelWithOptions(ctx, api.SignalSweep, workflow.SignalChannelOptions{Description: descSweep})

	if err := workflow.SetQueryHandlerWithOptions(ctx, api.QueryWorker, func() (api.WorkerView, error) {
		return w.view(), nil
	}, workflow.QueryHandlerOptions{Description: descWorkerView}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRegister, w.register, workflow.UpdateHandlerOptions{
		Validator: w.validateRegister, Description: descRegister,
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateReserve, w.reserve, workflow.UpdateHandlerOptions{
		Validator: w.validateReserve, Description: descReserve,
	}); err != nil {
		return err
	}
	live := func() error {
		switch {
		case !w.registered:
			return notRegistered(w.id)
		case w.rec.State == fleet.Deregistered:
			return temporal.NewApplicationError(fmt.Sprintf("worker %s is deregistered", w.id), api.ErrTypeConflict)
		}
		return nil
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRevoke, w.revoke, workflow.UpdateHandlerOptions{
		Validator: func(ctx workflow.Context, in api.RevokeInput) error {
			if err := live(); err != nil {
				return err
			}
			return w.validateRevoke(ctx, in)
		},
		Description: descRevoke,
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateDrain, w.drain, workflow.UpdateHandlerOptions{
		Description: descDrain,
		Validator: func(ctx workflow.Context, in api.DrainInput) error {
			if err := live(); err != nil {
				return err
			}
			unsigned := in
			unsigned.Proof = nil
			return w.authenticateOperator(ctx, api.UpdateDrain, in.WorkerID, unsigned, in.Proof)
		},
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateUndrain, func(ctx workflow.Context, in api.UndrainInput) (api.WorkerView, error) {
		w.rec.Undrain(workflow.Now(ctx))
		w.wake.SendAsync(true)
		return w.view(), nil
	}, workflow.UpdateHandlerOptions{
		Description: descUndrain,
		Validator: func(ctx workflow.Context, in api.UndrainInput) error {
			if err := live(); err != nil {
				return err
			}
			unsigned := in
			unsigned.Proof = nil
			return w.authenticateOperator(ctx, api.UpdateUndrain, in.WorkerID, unsigned, in.Proof)
		},
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateDeregister, func(ctx workflow.Context, in api.DeregisterInput) (api.WorkerView, error) {
		lost := w.rec.Deregister(workflow.Now(ctx))
		w.noteLost(lost, string(fleet.Deregistered))
		w.wake.SendAsync(true)
		return w.view(), nil
	}, workflow.UpdateHandlerOptions{
		Description: descDeregister,
		Validator: func(ctx workflow.Context, in api.DeregisterInput) error {
			if err := live(); err != nil {
				return err
			}
			unsigned := in
			unsigned.Proof = nil
			if err := w.authenticateOperator(ctx, api.UpdateDeregister, in.WorkerID, unsigned, in.Proof); err != nil {
				return err
			}
			if !w.rec.RevokedThrough.IsZero() && verifierOf(ctx).Enabled() {
				// A new entry would not know the revocation.
				return temporal.NewApplicationError(fmt.Sprintf("worker %s's identity was revoked at %s: its entry keeps the revocation, so it is not deregistered (it stays %s and takes no work)",
					w.id, w.rec.RevokedAt.Format(time.RFC3339), w.rec.State), api.ErrTypeConflict)
			}
			if n := len(w.rec.Reservations); n > 0 && !in.Force {
				return temporal.NewApplicationError(fmt.Sprintf("worker %s holds %d lease(s); drain it and wait, or force (their tasks then retry elsewhere)", w.id, n), api.ErrTypeConflict)
			}
			return nil
		},
	})
}

// endUnregisteredEntry is the change ID of the UnregisteredLifetime timer
// (version 1), recorded only by an entry not registered in its first
// workflow task. Retire it as docs/architecture.md says: once no WdcWorker
// started before it runs unregistered (such an entry never continues as
// new: terminate it), make the timer unconditional.
const endUnregisteredEntry = "end-unregistered-entry"

// UnregisteredLifetime is how long a registry entry that no registration
// was accepted into waits for one before it ends: UpdateWithStart starts
// the entry even when the validator refuses the registration.
const UnregisteredLifetime = time.Minute

func (w *workerWorkflow) run(ctx workflow.Context) error {
	// A carried record may name the previous run's liveness activity,
	// which ended with that run.
	w.rec.LivenessActivity = ""
	if !w.registered && workflow.GetVersion(ctx, endUnregisteredEntry, workflow.DefaultVersion, 1) == 1 {
		w.unregistered = workflow.NewTimerWithOptions(ctx, UnregisteredLifetime, workflow.TimerOptions{
			Summary: "waiting for a registration · the entry ends without one"})
	}
	w.publish(ctx)
	w.sendLost(ctx) // carried from the previous run
	for {
		w.armLiveness(ctx)
		w.armTimer(ctx)
		w.armReconcile(ctx)
		w.showDetails(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(w.heartbeatCh, func(c workflow.ReceiveChannel, _ bool) {
			var hb api.WorkerHeartbeatSignal
			c.Receive(ctx, &hb)
			w.onHeartbeat(ctx, hb)
		})
		sel.AddReceive(w.releaseCh, func(c workflow.ReceiveChannel, _ bool) {
			var r api.ReleaseSignal
			c.Receive(ctx, &r)
			w.rec.Release(r.TaskID, r.Fence)
		})
		sel.AddReceive(w.sweepCh, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
		})
		sel.AddReceive(w.wake, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
		})
		if w.timer != nil {
			sel.AddFuture(w.timer, func(workflow.Future) { w.timer = nil })
		}
		if w.liveness != nil {
			sel.AddFuture(w.liveness, func(f workflow.Future) { w.livenessEnded(ctx, f.Get(ctx, nil)) })
		}
		if w.unregistered != nil && !w.registered {
			sel.AddFuture(w.unregistered, func(workflow.Future) { w.unregistered, w.unregisteredEnded = nil, true })
		}
		if w.reconcileTimer != nil {
			sel.AddFuture(w.reconcileTimer, func(workflow.Future) {
				w.reconcileTimer = nil
				w.checkReservations(ctx)
			})
		}
		sel.Select(ctx)
		if ctx.Err() != nil {
			// Cancelled by an operator: the registry entry ends.
			return temporal.NewCanceledError("worker workflow cancelled")
		}

		// Buffered heartbeats are applied before the liveness windows
		// are judged.
		w.drainHeartbeats(ctx)
		w.evaluate(ctx)
		w.sendLost(ctx)
		w.publish(ctx)
		w.showDetails(ctx)

		if w.rec.State == fleet.Deregistered {
			return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
		}
		if w.unregisteredEnded && !w.registered && workflow.AllHandlersFinished(ctx) {
			workflow.GetLogger(ctx).Info("registry entry ends: no registration accepted", "worker", w.id, "waited", UnregisteredLifetime)
			return nil
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return w.continueAsNew(ctx)
		}
	}
}

// armReconcile arms the reservation check for when the oldest reservation
// not yet covered by a check is the worker's reservation check period old
// (fleet.Worker.ReservationCheckPeriod): a reservation whose task moved to
// another fence or worker, ended, or never confirmed it with a grant (an
// ambiguous reserve whose answer was lost) is then released, and the
// check's activity result in the history says which and why.
func (w *workerWorkflow) armReconcile(ctx workflow.Context) {
	if w.reconcileTimer != nil || len(w.rec.Reservations) == 0 {
		return
	}
	oldest := w.rec.Reservations[0].ReservedAt
	for _, r := range w.rec.Reservations[1:] {
		if r.ReservedAt.Before(oldest) {
			oldest = r.ReservedAt
		}
	}
	period := w.rec.ReservationCheckPeriod()
	at := oldest.Add(period)
	if next := w.reconciledAt.Add(period); at.Before(next) {
		at = next
	}
	d := at.Sub(workflow.Now(ctx))
	if d < time.Second {
		d = time.Second
	}
	w.reconcileTimer = workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{
		Summary: fmt.Sprintf("check %d reservations against their tasks", len(w.rec.Reservations)),
	})
}

// checkReservations asks the control plane which reservations older than
// the worker's check period no longer belong to their task, and releases
// them.
func (w *workerWorkflow) checkReservations(ctx workflow.Context) {
	now := workflow.Now(ctx)
	w.reconciledAt = now
	var refs []api.ReservationRef
	for _, r := range w.rec.Reservations {
		if now.Sub(r.ReservedAt) >= w.rec.ReservationCheckPeriod() {
			refs = append(refs, api.ReservationRef{TaskID: r.TaskID, Fence: r.Fence})
		}
	}
	if len(refs) == 0 {
		return
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           api.ControlTaskQueue,
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var res api.CheckReservationsResult
	if err := workflow.ExecuteActivity(actx, controlActs.CheckReservations, api.CheckReservationsInput{WorkerID: w.id, Reservations: refs}).Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("reservation check failed", "worker", w.id, "error", err)
		return
	}
	for _, st := range res.Stale {
		if w.rec.Release(st.TaskID, st.Fence) {
			workflow.GetLogger(ctx).Info("stale reservation released", "worker", w.id, "task", st.TaskID, "fence", st.Fence, "why", st.Why)
		}
	}
}

// drainHeartbeats applies every heartbeat already delivered. After the
// control plane was down, the liveness timer and the heartbeats the agent
// sent meanwhile arrive together; judging the timer first would take a
// live worker for OFFLINE and revoke every lease it holds.
func (w *workerWorkflow) drainHeartbeats(ctx workflow.Context) {
	for {
		var hb api.WorkerHeartbeatSignal
		if !w.heartbeatCh.ReceiveAsync(&hb) {
			return
		}
		w.onHeartbeat(ctx, hb)
	}
}

// LivenessActivityLifetime is the start-to-close timeout of a liveness
// activity. One that lives this long (its worker heartbeated throughout)
// is replaced by a new one; the timeout exists because Temporal requires
// one.
const LivenessActivityLifetime = 24 * time.Hour

// SignedLivenessActivityLifetime is the least start-to-close timeout of a
// signed incarnation's liveness activity (its registration was signed).
// Heartbeats by ID reach Temporal unsigned, so when its lifetime runs out
// the next one waits for the agent's next signed heartbeat signal: a
// namespace client heartbeating a dead worker's activity by ID keeps it
// ACTIVE at most this long (or two stale-after windows) and one window
// more.
const SignedLivenessActivityLifetime = 10 * time.Minute

// armLiveness keeps one liveness activity pending for the current
// incarnation while the worker is ACTIVE or DRAINING, and cancels it
// otherwise (a new incarnation gets a new activity: the old agent's
// heartbeats then find theirs cancelled).
func (w *workerWorkflow) armLiveness(ctx workflow.Context) {
	if !w.registered {
		return
	}
	id := api.LivenessActivityID(w.rec.Incarnation)
	live := w.rec.State == fleet.Active || w.rec.State == fleet.Draining
	if w.liveness != nil && live && w.rec.LivenessActivity == id {
		return
	}
	if w.liveness != nil {
		w.livenessCancel()
		w.liveness = nil
	}
	w.rec.LivenessActivity = ""
	if !live || w.livenessHalted || w.rec.LivenessAwaitsSignal {
		return
	}
	lifetime := LivenessActivityLifetime
	if w.signedIncarnation(ctx) {
		lifetime = max(SignedLivenessActivityLifetime, 2*w.rec.StaleAfter)
	}
	actx, cancel := heldActivity(ctx, id, w.rec.StaleAfter, lifetime,
		fmt.Sprintf("liveness · incarnation %d · heartbeated by ID", w.rec.Incarnation))
	w.liveness = workflow.ExecuteActivity(actx, controlActs.HoldLiveness, api.LivenessInput{WorkerID: w.id, Incarnation: w.rec.Incarnation})
	w.livenessCancel = cancel
	w.rec.LivenessActivity = id
}

// signedIncarnation reports whether the incarnation registered signed, so
// that its agent signs its heartbeat signals (verify-worker-heartbeats;
// an earlier history's are not).
func (w *workerWorkflow) signedIncarnation(ctx workflow.Context) bool {
	return w.rec.Identity != "" && workflow.GetVersion(ctx, verifyWorkerHeartbeats, workflow.DefaultVersion, 1) == 1
}

// livenessEnded applies the end of the pending liveness activity. A
// heartbeat timeout means Temporal saw no heartbeat for StaleAfter, so the
// last one was that long ago: evaluate then marks the worker STALE. Its
// lifetime running out means the worker heartbeated throughout (the
// heartbeat timeout is shorter): a new activity replaces it, for a signed
// incarnation only once its next heartbeat signal is accepted. One that was
// not started within the stale-after window leaves the worker to be
// judged by its heartbeat signals (which the agent sends while the
// activity it heartbeats is not started) and is scheduled again. A
// cancellation is the entry's own (it is cancelled). Anything else is
// unexpected: liveness falls back to heartbeat signals and the timer,
// from now, until a heartbeat signal at least StaleAfter later.
func (w *workerWorkflow) livenessEnded(ctx workflow.Context, err error) {
	w.liveness = nil
	w.rec.LivenessActivity = ""
	now := workflow.Now(ctx)
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT:
		if last := now.Add(-w.rec.StaleAfter); last.After(w.rec.LastHeartbeatAt) {
			w.rec.LastHeartbeatAt = last
		}
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		// Never started, so no heartbeat reached it: the agent sent
		// heartbeat signals instead (LastHeartbeatAt), and those are
		// judged until the next activity starts.
	case errors.As(err, &timeout):
		w.rec.LastHeartbeatAt = now
		w.rec.LivenessAwaitsSignal = w.signedIncarnation(ctx)
	case temporal.IsCanceledError(err):
		// The entry itself is being cancelled.
	default:
		workflow.GetLogger(ctx).Warn("liveness activity ended unexpectedly; judging heartbeat signals until the next one", "worker", w.id, "error", err)
		w.rec.LastHeartbeatAt = now
		w.livenessHalted, w.livenessHaltedAt = true, now
	}
}

// evaluate applies the liveness windows at the current workflow time,
// unless a liveness activity is pending: Temporal keeps those windows then.
func (w *workerWorkflow) evaluate(ctx workflow.Context) {
	if !w.registered || w.liveness != nil {
		return
	}
	changed, lost := w.rec.Evaluate(workflow.Now(ctx))
	if changed {
		workflow.GetLogger(ctx).Info("worker state changed", "worker", w.id, "state", w.rec.State)
	}
	w.noteLost(lost, string(w.rec.State))
}

// verifyWorkerHeartbeats is the change ID of the identity check of a
// worker heartbeat signal (version 1: signed by the worker's own SVID,
// under the certificate it registered with or a later one, with a seq
// above the last accepted, when identity is required). Retire it as
// docs/upgrading.md says: once every open WdcWorker has continued as new
// on a build that has it, make the check unconditional.
const verifyWorkerHeartbeats = "verify-worker-heartbeats"

func (w *workerWorkflow) onHeartbeat(ctx workflow.Context, hb api.WorkerHeartbeatSignal) {
	if !w.registered {
		return
	}
	if workflow.GetVersion(ctx, verifyWorkerHeartbeats, workflow.DefaultVersion, 1) == 1 {
		unsigned := hb
		unsigned.Proof = nil
		if rej := verifyWorkerSignal(ctx, w.id, api.SignalWorkerHeartbeat, hb.Seq, w.rec.HeartbeatSeq, w.rec.IdentityIssuedAt, unsigned, hb.Proof); rej != nil {
			return
		}
	}
	if err := w.rec.Heartbeat(hb, workflow.Now(ctx)); err != nil {
		workflow.GetLogger(ctx).Debug("heartbeat ignored", "worker", w.id, "error", err)
		return
	}
	if now := workflow.Now(ctx); w.livenessHalted && now.Sub(w.livenessHaltedAt) >= w.rec.StaleAfter {
		w.livenessHalted = false
	}
	w.rec.LivenessAwaitsSignal = false
}

func (w *workerWorkflow) noteLost(lost []fleet.Reservation, state string) {
	w.noteLostOf(w.rec, lost, state)
}

// noteLostOf queues the lost reservations of the incarnation in rec, with
// its liveness fencing.
func (w *workerWorkflow) noteLostOf(rec fleet.Worker, lost []fleet.Reservation, state string) {
	for _, r := range lost {
		w.lost = append(w.lost, api.WorkerLostSignal{
			WorkerID: w.id, Incarnation: rec.Incarnation, TaskID: r.TaskID, Fence: r.Fence, State: state,
			LivenessFenced: rec.LivenessFenced,
		})
	}
}

// sendLost tells every task that lost its reservation. A task that has
// ended makes the signal fail; that is fine (best effort, the task's own
// lease timer is the backstop).
func (w *workerWorkflow) sendLost(ctx workflow.Context) {
	if len(w.lost) == 0 {
		return
	}
	futures := make([]workflow.Future, 0, len(w.lost))
	for _, l := range w.lost {
		workflow.GetLogger(ctx).Info("reservation lost", "worker", w.id, "incarnation", l.Incarnation, "task", l.TaskID, "fence", l.Fence,
			"state", l.State, "liveness_fenced", l.LivenessFenced)
		futures = append(futures, workflow.SignalExternalWorkflow(ctx, api.TaskWorkflowID(l.TaskID), "", api.SignalWorkerLost, l))
	}
	w.lost = nil
	for _, f := range futures {
		_ = f.Get(ctx, nil)
	}
}

// armTimer keeps exactly one timer for the next liveness boundary. It is
// replaced only when the boundary moved earlier than the armed one (a
// re-registration or a STALE worker's heartbeat); a later boundary is
// handled when the armed timer fires. None is armed while a liveness
// activity is pending.
func (w *workerWorkflow) armTimer(ctx workflow.Context) {
	if !w.registered {
		return
	}
	deadline := w.rec.NextDeadline()
	if w.liveness != nil {
		deadline = time.Time{}
	}
	if deadline.IsZero() {
		if w.timer != nil {
			w.timerCancel()
			w.timer = nil
		}
		return
	}
	if w.timer != nil && !deadline.Before(w.timerAt) {
		return
	}
	if w.timer != nil {
		w.timerCancel()
	}
	d := deadline.Sub(workflow.Now(ctx))
	if d < time.Millisecond {
		d = time.Millisecond
	}
	tctx, cancel := workflow.WithCancel(ctx)
	w.timer = workflow.NewTimerWithOptions(tctx, d, workflow.TimerOptions{
		Summary: fmt.Sprintf("liveness window · incarnation %d · %s, next %s", w.rec.Incarnation, w.rec.State, nextLivenessState(w.rec.State)),
	})
	w.timerAt = deadline
	w.timerCancel = cancel
}

func (w *workerWorkflow) validateRegister(ctx workflow.Context, in api.RegisterInput) error {
	if w.rec.State == fleet.Deregistered {
		return temporal.NewApplicationError(fmt.Sprintf("worker %s is being deregistered; register again once that finished", w.id), api.ErrTypeConflict)
	}
	if in.WorkerID != w.id {
		return temporal.NewApplicationError(fmt.Sprintf("worker_id: %q does not match this workflow's worker %q", in.WorkerID, w.id), api.ErrTypeInvalidArgument)
	}
	if err := in.Validate(); err != nil {
		return temporal.NewApplicationError(err.Error(), api.ErrTypeInvalidArgument)
	}
	unsigned := in
	unsigned.Proof = nil
	if err := authenticateWorker(ctx, w.id, api.UpdateRegister, unsigned, in.Proof, w.rec.IdentitySignedAt); err != nil {
		countRejected(ctx, err)
		return err
	}
	if err := w.checkRevoked(ctx, in.Proof); err != nil {
		countRejected(ctx, err)
		return err
	}
	return nil
}

// checkRevoked refuses (unauthenticated) a registration whose certificate
// was issued at or before the worker's RevokedThrough, or that is unsigned
// once the worker was revoked. Identity off: nothing is checked.
func (w *workerWorkflow) checkRevoked(ctx workflow.Context, p *identity.Proof) error {
	through := w.rec.RevokedThrough
	if through.IsZero() || !verifierOf(ctx).Enabled() {
		return nil
	}
	if issued, err := p.IssuedAt(); err == nil && issued.After(through) {
		return nil
	}
	msg := fmt.Sprintf("worker %s was revoked at %s (%s): it registers only with a certificate issued after %s; enroll it again",
		w.id, w.rec.RevokedAt.Format(time.RFC3339), w.rec.RevokeReason, through.Format(time.RFC3339))
	workflow.GetLogger(ctx).Warn("message refused by the identity check", "kind", api.UpdateRegister, "reason", lease.RejectUnauthenticated, "detail", msg)
	return temporal.NewApplicationError(msg, string(lease.RejectUnauthenticated))
}

// authenticateOperator is the identity check of an operator's command to
// the entry (drain, undrain, deregister): signed by a submitter, or by the
// worker itself (an agent drains its own entry when it stops), for this
// worker (named, when signed, as forWorker). Identity off: nothing is
// checked. A refusal is counted.
func (w *workerWorkflow) authenticateOperator(ctx workflow.Context, kind, forWorker string, message any, p *identity.Proof) error {
	if !verifierOf(ctx).Enabled() {
		return nil
	}
	if p != nil && forWorker != w.id {
		err := temporal.NewApplicationError(fmt.Sprintf("worker_id: a signed %s must name this worker %q, not %q", kind, w.id, forWorker), string(lease.RejectWrongIdentity))
		countRejected(ctx, err)
		return err
	}
	v, now := verifierOf(ctx), workflow.Now(ctx)
	verdict, rej := v.Submitter(now, kind, message, p)
	if rej != nil && rej.Reason == lease.RejectWrongIdentity {
		if wv, wrej := v.Worker(now, w.id, kind, message, p); wrej == nil {
			verdict, rej = wv, nil
		}
	}
	if err := identityVerdict(ctx, kind, verdict, rej); err != nil {
		countRejected(ctx, err)
		return err
	}
	return nil
}

// validateRevoke admits a revoke signed by a submitter, on a control plane
// that checks identities (with identity off there is none to revoke).
func (w *workerWorkflow) validateRevoke(ctx workflow.Context, in api.RevokeInput) error {
	if in.WorkerID != w.id {
		return temporal.NewApplicationError(fmt.Sprintf("worker_id: %q does not match this workflow's worker %q", in.WorkerID, w.id), api.ErrTypeInvalidArgument)
	}
	if !verifierOf(ctx).Enabled() {
		return temporal.NewApplicationError(fmt.Sprintf("worker %s: identity is off on this control plane, so there is no identity to revoke; deregister the worker instead", w.id), api.ErrTypeConflict)
	}
	unsigned := in
	unsigned.Proof = nil
	if err := authenticateSubmitter(ctx, api.UpdateRevoke, unsigned, in.Proof); err != nil {
		countRejected(ctx, err)
		return err
	}
	return nil
}

// revoke ends the incarnation (OFFLINE; its liveness activity is then
// cancelled and its leases are lost) and refuses every certificate dated
// (NotBefore) up to the one it registered with or identity.Backdate ago,
// whichever is later: every one wdc's issuer issued before the revoke,
// including those the agent rotated to without registering again.
func (w *workerWorkflow) revoke(ctx workflow.Context, in api.RevokeInput) (api.WorkerView, error) {
	now := workflow.Now(ctx)
	through := now.Add(-identity.Backdate) // every certificate wdc's issuer issued before now
	if w.rec.IdentityIssuedAt.After(through) {
		through = w.rec.IdentityIssuedAt
	}
	lost := w.rec.Revoke(through, in.Reason, now)
	w.noteLost(lost, api.WorkerRevoked) // REVOKED: its tasks wait a lock-delay (needsLockDelay)
	workflow.GetLogger(ctx).Warn("worker identity revoked", "worker", w.id, "incarnation", w.rec.Incarnation,
		"through", through, "by", signerOf(in.Proof), "reason", in.Reason, "leases_lost", len(lost))
	w.wake.SendAsync(true)
	return w.view(), nil
}

func (w *workerWorkflow) register(ctx workflow.Context, in api.RegisterInput) (api.RegisterResult, error) {
	prev := w.rec // the lost reservations are the previous incarnation's
	lost := w.rec.Register(in, workflow.Now(ctx))
	// The last signing time accepted, for the replay check; one dated past
	// the validator's window was not verified (identity off) and is not
	// kept, lest it refuse every later registration.
	w.rec.IdentitySignedAt = prev.IdentitySignedAt
	if id := signerOf(in.Proof); id != "" && !in.Proof.SignedAt.After(workflow.Now(ctx).Add(identity.MaxSignedAge)) {
		w.rec.Identity, w.rec.IdentitySignedAt = id, in.Proof.SignedAt
		w.rec.IdentityIssuedAt, _ = in.Proof.IssuedAt()
	}
	w.registered = true
	w.noteLostOf(prev, lost, api.WorkerReregistered)
	w.wake.SendAsync(true)
	res := api.RegisterResult{WorkerID: w.id, Incarnation: w.rec.Incarnation}
	for _, r := range w.rec.Reservations {
		res.Adopted = append(res.Adopted, api.ReservationRef{TaskID: r.TaskID, Fence: r.Fence})
	}
	workflow.GetLogger(ctx).Info("worker registered", "worker", w.id, "incarnation", w.rec.Incarnation, "previous", prev.Incarnation,
		"claimed", len(in.Adopt), "adopted", len(res.Adopted), "lost", len(lost))
	return res, nil
}

func (w *workerWorkflow) validateReserve(ctx workflow.Context, in api.ReserveInput) error {
	if !w.registered {
		return notRegistered(w.id)
	}
	if in.TaskID == "" || in.Fence < 1 {
		return temporal.NewApplicationError("reserve needs task_id and a fence ≥ 1", api.ErrTypeInvalidArgument)
	}
	// Try on a copy: the validator must not mutate state.
	trial := w.rec
	trial.Reservations = append([]fleet.Reservation(nil), w.rec.Reservations...)
	if err := trial.Reserve(in.TaskID, in.Fence, in.Requirements, workflow.Now(ctx)); err != nil {
		var inel *fleet.Ineligible
		if errors.As(err, &inel) {
			return temporal.NewApplicationError(err.Error(), api.ErrTypeIneligible, inel)
		}
		return temporal.NewApplicationError(err.Error(), api.ErrTypeIneligible)
	}
	return nil
}

func (w *workerWorkflow) reserve(ctx workflow.Context, in api.ReserveInput) (api.ReserveResult, error) {
	if err := w.rec.Reserve(in.TaskID, in.Fence, in.Requirements, workflow.Now(ctx)); err != nil {
		return api.ReserveResult{}, temporal.NewApplicationError(err.Error(), api.ErrTypeIneligible)
	}
	// The loop arms the reservation check for it: nothing else may wake
	// the loop (heartbeats by ID reach the liveness activity, not it).
	w.wake.SendAsync(true)
	return api.ReserveResult{WorkerID: w.id, Incarnation: w.rec.Incarnation, IdentityIssuedAt: w.rec.IdentityIssuedAt}, nil
}

func (w *workerWorkflow) drain(ctx workflow.Context, in api.DrainInput) (api.WorkerView, error) {
	w.rec.Drain(in.Reason, workflow.Now(ctx))
	w.wake.SendAsync(true)
	return w.view(), nil
}

func (w *workerWorkflow) view() api.WorkerView {
	v := api.WorkerView{Worker: w.rec, Registered: w.registered}
	if v.WorkerID == "" {
		v.WorkerID = w.id
	}
	if w.registered {
		v.Free = w.rec.Free()
	}
	return v
}

// publish keeps the search attributes current and, once per incarnation,
// the profile in the memo (api.MemoWorkerProfile) that worker selection
// reads from visibility.
func (w *workerWorkflow) publish(ctx workflow.Context) {
	if w.registered && w.rec.Incarnation != w.memoIncarnation {
		w.memoIncarnation = w.rec.Incarnation
		if err := workflow.UpsertMemo(ctx, map[string]any{api.MemoWorkerProfile: w.rec.Profile()}); err != nil {
			workflow.GetLogger(ctx).Warn("upsert memo", "error", err)
		}
	}
	state := w.rec.State
	if !w.registered {
		state = "UNREGISTERED"
	}
	if state == w.saState {
		return
	}
	w.saState = state
	err := workflow.UpsertTypedSearchAttributes(ctx,
		api.SAKind.ValueSet(api.KindWorker),
		api.SAWorkerID.ValueSet(w.id),
		api.SAWorkerState.ValueSet(string(state)),
	)
	if err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

// continueAsNew waits for update handlers, then applies every signal
// still buffered (none is lost) and carries the record, the worker-lost
// notifications not yet sent and the time of the last reservation check.
// Nothing blocks between the drain and the continue-as-new: notifications
// are sent by the new run, not here.
func (w *workerWorkflow) continueAsNew(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	w.drainHeartbeats(ctx)
	for {
		var r api.ReleaseSignal
		if !w.releaseCh.ReceiveAsync(&r) {
			break
		}
		w.rec.Release(r.TaskID, r.Fence)
	}
	for w.sweepCh.ReceiveAsync(nil) {
	}
	for w.wake.ReceiveAsync(nil) {
	}
	w.evaluate(ctx)
	if w.liveness != nil && w.signedIncarnation(ctx) {
		// The next run's liveness activity waits for a signed heartbeat
		// signal, lest a run continued as new grant a fresh lifetime to
		// heartbeats by ID alone; the pending one says the worker was
		// heard within its window.
		w.rec.LivenessAwaitsSignal, w.rec.LastHeartbeatAt = true, workflow.Now(ctx)
	}
	in := api.WorkerInput{WorkerID: w.id, IncarnationFloor: w.rec.Incarnation, Lost: w.lost, ReconciledAt: w.reconciledAt}
	if w.registered {
		rec := w.rec
		in.State = &rec
	}
	return workflow.NewContinueAsNewError(ctx, WdcWorker, in)
}

func notRegistered(id string) error {
	return temporal.NewApplicationError(fmt.Sprintf("worker %s is not registered", id), api.ErrTypeNotRegistered)
}
