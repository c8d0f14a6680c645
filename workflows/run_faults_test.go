package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// Fault 8: a task whose workflow fails (or is terminated, or times out)
// never sends task-ended. The run watches its children and records such a
// task as ABORTED, so a run that closes when done still finishes. Before:
// the run waited forever.
func TestFault8RunRecordsAChildThatEndedWithoutReporting(t *testing.T) {
	h := newRunHarness(t)
	h.childPath()
	e1, d1 := runEnvelope(t, "t1")
	e2, d2 := runEnvelope(t, "t2")
	var add1, add2 updateOutcome
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &add1, nil)
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e2, EnvelopeDigest: d2}, &add2, nil)
	// t1 fails without reporting; t2 ends normally.
	h.env.RegisterDelayedCallback(func() {
		require.NoError(t, h.env.SignalWorkflowByID(api.TaskWorkflowID("t1"), "finish", api.TaskOutcome{State: "fail"}))
	}, 2*time.Second)
	h.finishTask(3*time.Second, "t2", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Ref: &api.ResultRef{TaskID: "t2", Fence: 1}})
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1", CloseWhenDone: true})
	require.True(t, h.env.IsWorkflowCompleted(), "the run finished")
	require.NoError(t, h.env.GetWorkflowError())
	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.Equal(t, api.RunIncomplete, final.Status)
	require.Equal(t, api.TaskAborted, final.Tasks[0].State)
	require.Contains(t, final.Tasks[0].EndDetail, "without reporting")
	require.Equal(t, api.TaskCompleted, final.Tasks[1].State)
	require.Equal(t, int64(1), final.WorkerResultEvents, "t2's compact reference became a worker_result")
	require.Equal(t, int64(1), final.Events[0].Result.Fence)
}

// Fault 8 across continue-as-new: a task started by an earlier run of the
// workflow cannot be watched; the run looks it up (ReconcileTasks) and
// records how it ended.
func TestFault8RunReconcilesTasksFromBeforeContinueAsNew(t *testing.T) {
	h := newRunHarness(t)
	h.reconcile = func(api.ReconcileTasksInput) api.ReconcileTasksResult {
		return api.ReconcileTasksResult{Closed: []api.ReconciledTask{
			{TaskID: "t1", Status: "TERMINATED"},
			{TaskID: "t2", Status: "COMPLETED", Outcome: &api.TaskOutcome{TaskID: "t2", State: api.TaskCompleted, Attempts: 2, Result: &api.TaskResult{TaskID: "t2", Fence: 2}}},
		}}
	}
	tcd, _ := InitialTCD("r1", "w1")
	carry := api.RunState{RunID: "r1", WorldID: "w1", Status: api.RunRunning, CloseWhenDone: true, TCDDigest: tcd,
		Tasks:      []api.RunTask{{TaskID: "t1", State: api.TaskLeased}, {TaskID: "t2", State: api.TaskPending}},
		TaskCounts: api.RunTaskCounts{Total: 2, Open: 2},
		Events:     []api.Event{}}
	h.env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1", CloseWhenDone: true, Carry: &carry})
	require.NoError(t, h.env.GetWorkflowError())
	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.Equal(t, []api.ReconcileTasksInput{{RunID: "r1", ListClosed: true}}, h.reconciled, "one list, no describes by ID")
	require.Equal(t, api.TaskAborted, final.Tasks[0].State)
	require.Equal(t, "workflow TERMINATED", final.Tasks[0].EndDetail)
	require.Equal(t, api.TaskCompleted, final.Tasks[1].State)
	require.Equal(t, int64(1), final.WorkerResultEvents)
}

