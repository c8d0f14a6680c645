package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
)

// fakeTask stands in for WdcTask as the run's child: it runs until the
// test ends it. (The test sends the run the task-ended signal a real task
// would send; the test environment does not route a child's signals to its
// parent.)
func fakeTask(ctx workflow.Context, in api.TaskInput) (api.TaskOutcome, error) {
	var out api.TaskOutcome
	workflow.GetSignalChannel(ctx, "finish").Receive(ctx, &out)
	if out.State == "fail" {
		return api.TaskOutcome{}, temporal.NewNonRetryableApplicationError("task workflow failed", "boom", nil)
	}
	return out, nil
}

type runHarness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment
	// started records every StartTasks input; startErr, when set, is
	// StartTasks' error message for a task ("" starts it).
	started  []api.StartTasksInput
	startErr func(taskID string) string
	// startCall is StartTasks' mock (startCall.After delays it);
	// startFault, when set, fails a try of it with the error it returns.
	startCall  *testsuite.MockCallWrapper
	startFault func(ctx context.Context) error
	// reconciled records every ReconcileTasks input; reconcile, when set,
	// answers it (else nothing is closed).
	reconciled []api.ReconcileTasksInput
	reconcile  func(api.ReconcileTasksInput) api.ReconcileTasksResult
	// reconcileCall is ReconcileTasks' mock (reconcileCall.After delays
	// its answer).
	reconcileCall *testsuite.MockCallWrapper
	// ended is each task's own outcome once finishTask ended it: what
	// ReconcileTasks with Reported reads from the task (a task-ended
	// signal alone ends nothing); verified records those inputs.
	ended    map[string]api.TaskOutcome
	verified []api.ReconcileTasksInput
	// children is set when the run starts its tasks as fakeTask children
	// (DefaultVersion of startTasksByActivity).
	children bool
}

// newRunHarness runs WdcRun with StartTasks and ReconcileTasks mocked
// (the harness records their inputs).
func newRunHarness(t *testing.T) *runHarness {
	return newRunHarnessIn(t, &testsuite.WorkflowTestSuite{})
}

// newRunHarnessIn is newRunHarness in the test suite ts.
func newRunHarnessIn(t *testing.T, ts *testsuite.WorkflowTestSuite) *runHarness {
	env := ts.NewTestWorkflowEnvironment()
	env.SetTestTimeout(20 * time.Second)
	env.RegisterWorkflowWithOptions(WdcRun, workflow.RegisterOptions{Name: api.RunWorkflowType})
	env.RegisterWorkflowWithOptions(fakeTask, workflow.RegisterOptions{Name: api.TaskWorkflowType})
	env.RegisterActivity(&activities.Control{})
	h := &runHarness{t: t, env: env, ended: map[string]api.TaskOutcome{}}
	h.startCall = env.OnActivity(controlActs.StartTasks, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in api.StartTasksInput) (api.StartTasksResult, error) {
			if h.startFault != nil {
				if err := h.startFault(ctx); err != nil {
					return api.StartTasksResult{}, err
				}
			}
			h.started = append(h.started, in)
			res := api.StartTasksResult{Errors: make([]string, len(in.Tasks))}
			for i, st := range in.Tasks {
				if h.startErr != nil {
					res.Errors[i] = h.startErr(st.Input.Envelope.TaskID)
				}
			}
			return res, nil
		})
	h.reconcileCall = env.OnActivity(controlActs.ReconcileTasks, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in api.ReconcileTasksInput) (api.ReconcileTasksResult, error) {
			if in.Reported {
				h.verified = append(h.verified, in)
				return h.reportedOutcomes(in), nil
			}
			h.reconciled = append(h.reconciled, in)
			if h.reconcile == nil {
				return api.ReconcileTasksResult{}, nil
			}
			return h.reconcile(in), nil
		})
	return h
}

