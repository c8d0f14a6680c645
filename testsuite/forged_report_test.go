package testsuite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
)

// Issue #20, attack 1: a task-ended signal any namespace client can send
// for an open task, with a result reference of its choosing. The run reads
// the task's outcome from the task itself (its lease query): the forged
// signal ends nothing and adds no worker_result; the task's real result,
// submitted through the fence check, is the one the run records.
func TestForgedTaskEndedSignalLeavesTheRunUnchanged(t *testing.T) {
	c, wc, _, labels := raceEnv(t, "forged-report", &soakLauncher{})
	env := envelope.Envelope{TaskID: "forged-report", RunID: "forged-run", WorldID: "races", Command: []string{"true"}, Selector: labels}
	_, err := wc.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: time.Hour})
	require.NoError(t, err)
	claim := waitLaunched(t, wc, env.TaskID, 1)

	runWF := api.RunWorkflowID(env.RunID)
	verifies := func() int { return countActivities(t, c, runWF, "ReconcileTasks") }
	before := verifies()
	forged := api.TaskEndedSignal{TaskID: env.TaskID, RunID: env.RunID, State: api.TaskCompleted, Attempts: 1,
		Ref: &api.ResultRef{TaskID: env.TaskID, WorkerID: claim.WorkerID, Attempt: claim.Attempt, Fence: claim.Fence, EnvelopeDigest: claim.EnvelopeDigest, ResultDigest: "sha256:" + strings.Repeat("f", 64)}}
	require.NoError(t, c.SignalWorkflow(context.Background(), runWF, "", api.SignalTaskEnded, forged))
	waitFor(t, 30*time.Second, "the run checked the report against the task", func() bool { return verifies() > before })

	v, err := wc.Run(context.Background(), env.RunID)
	require.NoError(t, err)
	require.Equal(t, int64(1), v.TaskCounts.Open, "the forged signal ended nothing")
	require.Zero(t, v.WorkerResultEvents)
	require.Empty(t, v.Events)

	res, err := submitAs(t, c, api.SubmitResultUpdateID(claim), api.SubmitResultInput{Claim: claim})
	require.NoError(t, err)
	require.True(t, res.Accepted)
	want, err := api.ResultRefOf(res.Result)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the run recorded the task's own result", func() bool {
		v, err = wc.Run(context.Background(), env.RunID)
		return err == nil && v.WorkerResultEvents == 1
	})
	require.Len(t, v.Events, 1)
	require.Equal(t, &want, v.Events[0].Result, "the task's own result, not the forged one")
	require.Equal(t, int64(1), v.TaskCounts.Completed)
	if *updateHistories {
		writeHistoryFrom(t, c, runWF, "") // a forged report checked and dropped, the real one recorded
	}
}

// countActivities counts the completed activities of type name in a
// workflow's history.
func countActivities(t *testing.T, c client.Client, wfID, name string) int {
	t.Helper()
	iter := c.GetWorkflowHistory(context.Background(), wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	scheduled := map[int64]bool{}
	n := 0
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == name {
			scheduled[ev.GetEventId()] = true
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] {
			n++
		}
	}
	return n
}