// Bounded state: a task at the attempt cap keeps its state (continue-as-new
// input) under Temporal's 2 MB payload limit (a run's bounds are tested by
// TestRunCarryAtItsBoundsStaysUnderThePayloadLimit).
func TestStateStaysUnderPayloadLimit(t *testing.T) {
	const limit = 2 << 20
	long := strings.Repeat("x", 63)
	ledger := lease.NewLedger(long, "sha256:"+strings.Repeat("c", 64))
	carry := api.TaskCarry{Ledger: ledger}
	now := time.Now()
	for i := 0; i < api.MaxAttemptsLimit; i++ {
		_, err := carry.Ledger.Grant(long, time.Second, now)
		require.NoError(t, err)
		d, err := carry.Ledger.Revoke(lease.ReasonLaunchFailed, strings.Repeat("d", 2048), now)
		require.NoError(t, err)
		carry.Directives = append(carry.Directives, d)
	}
	b, err := json.Marshal(api.TaskInput{Carry: &carry})
	require.NoError(t, err)
	require.Less(t, len(b), limit, "task carry of %d attempts is %d bytes", api.MaxAttemptsLimit, len(b))
	t.Logf("task of %d attempts: %d bytes", api.MaxAttemptsLimit, len(b))
}

// A task added just as the run's reconcile runs is still starting: the
// reconcile does not look it up (it could be taken for missing and
// recorded ABORTED while it runs). Found in review.
func TestRunReconcileSkipsTasksBeingStarted(t *testing.T) {
	h := newRunHarness(t)
	h.reconcile = func(api.ReconcileTasksInput) api.ReconcileTasksResult {
		// Visibility may still list t3's ID from before it started.
		return api.ReconcileTasksResult{Closed: []api.ReconciledTask{{TaskID: "t3", Status: "NOT_FOUND"}}}
	}
	h.startCall.After(10 * time.Second)
	tcd, _ := InitialTCD("r1", "w1")
	carry := api.RunState{RunID: "r1", WorldID: "w1", Status: api.RunRunning, TCDDigest: tcd, CloseWhenDone: true,
		Tasks: []api.RunTask{{TaskID: "t1", State: api.TaskLeased}}, Events: []api.Event{}}
	e3, d3 := runEnvelope(t, "t3")
	var add3 updateOutcome
	h.update(reconcileInterval-time.Nanosecond, api.UpdateAddTask, api.AddTaskInput{Envelope: e3, EnvelopeDigest: d3}, &add3, nil)
	h.finishTask(95*time.Second, "t1", api.TaskOutcome{State: api.TaskCancelled})
	h.finishTask(100*time.Second, "t3", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Ref: &api.ResultRef{TaskID: "t3", Fence: 1}})
	h.env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1", Carry: &carry, CloseWhenDone: true})
	require.NoError(t, h.env.GetWorkflowError())
	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.NotEmpty(t, h.reconciled)
	require.Equal(t, api.TaskCompleted, final.Tasks[1].State)
	require.Equal(t, int64(1), final.WorkerResultEvents)
}

