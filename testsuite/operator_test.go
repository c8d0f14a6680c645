package testsuite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"
	sdktestsuite "go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/worker"
)

// A running task that an operator terminates from Temporal's own tools
// (the SDK's TerminateWorkflow, what `temporal workflow terminate` and the
// Web UI call) reads as ended within seconds: its view says ABORTED and
// how it closed (its query alone still says LEASED), `wdc tasks wait`
// exits with no result instead of following it for ever, and the agent
// stops its command.
func TestOperatorTerminateEndsTheTaskVisibly(t *testing.T) {
	startAgent(t, "op-term-a", quickReservationCheck)
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
// fence 2, granted no sooner than a TTL after the reset (the lock-delay),
// a claim under fence 1 is refused as stale_fence, and the task completes
// on the new fence.
func TestOperatorResetNeverReusesAFence(t *testing.T) {
	startAgent(t, "op-reset-a", quickReservationCheck)
	waitWorkersActive(t, "op-reset-a")
	env := taskEnvelope(t, "op-reset", `if [ "$WDC_FENCE" = 1 ]; then exec sleep 60; fi
sleep 3; echo "fence $WDC_FENCE" > outputs/fence.txt`)
	ttl := 6 * time.Second
	submit(t, env, api.TaskOptions{LeaseTTL: ttl})
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
	reset := time.Now()
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
	// The new run knew a reset started it, so its selection also read the
	// run the reset replaced from its history (SelectWorkerInput.Reset).
	afterReset := countMatching(t, suite.client, wfID, func(ev *historypb.HistoryEvent) bool {
		return ev.GetEventType() == enumspb.EVENT_TYPE_MARKER_RECORDED &&
			strings.Contains(payloadString(t, ev.GetUserMetadata().GetSummary()), "after a reset")
	})
	assert.Positive(t, afterReset, "a selection of the new run marked after a reset")
	assert.False(t, second.Lease.GrantedAt.Before(reset.Add(ttl)),
		"granted at %s, within a TTL of the reset at %s: the reset-away run's command may still run", second.Lease.GrantedAt, reset)
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

// runHistory is one run's history (runID "" for the current run).
func runHistory(t *testing.T, wfID, runID string) []*historypb.HistoryEvent {
	t.Helper()
	var evs []*historypb.HistoryEvent
	iter := suite.client.GetWorkflowHistory(context.Background(), wfID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		evs = append(evs, ev)
	}
	return evs
}

// lastWorkflowTask is the event a `temporal workflow reset --type
// LastWorkflowTask` resets to: the last completed workflow task.
func lastWorkflowTask(evs []*historypb.HistoryEvent) int64 {
	var id int64
	for _, ev := range evs {
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			id = ev.GetEventId()
		}
	}
	return id
}

// resetTask resets the task's run runID to the workflow task that finished
// at event id, through the SDK call the CLI and the Web UI make.
func resetTask(t *testing.T, taskID, runID string, id int64) {
	t.Helper()
	require.NotZero(t, id)
	_, err := suite.client.ResetWorkflowExecution(context.Background(), &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 "default",
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: api.TaskWorkflowID(taskID), RunId: runID},
		Reason:                    "operator test",
		WorkflowTaskFinishEventId: id,
		RequestId:                 fmt.Sprintf("%s-%d", taskID, time.Now().UnixNano()),
	})
	require.NoError(t, err)
}

// opReservationCheck is the reservation check period of the operator
// tests' agents (fleet.Registration.ReservationCheckAfter).
const opReservationCheck = 5 * time.Second

// quickReservationCheck registers an agent with opReservationCheck, so a
// reservation left by a terminated task is released within seconds.
func quickReservationCheck(o *worker.AgentOptions) {
	o.Registration.ReservationCheckAfter = opReservationCheck
}

// waitNoReservation waits, at most twice the agent's reservation check
// period and a margin, until worker holds no reservation of the task.
func waitNoReservation(t *testing.T, worker, taskID string) {
	t.Helper()
	began := time.Now()
	waitFor(t, 2*opReservationCheck+30*time.Second, worker+" holds no reservation of "+taskID, func() bool {
		v, err := suite.wdc.Worker(context.Background(), worker)
		return err == nil && !slices.ContainsFunc(v.Reservations, func(r fleet.Reservation) bool { return r.TaskID == taskID })
	})
	t.Logf("%s's reservations of %s released after %.1fs", worker, taskID, time.Since(began).Seconds())
}

