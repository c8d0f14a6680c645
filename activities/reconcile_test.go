package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

func TestStaleReservation(t *testing.T) {
	active := func(worker string, fence int64) *lease.Lease {
		return &lease.Lease{WorkerID: worker, Fence: fence, State: lease.Active}
	}
	ended := func(worker string, fence int64) *lease.Lease {
		return &lease.Lease{WorkerID: worker, Fence: fence, State: lease.Expired}
	}
	for _, tc := range []struct {
		name  string
		view  api.TaskView
		fence int64
		stale bool
	}{
		{"first selection under way", api.TaskView{State: api.TaskPending}, 1, false},
		{"never granted", api.TaskView{State: api.TaskPending}, 3, true},
		{"current lease on this worker", api.TaskView{State: api.TaskLeased, Lease: active("w1", 2)}, 2, false},
		{"fence granted to another worker (ambiguous reserve)", api.TaskView{State: api.TaskLeased, Lease: active("w2", 2)}, 2, true},
		{"task moved past the fence", api.TaskView{State: api.TaskLeased, Lease: active("w1", 4)}, 2, true},
		{"next selection under way", api.TaskView{State: api.TaskBackoff, Lease: ended("w2", 2)}, 3, false},
		{"lease ended, release lost", api.TaskView{State: api.TaskBackoff, Lease: ended("w1", 2)}, 2, true},
		{"task ended", api.TaskView{State: api.TaskCompleted, Lease: active("w1", 2)}, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := staleReservation(tc.view, "w1", tc.fence)
			require.Equal(t, tc.stale, why != "", "why=%q", why)
		})
	}
}

// terminatedTask is a client.Client serving task workflows whose query
// answers their last state (fence 1 LEASED on w) and whose description
// says status, as the server does for a workflow an operator terminated.
type terminatedTask struct {
	client.Client
	status enumspb.WorkflowExecutionStatus
	// typ and queue describe the execution (default: WdcTask on
	// wdc-control, a task wdc runs).
	typ, queue string
}

func (f terminatedTask) QueryWorkflow(_ context.Context, wfID, _, _ string, _ ...any) (converter.EncodedValue, error) {
	l := lease.Lease{TaskID: "t1", WorkerID: "w", Attempt: 1, Fence: 1, State: lease.Active}
	return jsonValue{api.TaskView{TaskID: "t1", State: api.TaskLeased, Lease: &l, Leases: []lease.Lease{l}}}, nil
}

func (f terminatedTask) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	typ, queue := api.TaskWorkflowType, api.ControlTaskQueue
	if f.typ != "" {
		typ = f.typ
	}
	if f.queue != "" {
		queue = f.queue
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status: f.status, Type: &commonpb.WorkflowType{Name: typ}, TaskQueue: queue,
		Execution: &commonpb.WorkflowExecution{WorkflowId: api.TaskWorkflowID("t1")}}}, nil
}

// A look-alike under a task's workflow ID (another type, or WdcTask on a
// queue of its own) answering that the task holds its lease keeps no
// reservation, and its answer is no outcome: the run records the task
// ended without a result.
func TestALookAlikeTaskIsNotBelieved(t *testing.T) {
	for _, tc := range []struct{ name, typ, queue string }{
		{"another type", "Crafted", api.ControlTaskQueue},
		{"WdcTask on the attacker's queue", api.TaskWorkflowType, "attacker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ts testsuite.WorkflowTestSuite
			env := ts.NewTestActivityEnvironment()
			env.RegisterActivity(&Control{Client: terminatedTask{status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, typ: tc.typ, queue: tc.queue}})
			val, err := env.ExecuteActivity("CheckReservations", api.CheckReservationsInput{WorkerID: "w", Reservations: []api.ReservationRef{{TaskID: "t1", Fence: 1}}})
			require.NoError(t, err)
			var res api.CheckReservationsResult
			require.NoError(t, val.Get(&res))
			require.Len(t, res.Stale, 1, "the look-alike's word keeps no reservation")

			val, err = env.ExecuteActivity("ReconcileTasks", api.ReconcileTasksInput{RunID: "r1", TaskIDs: []string{"t1"}, Reported: true})
			require.NoError(t, err)
			var rec api.ReconcileTasksResult
			require.NoError(t, val.Get(&rec))
			require.Len(t, rec.Closed, 1)
			require.Equal(t, StatusNotATask, rec.Closed[0].Status)
			require.Nil(t, rec.Closed[0].Outcome, "no outcome is taken from it")
		})
	}
}

// The reservation of a task whose workflow was terminated is released:
// its query still says LEASED, its description says it closed.
func TestCheckReservationsReleasesATerminatedTasksReservation(t *testing.T) {
	for _, tc := range []struct {
		status enumspb.WorkflowExecutionStatus
		stale  bool
	}{
		{enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, true},
		{enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, false},
	} {
		var ts testsuite.WorkflowTestSuite
		env := ts.NewTestActivityEnvironment()
		env.RegisterActivity(&Control{Client: terminatedTask{status: tc.status}})
		val, err := env.ExecuteActivity("CheckReservations", api.CheckReservationsInput{WorkerID: "w", Reservations: []api.ReservationRef{{TaskID: "t1", Fence: 1}}})
		require.NoError(t, err)
		var res api.CheckReservationsResult
		require.NoError(t, val.Get(&res))
		if !tc.stale {
			require.Empty(t, res.Stale, tc.status.String())
			continue
		}
		require.Len(t, res.Stale, 1, tc.status.String())
		require.Contains(t, res.Stale[0].Why, "ABORTED")
	}
}