// A task whose workflow closed without an outcome (an operator terminated
// it) starts again when it is added again: the add looks it up, records it
// ABORTED and starts a new execution of its workflow; a task that ended
// with an outcome is not started again.
func TestRunStartsAnAbortedTaskAgainWhenItIsAddedAgain(t *testing.T) {
	h := newRunHarness(t)
	h.terminatedUntilRerun("t1")
	e1, d1 := runEnvelope(t, "t1")
	add := api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}
	var first, again, third updateOutcome
	var againRes api.AddTaskResult
	h.update(time.Second, api.UpdateAddTask, add, &first, nil)
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(api.UpdateAddTask, "again", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { again.err = err },
			OnComplete: func(v any, err error) {
				again.completed, again.err = true, err
				if err == nil {
					againRes = v.(api.AddTaskResult)
				}
			},
		}, add)
	}, 4*time.Second)
	var rerun api.RunView
	h.query(5*time.Second, &rerun)
	h.finishTask(6*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Ref: &api.ResultRef{TaskID: "t1", Fence: 2}})
	h.update(7*time.Second, api.UpdateAddTask, add, &third, nil)
	var closed updateOutcome
	h.update(8*time.Second, api.UpdateCloseRun, api.CloseRunInput{}, &closed, nil)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	require.NoError(t, first.err)

	require.Equal(t, []api.ReconcileTasksInput{{RunID: "r1", TaskIDs: []string{"t1"}}}, h.reconciled, "the re-add looked t1 up")
	require.True(t, again.completed)
	require.NoError(t, again.err)
	require.False(t, againRes.Existing, "started again")
	require.Len(t, h.started, 2, "a completed task's re-add starts nothing")
	require.True(t, h.started[1].Tasks[0].Rerun)
	require.Equal(t, api.TaskPending, rerun.Tasks[0].State)
	require.Equal(t, api.RunTaskCounts{Total: 1, Open: 1}, rerun.TaskCounts)
	require.NoError(t, third.err, "a completed task's re-add is idempotent")

	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.Equal(t, api.RunCompleted, final.Status)
	require.Len(t, final.Tasks, 1)
	require.Equal(t, api.RunTaskCounts{Total: 1, Completed: 1}, final.TaskCounts)
	require.Equal(t, int64(1), final.WorkerResultEvents)
}

// A task that ends and reports while the StartTasks activity that started
// it has not returned (its completion is slow to reach the run) is
// recorded once the start returns: the report is read again then. Before,
// it was dropped and the run counted the task open for good. Found by the
// nemesis soak.
func TestRunRecordsATaskThatReportedWhileItsStartRan(t *testing.T) {
	h := newRunHarness(t)
	h.startCall.After(5 * time.Second)
	e1, d1 := runEnvelope(t, "t1")
	var add updateOutcome
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &add, nil)
	h.finishTask(2*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Ref: &api.ResultRef{TaskID: "t1", Fence: 1}})
	var during, after api.RunView
	h.query(3*time.Second, &during)
	h.query(8*time.Second, &after)
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 9*time.Second)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.NoError(t, add.err)

	require.Equal(t, api.RunTaskCounts{Total: 1, Open: 1}, during.TaskCounts, "read while starting: not yet taken")
	require.Equal(t, api.RunTaskCounts{Total: 1, Completed: 1}, after.TaskCounts)
	require.Equal(t, int64(1), after.WorkerResultEvents)
	require.Len(t, h.verified, 2, "read while it started, and again after")
}

// A task an operator terminates while the StartTasks activity that
// started it has not returned, and adds again meanwhile, starts again:
// the add waits for the start to return, then looks the task up. Before,
// the add answered existing and the run recorded the task ABORTED.
// Found by the nemesis soak.
func TestRunStartsAgainATaskTerminatedWhileItsStartRan(t *testing.T) {
	h := newRunHarness(t)
	h.startCall.After(5 * time.Second)
	h.terminatedUntilRerun("t1")
	e1, d1 := runEnvelope(t, "t1")
	add := api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}
	var first, again updateOutcome
	var againRes api.AddTasksResult
	h.update(time.Second, api.UpdateAddTask, add, &first, nil)
	h.update(3*time.Second, api.UpdateAddTasks, api.AddTasksInput{Tasks: []api.AddTaskInput{add}}, &again, &againRes)
	h.finishTask(13*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Ref: &api.ResultRef{TaskID: "t1", Fence: 2}})
	var closed updateOutcome
	h.update(14*time.Second, api.UpdateCloseRun, api.CloseRunInput{}, &closed, nil)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	require.NoError(t, first.err)

	require.NoError(t, again.err)
	require.Equal(t, []string{""}, againRes.Errors)
	require.False(t, againRes.Results[0].Existing, "started again")
	require.Equal(t, []api.ReconcileTasksInput{{RunID: "r1", TaskIDs: []string{"t1"}}}, h.reconciled, "looked up once its start returned")
	require.Len(t, h.started, 2)
	require.True(t, h.started[1].Tasks[0].Rerun)

	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.Equal(t, api.RunTaskCounts{Total: 1, Completed: 1}, final.TaskCounts)
	require.Equal(t, int64(1), final.WorkerResultEvents)
}