// reportedOutcomes answers ReconcileTasks with Reported as the activity
// does: the tasks that ended, by their own outcome.
func (h *runHarness) reportedOutcomes(in api.ReconcileTasksInput) api.ReconcileTasksResult {
	var res api.ReconcileTasksResult
	for _, id := range in.TaskIDs {
		if out, ok := h.ended[id]; ok {
			if out.Result != nil {
				ref, err := api.ResultRefOf(*out.Result)
				require.NoError(h.t, err)
				out.Result, out.Ref = nil, &ref
			}
			res.Closed = append(res.Closed, api.ReconciledTask{TaskID: id, Status: "RUNNING", Outcome: &out})
		}
	}
	return res
}

// childPath makes the run start its tasks as fakeTask children, as runs
// before startTasksByActivity did.
func (h *runHarness) childPath() {
	h.children = true
	h.env.OnGetVersion(startTasksByActivity, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
}

func runEnvelope(t *testing.T, taskID string) (envelope.Envelope, string) {
	e := envelope.Envelope{TaskID: taskID, RunID: "r1", WorldID: "w1", Command: []string{"true"}}
	e.Normalize()
	d, err := e.Digest()
	require.NoError(t, err)
	return e, d
}

func (h *runHarness) update(at time.Duration, name string, arg any, out *updateOutcome, result any) {
	h.env.RegisterDelayedCallback(func() {
		h.env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
			OnAccept: func() { out.accepted = true },
			OnReject: func(err error) { out.rejected = true; out.err = err },
			OnComplete: func(v any, err error) {
				out.completed = true
				out.err = err
				if result != nil && err == nil {
					switch r := result.(type) {
					case *api.CommitResult:
						*r = v.(api.CommitResult)
					case *api.AddTasksResult:
						*r = v.(api.AddTasksResult)
					}
				}
			},
		}, arg)
	}, at)
}

// finishTask reports a task's outcome to the run (and ends its child, on
// the child path).
func (h *runHarness) finishTask(at time.Duration, taskID string, out api.TaskOutcome) {
	out.TaskID, out.RunID = taskID, "r1"
	h.env.RegisterDelayedCallback(func() {
		h.ended[taskID] = out
		if h.children {
			require.NoError(h.t, h.env.SignalWorkflowByID(api.TaskWorkflowID(taskID), "finish", out))
		}
		h.env.SignalWorkflow(api.SignalTaskEnded, out)
	}, at)
}

func (h *runHarness) query(at time.Duration, into *api.RunView) {
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryRun)
		require.NoError(h.t, err)
		require.NoError(h.t, v.Get(into))
	}, at)
}