// An operator's reset of a running task to its last workflow task (what
// `temporal workflow reset --type LastWorkflowTask` does) keeps what the
// history before that point decided, the running attempt's grant with it:
// the attempt keeps its lease and fence, no fence is granted again, and
// the task completes on it and leaves no reservation.
func TestOperatorResetToTheLastWorkflowTaskKeepsTheRunningAttempt(t *testing.T) {
	startAgent(t, "op-last-a", quickReservationCheck)
	waitWorkersActive(t, "op-last-a")
	env := taskEnvelope(t, "op-last", `sleep 10; echo "fence $WDC_FENCE" > outputs/fence.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 6 * time.Second})
	first := waitAttemptRunning(t, env.TaskID, 1)
	waitFor(t, 10*time.Second, "the lease held by its lease activity", func() bool {
		v, err := suite.wdc.Task(context.Background(), env.TaskID)
		return err == nil && v.LeaseActivity != ""
	})
	old := currentRunID(t, suite.client, api.TaskWorkflowID(env.TaskID))
	type waited struct {
		out api.TaskOutcome
		err error
	}
	waiting := make(chan waited, 1) // `tasks wait`, from before the reset
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := suite.wdc.WaitTask(ctx, env.TaskID)
		waiting <- waited{out, err}
	}()
	time.Sleep(500 * time.Millisecond)
	resetTask(t, env.TaskID, old, lastWorkflowTask(runHistory(t, api.TaskWorkflowID(env.TaskID), old)))
	require.NotEqual(t, old, currentRunID(t, suite.client, api.TaskWorkflowID(env.TaskID)), "a new run")

	w := <-waiting
	require.NoError(t, w.err, "a wait follows the reset to the new run")
	assert.Equal(t, api.TaskCompleted, w.out.State)
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State, "waiting: %s", view.Waiting)
	require.Len(t, view.Leases, 1, "no fence granted again")
	assert.Equal(t, int64(1), view.Result.Fence)
	assert.Equal(t, first.AttemptDir, view.AttemptDir, "the same attempt, in its own directory")
	assert.Equal(t, "fence 1\n", readArtifact(t, view.Result, "fence.txt"))
	waitNoReservation(t, "op-last-a", env.TaskID)
}

// An operator's reset of a task to a workflow task before its retry (what
// `temporal workflow reset --event-id` does), while the retry runs: the
// new run never grants the fence the reset-away run granted after that
// point. Attempt 1 (fence 1) is handed back by its stopping agent,
// attempt 2 (fence 2) runs on another worker, then the reset: the new run
// retries under fence 3, attempt 2's claim is stale_fence, its command
// stops, its reservation is released within the reservation check period,
// and no task directory is used twice.
func TestOperatorResetBeforeARetryNeverGrantsItsFenceAgain(t *testing.T) {
	a := startAgent(t, "op-rr-a", quickReservationCheck)
	waitWorkersActive(t, "op-rr-a")
	env := taskEnvelope(t, "op-rr", `case "$WDC_FENCE" in 1|2) exec sleep 60;; esac
echo "fence $WDC_FENCE" > outputs/fence.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 6 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	waitAttemptRunning(t, env.TaskID, 1)
	wfID := api.TaskWorkflowID(env.TaskID)
	old := currentRunID(t, suite.client, api.TaskWorkflowID(env.TaskID))
	point := lastWorkflowTask(runHistory(t, wfID, old))

	startAgent(t, "op-rr-b", quickReservationCheck)
	waitWorkersActive(t, "op-rr-b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	a.Stop(ctx) // hands attempt 1 back: the retry runs on op-rr-b
	cancel()
	second := waitAttemptRunning(t, env.TaskID, 2)
	require.Equal(t, int64(2), second.Lease.Fence)
	require.Equal(t, "op-rr-b", second.Lease.WorkerID)

	resetTask(t, env.TaskID, old, point)
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State, "waiting: %s", view.Waiting)
	var fences []int64
	for _, l := range view.Leases {
		fences = append(fences, l.Fence)
	}
	assert.Equal(t, []int64{1, 3}, fences, "fence 2 is never granted again")
	require.NotNil(t, view.Result)
	assert.Equal(t, int64(3), view.Result.Fence)
	assert.Equal(t, "fence 3\n", readArtifact(t, view.Result, "fence.txt"))
	assert.NotEqual(t, second.AttemptDir, view.AttemptDir, "task directories never collide")

	// The task has ended: a submission finds no workflow, and its executor
	// judges the claim by the task's final lease (as it does for any
	// closed task), which says stale_fence.
	_, err := submitAs(t, suite.client, "op-rr-stale", api.SubmitResultInput{Claim: lease.ClaimOf(*second.Lease)})
	require.Error(t, err, "the reset-away run's claim")
	rej := lease.Check(view.Lease, lease.ClaimOf(*second.Lease))
	require.NotNil(t, rej)
	assert.Equal(t, lease.RejectStaleFence, rej.Reason)
	waitFor(t, 30*time.Second, "attempt 2's command stopped", func() bool {
		return len(processesIn(second.AttemptDir)) == 0
	})
	waitNoReservation(t, "op-rr-b", env.TaskID)
}

