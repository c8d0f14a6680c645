package client

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
)

// startOp is a start operation the fake below can tell apart.
type startOp struct {
	client.WithStartWorkflowOperation
	id int
}

// runStarter is a client.Client whose UpdateWithStartWorkflow answers
// "not ready" notReady times, then accepts; like the SDK, it refuses a
// start operation it was given before. Other methods panic, except
// DescribeWorkflowExecution (no run yet).
type runStarter struct {
	client.Client
	notReady, ops, calls int
	seen                 map[int]bool
}

func (r *runStarter) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, serviceerror.NewNotFound("no run")
}

func (r *runStarter) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	r.ops++
	return startOp{id: r.ops}
}

func (r *runStarter) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	r.calls++
	op := o.StartWorkflowOperation.(startOp)
	if r.seen[op.id] {
		return nil, errors.New("invalid WithStartWorkflowOperation: was already executed")
	}
	r.seen[op.id] = true
	if r.calls <= r.notReady {
		return nil, serviceerror.NewWorkflowNotReady("workflow is not ready")
	}
	return addedTasks{n: len(o.UpdateOptions.Args[0].(api.AddTasksInput).Tasks)}, nil
}

type addedTasks struct {
	client.WorkflowUpdateHandle
	n int
}

func (a addedTasks) Get(_ context.Context, ptr any) error {
	res := ptr.(*api.AddTasksResult)
	res.Results, res.Errors = make([]api.AddTaskResult, a.n), make([]string, a.n)
	return nil
}

// A submission the run was not ready for is sent again with a start
// operation of its own (the SDK runs each one once).
func TestSubmitTasksRetriesWithAFreshStartOperation(t *testing.T) {
	fake := &runStarter{notReady: 2, seen: map[int]bool{}}
	c := &Client{C: fake}
	envs := []envelope.Envelope{
		{TaskID: "t1", RunID: "r1", WorldID: "w", Command: []string{"/bin/true"}},
		{TaskID: "t2", RunID: "r1", WorldID: "w", Command: []string{"/bin/true"}},
	}
	res, err := c.SubmitTasks(context.Background(), envs, api.TaskOptions{})
	require.NoError(t, err)
	assert.Len(t, res.Results, 2)
	assert.Equal(t, 3, fake.calls, "two not-ready answers, then accepted")
	assert.Equal(t, 3, fake.ops, "one start operation per call")
}