func TestRunIngestsOneWorkerResultPerAcceptedTaskAndOnlyCommitMovesEvidence(t *testing.T) {
	h := newRunHarness(t)
	e1, d1 := runEnvelope(t, "t1")
	e2, d2 := runEnvelope(t, "t2")
	var add1, add2, again, conflict, badWorld updateOutcome
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &add1, nil)
	h.update(2*time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e2, EnvelopeDigest: d2}, &add2, nil)
	h.update(3*time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &again, nil)
	changed := e1
	changed.Command = []string{"false"}
	dc, _ := changed.Digest()
	h.update(3*time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: changed, EnvelopeDigest: dc}, &conflict, nil)
	other := e2
	other.TaskID, other.WorldID = "t3", "elsewhere"
	do, _ := other.Digest()
	h.update(3*time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: other, EnvelopeDigest: do}, &badWorld, nil)

	result := &api.TaskResult{TaskID: "t1", RunID: "r1", WorkerID: "w-b", Attempt: 2, Fence: 2, EnvelopeDigest: d1}
	h.finishTask(4*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 2, Result: result})
	h.finishTask(5*time.Second, "t2", api.TaskOutcome{State: api.TaskRetriesExhausted, Attempts: 5})
	var afterTasks, afterCommit api.RunView
	h.query(6*time.Second, &afterTasks)

	var staleCommit, badSeq, commit, twice updateOutcome
	var commitRes api.CommitResult
	h.update(7*time.Second, api.UpdateCommit, api.CommitInput{ExpectedParentTime: 5, EventSeqs: []int64{1}}, &staleCommit, nil)
	h.update(7*time.Second, api.UpdateCommit, api.CommitInput{ExpectedParentTime: 0, EventSeqs: []int64{9}}, &badSeq, nil)
	h.update(8*time.Second, api.UpdateCommit, api.CommitInput{ExpectedParentTime: 0, EventSeqs: []int64{1}, Note: "reviewed"}, &commit, &commitRes)
	h.update(9*time.Second, api.UpdateCommit, api.CommitInput{ExpectedParentTime: 1, EventSeqs: []int64{1}}, &twice, nil)
	h.query(10*time.Second, &afterCommit)
	var closed updateOutcome
	h.update(11*time.Second, api.UpdateCloseRun, api.CloseRunInput{}, &closed, nil)

	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())

	require.NoError(t, add1.err)
	require.NoError(t, add2.err)
	require.NoError(t, again.err, "re-adding the same envelope is idempotent")
	require.True(t, conflict.rejected)
	requireAppErrType(t, conflict.err, api.ErrTypeConflict)
	require.True(t, badWorld.rejected)
	require.ErrorContains(t, badWorld.err, "world_id")
	requireAppErrType(t, badWorld.err, api.ErrTypeConflict)

	require.Equal(t, api.RunIncomplete, afterTasks.Status)
	require.Equal(t, int64(1), afterTasks.WorkerResultEvents, "one worker_result per accepted result")
	require.Len(t, afterTasks.Events, 1)
	require.Equal(t, api.EventWorkerResult, afterTasks.Events[0].Type)
	require.Equal(t, int64(0), afterTasks.Evidence, "worker results do not touch evidence")
	require.Equal(t, int64(0), afterTasks.ParentTime)
	initial, _ := InitialTCD("r1", "w1")
	require.Equal(t, initial, afterTasks.TCDDigest)

	require.True(t, staleCommit.rejected)
	requireAppErrType(t, staleCommit.err, api.ErrTypeConflict)
	require.True(t, badSeq.rejected)
	require.ErrorContains(t, badSeq.err, "event_seqs[0]")
	require.NoError(t, commit.err)
	require.Equal(t, int64(1), commitRes.ParentTime)
	require.True(t, twice.rejected, "an event is committed at most once")

	require.Equal(t, int64(1), afterCommit.Evidence)
	require.Equal(t, int64(1), afterCommit.ParentTime)
	require.Positive(t, afterTasks.PendingBytes, "the uncommitted result counts")
	require.Zero(t, afterCommit.PendingBytes, "nothing open, nothing uncommitted: the commit took back what the result added")
	ref, err := api.ResultRefOf(*result)
	require.NoError(t, err)
	want, _ := NextTCD(initial, 1, []api.ResultRef{ref})
	require.Equal(t, want, afterCommit.TCDDigest)
	require.NotEqual(t, initial, afterCommit.TCDDigest)
	require.True(t, closed.completed)

	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.True(t, final.Closed)
}

func TestRunCloseWhenDone(t *testing.T) {
	h := newRunHarness(t)
	e1, d1 := runEnvelope(t, "t1")
	var add updateOutcome
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &add, nil)
	h.finishTask(2*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Result: &api.TaskResult{TaskID: "t1"}})
	var late updateOutcome
	e2, d2 := runEnvelope(t, "t2")
	h.update(3*time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e2, EnvelopeDigest: d2}, &late, nil)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1", CloseWhenDone: true})
	require.NoError(t, h.env.GetWorkflowError())
	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.Equal(t, api.RunCompleted, final.Status)
	require.True(t, final.Closed)
	require.Len(t, final.Tasks, 1)
}