// A batch that waited for a task's start and finds the run closed once it
// returns starts nothing, and the run ends: the waiting batch kept it from
// ending meanwhile. Found in review.
func TestRunClosedWhileABatchWaitsStartsNothing(t *testing.T) {
	h := newRunHarness(t)
	h.startCall.After(5 * time.Second)
	h.startErr = func(id string) string {
		if id == "t1" {
			return "start task t1: workflow exists (task IDs cannot be reused)"
		}
		return ""
	}
	e1, d1 := runEnvelope(t, "t1")
	e2, d2 := runEnvelope(t, "t2")
	var first, batch, closed updateOutcome
	var batchRes api.AddTasksResult
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &first, nil)
	h.update(2*time.Second, api.UpdateAddTasks, api.AddTasksInput{Tasks: []api.AddTaskInput{
		{Envelope: e1, EnvelopeDigest: d1}, {Envelope: e2, EnvelopeDigest: d2}}}, &batch, &batchRes)
	h.update(3*time.Second, api.UpdateCloseRun, api.CloseRunInput{}, &closed, nil)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	require.Error(t, first.err, "t1 could not start")
	require.NoError(t, batch.err)
	require.Equal(t, []string{"run r1 is closed", "run r1 is closed"}, batchRes.Errors)
	require.Len(t, h.started, 1, "the closed run started nothing more")
	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.Equal(t, api.RunTaskCounts{}, final.TaskCounts)
}

// A task that reports while the run is verifying an earlier report of it
// (one sent before it ended: a forged or stale one) is read again after
// that verification, not dropped with it. Found in review.
func TestRunReadsAgainATaskReportedWhileItWasVerified(t *testing.T) {
	h, _, add, _ := newRunHarnessWithTask(t)
	h.reconcileCall.After(3 * time.Second)
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalTaskEnded, api.TaskOutcome{TaskID: "t1", RunID: "r1", State: api.TaskCompleted})
	}, 2*time.Second)
	own := api.TaskOutcome{TaskID: "t1", RunID: "r1", State: api.TaskCompleted, Attempts: 1, Ref: &api.ResultRef{TaskID: "t1", Fence: 1}}
	// The task's own report arrives while the first read is under way; that
	// read (the mock answers at 5 s) saw it still running.
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(api.SignalTaskEnded, own) }, 3*time.Second)
	h.env.RegisterDelayedCallback(func() { h.ended["t1"] = own }, 6*time.Second)
	var v api.RunView
	h.query(20*time.Second, &v)
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 21*time.Second)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.NoError(t, add.err)
	require.Len(t, h.verified, 2, "read at the early report, and again after the task's own")
	require.Equal(t, api.RunTaskCounts{Total: 1, Completed: 1}, v.TaskCounts)
	require.Equal(t, int64(1), v.WorkerResultEvents)
}

// A task that completed but whose report never reached the run (lost, or
// dropped) is found by the run's sweep of its open tasks by ID, every
// sweepEvery reconciles: visibility lists only tasks closed without an
// outcome.
func TestRunSweepFindsATaskWhoseReportWasLost(t *testing.T) {
	h := newRunHarness(t)
	h.reconcile = func(in api.ReconcileTasksInput) api.ReconcileTasksResult {
		if in.ListClosed {
			return api.ReconcileTasksResult{}
		}
		return api.ReconcileTasksResult{Closed: []api.ReconciledTask{{TaskID: "t1", Status: "COMPLETED",
			Outcome: &api.TaskOutcome{TaskID: "t1", RunID: "r1", State: api.TaskCompleted, Attempts: 1, Ref: &api.ResultRef{TaskID: "t1", Fence: 1}}}}}
	}
	tcd, _ := InitialTCD("r1", "w1")
	carry := api.RunState{RunID: "r1", WorldID: "w1", Status: api.RunRunning, TCDDigest: tcd, CloseWhenDone: true,
		Tasks: []api.RunTask{{TaskID: "t1", State: api.TaskLeased}}, Events: []api.Event{}}
	h.env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1", Carry: &carry, CloseWhenDone: true})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.Equal(t, api.TaskCompleted, final.Tasks[0].State)
	require.Equal(t, int64(1), final.WorkerResultEvents)
	require.Len(t, h.reconciled, sweepEvery, "nine lists of closed tasks, then the sweep")
	require.Equal(t, []string{"t1"}, h.reconciled[sweepEvery-1].TaskIDs)
}

