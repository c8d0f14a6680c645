package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/lease"
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

// closedTask is a client.Client serving one task whose query answers its
// last state (LEASED) and whose description says status.
type closedTask struct {
	client.Client
	status enumspb.WorkflowExecutionStatus
}

func (c closedTask) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	v := api.TaskView{TaskID: "t1", State: api.TaskLeased, Waiting: "x", Phase: "Running"}
	p, err := converter.GetDefaultDataConverter().ToPayloads(v)
	if err != nil {
		return nil, err
	}
	return encodedValue{p}, nil
}

func (c closedTask) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: c.status}}, nil
}

type encodedValue struct{ p *commonpb.Payloads }

func (e encodedValue) HasValue() bool { return true }
func (e encodedValue) Get(ptr any) error {
	return converter.GetDefaultDataConverter().FromPayloads(e.p, ptr)
}

// A task workflow an operator terminated (or that failed, timed out or
// was cancelled in Temporal) answers its query with its last state; the
// view says ABORTED and how it closed, so status, --wait and the
// reservation check see that it ended.
func TestTaskViewOfAClosedWorkflowSaysHowItClosed(t *testing.T) {
	for status, want := range map[enumspb.WorkflowExecutionStatus]string{
		enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED: "TERMINATED",
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:  "TIMED_OUT",
		enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:    "",
	} {
		c := &Client{C: closedTask{status: status}}
		v, err := c.Task(context.Background(), "t1")
		require.NoError(t, err)
		assert.Equal(t, want, v.ClosedAs, status.String())
		if want == "" {
			assert.Equal(t, api.TaskLeased, v.State)
			continue
		}
		assert.Equal(t, api.TaskAborted, v.State)
		assert.Empty(t, v.Waiting)
	}
}

// heldTask serves a task whose lease activity holds its lease: the query
// says the lease as the last heartbeat signal left it, the description
// has the activity's last heartbeat by ID.
type heldTask struct {
	client.Client
	view api.TaskView
	beat time.Time
}

func (h heldTask) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	p, err := converter.GetDefaultDataConverter().ToPayloads(h.view)
	if err != nil {
		return nil, err
	}
	return encodedValue{p}, nil
}

func (h heldTask) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
		PendingActivities:     []*workflowpb.PendingActivityInfo{{ActivityId: api.LeaseActivityID(1), LastHeartbeatTime: timestamppb.New(h.beat)}},
	}, nil
}

// A lease its lease activity holds reads as renewed at the last heartbeat
// by ID, so a live lease looks live.
func TestTaskViewRenewsALeaseHeldByItsLeaseActivity(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := lease.Lease{TaskID: "t1", WorkerID: "w", Attempt: 1, Fence: 1, State: lease.Active, TTL: 30 * time.Second, GrantedAt: t0, RenewedAt: t0, ExpiresAt: t0.Add(30 * time.Second)}
	view := api.TaskView{TaskID: "t1", State: api.TaskLeased, Lease: &l, Leases: []lease.Lease{l}, LeaseActivity: api.LeaseActivityID(1)}
	beat := t0.Add(5 * time.Minute)
	v, err := (&Client{C: heldTask{view: view, beat: beat}}).Task(context.Background(), "t1")
	require.NoError(t, err)
	assert.True(t, v.Lease.RenewedAt.Equal(beat))
	assert.True(t, v.Lease.ExpiresAt.Equal(beat.Add(30*time.Second)))
	assert.True(t, v.Leases[0].ExpiresAt.Equal(beat.Add(30*time.Second)))
}

// A state filter also names the execution status: a terminated task (or
// a reset's old run) keeps its last WdcTaskState, LEASED, for ever.
func TestTaskStateQueryTakesTheExecutionStatusIntoAccount(t *testing.T) {
	for state, want := range map[api.TaskState]string{
		"":                       `ExecutionStatus != "ContinuedAsNew"`,
		api.TaskLeased:           `WdcTaskState = "LEASED" AND ExecutionStatus = "Running"`,
		api.TaskPending:          `WdcTaskState = "PENDING" AND ExecutionStatus = "Running"`,
		api.TaskCompleted:        `WdcTaskState = "COMPLETED" AND ExecutionStatus = "Completed"`,
		api.TaskRetriesExhausted: `WdcTaskState = "RETRIES_EXHAUSTED" AND ExecutionStatus = "Completed"`,
		api.TaskAborted:          `ExecutionStatus IN ("Terminated", "Failed", "TimedOut", "Canceled")`,
	} {
		assert.Equal(t, want, TaskStateQuery(state), state)
	}
}