func TestRunIgnoresRepeatedAndUnknownReports(t *testing.T) {
	h := newRunHarness(t)
	e1, d1 := runEnvelope(t, "t1")
	var add updateOutcome
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &add, nil)
	res := &api.TaskResult{TaskID: "t1", Fence: 1}
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalTaskEnded, api.TaskOutcome{TaskID: "nope", State: api.TaskCompleted, Result: res})
	}, 2*time.Second)
	h.finishTask(3*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Result: res})
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalTaskEnded, api.TaskOutcome{TaskID: "t1", State: api.TaskCompleted, Result: res})
	}, 4*time.Second)
	var v api.RunView
	h.query(5*time.Second, &v)
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 6*time.Second)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.Equal(t, int64(1), v.WorkerResultEvents)
}

// A task's first outcome is the run's: a later report that differs (an
// abandoned attempt's result, another state) is not looked at again and
// never flips the recorded result.
func TestRunKeepsATasksFirstOutcome(t *testing.T) {
	h, m, add, d1 := newRunHarnessWithTask(t)
	kept := &api.TaskResult{TaskID: "t1", RunID: "r1", WorkerID: "w-b", Attempt: 2, Fence: 2, EnvelopeDigest: d1}
	h.finishTask(2*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 2, Result: kept})
	abandoned := &api.TaskResult{TaskID: "t1", RunID: "r1", WorkerID: "w-a", Attempt: 1, Fence: 1, EnvelopeDigest: d1}
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalTaskEnded, api.TaskOutcome{TaskID: "t1", RunID: "r1", State: api.TaskCompleted, Attempts: 1, Result: abandoned})
		h.env.SignalWorkflow(api.SignalTaskEnded, api.TaskOutcome{TaskID: "t1", RunID: "r1", State: api.TaskAborted})
	}, 3*time.Second)
	var v api.RunView
	h.query(4*time.Second, &v)
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 5*time.Second)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.NoError(t, add.err)

	want, err := api.ResultRefOf(*kept)
	require.NoError(t, err)
	require.Equal(t, int64(1), v.WorkerResultEvents)
	require.Len(t, v.Events, 1)
	require.Equal(t, &want, v.Events[0].Result, "the first outcome's result")
	require.Equal(t, api.TaskCompleted, v.Tasks[0].State)
	require.EqualValues(t, 2, v.Tasks[0].Attempts)
	require.Equal(t, int64(1), v.TaskCounts.Completed)

	require.NoError(t, m.Close())
	require.Zero(t, counterTotal(t, m, api.MetricTaskReportsConflicting), "the later reports were never taken as outcomes")
	require.Len(t, h.verified, 1, "only the first report was verified")
	require.Equal(t, []string{"t1"}, h.verified[0].TaskIDs)
}

func requireAppErrType(t *testing.T, err error, typ string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	require.Equal(t, typ, appErr.Type())
}

// The run starts its task with exactly TaskStart's input, the one the
// task workflow tests start it with, by one StartTasks for the batch.
func TestRunStartsItsTaskAsTaskStartBuildsIt(t *testing.T) {
	h := newRunHarness(t)
	e1, d1 := runEnvelope(t, "t1")
	add := api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1, Options: api.TaskOptions{MaxAttempts: 2}}
	var added updateOutcome
	h.update(time.Second, api.UpdateAddTask, add, &added, nil)
	var closed updateOutcome
	h.update(2*time.Second, api.UpdateCloseRun, api.CloseRunInput{}, &closed, nil)
	h.finishTask(3*time.Second, "t1", api.TaskOutcome{State: api.TaskRetriesExhausted})
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.NoError(t, h.env.GetWorkflowError())
	require.NoError(t, added.err)

	_, want := TaskStart("r1", add)
	require.Equal(t, []api.StartTasksInput{{RunID: "r1", Tasks: []api.StartTask{{Input: want}}}}, h.started)
	require.EqualValues(t, 2, want.Options.MaxAttempts)
	require.NotZero(t, want.Options.LeaseTTL, "defaults filled in")
}
