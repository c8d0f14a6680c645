package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
)

func batchOf(t *testing.T, ids ...string) api.AddTasksInput {
	var in api.AddTasksInput
	for _, id := range ids {
		e, d := runEnvelope(t, id)
		in.Tasks = append(in.Tasks, api.AddTaskInput{Envelope: e, EnvelopeDigest: d})
	}
	return in
}

// Every way the add-tasks validator refuses a batch: nothing of the batch
// is added, and the error names the offending task by index.
func TestRunAddTasksRefusesABadBatchWhole(t *testing.T) {
	wrongDigest := batchOf(t, "a", "b", "c")
	wrongDigest.Tasks[2].EnvelopeDigest = "sha256:00"
	otherRun := batchOf(t, "a", "b")
	otherRun.Tasks[1].Envelope.RunID = "r2"
	otherRun.Tasks[1].EnvelopeDigest, _ = otherRun.Tasks[1].Envelope.Digest()
	var tooMany []string
	for i := range api.MaxTasksPerBatch + 1 {
		tooMany = append(tooMany, fmt.Sprintf("t%d", i))
	}
	tests := map[string]struct {
		in   api.AddTasksInput
		typ  string
		want string
	}{
		"empty":          {api.AddTasksInput{}, api.ErrTypeInvalidArgument, "tasks: give at least one task"},
		"too many":       {batchOf(t, tooMany...), api.ErrTypeInvalidArgument, fmt.Sprintf("at most %d per batch", api.MaxTasksPerBatch)},
		"duplicate id":   {batchOf(t, "a", "b", "a"), api.ErrTypeInvalidArgument, `tasks[2]: task_id "a" is also tasks[0]`},
		"wrong digest":   {wrongDigest, api.ErrTypeInvalidArgument, "tasks[2] (c): envelope_digest"},
		"another run":    {otherRun, api.ErrTypeInvalidArgument, `tasks[1] (b): envelope.run_id: "r2"`},
		"invalid option": {func() api.AddTasksInput { b := batchOf(t, "a"); b.Tasks[0].Options.MaxAttempts = -1; return b }(), api.ErrTypeInvalidArgument, "tasks[0] (a): options.max_attempts"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newRunHarness(t)
			var out updateOutcome
			h.update(time.Second, api.UpdateAddTasks, tc.in, &out, nil)
			var v api.RunView
			h.query(2*time.Second, &v)
			h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 3*time.Second)
			h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
			require.True(t, out.rejected, "the batch was not refused")
			requireAppErrType(t, out.err, tc.typ)
			assert.Contains(t, out.err.Error(), tc.want)
			assert.Empty(t, v.Tasks, "nothing of a refused batch is added")
		})
	}
}

// A good batch adds every task; adding it again is idempotent.
func TestRunAddTasksStartsEveryTask(t *testing.T) {
	h := newRunHarness(t)
	var first, again updateOutcome
	var firstRes, againRes api.AddTasksResult
	in := batchOf(t, "a", "b", "c")
	h.update(time.Second, api.UpdateAddTasks, in, &first, &firstRes)
	h.update(2*time.Second, api.UpdateAddTasks, in, &again, &againRes)
	var v api.RunView
	h.query(3*time.Second, &v)
	for _, id := range []string{"a", "b", "c"} {
		h.finishTask(3500*time.Millisecond, id, api.TaskOutcome{State: api.TaskCompleted, Attempts: 1})
	}
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 4*time.Second)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.True(t, first.completed)
	require.NoError(t, first.err)
	require.True(t, again.completed)
	require.NoError(t, again.err)
	require.Len(t, firstRes.Results, 3)
	require.Len(t, againRes.Results, 3)
	for i := range 3 {
		assert.Empty(t, firstRes.Errors[i])
		assert.False(t, firstRes.Results[i].Existing, "added the first time")
		assert.Equal(t, in.Tasks[i].Envelope.TaskID, firstRes.Results[i].TaskID)
		assert.True(t, againRes.Results[i].Existing, "already there the second time")
	}
	require.Len(t, v.Tasks, 3)
	for i, task := range v.Tasks {
		assert.Equal(t, in.Tasks[i].Envelope.TaskID, task.TaskID)
		assert.Equal(t, api.TaskPending, task.State)
	}
}

// A batch costs the run one StartTasks; a task it cannot start (its ID
// belongs to another run) is reported and leaves the run, the others stay.
func TestRunAddTasksStartsTheBatchWithOneActivity(t *testing.T) {
	h := newRunHarness(t)
	h.startErr = func(id string) string {
		if id == "b" {
			return "start task b: workflow wdc-task/b exists"
		}
		return ""
	}
	var add updateOutcome
	var res api.AddTasksResult
	h.update(time.Second, api.UpdateAddTasks, batchOf(t, "a", "b", "c"), &add, &res)
	var v api.RunView
	h.query(2*time.Second, &v)
	h.env.RegisterDelayedCallback(func() { h.env.CancelWorkflow() }, 3*time.Second)
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1"})
	require.NoError(t, add.err)
	require.Len(t, h.started, 1, "one activity for the batch")
	require.Len(t, h.started[0].Tasks, 3)
	require.Equal(t, []string{"", "start task b: workflow wdc-task/b exists", ""}, res.Errors)
	require.Empty(t, res.Results[1].TaskID)
	require.Len(t, v.Tasks, 2)
	require.Equal(t, api.RunTaskCounts{Total: 2, Open: 2}, v.TaskCounts)
}
