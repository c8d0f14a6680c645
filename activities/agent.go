package activities

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/launchers"
)

// Agent are the activities of one fleet worker's agent, on its task queue
// api.AgentTaskQueue(worker): they run Local attempts through Launcher.
type Agent struct {
	WorkerID string
	Launcher launchers.Launcher
}

// LaunchAttempt starts an attempt and returns once it runs; the executor
// then owns it. Errors: a non-retryable launch_failed ApplicationError when
// the attempt is for another worker or cannot start (bad command, missing
// input) — the task turns that into a launch_failed retry on a new attempt.
func (a *Agent) LaunchAttempt(ctx context.Context, in api.LaunchInput) (api.LaunchResult, error) {
	if in.Lease.WorkerID != a.WorkerID {
		return api.LaunchResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("lease is for worker %q, this agent is %q", in.Lease.WorkerID, a.WorkerID), api.ErrTypeLaunchFailed, nil)
	}
	sub, err := a.Launcher.Submit(ctx, launchers.Attempt{Envelope: in.Envelope, Lease: in.Lease, HeartbeatInterval: in.HeartbeatInterval})
	if err != nil {
		return api.LaunchResult{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeLaunchFailed, err)
	}
	return api.LaunchResult{TaskDir: sub.TaskDir, PID: sub.PID}, nil
}

// CancelAttempt stops an attempt whose lease ended (best effort).
func (a *Agent) CancelAttempt(ctx context.Context, in api.CancelAttemptInput) error {
	return a.Launcher.Cancel(ctx, in.Claim, in.Reason)
}