// fenceRow is a visibility row (or a description) of run runID of task
// t1 that published fence, with a 30 s lease TTL; open when closedAt is
// zero.
func fenceRow(t *testing.T, runID string, fence int64, closedAt time.Time) *workflowpb.WorkflowExecutionInfo {
	t.Helper()
	dc := converter.GetDefaultDataConverter()
	f, err := dc.ToPayload(fence)
	require.NoError(t, err)
	ttl, err := dc.ToPayload(30 * time.Second)
	require.NoError(t, err)
	e := &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: api.TaskWorkflowID("t1"), RunId: runID},
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{api.SAFence.GetName(): f}},
		Memo:             &commonpb.Memo{Fields: map[string]*commonpb.Payload{api.MemoLeaseTTL: ttl}},
	}
	if !closedAt.IsZero() {
		e.CloseTime = timestamppb.New(closedAt)
	}
	return e
}

// A run that visibility still lists as open is judged by its own
// description: visibility indexes a grant's fence after the grant, and a
// fence granted just before an operator's reset must still be skipped.
func TestFenceFloorReadsAnOpenRunFromItsDescription(t *testing.T) {
	closed := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	rows := []*workflowpb.WorkflowExecutionInfo{
		fenceRow(t, "current", 1, time.Time{}),
		fenceRow(t, "reset-away", 1, time.Time{}),
		fenceRow(t, "continued", 1, closed.Add(-time.Hour)),
	}
	described := fenceRow(t, "reset-away", 2, closed)
	fake := &fenceRuns{rows: rows, describe: map[string]*workflowpb.WorkflowExecutionInfo{"reset-away": described}}
	past, err := (&Client{C: fake}).FenceFloor(context.Background(), "t1", "current", 2)
	require.NoError(t, err)
	assert.Equal(t, int64(2), past.Fence, "the fence the reset-away run granted")
	assert.False(t, past.Open)
	assert.True(t, past.ClosedAt.Equal(closed), "closed at %s", past.ClosedAt)
	assert.Equal(t, 30*time.Second, past.LeaseTTL)
	assert.Equal(t, []string{"reset-away"}, fake.described, "only a run listed as open is described")
}

// fenceRuns lists rows for any query and describes a run from describe
// (NotFound otherwise), recording each run it described.
type fenceRuns struct {
	client.Client
	rows      []*workflowpb.WorkflowExecutionInfo
	describe  map[string]*workflowpb.WorkflowExecutionInfo
	described []string
}

func (f *fenceRuns) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: f.rows}, nil
}

func (f *fenceRuns) DescribeWorkflowExecution(_ context.Context, _, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.described = append(f.described, runID)
	e, ok := f.describe[runID]
	if !ok {
		return nil, serviceerror.NewNotFound("no such run")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: e}, nil
}

// A run that visibility does not list yet (its start not indexed) is
// still judged when it is a base the caller's reset replaced.
func TestFenceFloorDescribesTheRunsAResetReplaced(t *testing.T) {
	closed := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	fake := &fenceRuns{
		rows:     []*workflowpb.WorkflowExecutionInfo{fenceRow(t, "current", 1, time.Time{})},
		describe: map[string]*workflowpb.WorkflowExecutionInfo{"reset-away": fenceRow(t, "reset-away", 2, closed)},
	}
	past, err := (&Client{C: fake}).FenceFloor(context.Background(), "t1", "current", 2, "reset-away", "current", "deleted")
	require.NoError(t, err)
	assert.Equal(t, int64(2), past.Fence)
	assert.True(t, past.ClosedAt.Equal(closed))
	assert.Equal(t, []string{"reset-away", "deleted"}, fake.described, "each base once, never the caller's own run; a deleted one is skipped")
}

// resetHistory is a client.Client whose task history holds events.
type resetHistory struct {
	client.Client
	events []*historypb.HistoryEvent
}

func (r resetHistory) GetWorkflowHistory(context.Context, string, string, bool, enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	return &eventIterator{events: r.events}
}

type eventIterator struct{ events []*historypb.HistoryEvent }

func (it *eventIterator) HasNext() bool { return len(it.events) > 0 }
func (it *eventIterator) Next() (*historypb.HistoryEvent, error) {
	ev := it.events[0]
	it.events = it.events[1:]
	return ev, nil
}

func resetFailure(cause enumspb.WorkflowTaskFailedCause, base string) *historypb.HistoryEvent {
	return &historypb.HistoryEvent{
		EventType: enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED,
		Attributes: &historypb.HistoryEvent_WorkflowTaskFailedEventAttributes{WorkflowTaskFailedEventAttributes: &historypb.WorkflowTaskFailedEventAttributes{
			Cause: cause, BaseRunId: base,
		}},
	}
}

// A run reset twice names both runs the resets replaced, the latest
// first; a workflow task failed for any other cause names none.
func TestResetBasesReadsEveryResetInTheHistory(t *testing.T) {
	events := []*historypb.HistoryEvent{
		{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED},
		resetFailure(enumspb.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW, "first"),
		resetFailure(enumspb.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE, ""),
		resetFailure(enumspb.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW, "second"),
	}
	bases, err := (&Client{C: resetHistory{events: events}}).ResetBases(context.Background(), "t1", "third")
	require.NoError(t, err)
	assert.Equal(t, []string{"second", "first"}, bases)
}
