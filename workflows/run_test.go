package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/telemetry"
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
}

func newRunHarness(t *testing.T) *runHarness {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.SetTestTimeout(20 * time.Second)
	env.RegisterWorkflowWithOptions(WdcRun, workflow.RegisterOptions{Name: api.RunWorkflowType})
	env.RegisterWorkflowWithOptions(fakeTask, workflow.RegisterOptions{Name: api.TaskWorkflowType})
	return &runHarness{t: t, env: env}
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

// finishTask ends a child task and reports its outcome to the run.
func (h *runHarness) finishTask(at time.Duration, taskID string, out api.TaskOutcome) {
	out.TaskID, out.RunID = taskID, "r1"
	h.env.RegisterDelayedCallback(func() {
		require.NoError(h.t, h.env.SignalWorkflowByID(api.TaskWorkflowID(taskID), "finish", out))
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
// abandoned attempt's result, another state) is counted and never flips
// the recorded result; a repeat of the same outcome (the task's signal,
// then its child's completion) is not counted.
func TestRunKeepsATasksFirstOutcome(t *testing.T) {
	m := telemetry.NewMetrics(nil)
	var ts testsuite.WorkflowTestSuite
	ts.SetMetricsHandler(m.Handler)
	h := &runHarness{t: t, env: ts.NewTestWorkflowEnvironment()}
	h.env.SetTestTimeout(20 * time.Second)
	h.env.RegisterWorkflowWithOptions(WdcRun, workflow.RegisterOptions{Name: api.RunWorkflowType})
	h.env.RegisterWorkflowWithOptions(fakeTask, workflow.RegisterOptions{Name: api.TaskWorkflowType})
	e1, d1 := runEnvelope(t, "t1")
	var add updateOutcome
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, &add, nil)
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
	fams, err := m.Registry.Gather()
	require.NoError(t, err)
	var conflicting float64
	for _, f := range fams {
		if f.GetName() == api.MetricTaskReportsConflicting+"_total" {
			for _, s := range f.GetMetric() {
				conflicting += s.GetCounter().GetValue()
			}
		}
	}
	require.Equal(t, float64(2), conflicting, "the two differing reports, not the repeat")
}

func requireAppErrType(t *testing.T, err error, typ string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	require.Equal(t, typ, appErr.Type())
}

// The run starts its task with exactly TaskStart's input and search
// attributes, the ones the task workflow tests start it with.
func TestRunStartsItsTaskAsTaskStartBuildsIt(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.SetTestTimeout(20 * time.Second)
	env.RegisterWorkflowWithOptions(WdcRun, workflow.RegisterOptions{Name: api.RunWorkflowType})
	var got api.TaskInput
	var gotSA temporal.SearchAttributes
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in api.TaskInput) (api.TaskOutcome, error) {
		got, gotSA = in, workflow.GetTypedSearchAttributes(ctx)
		return api.TaskOutcome{TaskID: in.Envelope.TaskID, RunID: in.Envelope.RunID, State: api.TaskRetriesExhausted}, nil
	}, workflow.RegisterOptions{Name: api.TaskWorkflowType})
	e1, d1 := runEnvelope(t, "t1")
	add := api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1, Options: api.TaskOptions{MaxAttempts: 2}}
	h := &runHarness{t: t, env: env}
	var added updateOutcome
	h.update(time.Second, api.UpdateAddTask, add, &added, nil)
	var closed updateOutcome
	h.update(2*time.Second, api.UpdateCloseRun, api.CloseRunInput{}, &closed, nil)
	env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.NoError(t, added.err)

	opts, want := TaskStart("r1", add)
	require.Equal(t, want, got, "the task's input")
	require.EqualValues(t, 2, want.Options.MaxAttempts)
	require.NotZero(t, want.Options.LeaseTTL, "defaults filled in")
	for _, key := range []temporal.SearchAttributeKeyKeyword{api.SAKind, api.SARunID, api.SATaskState} {
		w, _ := opts.TypedSearchAttributes.GetKeyword(key)
		g, _ := gotSA.GetKeyword(key)
		require.Equal(t, w, g, key.GetName())
	}
}
