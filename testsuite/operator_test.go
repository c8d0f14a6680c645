package testsuite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// A running task that an operator terminates from Temporal's own tools
// (the SDK's TerminateWorkflow, what `temporal workflow terminate` and the
// Web UI call) reads as ended within seconds: its view says ABORTED and
// how it closed (its query alone still says LEASED), `wdc tasks wait`
// exits with no result instead of following it for ever, and the agent
// stops its command.
func TestOperatorTerminateEndsTheTaskVisibly(t *testing.T) {
	startAgent(t, "op-term-a")
	waitWorkersActive(t, "op-term-a")
	env := taskEnvelope(t, "op-term", "exec sleep 60")
	submit(t, env, api.TaskOptions{LeaseTTL: 30 * time.Second})
	running := waitAttemptRunning(t, env.TaskID, 1)
	ctx := context.Background()
	require.NoError(t, suite.client.TerminateWorkflow(ctx, api.TaskWorkflowID(env.TaskID), "", "operator test"))

	began := time.Now()
	var v api.TaskView
	waitFor(t, 10*time.Second, "the task reads ABORTED", func() bool {
		var err error
		v, err = suite.wdc.Task(ctx, env.TaskID)
		return err == nil && v.State == api.TaskAborted
	})
	assert.Equal(t, "TERMINATED", v.ClosedAs)
	t.Logf("ABORTED after %.1fs", time.Since(began).Seconds())

	code, _, stderr := cli(t, "tasks", "wait", env.TaskID)
	assert.Equal(t, 3, code, "no result: %s", stderr)
	assert.Contains(t, stderr, "TERMINATED")

	waitFor(t, 20*time.Second, "the attempt's command stopped", func() bool {
		return len(processesIn(running.AttemptDir)) == 0
	})
}

// An operator's reset of a running task to its first workflow task (what
// `temporal workflow reset --type FirstWorkflowTask` and the Web UI's
// Reset do) re-runs the selection and the grant. The new run never grants
// the fence the reset-away run granted: attempt 1 of the new run holds
// fence 2, a claim under fence 1 is refused as stale_fence, and the task
// completes on the new fence.
func TestOperatorResetNeverReusesAFence(t *testing.T) {
	startAgent(t, "op-reset-a")
	waitWorkersActive(t, "op-reset-a")
	env := taskEnvelope(t, "op-reset", `if [ "$WDC_FENCE" = 1 ]; then exec sleep 60; fi
sleep 3; echo "fence $WDC_FENCE" > outputs/fence.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 30 * time.Second})
	first := waitAttemptRunning(t, env.TaskID, 1)
	require.Equal(t, int64(1), first.Lease.Fence)
	ctx := context.Background()
	wfID := api.TaskWorkflowID(env.TaskID)
	desc, err := suite.client.DescribeWorkflowExecution(ctx, wfID, "")
	require.NoError(t, err)
	runID := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	var firstWFT int64
	iter := suite.client.GetWorkflowHistory(ctx, wfID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() && firstWFT == 0 {
		ev, err := iter.Next()
		require.NoError(t, err)
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			firstWFT = ev.GetEventId()
		}
	}
	require.NotZero(t, firstWFT)
	_, err = suite.client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 "default",
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: wfID, RunId: runID},
		Reason:                    "operator test",
		WorkflowTaskFinishEventId: firstWFT,
		RequestId:                 fmt.Sprintf("op-reset-%d", time.Now().UnixNano()),
	})
	require.NoError(t, err)

	var second api.TaskView
	waitFor(t, 15*time.Second, "the new run's attempt running", func() bool {
		v, err := suite.wdc.Task(ctx, env.TaskID)
		second = v
		return err == nil && v.AttemptDir != "" && v.Lease != nil && v.Lease.Fence != 1
	})
	assert.Equal(t, int64(2), second.Lease.Fence, "a fence above the reset-away run's")
	assert.NotEqual(t, first.AttemptDir, second.AttemptDir, "task directories never collide")
	_, err = submitAs(t, suite.client, "op-reset-stale", api.SubmitResultInput{Claim: lease.ClaimOf(*first.Lease)})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr, "the reset-away run's claim")
	assert.Equal(t, string(lease.RejectStaleFence), appErr.Type())

	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State, "waiting: %s", view.Waiting)
	require.NotNil(t, view.Result)
	assert.Equal(t, int64(2), view.Result.Fence, "the new run's attempt holds a fence above the reset-away run's")
	assert.Equal(t, "fence 2\n", readArtifact(t, view.Result, "fence.txt"))
}
