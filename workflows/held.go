package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
)

// heldActivity returns the context in which a workflow schedules a held
// activity (activities.Control.HoldLiveness, HoldLease: pending until its
// workflow cancels it or Temporal times it out) under ID id on the control
// queue, and the function that cancels it. window is its heartbeat
// timeout — its holder heartbeats it by ID at least that often — and also
// how long it may wait to be started: one that the control plane does not
// start within a window (it is down, or its activity slots are full) ends
// with a schedule-to-start timeout, and its holder is judged by heartbeat
// signals meanwhile (its heartbeats by ID find no started activity and
// fall back to them). lifetime is its start-to-close timeout, which
// Temporal requires; a holder that heartbeats throughout outlives it.
// Held activities are never retried. summary names it in the history.
func heldActivity(ctx workflow.Context, id string, window, lifetime time.Duration, summary string) (workflow.Context, workflow.CancelFunc) {
	actx, cancel := workflow.WithCancel(ctx)
	return workflow.WithActivityOptions(actx, workflow.ActivityOptions{
		TaskQueue:              api.ControlTaskQueue,
		ActivityID:             id,
		ScheduleToStartTimeout: window,
		StartToCloseTimeout:    lifetime,
		HeartbeatTimeout:       window,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:                summary,
	}), cancel
}
