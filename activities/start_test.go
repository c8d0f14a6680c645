package activities

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
)

// existing is a client.Client on which the task workflows named in runs
// already exist, started by that run at that time; others start.
type existing struct {
	client.Client
	runs    map[string]string
	started map[string]time.Time
}

func (f existing) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	if !o.WorkflowExecutionErrorWhenAlreadyStarted {
		panic("an existing execution would pass for a started one")
	}
	if _, ok := f.runs[o.ID]; ok {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("exists", "", "run-1")
	}
	return nil, nil
}

func (f existing) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	p, err := converter.GetDefaultDataConverter().ToPayload(f.runs[id])
	if err != nil {
		return nil, err
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Status:           enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		StartTime:        timestamppb.New(f.started[id]),
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{api.SARunID.GetName(): p}},
	}}, nil
}

// A task whose workflow exists counts as started only when this run
// started it after the activity was scheduled (an earlier try); one of
// another run, or of this run from before, is reported.
func TestStartTasksStartsNothingTwiceAndNothingOfAnotherRun(t *testing.T) {
	future := time.Now().Add(time.Hour)
	f := existing{
		runs:    map[string]string{api.TaskWorkflowID("retried"): "r1", api.TaskWorkflowID("before"): "r1", api.TaskWorkflowID("other"): "r2"},
		started: map[string]time.Time{api.TaskWorkflowID("retried"): future, api.TaskWorkflowID("before"): time.Unix(0, 0), api.TaskWorkflowID("other"): future},
	}
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(&Control{Client: f})
	var in api.StartTasksInput
	in.RunID = "r1"
	for _, id := range []string{"new", "retried", "before", "other"} {
		in.Tasks = append(in.Tasks, api.StartTask{Input: api.TaskInput{Envelope: envelope.Envelope{TaskID: id, RunID: "r1", Command: []string{"true"}}}})
	}
	val, err := env.ExecuteActivity("StartTasks", in)
	require.NoError(t, err)
	var res api.StartTasksResult
	require.NoError(t, val.Get(&res))
	require.Len(t, res.Errors, 4)
	require.Empty(t, res.Errors[0], "new")
	require.Empty(t, res.Errors[1], "started by an earlier try")
	require.Contains(t, res.Errors[2], "run r1")
	require.Contains(t, res.Errors[3], "run r2")
}

// slowStarts is a client.Client whose every workflow start takes delay.
type slowStarts struct {
	client.Client
	delay time.Duration
}

func (f slowStarts) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	time.Sleep(f.delay)
	return nil, nil
}

// startTasksUnder runs StartTasks once with a heartbeat timeout of 3 s.
func startTasksUnder(ctx workflow.Context, in api.StartTasksInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute, HeartbeatTimeout: 3 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	return workflow.ExecuteActivity(ctx, "StartTasks", in).Get(ctx, nil)
}

// StartTasks heartbeats while its starts are slow, not only when one
// returns: a slow server must not pass for a dead control plane, whose
// heartbeat timeout lets a second try run beside the first.
func TestStartTasksHeartbeatsWhileItsStartsAreSlow(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	env.RegisterWorkflow(startTasksUnder)
	env.RegisterActivity(&Control{Client: slowStarts{delay: 5 * time.Second}})
	in := api.StartTasksInput{RunID: "r1", Tasks: []api.StartTask{{Input: api.TaskInput{Envelope: envelope.Envelope{TaskID: "slow", RunID: "r1", Command: []string{"true"}}}}}}
	env.ExecuteWorkflow(startTasksUnder, in)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError(), "a start slower than the heartbeat timeout")
}
