package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
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
}

func (f terminatedTask) QueryWorkflow(_ context.Context, wfID, _, _ string, _ ...any) (converter.EncodedValue, error) {
	l := lease.Lease{TaskID: "t1", WorkerID: "w", Attempt: 1, Fence: 1, State: lease.Active}
	return jsonValue{api.TaskView{TaskID: "t1", State: api.TaskLeased, Lease: &l, Leases: []lease.Lease{l}}}, nil
}

func (f terminatedTask) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: f.status}}, nil
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
