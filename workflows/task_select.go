package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// The Selecting phase: a worker is reserved (under a fence above any an
// earlier run of the task granted) and the lease granted and launched.

// startedByReset reports whether this run was started by a reset: a reset
// copies the start event, whose original run ID is then another run's
// (a continue-as-new's is its own: TaskCarry.AfterReset carries it).
func startedByReset(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.OriginalRunID != "" && info.OriginalRunID != info.WorkflowExecution.RunID
}

// selectAndGrant is the Selecting phase: one request for a worker; on a
// reservation, the lease is granted and launched; otherwise the task waits
// (handling signals) before decide runs again. The wait grows from
// SelectInterval by half each time, to at most 5 s (or SelectInterval if
// longer).
func (t *taskWorkflow) selectAndGrant(ctx workflow.Context) error {
	t.setState(ctx, api.TaskPending)
	in := api.SelectWorkerInput{
		TaskID:       t.env.TaskID,
		Fence:        t.ledger.Fence + 1,
		Requirements: t.env.Requirements(),
		AvoidWorkers: t.lostWorkers(),
		LeaseTTL:     t.opts.LeaseTTL,
		Reset:        t.carry.AfterReset,
	}
	// A local activity, in the workflow task that asks for it: a marker in
	// the history instead of three activity events and a workflow task.
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
		Summary:             selectSummary(in),
	})
	var res api.SelectWorkerResult
	err := workflow.ExecuteLocalActivity(lctx, controlActs.SelectWorker, in).Get(ctx, &res)
	if err == nil && res.WorkerID != "" && t.carry.Cancelled {
		// Cancelled while the worker was being reserved: hand the
		// reservation back instead of granting and launching.
		t.release(ctx, lease.Lease{TaskID: t.env.TaskID, WorkerID: res.WorkerID, Fence: max(in.Fence, res.Fence)})
		return nil
	}
	if err == nil && res.WorkerID != "" {
		t.waiting = ""
		t.selectInterval = t.opts.SelectInterval
		return t.grant(ctx, res)
	}
	was := t.waiting
	switch {
	case err != nil:
		t.waiting = "cannot select a worker: " + errorMessage(err)
	case !res.LockDelayUntil.IsZero():
		t.waiting = "lock-delay: " + res.Waiting
	default:
		t.waiting = "no eligible worker: " + res.Waiting
	}
	if t.waiting != was {
		// Once per reason: a task waits through many selections.
		workflow.GetLogger(ctx).Info("no worker yet", "task", t.env.TaskID, "reason", t.waiting)
	}
	// The control plane spaces the looks of many waiting tasks
	// (RetryAfter, recorded with the selection's result).
	t.showDetails(ctx)
	wait := max(t.selectInterval, res.RetryAfter)
	t.sleep(ctx, wait, selectWaitSummary(wait))
	t.selectInterval = min(t.selectInterval*3/2, max(5*time.Second, t.opts.SelectInterval))
	return nil
}

// lostWorkers lists the workers that lost a lease of this task (expired or
// revoked for a retry reason), each once, ordered by its latest loss,
// oldest first. Selection passes them over while another eligible worker
// exists (api.SelectWorkerInput.AvoidWorkers).
func (t *taskWorkflow) lostWorkers() []string {
	var out []string
	for _, l := range t.ledger.Leases {
		if (l.State == lease.Expired || l.State == lease.Revoked) && lease.RetryReason(l.EndReason).Valid() {
			out = append(slices.DeleteFunc(out, func(w string) bool { return w == l.WorkerID }), l.WorkerID)
		}
	}
	return out
}

// grant issues the lease to the reserved worker and launches the attempt.
func (t *taskWorkflow) grant(ctx workflow.Context, sel api.SelectWorkerResult) error {
	t.ledger.RaiseFence(sel.Fence - 1)
	if _, err := t.ledger.Grant(sel.WorkerID, t.opts.LeaseTTL, workflow.Now(ctx)); err != nil {
		return err // a broken invariant: fail loudly
	}
	// The fence is above any a replaced run granted: later selections
	// need not look for those runs.
	t.carry.AfterReset = false
	cur := t.ledger.Current()
	cur.IdentityIssuedAt, cur.Incarnation = sel.IdentityIssuedAt, sel.Incarnation
	l := *cur
	workflow.GetLogger(ctx).Info("lease granted", "task", l.TaskID, "worker", l.WorkerID, "incarnation", l.Incarnation, "attempt", l.Attempt, "fence", l.Fence)
	count(ctx, api.MetricLeasesGranted, "")
	t.attemptDir = ""
	t.lease.granted()
	t.setState(ctx, api.TaskLeased)
	lctx, cancel := workflow.WithCancel(ctx)
	actx := workflow.WithActivityOptions(lctx, t.launchOptions(l))
	t.launch = workflow.ExecuteActivity(actx, agentActs.LaunchAttempt, api.LaunchInput{
		Envelope: t.env, Lease: l, HeartbeatInterval: t.opts.HeartbeatInterval, Incarnation: sel.Incarnation, Authority: t.authority,
	})
	t.launchCancel = cancel
	return nil
}

// launchOptions routes the launch to the launcher's queue: the worker's
// agent for Local attempts. The schedule-to-close timeout bounds waiting
// for a dead agent.
func (t *taskWorkflow) launchOptions(l lease.Lease) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		TaskQueue:              api.AgentTaskQueue(l.WorkerID),
		Summary:                launchSummary(l),
		ScheduleToCloseTimeout: t.opts.LaunchTimeout,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
	}
}
