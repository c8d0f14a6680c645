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
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/worker"
)

// A launch that stalls after its inputs are in place (as behind a slow
// download) while its lease expires is refused by the agent's check right
// before the command starts: the task cancelled the launch activity when
// it ended the lease, and the check is a heartbeat of that activity (the
// Temporal server answers it alone; no lease query reaches the control
// plane). Attempt 1's command never runs; attempt 2 completes the task.
func TestALaunchWhoseLeaseEndedWhileItStalledStartsNothing(t *testing.T) {
	stalled := make(chan lease.Claim, 1)
	resume := make(chan struct{})
	// Two agents: a stalled launch holds its agent's launcher, so
	// attempt 2 runs on the other one (it avoids the worker that lost the
	// lease).
	stall := func(o *worker.AgentOptions) {
		o.Faults.Stall = func(c lease.Claim) {
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
	assert.Contains(t, failure, "lease_not_active: the task cancelled this launch")
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
