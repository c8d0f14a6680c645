package activities

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/wdc-runtime/wdc/api"
)

// HoldLiveness starts a worker's liveness activity and leaves it pending
// (see hold). From then on the worker's agent heartbeats the activity by
// its ID (api.LivenessActivityID), and when none arrives within the
// activity's heartbeat timeout (the worker's stale-after window) the
// server times the activity out, which is what marks the worker STALE in
// its registry entry. Nothing completes the activity; its entry cancels
// it, or it ends by timing out.
func (c *Control) HoldLiveness(ctx context.Context, in api.LivenessInput) error {
	return hold(ctx, "liveness held", "worker", in.WorkerID, "incarnation", in.Incarnation)
}

// HoldLease starts a lease's lease activity and leaves it pending (see
// hold). From then on the attempt's executor heartbeats the activity by
// its ID (api.LeaseActivityID), and when none arrives within the
// activity's heartbeat timeout (the lease TTL) the server times the
// activity out, which is what expires the lease in its task. Nothing
// completes the activity; its task cancels it when the lease ends, or it
// ends by timing out (or with the task's workflow).
func (c *Control) HoldLease(ctx context.Context, in api.LeaseHoldInput) error {
	return hold(ctx, "lease held", "task", in.TaskID, "worker", in.WorkerID, "attempt", in.Attempt, "fence", in.Fence)
}

// hold is a held activity: it returns activity.ErrResultPending at once,
// so no control-plane slot or goroutine is held while it is pending.
// Temporal alone keeps its time: a heartbeat by ID is one RPC the server
// answers without a workflow task or history event, and a missing one
// times the activity out (TIMEOUT_TYPE_HEARTBEAT), which its workflow
// takes as the holder gone. msg and attrs say what it holds in the log.
func hold(ctx context.Context, msg string, attrs ...any) error {
	activity.GetLogger(ctx).Debug(msg, attrs...)
	return activity.ErrResultPending
}
