package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/telemetry"
)

// A task-ended signal anyone with namespace access sends for an open task
// ends nothing: the run reads the task's own outcome, finds it open,
// counts the signal and drops it; the task's own report later is kept,
// with its own result.
func TestRunIgnoresATaskEndedSignalTheTaskDidNotSend(t *testing.T) {
	h, m, add, d1 := newRunHarnessWithTask(t)
	forged := &api.ResultRef{TaskID: "t1", WorkerID: "mallory", Attempt: 1, Fence: 1, ResultDigest: "sha256:forged"}
	h.env.RegisterDelayedCallback(func() {
		h.env.SignalWorkflow(api.SignalTaskEnded, api.TaskOutcome{TaskID: "t1", RunID: "r1", State: api.TaskCompleted, Attempts: 1, Ref: forged})
	}, 2*time.Second)
	var afterForged, final api.RunView
	h.query(3*time.Second, &afterForged)
	real := &api.TaskResult{TaskID: "t1", RunID: "r1", WorkerID: "w-a", Attempt: 1, Fence: 1, EnvelopeDigest: d1}
	h.finishTask(4*time.Second, "t1", api.TaskOutcome{State: api.TaskCompleted, Attempts: 1, Result: real})
	h.query(5*time.Second, &final)
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 6*time.Second)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.NoError(t, add.err)

	require.Equal(t, api.TaskPending, afterForged.Tasks[0].State, "the forged signal ended nothing")
	require.Zero(t, afterForged.WorkerResultEvents)
	require.Empty(t, afterForged.Events)
	require.Equal(t, api.RunTaskCounts{Total: 1, Open: 1}, afterForged.TaskCounts)

	want, err := api.ResultRefOf(*real)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, final.Tasks[0].State)
	require.Len(t, final.Events, 1)
	require.Equal(t, &want, final.Events[0].Result, "the task's own result")
	require.Len(t, h.verified, 2, "each signal was checked against the task")

	require.NoError(t, m.Close())
	require.Equal(t, float64(1), counterTotal(t, m, api.MetricTaskReportsUnverified))
}

// Reports still being verified when a run continues as new are carried:
// the next run reads those tasks' outcomes first.
func TestRunCarriesReportsBeingVerifiedIntoContinueAsNew(t *testing.T) {
	h := newRunHarness(t)
	tcd, _ := InitialTCD("r1", "w1")
	carry := api.RunState{RunID: "r1", WorldID: "w1", Status: api.RunRunning, TCDDigest: tcd, CloseWhenDone: true,
		Tasks: []api.RunTask{{TaskID: "t1", State: api.TaskLeased}}, Events: []api.Event{}, Reported: []string{"t1"}}
	h.ended["t1"] = api.TaskOutcome{TaskID: "t1", RunID: "r1", State: api.TaskRetriesExhausted, Attempts: 3}
	h.env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1", Carry: &carry})
	require.NoError(t, h.env.GetWorkflowError())
	var final api.RunState
	require.NoError(t, h.env.GetWorkflowResult(&final))
	require.Equal(t, api.TaskRetriesExhausted, final.Tasks[0].State)
	require.Empty(t, final.Reported)
	require.Equal(t, []api.ReconcileTasksInput{{RunID: "r1", TaskIDs: []string{"t1"}, Reported: true}}, h.verified)
}

// newRunHarnessWithTask is newRunHarness with its metrics, adding task t1
// (envelope digest d1) at 1 s; add is that update's outcome.
func newRunHarnessWithTask(t *testing.T) (h *runHarness, m *telemetry.Metrics, add *updateOutcome, d1 string) {
	m = telemetry.NewMetrics(nil)
	var ts testsuite.WorkflowTestSuite
	ts.SetMetricsHandler(m.Handler)
	h = newRunHarnessIn(t, &ts)
	e1, d1 := runEnvelope(t, "t1")
	add = &updateOutcome{}
	h.update(time.Second, api.UpdateAddTask, api.AddTaskInput{Envelope: e1, EnvelopeDigest: d1}, add, nil)
	return h, m, add, d1
}

// counterTotal sums the counter name (without _total) over its labels.
func counterTotal(t *testing.T, m *telemetry.Metrics, name string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range fams {
		if f.GetName() == name+"_total" {
			for _, s := range f.GetMetric() {
				total += s.GetCounter().GetValue()
			}
		}
	}
	return total
}
