package testsuite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/worker"
)

// A launch that stalls after its inputs are in place (as behind a slow
// download) while its lease expires starts nothing: the task's cancel of
// the ended lease's attempt stops it, and so would the agent's check right
// before the command starts (the task cancelled the launch activity when
// it ended the lease, and the check is a heartbeat of that activity). Attempt 1's command never runs; attempt 2 completes the task.
func TestALaunchWhoseLeaseEndedWhileItStalledStartsNothing(t *testing.T) {
	stalled := make(chan lease.Claim, 1)
	resume := make(chan struct{})
	// Two agents: attempt 2 runs on the other one (it avoids the worker
	// that lost the lease).
	stall := func(o *worker.AgentOptions) {
		o.Faults.Stall = func(_ context.Context, c lease.Claim) {
			if c.Attempt == 1 {
				stalled <- c
				<-resume
			}
		}
	}
	startAgent(t, "stall-a", stall)
	startAgent(t, "stall-b", stall)
	waitWorkersActive(t, "stall-a", "stall-b")
	dir := t.TempDir()
	trace, proceed := filepath.Join(dir, "trace"), filepath.Join(dir, "proceed")
	env := taskEnvelope(t, "stall-task", `echo "$WDC_ATTEMPT" >> "$TRACE"
while [ ! -e "$PROCEED" ]; do sleep 0.05; done`)
	env.Env["TRACE"], env.Env["PROCEED"] = trace, proceed
	submit(t, env, api.TaskOptions{LeaseTTL: 2 * time.Second, LaunchTimeout: time.Minute, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})

	var claim lease.Claim
	select {
	case claim = <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("attempt 1's launch never reached the executor")
	}
	// Attempt 1's lease expires (nothing heartbeats it before its command
	// runs) and attempt 2 runs, still waiting for the proceed file.
	waitAttemptRunning(t, env.TaskID, 2)
	close(resume)

	// The stalled launch then checks its lease, is refused, and fails
	// with the check's reason.
	var failure string
	waitFor(t, 30*time.Second, "attempt 1's launch failed", func() bool {
		failure = launchFailure(t, env.TaskID)
		return failure != ""
	})
	// Refused by the attempt's cancel (the task cancels an ended lease's
	// attempt) or by the launch check, whichever comes first.
	assert.Regexp(t, `lease_not_active: (the task cancelled this launch|cancelled while it was starting)`, failure)
	assert.Contains(t, failure, "attempt "+claim.String()+" not started")
	_, err := os.Stat(executor.TaskDir(filepath.Join(suite.dataDir, "work", claim.WorkerID), claim))
	assert.ErrorIs(t, err, os.ErrNotExist, "a refused launch leaves no task directory")

	require.NoError(t, os.WriteFile(proceed, nil, 0o644))
	out, _ := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	assert.Equal(t, int64(2), out.Result.Attempt)
	b, err := os.ReadFile(trace)
	require.NoError(t, err)
	assert.Equal(t, "2\n", string(b), "only attempt 2's command ran")
}

// launchFailure is the failure message of the task's first failed launch
// activity, "" while there is none.
func launchFailure(t *testing.T, taskID string) string {
	t.Helper()
	it := suite.client.GetWorkflowHistory(context.Background(), api.TaskWorkflowID(taskID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if a := e.GetActivityTaskFailedEventAttributes(); a != nil {
			return strings.TrimSpace(a.GetFailure().GetMessage())
		}
	}
	return ""
}

// A launch stalled in its staging for twice the agent's stale window,
// while another attempt runs on the same agent: the worker stays ACTIVE
// (its heartbeats never wait on a launch), the other attempt keeps its
// lease, and cancelling the stalled task takes effect at once.
func TestAStalledLaunchDoesNotStopTheAgentsHeartbeats(t *testing.T) {
	stalled := make(chan lease.Claim, 1)
	unstalled := make(chan time.Time, 1)
	startAgent(t, "stall-hb", func(o *worker.AgentOptions) {
		o.Registration.HeartbeatInterval, o.Registration.StaleAfter, o.Registration.OfflineAfter = 500*time.Millisecond, 2*time.Second, 10*time.Second
		o.Faults.Stall = func(ctx context.Context, c lease.Claim) {
			if c.TaskID == "stall-hb-slow" {
				stalled <- c
				<-ctx.Done()
				unstalled <- time.Now()
			}
		}
	})
	waitWorkersActive(t, "stall-hb")
	busy := taskEnvelope(t, "stall-hb-busy", "sleep 30")
	submit(t, busy, api.TaskOptions{LeaseTTL: 30 * time.Second})
	running := waitAttemptRunning(t, busy.TaskID, 1)
	slow := taskEnvelope(t, "stall-hb-slow", "true")
	submit(t, slow, api.TaskOptions{LeaseTTL: 30 * time.Second, LaunchTimeout: time.Minute})
	select {
	case <-stalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow launch never reached the executor")
	}
	ctx := context.Background()
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		w, err := suite.wdc.Worker(ctx, "stall-hb")
		require.NoError(t, err)
		require.Equal(t, fleet.Active, w.State, "the worker stays ACTIVE while a launch stalls")
	}
	v, err := suite.wdc.Task(ctx, busy.TaskID)
	require.NoError(t, err)
	require.Equal(t, running.Lease.Fence, v.Lease.Fence)
	require.Equal(t, lease.Active, v.Lease.State, "the other attempt keeps its lease")

	began := time.Now()
	_, err = suite.wdc.CancelTask(ctx, slow.TaskID, "stall test")
	require.NoError(t, err)
	out, err := suite.wdc.WaitTask(ctx, slow.TaskID)
	require.NoError(t, err)
	assert.Equal(t, api.TaskCancelled, out.State)
	// The stalled launch ends (its staging is cancelled); whether its
	// failure still reaches the history depends on whether the cancelled
	// task's workflow has closed by then.
	select {
	case at := <-unstalled:
		t.Logf("stalled launch ended %.1fs after the cancel (history: %q)", at.Sub(began).Seconds(), launchFailure(t, slow.TaskID))
		assert.Less(t, at.Sub(began), 10*time.Second)
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled launch was not stopped by the cancel")
	}
	_, err = suite.wdc.CancelTask(ctx, busy.TaskID, "stall test done")
	require.NoError(t, err)
}