// At DefaultVersion of rereadTaskReports (a history recorded before it) a
// report read while its task was starting is dropped as it was then, so
// such a history replays.
func TestRunBeforeRereadTaskReportsKeepsTheOldBehaviour(t *testing.T) {
	h := newRunHarness(t)
	h.env.OnGetVersion(rereadTaskReports, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	h.startCall.After(5 * time.Second)
	e1, d1 := runEnvelope(t, "t1")
	var add updateOutcome
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &add, nil)
	h.finishTask(2*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Ref: &api.ResultRef{TaskID: "t1", Fence: 1}})
	var after api.RunView
	h.query(8*time.Second, &after)
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 9*time.Second)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.NoError(t, add.err)
	require.Equal(t, api.RunTaskCounts{Total: 1, Open: 1}, after.TaskCounts)
	require.Len(t, h.verified, 1)
}

// terminatedUntilRerun makes ReconcileTasks find task's workflow
// terminated until the run starts a second batch (its new execution).
func (h *runHarness) terminatedUntilRerun(task string) {
	h.reconcile = func(api.ReconcileTasksInput) api.ReconcileTasksResult {
		if len(h.started) > 1 {
			return api.ReconcileTasksResult{} // the new execution runs
		}
		return api.ReconcileTasksResult{Closed: []api.ReconciledTask{{TaskID: task, Status: "TERMINATED"}}}
	}
}

// A batch whose StartTasks dies with its control plane again and again (a
// soak killed both control planes for minutes) starts within a bounded
// backoff of the last death: each try is noticed within startHeartbeat and
// retried within startBackoff. Before, the default retry policy doubled
// the wait up to 100 s, and the CLI's retries of the batch gave up first.
// Found by the nemesis soak. (This environment retries a nil policy every
// second, so the policy itself is checked as scheduled, too.)
func TestRunRetriesABatchStartKilledWithItsControlPlaneSoon(t *testing.T) {
	h := newRunHarness(t)
	var tries []time.Time
	h.startFault = func(ctx context.Context) error {
		require.LessOrEqual(t, activity.GetInfo(ctx).HeartbeatTimeout, startHeartbeat)
		tries = append(tries, h.env.Now())
		if len(tries) <= 6 {
			return errors.New("control plane killed")
		}
		return nil
	}
	var add updateOutcome
	var res api.AddTasksResult
	h.update(time.Second, api.UpdateAddTasks, batchOf(t, "a", "b"), &add, &res)
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, time.Minute)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.True(t, add.completed)
	require.NoError(t, add.err)
	require.Equal(t, []string{"", ""}, res.Errors)
	require.Len(t, tries, 7)
	for i := 1; i < len(tries); i++ {
		require.LessOrEqual(t, tries[i].Sub(tries[i-1]), startBackoff, "wait before try %d", i+1)
	}
	o := startTasksOptions(2)
	require.NotNil(t, o.RetryPolicy, "the server's default doubles the wait up to 100 s")
	require.LessOrEqual(t, o.RetryPolicy.MaximumInterval, startBackoff)
	require.NotZero(t, o.RetryPolicy.MaximumInterval)
}
