package activities

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/wdc-runtime/wdc/api"
)

// HoldLiveness starts a worker's liveness activity and leaves it pending:
// it returns activity.ErrResultPending at once, so no control-plane slot
// or goroutine is held. From then on the worker's agent heartbeats the
// activity by its ID (api.LivenessActivityID) and Temporal alone keeps
// the time: a heartbeat is one RPC the server answers without a workflow
// task or history event, and when none arrives within the activity's
// heartbeat timeout (the worker's stale-after window) the server times the
// activity out, which is what marks the worker STALE in its registry
// entry. Nothing completes the activity; its entry cancels it, or it ends
// by timing out.
func (c *Control) HoldLiveness(ctx context.Context, in api.LivenessInput) error {
	activity.GetLogger(ctx).Debug("liveness held", "worker", in.WorkerID, "incarnation", in.Incarnation)
	return activity.ErrResultPending
}
