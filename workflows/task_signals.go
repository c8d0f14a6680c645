package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

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

// verifyLeaseHeartbeats is the change ID of the identity check of a lease
// heartbeat signal that would renew the lease (version 1: it must be
// signed by the attempt's key when identity is required). WdcTask is
// pinned to its build; the ID keeps the histories recorded before it
// replaying, and retires with the other WdcTask change IDs
// (docs/upgrading.md).
const verifyLeaseHeartbeats = "verify-lease-heartbeats"

// onHeartbeat renews the lease with a heartbeat signal that passes the
// fence check and, when it would renew (a seq above the last), the
// identity check; a refused one is counted by reason. One that would not
// renew (a seq already seen) changes nothing: it neither counts nor lets
// the lease activity be scheduled again.
func (t *taskWorkflow) onHeartbeat(ctx workflow.Context, hb api.LeaseHeartbeatSignal) {
	cur := t.ledger.Current()
	rej := lease.Check(cur, hb.Claim)
	renews := rej == nil && hb.Seq > cur.HeartbeatSeq
	if renews && workflow.GetVersion(ctx, verifyLeaseHeartbeats, workflow.DefaultVersion, 1) == 1 {
		unsigned := hb
		unsigned.Proof = nil
		rej = verifySignal(ctx, api.SignalLeaseHeartbeat, hb.Claim, cur, unsigned, hb.Proof)
	}
	if rej == nil && !renews && workflow.GetVersion(ctx, verifyLeaseHeartbeats, workflow.DefaultVersion, 1) == 1 {
		return
	}
	if rej == nil {
		rej = t.ledger.Renew(hb.Claim, hb.Seq, workflow.Now(ctx))
	}
	if rej != nil {
		if t.carry.Stats.HeartbeatsRejected == nil {
			t.carry.Stats.HeartbeatsRejected = map[string]int64{}
		}
		t.carry.Stats.HeartbeatsRejected[string(rej.Reason)]++
		return
	}
	t.carry.Stats.HeartbeatsAccepted++
	t.lease.heardSignal()
}

// onWorkerLost revokes the lease when the lost reservation is the current
// lease's (same task, worker and fence, lease ACTIVE with no result being
// ingested), judged by the shared fence check; older fences are history.
// The registry's reservation names no attempt or digest, so those are the
// current lease's. Nor is a reservation of an incarnation of the worker
// older than the lease's, even under its fence: a selection retried after
// the worker registered again reserves that fence anew, and the old
// incarnation's reservation is lost later (when both are known). A newer
// one's is: a cluster agent's registration adopts its running attempts'
// reservations.
func (t *taskWorkflow) onWorkerLost(ctx workflow.Context, lost api.WorkerLostSignal) {
	cur := t.ledger.Current()
	if cur == nil {
		return
	}
	if lost.Incarnation != 0 && lost.Incarnation < cur.Incarnation {
		workflow.GetLogger(ctx).Info("worker lost ignored: an earlier incarnation's reservation", "task", cur.TaskID, "worker", lost.WorkerID,
			"fence", lost.Fence, "lost_incarnation", lost.Incarnation, "lease_incarnation", cur.Incarnation)
		return
	}
	claim := lease.Claim{TaskID: lost.TaskID, WorkerID: lost.WorkerID, Fence: lost.Fence, Attempt: cur.Attempt, EnvelopeDigest: cur.EnvelopeDigest}
	if rej := lease.Check(cur, claim); rej != nil {
		return
	}
	lockDelay := needsLockDelay(lost)
	if workflow.GetVersion(ctx, verifyWorkerLoss, workflow.DefaultVersion, 1) == 1 {
		// Anyone may send worker-lost: the registry entry has the last
		// word on whether the worker is lost, and on skipping the
		// lock-delay.
		check, err := t.checkWorkerLoss(ctx, lost)
		switch {
		case err == nil && check.Refuted:
			workflow.GetLogger(ctx).Warn("worker lost ignored: its registry entry holds the reservation", "task", cur.TaskID, "worker", lost.WorkerID,
				"fence", lost.Fence, "incarnation", lost.Incarnation, "state", lost.State)
			count(ctx, api.MetricResultsRejected, string(lease.RejectUnauthenticated))
			return
		case err == nil:
			lockDelay = lockDelay || needsLockDelay(api.WorkerLostSignal{State: check.State, LivenessFenced: check.LivenessFenced})
		default:
			lockDelay = true
		}
		if cur = t.ledger.Current(); cur == nil || lease.Check(cur, claim) != nil {
			return // the lease ended meanwhile
		}
	}
	t.revoke(ctx, lease.ReasonWorkerLost, fmt.Sprintf("worker %s is %s", lost.WorkerID, lost.State))
	if t.directive != nil && lockDelay {
		t.directive.LockDelayUntil = workflow.Now(ctx).Add(cur.TTL)
	}
}

// verifyWorkerLoss is the change ID of checking a worker-lost signal
// against the worker's registry entry (version 1: Control.CheckWorkerLoss,
// a local activity). WdcTask is pinned to its build; the ID keeps the
// histories recorded before it replaying, and retires with the other
// WdcTask change IDs (docs/upgrading.md).
const verifyWorkerLoss = "verify-worker-loss"