// A task an operator terminated and then submits again (the same
// envelope, `wdc tasks submit`) runs again as a new execution of its
// workflow: its fences go on above the terminated one's, granted no
// sooner than a TTL after the terminate (the lock-delay, which the task
// says it waits out), the terminated one's reservation is released within
// the reservation check period,
// visibility lists it by the state it is in (a terminated execution keeps
// WdcTaskState LEASED: the list filters name the execution status), and
// state and --wait say how each ended.
func TestOperatorTerminateThenResubmitGrantsAHigherFence(t *testing.T) {
	startAgent(t, "op-tr-a", quickReservationCheck)
	waitWorkersActive(t, "op-tr-a")
	env := taskEnvelope(t, "op-tr", `if [ "$WDC_FENCE" = 1 ]; then exec sleep 60; fi
echo "fence $WDC_FENCE" > outputs/fence.txt`)
	opts := api.TaskOptions{LeaseTTL: 10 * time.Second}
	submit(t, env, opts)
	first := waitAttemptRunning(t, env.TaskID, 1)
	require.Equal(t, int64(1), first.Lease.Fence)
	ctx := context.Background()
	terminated := time.Now()
	require.NoError(t, suite.client.TerminateWorkflow(ctx, api.TaskWorkflowID(env.TaskID), "", "operator test"))
	waitFor(t, 10*time.Second, "the task reads ABORTED", func() bool {
		v, err := suite.wdc.Task(ctx, env.TaskID)
		return err == nil && v.State == api.TaskAborted
	})
	code, _, stderr := cli(t, "tasks", "wait", env.TaskID)
	assert.Equal(t, 3, code, "no result: %s", stderr)
	assert.Contains(t, stderr, "TERMINATED")

	listed := func(state api.TaskState) []wdcclient.TaskSummary {
		var in []wdcclient.TaskSummary
		waitFor(t, 10*time.Second, "visibility of "+string(state), func() bool {
			all, err := suite.wdc.ListTasks(ctx, string(state), env.RunID)
			in = all
			return err == nil
		})
		return in
	}
	waitFor(t, 10*time.Second, "listed ABORTED", func() bool {
		l := listed(api.TaskAborted)
		return len(l) == 1 && l[0].State == api.TaskAborted
	})
	assert.Empty(t, listed(api.TaskLeased), "a terminated task is not LEASED")
	var rec sdktestsuite.WorkflowTestSuite
	aenv := rec.NewTestActivityEnvironment()
	ctl := &activities.Control{Client: suite.client}
	aenv.RegisterActivity(ctl)
	v, err := aenv.ExecuteActivity(ctl.ReconcileTasks, api.ReconcileTasksInput{RunID: env.RunID, ListClosed: true})
	require.NoError(t, err, "the run's reconcile query: %s", activities.ClosedTasksQuery(env.RunID))
	var found api.ReconcileTasksResult
	require.NoError(t, v.Get(&found))
	assert.Equal(t, []api.ReconciledTask{{TaskID: env.TaskID, Status: "TERMINATED"}}, found.Closed, "the run's reconcile finds it")
	code, stdout, stderr := cli(t, "tasks", "list", "--state", "LEASED", "--run", env.RunID)
	assert.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, env.TaskID)
	waitNoReservation(t, "op-tr-a", env.TaskID)

	submit(t, env, opts)
	// While there is a lock-delay left, the new execution says it waits it
	// out; on a loaded machine it may be seen only once the delay is over.
	// The grant's time below is what must hold either way.
	lockDelayEnds := terminated.Add(opts.LeaseTTL)
	sawLockDelay := false
	waitFor(t, opts.LeaseTTL+5*time.Second, "the new execution waiting out the lock-delay, or the lock-delay over", func() bool {
		v, err := suite.wdc.Task(ctx, env.TaskID)
		sawLockDelay = err == nil && strings.HasPrefix(v.Waiting, "lock-delay: fence 1 of an earlier run")
		return sawLockDelay || time.Now().After(lockDelayEnds)
	})
	if !sawLockDelay {
		t.Logf("not seen waiting: the lock-delay ended %s after the terminate, before the new execution was read", opts.LeaseTTL)
	}
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State, "waiting: %s", view.Waiting)
	require.Len(t, view.Leases, 1)
	assert.False(t, view.Leases[0].GrantedAt.Before(terminated.Add(opts.LeaseTTL)),
		"granted at %s, within a TTL of the terminate at %s: the terminated command may still run", view.Leases[0].GrantedAt, terminated)
	assert.Equal(t, int64(1), view.Leases[0].Attempt, "a new execution counts its own attempts")
	assert.Equal(t, int64(2), view.Result.Fence, "above the terminated execution's fence")
	assert.Equal(t, "fence 2\n", readArtifact(t, view.Result, "fence.txt"))
	assert.NotEqual(t, first.AttemptDir, view.AttemptDir, "task directories never collide")
	code, _, stderr = cli(t, "tasks", "wait", env.TaskID)
	assert.Equal(t, 0, code, stderr)
	waitFor(t, 10*time.Second, "listed COMPLETED, once", func() bool {
		l := listed("")
		return len(l) == 1 && l[0].State == api.TaskCompleted
	})
	run := runWithEndedTasks(t, suite.wdc, env.RunID)
	require.Len(t, run.Tasks, 1)
	assert.Equal(t, api.TaskCompleted, run.Tasks[0].State)
	assert.Equal(t, api.RunTaskCounts{Total: 1, Completed: 1}, run.TaskCounts)
	assert.Equal(t, int64(1), run.WorkerResultEvents)
	waitNoReservation(t, "op-tr-a", env.TaskID)
}
