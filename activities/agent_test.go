package activities

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// recordingLauncher records submissions and starts nothing.
type recordingLauncher struct{ submitted int }

func (l *recordingLauncher) Submit(context.Context, launchers.Attempt) (launchers.Submission, error) {
	l.submitted++
	return launchers.Submission{TaskDir: "/nowhere", PID: 1}, nil
}

func (l *recordingLauncher) Status(context.Context, lease.Claim) (launchers.Status, error) {
	return launchers.Status{}, launchers.ErrUnknownAttempt
}

func (l *recordingLauncher) Cancel(context.Context, lease.Claim, string) error { return nil }

// A launch delivered after its schedule-to-close deadline (to an agent
// that was frozen, say) never reaches the launcher: it fails as a
// non-retryable launch_failed. (The SDK's test environment refuses to run
// an activity past its deadline, so the activity gets a context that is.)
func TestLaunchAttemptPastItsDeadlineStartsNothing(t *testing.T) {
	launcher := &recordingLauncher{}
	agent := &Agent{WorkerID: "w-a", Launcher: launcher}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-1500*time.Millisecond))
	defer cancel()
	_, err := agent.LaunchAttempt(ctx, api.LaunchInput{
		Lease: lease.Lease{TaskID: "t1", WorkerID: "w-a", Attempt: 2, Fence: 2, State: lease.Active, TTL: 4 * time.Second}, HeartbeatInterval: time.Second,
	})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Equal(t, api.ErrTypeLaunchFailed, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "attempt 2 (fence 2) not started")
	assert.Zero(t, launcher.submitted, "nothing was submitted to the launcher")
}

// A launch within its deadline goes to the launcher.
func TestLaunchAttemptInTimeIsSubmitted(t *testing.T) {
	launcher := &recordingLauncher{}
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(&Agent{WorkerID: "w-a", Launcher: launcher})
	_, err := env.ExecuteActivity((&Agent{}).LaunchAttempt, api.LaunchInput{
		Lease: lease.Lease{TaskID: "t1", WorkerID: "w-a", Attempt: 2, Fence: 2, State: lease.Active, TTL: 4 * time.Second}, HeartbeatInterval: time.Second,
	})
	require.NoError(t, err)
	assert.Equal(t, 1, launcher.submitted)
}
