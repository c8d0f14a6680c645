package workflows

import (
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// LeaseActivityLifetime is the least start-to-close timeout of a lease
// activity; a lease whose TTL is longer gets twice its TTL, so the server
// never caps the heartbeat timeout (the TTL) at the lifetime. One that
// lives this long (its executor heartbeated throughout) is replaced by a
// new one; Temporal requires the timeout.
const LeaseActivityLifetime = 24 * time.Hour

// SignedLeaseActivityLifetime is the least start-to-close timeout of the
// lease activity of a signed holder (the worker registered with an SVID).
// Heartbeats by ID reach Temporal unsigned, so when its lifetime runs out
// the next one waits for the attempt's next signed heartbeat signal: a
// namespace client heartbeating a dead attempt's activity by ID keeps its
// lease at most this long (or two TTLs) and one TTL more.
const SignedLeaseActivityLifetime = 10 * time.Minute

// leaseWatch times the task's ACTIVE lease. Until the lease's first
// accepted heartbeat signal it keeps one timer per TTL window (re-armed
// for the remainder when heartbeats moved the expiry, never once per
// heartbeat); from then on it holds a lease activity (api.LeaseActivityID,
// activities.Control.HoldLease) with the TTL as its heartbeat timeout,
// which the executor heartbeats by ID — no workflow task, no history
// event — and which Temporal times out when the heartbeats stop. The
// ledger decides every expiry.
type leaseWatch struct {
	ledger *lease.Ledger
	stats  *api.TaskStats

	timer       workflow.Future
	timerCancel workflow.CancelFunc

	act       workflow.Future
	actFence  int64
	actCancel workflow.CancelFunc
	// signalled: a heartbeat signal of the current lease was accepted
	// since the last lease activity was scheduled.
	signalled bool
	// halted is a fence whose holder heartbeats by signal only: no lease
	// activity is scheduled for it again.
	halted int64
}

// granted starts watching a newly granted lease.
func (w *leaseWatch) granted() { w.signalled = false }

// heardSignal records an accepted heartbeat signal of the current lease.
func (w *leaseWatch) heardSignal() { w.signalled = true }

// arm schedules what times the current lease: the lease activity once a
// heartbeat signal was accepted, else the TTL window's timer. Nothing is
// armed while a result is pending (the ingest decides) or no lease is
// ACTIVE.
func (w *leaseWatch) arm(ctx workflow.Context) {
	cur := w.ledger.Current()
	if cur == nil || cur.State != lease.Active || cur.ResultPending {
		return
	}
	if w.act == nil && w.signalled && cur.Fence != w.halted {
		w.signalled = false
		w.stopTimer()
		lifetime := LeaseActivityLifetime
		if signedHolder(ctx, cur) {
			lifetime = SignedLeaseActivityLifetime
		}
		actx, cancel := heldActivity(ctx, api.LeaseActivityID(cur.Fence), cur.TTL, max(lifetime, 2*cur.TTL), leaseActivitySummary(*cur))
		w.act = workflow.ExecuteActivity(actx, controlActs.HoldLease, api.LeaseHoldInput{
			TaskID: cur.TaskID, WorkerID: cur.WorkerID, Attempt: cur.Attempt, Fence: cur.Fence,
		})
		w.actFence, w.actCancel = cur.Fence, cancel
	}
	if w.timer != nil || w.act != nil {
		return
	}
	d := max(cur.ExpiresAt.Sub(workflow.Now(ctx)), time.Millisecond)
	tctx, cancel := workflow.WithCancel(ctx)
	w.timer, w.timerCancel = workflow.NewTimerWithOptions(tctx, d, workflow.TimerOptions{Summary: leaseTimerSummary(*cur)}), cancel
	w.stats.TimersStarted++
}

// stop cancels the timer and the lease activity: the executor's next
// heartbeat by ID then learns that its lease ended.
func (w *leaseWatch) stop() {
	w.stopTimer()
	if w.act != nil {
		w.actCancel()
		w.act, w.actCancel = nil, nil
	}
	w.signalled = false
}

func (w *leaseWatch) stopTimer() {
	if w.timer != nil {
		w.timerCancel()
		w.timer = nil
	}
}

// holding reports whether a lease activity holds the lease.
func (w *leaseWatch) holding() bool { return w.act != nil }

// activityID is the pending lease activity's ID, or "".
func (w *leaseWatch) activityID() string {
	if w.act == nil {
		return ""
	}
	return api.LeaseActivityID(w.actFence)
}

// addTo adds the timer and the lease activity to sel. drain applies the
// heartbeat signals already delivered, before an expiry is judged (after
// a control-plane outage the timer and the heartbeats sent meanwhile
// arrive together); expired receives the directive of a lease that
// expired, and by what.
func (w *leaseWatch) addTo(ctx workflow.Context, sel workflow.Selector, drain func(), expired func(lease.RetryDirective, string)) {
	if w.timer != nil {
		sel.AddFuture(w.timer, func(workflow.Future) {
			w.timer = nil
			drain()
			if d, err := w.ledger.Expire(workflow.Now(ctx)); err == nil {
				expired(d, "lease timer")
			}
			// Otherwise renewed (arm re-arms for the remainder), ended,
			// or a result is pending.
		})
	}
	if w.act != nil {
		sel.AddFuture(w.act, func(f workflow.Future) {
			w.activityEnded(ctx, f.Get(ctx, nil), drain, expired)
		})
	}
}

// signedHolder reports whether cur's worker registered with an SVID, so
// that its attempt signs its heartbeat signals (verify-lease-heartbeats;
// an earlier history's leases are not).
func signedHolder(ctx workflow.Context, cur *lease.Lease) bool {
	return !cur.IdentityIssuedAt.IsZero() && workflow.GetVersion(ctx, verifyLeaseHeartbeats, workflow.DefaultVersion, 1) == 1
}

// activityEnded applies the lease activity's end. A heartbeat timeout
// means Temporal saw no heartbeat for a TTL (lease.Ledger.Heard): after
// the delivered signals, the lease expires — unless a signal renewed it
// since (its holder heartbeats by signal: halted) or a result is pending.
// Not started within a TTL: heartbeat signals judge the lease until the
// next accepted one schedules another. Its lifetime ran out (heartbeats
// throughout): a new one replaces it, for a signed holder only once its
// next heartbeat signal is accepted. Cancelled: the task's own doing.
// Anything else: the lease counts as heard now and signals judge it.
func (w *leaseWatch) activityEnded(ctx workflow.Context, err error, drain func(), expired func(lease.RetryDirective, string)) {
	fence := w.actFence
	w.act, w.actCancel = nil, nil
	cur := w.ledger.Current()
	if cur == nil || cur.Fence != fence {
		return
	}
	now := workflow.Now(ctx)
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT:
		drain()
		w.ledger.Heard(fence, now.Add(-cur.TTL))
		d, err := w.ledger.Expire(now)
		switch {
		case err == nil:
			expired(d, "lease activity heartbeat timeout")
		case errors.Is(err, lease.ErrNotExpired):
			w.halted = fence
		}
		w.signalled = false
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		w.signalled = false
	case errors.As(err, &timeout):
		w.ledger.Heard(fence, now)
		w.signalled = !signedHolder(ctx, cur)
	case temporal.IsCanceledError(err):
	default:
		workflow.GetLogger(ctx).Warn("lease activity ended unexpectedly; judging heartbeat signals until the next one", "task", cur.TaskID, "fence", fence, "error", err)
		w.ledger.Heard(fence, now)
		w.signalled = false
	}
}