// checkWorkerLoss asks the worker's registry entry about lost (a local
// activity: one marker).
func (t *taskWorkflow) checkWorkerLoss(ctx workflow.Context, lost api.WorkerLostSignal) (api.WorkerLossCheck, error) {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
		Summary:             fmt.Sprintf("CheckWorkerLoss %s incarnation %d · fence %d", lost.WorkerID, lost.Incarnation, lost.Fence),
	})
	var check api.WorkerLossCheck
	err := workflow.ExecuteLocalActivity(lctx, controlActs.CheckWorkerLoss, lost).Get(ctx, &check)
	return check, err
}

// needsLockDelay reports whether the attempt of a lost reservation may
// still be running: the next attempt then waits a lease TTL (the longest
// its executor runs on without an accepted heartbeat). A liveness-fenced
// worker's attempts are dead by the time it goes STALE or OFFLINE, and
// with its agent when it registers again; any other loss (a forced
// deregistration, a cluster or hand-off worker) waits.
func needsLockDelay(lost api.WorkerLostSignal) bool {
	if !lost.LivenessFenced {
		return true
	}
	switch lost.State {
	case string(fleet.Stale), string(fleet.Offline), api.WorkerReregistered:
		return false
	}
	return true
}

// onAttemptFailed applies an executor's report of an attempt that ended
// without a result, after the fence check and the identity check.
func (t *taskWorkflow) onAttemptFailed(ctx workflow.Context, f api.AttemptFailedSignal) {
	if rej := lease.Check(t.ledger.Current(), f.Claim); rej != nil {
		return
	}
	// A forged report would revoke the lease with no lock-delay while the
	// attempt's command still runs: only its own key may say it ended.
	unsigned := f
	unsigned.Proof = nil
	if rej := verifySignal(ctx, api.SignalAttemptFailed, f.Claim, t.ledger.Current(), unsigned, f.Proof); rej != nil {
		return
	}
	// An executor reports only what it can know: the attempt was killed
	// (by the OOM killer, or from outside) or could not start. Expiry and
	// worker loss are the task's own judgement, never taken from a report.
	reason := f.Reason
	if reason != lease.ReasonLaunchFailed && reason != lease.ReasonOOMKilled {
		reason = lease.ReasonInfraKilled
	}
	t.revoke(ctx, reason, f.Detail)
}

// verifyLaunchFailures is the change ID of the identity check of a launch
// failure (version 1: one not signed by the lease holder's worker waits a
// lock-delay). WdcTask is pinned to its build; the ID keeps the histories
// recorded before it replaying, and retires with the other WdcTask change
// IDs (docs/upgrading.md).
const verifyLaunchFailures = "verify-launch-failures"

// launchFailed revokes the lease whose launch activity failed (refused
// while a result is pending: the attempt ran). Anyone may fail an activity
// by its ID, so when the holder's worker registered signed, the next
// attempt waits a lock-delay of the lease's TTL unless the failure's
// api.LaunchFailure names this lease's claim and the worker signed it:
// the command may have started.
func (t *taskWorkflow) launchFailed(ctx workflow.Context, err error) {
	cur := t.ledger.Current()
	if cur == nil {
		return
	}
	ttl, believed := cur.TTL, true
	if !cur.IdentityIssuedAt.IsZero() && workflow.GetVersion(ctx, verifyLaunchFailures, workflow.DefaultVersion, 1) == 1 {
		// Whatever the failure says it is (a timeout, a cancellation:
		// anyone may fail an activity with any failure by its ID), only
		// the worker's signed LaunchFailure for this claim is believed.
		var f api.LaunchFailure
		var ae *temporal.ApplicationError
		claim := lease.ClaimOf(*cur)
		if !errors.As(err, &ae) || ae.Details(&f) != nil || f.Claim != claim {
			f = api.LaunchFailure{}
		}
		unsigned := f
		unsigned.Proof = nil
		believed = recordVerdict(ctx, api.LaunchFailedReport, "claim", claim.String(), func(v *identity.Verifier, now time.Time) (identity.Verdict, *lease.Rejection) {
			if !v.Enabled() {
				return identity.Verdict{}, nil
			}
			if f.Claim != claim {
				return identity.Verdict{}, &lease.Rejection{Reason: lease.RejectUnauthenticated, Message: "the launch failure carries no signed detail for this claim"}
			}
			return workerVerdict(v, now, cur.WorkerID, api.LaunchFailedReport, cur.IdentityIssuedAt, unsigned, f.Proof)
		}) == nil
	}
	t.revoke(ctx, lease.ReasonLaunchFailed, errorMessage(err))
	if !believed && t.directive != nil {
		t.directive.LockDelayUntil = workflow.Now(ctx).Add(ttl)
	}
}

// sleep waits for d or until the task is cancelled, handling signals;
// summary names the timer in the history.
func (t *taskWorkflow) sleep(ctx workflow.Context, d time.Duration, summary string) {
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	timer := workflow.NewTimerWithOptions(tctx, d, workflow.TimerOptions{Summary: summary})
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
