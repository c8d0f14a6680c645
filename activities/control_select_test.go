package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
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
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/resource"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// How the fake registry answers a reserve update.
const (
	// reserveRejected: the validator refuses (a clean ApplicationError).
	reserveRejected = "rejected"
	// reserveLost: the worker reserves, but the answer is lost (a
	// transport error reaches the caller).
	reserveLost = "lost"
)

// fakeRegistry is a client.Client that serves the worker registry from
// fleet.Worker records: visibility lists them, the worker query returns
// them, the reserve update and release signal apply fleet's rules. Any
// other client call panics (the embedded interface is nil).
type fakeRegistry struct {
	client.Client

	mu       sync.Mutex
	workers  map[string]*fleet.Worker
	mode     map[string]string // worker ID → reserve answer; default: answered
	reserves []string          // worker IDs sent a reserve, in order
	releases []string          // "<worker> <task>/<fence>", in order
	// profiles publishes each worker's profile in the listed memo, as
	// WdcWorker does.
	profiles bool
	// lists and queries count the calls made (lists: of the fleet).
	lists, queries int
	// fenceFloor is the highest fence an earlier run of the task published;
	// fenceClosed, when set, is when that run closed, with fenceTTL in its
	// memo. Its description says so.
	fenceFloor  int64
	fenceClosed time.Time
	fenceTTL    time.Duration
	// Visibility trailing that run: fenceOpen lists it as still running
	// (its close not yet indexed), fenceListed (when set) with an older
	// fence; fenceGone describes it as not found (deleted).
	fenceOpen, fenceGone bool
	fenceListed          int64
	// fenceUnlisted keeps that run out of visibility (its start not yet
	// indexed); the caller's history records a reset from it.
	fenceUnlisted bool
	// fenceSelf lists that run under the caller's own run ID.
	fenceSelf bool
}

// testRunID is the run ID the SDK's test activity environment gives the
// workflow that calls an activity.
const testRunID = "default-test-run-id"

func newFakeRegistry(workers ...fleet.Worker) *fakeRegistry {
	f := &fakeRegistry{workers: map[string]*fleet.Worker{}, mode: map[string]string{}}
	for i := range workers {
		f.workers[workers[i].WorkerID] = &workers[i]
	}
	return f
}

func (f *fakeRegistry) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var resp workflowservice.ListWorkflowExecutionsResponse
	if strings.Contains(req.GetQuery(), "WorkflowId") {
		// A task's fence floor: the fake serves the earlier run as
		// visibility lists it.
		info, err := f.earlierRun(true)
		if info != nil && !f.fenceUnlisted {
			resp.Executions = append(resp.Executions, info)
		}
		return &resp, err
	}
	f.lists++
	for id, w := range f.workers {
		if filtered := strings.Contains(req.GetQuery(), api.SAWorkerState.GetName()); filtered && !strings.Contains(req.GetQuery(), fmt.Sprintf("%q", w.State)) {
			continue // visibility's state filter, as wdcclient.WorkersQuery writes it
		}
		state, err := converter.GetDefaultDataConverter().ToPayload(string(w.State))
		if err != nil {
			return nil, err
		}
		info := &workflowpb.WorkflowExecutionInfo{
			Execution:        &commonpb.WorkflowExecution{WorkflowId: api.WorkerWorkflowID(id)},
			SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{api.SAWorkerState.GetName(): state}},
		}
		if f.profiles {
			p, err := converter.GetDefaultDataConverter().ToPayload(w.Profile())
			if err != nil {
				return nil, err
			}
			info.Memo = &commonpb.Memo{Fields: map[string]*commonpb.Payload{api.MemoWorkerProfile: p}}
		}
		resp.Executions = append(resp.Executions, info)
	}
	return &resp, nil
}

// earlierRun is the earlier run that published f.fenceFloor (nil when
// none): as visibility lists it when listed, else as its description.
func (f *fakeRegistry) earlierRun(listed bool) (*workflowpb.WorkflowExecutionInfo, error) {
	if f.fenceFloor == 0 {
		return nil, nil
	}
	fence := f.fenceFloor
	if listed && f.fenceListed != 0 {
		fence = f.fenceListed
	}
	p, err := converter.GetDefaultDataConverter().ToPayload(fence)
	if err != nil {
		return nil, err
	}
	ttl, err := converter.GetDefaultDataConverter().ToPayload(f.fenceTTL)
	if err != nil {
		return nil, err
	}
	info := &workflowpb.WorkflowExecutionInfo{
		Execution:        &commonpb.WorkflowExecution{WorkflowId: "wdc-task/t1", RunId: "earlier"},
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{api.SAFence.GetName(): p}},
		Memo:             &commonpb.Memo{Fields: map[string]*commonpb.Payload{api.MemoLeaseTTL: ttl}},
	}
	if f.fenceSelf {
		info.Execution.RunId = testRunID
	}
	if !f.fenceClosed.IsZero() && !(listed && f.fenceOpen) {
		info.CloseTime = timestamppb.New(f.fenceClosed)
	}
	return info, nil
}

// DescribeWorkflowExecution describes the earlier run (earlierRun) alone.
func (f *fakeRegistry) DescribeWorkflowExecution(_ context.Context, _, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	info, err := f.earlierRun(false)
	if err != nil {
		return nil, err
	}
	if info == nil || f.fenceGone || info.GetExecution().GetRunId() != runID {
		return nil, serviceerror.NewNotFound("no such run")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info}, nil
}

// GetWorkflowHistory is the caller's history: a reset from the earlier
// run when fenceUnlisted.
func (f *fakeRegistry) GetWorkflowHistory(context.Context, string, string, bool, enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	events := []*historypb.HistoryEvent{{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED}}
	if f.fenceUnlisted {
		events = append(events, &historypb.HistoryEvent{
			EventType: enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED,
			Attributes: &historypb.HistoryEvent_WorkflowTaskFailedEventAttributes{WorkflowTaskFailedEventAttributes: &historypb.WorkflowTaskFailedEventAttributes{
				Cause: enumspb.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW, BaseRunId: "earlier",
			}},
		})
	}
	return &historyOf{events: events}
}

// historyOf iterates over events.
type historyOf struct{ events []*historypb.HistoryEvent }

func (h *historyOf) HasNext() bool { return len(h.events) > 0 }
func (h *historyOf) Next() (*historypb.HistoryEvent, error) {
	ev := h.events[0]
	h.events = h.events[1:]
	return ev, nil
}

func (f *fakeRegistry) QueryWorkflow(_ context.Context, workflowID, _, _ string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	w := f.workers[api.WorkerIDFromWorkflowID(workflowID)]
	return jsonValue{api.WorkerView{Worker: *w, Registered: true, Free: w.Free()}}, nil
}

func (f *fakeRegistry) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := api.WorkerIDFromWorkflowID(o.WorkflowID)
	f.reserves = append(f.reserves, id)
	in := o.Args[0].(api.ReserveInput)
	w := f.workers[id]
	if f.mode[id] == reserveRejected {
		return nil, temporal.NewApplicationError("worker "+id+" is full", api.ErrTypeIneligible)
	}
	if err := w.Reserve(in.TaskID, in.Fence, in.Requirements, t0); err != nil {
		return nil, temporal.NewApplicationError(err.Error(), api.ErrTypeIneligible)
	}
	if f.mode[id] == reserveLost {
		return nil, errors.New("rpc error: code = Unavailable desc = connection reset")
	}
	return reserved{id: id, incarnation: w.Incarnation}, nil
}

func (f *fakeRegistry) SignalWorkflow(_ context.Context, workflowID, _, name string, arg any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name != api.SignalRelease {
		return fmt.Errorf("unexpected signal %s", name)
	}
	id := api.WorkerIDFromWorkflowID(workflowID)
	sig := arg.(api.ReleaseSignal)
	f.releases = append(f.releases, fmt.Sprintf("%s %s/%d", id, sig.TaskID, sig.Fence))
	f.workers[id].Release(sig.TaskID, sig.Fence)
	return nil
}

// holds lists "<task>/<fence>" reservations a worker holds.
func (f *fakeRegistry) holds(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []string{}
	for _, r := range f.workers[id].Reservations {
		out = append(out, fmt.Sprintf("%s/%d", r.TaskID, r.Fence))
	}
	sort.Strings(out)
	return out
}

type jsonValue struct{ v any }

func (j jsonValue) HasValue() bool { return true }
func (j jsonValue) Get(ptr any) error {
	b, err := json.Marshal(j.v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, ptr)
}

type reserved struct {
	id          string
	incarnation int64
}

func (r reserved) WorkflowID() string { return api.WorkerWorkflowID(r.id) }
func (r reserved) RunID() string      { return "" }
func (r reserved) UpdateID() string   { return "" }
func (r reserved) Get(_ context.Context, ptr any) error {
	*ptr.(*api.ReserveResult) = api.ReserveResult{WorkerID: r.id, Incarnation: r.incarnation}
	return nil
}

// idleWorker is an ACTIVE worker with 4 slots that heartbeated at t0,
// holding the given "other" reservations.
func idleWorker(id string, held int) fleet.Worker {
	var w fleet.Worker
	w.Register(fleet.Registration{WorkerID: id, Capacity: resource.List{CPUMillis: 4000, MemoryBytes: 1 << 30}}, t0)
	for i := range held {
		if err := w.Reserve(fmt.Sprint("other-", i), 1, fleet.Requirements{}, t0); err != nil {
			panic(err)
		}
	}
	return w
}

// selectEnv runs SelectWorker against reg with the clock at now.
func selectEnv(reg *fakeRegistry, now time.Time) *testsuite.TestActivityEnvironment {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(&Control{Client: reg, Now: func() time.Time { return now }})
	return env
}

func runSelect(t *testing.T, env *testsuite.TestActivityEnvironment, in api.SelectWorkerInput) api.SelectWorkerResult {
	t.Helper()
	val, err := env.ExecuteActivity("SelectWorker", in)
	require.NoError(t, err)
	var res api.SelectWorkerResult
	require.NoError(t, val.Get(&res))
	return res
}

// A reserve whose answer is lost did reserve: it is released before the
// next worker is tried, and only the granted reservation remains.
func TestSelectWorkerReleasesAReserveWhoseAnswerWasLost(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0), idleWorker("b", 1), idleWorker("c", 2))
	reg.mode["a"] = reserveLost
	env := selectEnv(reg, t0)
	var heartbeats [][]string
	var hbMu sync.Mutex
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var p selectProgress
		if details.Get(&p) == nil {
			hbMu.Lock()
			heartbeats = append(heartbeats, p.Tried)
			hbMu.Unlock()
		}
	})

	res := runSelect(t, env, api.SelectWorkerInput{TaskID: "t1", Fence: 3})
	assert.Equal(t, "b", res.WorkerID)
	assert.Equal(t, []string{"a", "b"}, reg.reserves, "least loaded first")
	assert.Equal(t, []string{"a t1/3"}, reg.releases)
	assert.Equal(t, []string{}, reg.holds("a"), "the lost reservation was released")
	assert.Equal(t, []string{"other-0/1", "t1/3"}, reg.holds("b"))
	require.NotEmpty(t, heartbeats)
	assert.Equal(t, []string{"a"}, heartbeats[0], "a worker is recorded before its reserve is sent")
}

// A clean rejection reserved nothing: no release is sent.
func TestSelectWorkerSendsNoReleaseAfterACleanRejection(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0), idleWorker("b", 1))
	reg.mode["a"] = reserveRejected
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 1})
	assert.Equal(t, "b", res.WorkerID)
	assert.Equal(t, []string{"a", "b"}, reg.reserves)
	assert.Empty(t, reg.releases)
}

// When every reserve's answer is lost, each is released and the task is
// told it waits.
func TestSelectWorkerReleasesEveryLostReserveWhenNoneSucceeds(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0), idleWorker("b", 1))
	reg.mode["a"], reg.mode["b"] = reserveLost, reserveLost
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 2})
	assert.Empty(t, res.WorkerID)
	assert.NotEmpty(t, res.Waiting)
	assert.Equal(t, []string{"a t1/2", "b t1/2"}, reg.releases)
	assert.Equal(t, []string{}, reg.holds("a"))
	assert.Equal(t, []string{"other-0/1"}, reg.holds("b"))
}

// A retry of the activity (heartbeat details from the earlier attempt)
// releases (task, fence) on every worker the earlier attempt tried, except
// the one it reserves on now.
func TestSelectWorkerRetryReleasesWhatEarlierAttemptsTried(t *testing.T) {
	// The earlier attempt reserved on a and c, and its answers were lost.
	a, c := idleWorker("a", 0), idleWorker("c", 0)
	require.NoError(t, a.Reserve("t1", 5, fleet.Requirements{}, t0))
	require.NoError(t, c.Reserve("t1", 5, fleet.Requirements{}, t0))
	c.Reservations = append(c.Reservations, fleet.Reservation{TaskID: "busy", Fence: 1})
	reg := newFakeRegistry(a, idleWorker("b", 2), c)
	env := selectEnv(reg, t0)
	env.SetHeartbeatDetails(selectProgress{TaskID: "t1", Fence: 5, Tried: []string{"a", "c"}})

	res := runSelect(t, env, api.SelectWorkerInput{TaskID: "t1", Fence: 5})
	assert.Equal(t, "a", res.WorkerID, "a holds the least (its reservation is idempotent)")
	assert.Equal(t, []string{"c t1/5"}, reg.releases, "the worker reserved on now is not released")
	assert.Equal(t, []string{"t1/5"}, reg.holds("a"))
	assert.Equal(t, []string{"busy/1"}, reg.holds("c"))
}

// Heartbeat details of another task or fence are not this selection's.
func TestSelectWorkerIgnoresDetailsOfAnotherFence(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0))
	env := selectEnv(reg, t0)
	env.SetHeartbeatDetails(selectProgress{TaskID: "t1", Fence: 4, Tried: []string{"a", "b"}})
	res := runSelect(t, env, api.SelectWorkerInput{TaskID: "t1", Fence: 5})
	assert.Equal(t, "a", res.WorkerID)
	assert.Empty(t, reg.releases)
}

// The activity ranks with fleet.Place: every worker that lost a lease of
// the task (AvoidWorkers) last, late heartbeats
// after fresh ones at the wall clock it is given.
func TestSelectWorkerPlacement(t *testing.T) {
	late := func(w fleet.Worker) fleet.Worker {
		w.LastHeartbeatAt = t0.Add(-10 * time.Second)
		return w
	}
	tests := []struct {
		name    string
		workers []fleet.Worker
		in      api.SelectWorkerInput
		want    string
	}{
		{"every worker that lost a lease is avoided",
			[]fleet.Worker{idleWorker("a", 0), idleWorker("b", 0), idleWorker("c", 3)},
			api.SelectWorkerInput{AvoidWorkers: []string{"a", "b"}}, "c"},
		{"among avoided workers, the oldest loss first",
			[]fleet.Worker{idleWorker("a", 0), idleWorker("b", 0)},
			api.SelectWorkerInput{AvoidWorkers: []string{"b", "a"}}, "b"},
		{"a late heartbeat is ranked after a busier fresh worker",
			[]fleet.Worker{late(idleWorker("a", 0)), idleWorker("b", 3)},
			api.SelectWorkerInput{}, "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := newFakeRegistry(tc.workers...)
			tc.in.TaskID, tc.in.Fence = "t1", 1
			res := runSelect(t, selectEnv(reg, t0), tc.in)
			assert.Equal(t, tc.want, res.WorkerID)
			assert.Equal(t, []string{tc.want}, reg.reserves, "the first ranked worker is reserved")
		})
	}
}

// A waiting task's reason names the worker that would fit but is not
// ACTIVE (here DRAINING) as such, before workers the task does not select.
func TestSelectWorkerWaitingNamesDrainingWorkers(t *testing.T) {
	drained := idleWorker("drained", 0)
	drained.Labels = map[string]string{"zone": "a"}
	drained.Drain("kernel upgrade", t0)
	other := idleWorker("other", 0)
	other.Labels = map[string]string{"zone": "b"}
	reg := newFakeRegistry(drained, other)
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 1, Requirements: fleet.Requirements{Selector: map[string]string{"zone": "a"}}})
	assert.Empty(t, res.WorkerID)
	assert.Contains(t, res.Waiting, "drained: not_active (state is DRAINING)")
	assert.Less(t, strings.Index(res.Waiting, "drained"), strings.Index(res.Waiting, "other"), "the near miss first: %s", res.Waiting)
	assert.Empty(t, reg.reserves)
}

// A selection's calls do not grow with the fleet: with 10 or 500 workers
// (profiles published), one list, at most DefaultProbes queries and one
// reserve when the first asked worker takes it; a second selection right
// after shares the list.
func TestSelectWorkerCostDoesNotGrowWithTheFleet(t *testing.T) {
	for _, size := range []int{10, 500} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			var workers []fleet.Worker
			for i := range size {
				workers = append(workers, idleWorker(fmt.Sprintf("w%03d", i), i%3))
			}
			reg := newFakeRegistry(workers...)
			reg.profiles = true
			env := selectEnv(reg, t0)
			res := runSelect(t, env, api.SelectWorkerInput{TaskID: "t1", Fence: 1})
			require.NotEmpty(t, res.WorkerID)
			assert.Equal(t, 1, reg.lists)
			assert.Equal(t, fleet.DefaultProbes, reg.queries)
			assert.Len(t, reg.reserves, 1)

			res = runSelect(t, env, api.SelectWorkerInput{TaskID: "t2", Fence: 1})
			require.NotEmpty(t, res.WorkerID)
			assert.Equal(t, 1, reg.lists, "the second selection shares the list")
			// It asks the workers it draws, less those the first asked
			// a moment ago that its record says can take the task.
			assert.LessOrEqual(t, reg.queries, 2*fleet.DefaultProbes)
			assert.Greater(t, reg.queries, fleet.DefaultProbes-1)
		})
	}
}

// When every asked worker is full, a second round asks other workers; the
// selection stops after MaxSelectionRounds and says how many could fit
// but were not asked. The bound holds however many workers are full.
func TestSelectWorkerAsksAtMostTwoRoundsOfWorkers(t *testing.T) {
	var workers []fleet.Worker
	for i := range 50 {
		workers = append(workers, idleWorker(fmt.Sprintf("w%02d", i), 4)) // 4 slots each: full
	}
	reg := newFakeRegistry(workers...)
	reg.profiles = true
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 1})
	assert.Empty(t, res.WorkerID)
	assert.Equal(t, MaxSelectionRounds*fleet.DefaultProbes, reg.queries)
	assert.LessOrEqual(t, reg.lists, 2)
	assert.Empty(t, reg.reserves, "no asked worker had room")
	assert.Contains(t, res.Waiting, "none of 50 ACTIVE workers can take the task")
	assert.Contains(t, res.Waiting, fmt.Sprintf("%d more that could fit were not asked this time", 50-MaxSelectionRounds*fleet.DefaultProbes))
	assert.LessOrEqual(t, len(res.PassedOver), maxPassedOver)

	// A second selection sharing the first one's list (the same control
	// plane, within FleetViewMaxAge) keeps the same bound.
	env := selectEnv(reg, t0)
	runSelect(t, env, api.SelectWorkerInput{TaskID: "t2", Fence: 1})
	reg.queries = 0
	res = runSelect(t, env, api.SelectWorkerInput{TaskID: "t3", Fence: 1})
	assert.Empty(t, res.WorkerID)
	assert.LessOrEqual(t, reg.queries, MaxSelectionRounds*fleet.DefaultProbes, "a shared list adds no round")

	// The one worker with room is found across selections (the draw
	// differs each time), not never.
	reg.workers["w37"].Release("other-0", 1)
	found := false
	for i := 0; i < 60 && !found; i++ {
		res = runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 1})
		found = res.WorkerID == "w37"
	}
	assert.True(t, found, "the free worker was never asked")
}

// A task that lost a lease on the only worker with room still gets it
// when every other worker is full: the avoided worker keeps one draw.
func TestSelectWorkerFallsBackToAnAvoidedWorkerWithRoom(t *testing.T) {
	var workers []fleet.Worker
	for i := range 10 {
		workers = append(workers, idleWorker(fmt.Sprintf("w%02d", i), 4)) // full
	}
	workers = append(workers, idleWorker("lost", 0))
	reg := newFakeRegistry(workers...)
	reg.profiles = true
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 2, AvoidWorkers: []string{"lost"}})
	assert.Equal(t, "lost", res.WorkerID, "waiting: %s", res.Waiting)
}

// A control plane that asked a worker for its record a moment ago
// (within LoadCacheMaxAge) selects it again without asking, counting the
// reservations it made and the releases it sent since; a record that says
// the worker is full is not trusted (the worker is asked), and a record
// the worker's reserve contradicts is dropped.
func TestSelectWorkerReusesTheRecordItAskedForMomentsAgo(t *testing.T) {
	reg := newFakeRegistry(idleWorker("w", 0)) // 4 slots
	reg.profiles = true
	ctl := &Control{Client: reg, Now: func() time.Time { return t0 }}
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(ctl)
	for i := 1; i <= 4; i++ {
		res := runSelect(t, env, api.SelectWorkerInput{TaskID: fmt.Sprint("t", i), Fence: 1})
		require.Equal(t, "w", res.WorkerID)
	}
	assert.Equal(t, 1, reg.queries, "asked once; three selections used its record and their own reservations")
	assert.Len(t, reg.reserves, 4)

	// Full by the record: asked again, and it is full.
	res := runSelect(t, env, api.SelectWorkerInput{TaskID: "t5", Fence: 1})
	assert.Empty(t, res.WorkerID)
	assert.Equal(t, 2, reg.queries, "a record that says no is not trusted")
	assert.Len(t, reg.reserves, 4, "no reserve sent to a full worker")

	// Freed elsewhere (another control plane, the task's own release):
	// the record says full, so the worker is asked, and takes the task.
	reg.mu.Lock()
	reg.workers["w"].Release("t1", 1)
	reg.mu.Unlock()
	res = runSelect(t, env, api.SelectWorkerInput{TaskID: "t6", Fence: 1})
	assert.Equal(t, "w", res.WorkerID)
	assert.Equal(t, 3, reg.queries)

	// A release this control plane sends frees the slot in its record:
	// the next selection takes it without asking.
	ctl.release(context.Background(), "w", api.SelectWorkerInput{TaskID: "t2", Fence: 1})
	res = runSelect(t, env, api.SelectWorkerInput{TaskID: "t7", Fence: 1})
	assert.Equal(t, "w", res.WorkerID)
	assert.Equal(t, 3, reg.queries)

	// The worker refuses what the record allows: the record is dropped,
	// and the next selection asks.
	ctl.release(context.Background(), "w", api.SelectWorkerInput{TaskID: "t3", Fence: 1})
	reg.mode["w"] = reserveRejected
	res = runSelect(t, env, api.SelectWorkerInput{TaskID: "t8", Fence: 1})
	assert.Empty(t, res.WorkerID)
	assert.Equal(t, 3, reg.queries, "the record said yes")
	_, cached := ctl.loads.fits("w", "t1", fleet.Requirements{}, time.Now())
	assert.False(t, cached, "dropped on the refusal")
	delete(reg.mode, "w")
	res = runSelect(t, env, api.SelectWorkerInput{TaskID: "t9", Fence: 1})
	assert.Equal(t, "w", res.WorkerID)
	assert.Equal(t, 4, reg.queries)
}

// A record stands in for asking only while it is younger than
// LoadCacheMaxAge.
func TestLoadCacheRecordsAgeOut(t *testing.T) {
	var c loadCache
	asked := time.Now()
	c.asked(idleWorker("w", 1), asked)
	_, ok := c.fits("w", "t1", fleet.Requirements{}, asked.Add(LoadCacheMaxAge-time.Millisecond))
	assert.True(t, ok)
	_, ok = c.fits("w", "t1", fleet.Requirements{}, asked.Add(LoadCacheMaxAge))
	assert.False(t, ok)
	c.reserved("w", "t", 1, fleet.Requirements{}, t0)
	w, ok := c.fits("w", "t1", fleet.Requirements{}, asked)
	require.True(t, ok)
	assert.Len(t, w.Reservations, 2, "the reservation made since is counted")
	c.released("w", "t", 1)
	w, _ = c.fits("w", "t1", fleet.Requirements{}, asked)
	assert.Len(t, w.Reservations, 1)
}

// A reservation the task itself holds (leaked by a control plane that died
// between the reserve and the grant) does not count against it: the
// selection of the same task sends the reserve, which keeps it (same
// fence) or replaces it (a newer one), instead of waiting for ever on a
// full 1-slot worker.
func TestSelectWorkerDoesNotCountTheTasksOwnReservation(t *testing.T) {
	for _, fence := range []int64{1, 2} {
		var w fleet.Worker
		w.Register(fleet.Registration{WorkerID: "a", Capacity: resource.List{CPUMillis: 1000, Slots: 1}}, t0)
		require.NoError(t, w.Reserve("t1", 1, fleet.Requirements{}, t0))
		reg := newFakeRegistry(w)
		res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: fence})
		assert.Equal(t, "a", res.WorkerID, "fence %d: %s", fence, res.Waiting)
		assert.Equal(t, []string{"a"}, reg.reserves)
		require.Len(t, reg.workers["a"].Reservations, 1)
		assert.Equal(t, fence, reg.workers["a"].Reservations[0].Fence)
	}
}

// A fence that an earlier run of the task's workflow granted (the run an
// operator reset away) is never reserved or granted again: the selection
// reserves under the next fence above it and says so.
func TestSelectWorkerSkipsFencesAnEarlierRunGranted(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0))
	reg.fenceFloor = 3
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 1})
	assert.Equal(t, "a", res.WorkerID)
	assert.Equal(t, int64(4), res.Fence)
	require.Len(t, reg.workers["a"].Reservations, 1)
	assert.Equal(t, int64(4), reg.workers["a"].Reservations[0].Fence)

	reg = newFakeRegistry(idleWorker("a", 0))
	res = runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 2})
	assert.Equal(t, int64(2), res.Fence, "no earlier run: the task's own next fence")
}

// After an earlier run that granted a fence closed (terminated or reset
// away by an operator), nothing is reserved until the longer of its lease
// TTL and the task's has passed since it closed: its command may run
// until then.
func TestSelectWorkerWaitsOutTheLockDelayOfAClosedEarlierRun(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0))
	reg.fenceFloor, reg.fenceClosed, reg.fenceTTL = 3, t0.Add(-2*time.Second), 10*time.Second
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 1, LeaseTTL: 5 * time.Second})
	assert.Empty(t, res.WorkerID)
	assert.Empty(t, reg.reserves, "nothing reserved during the lock-delay")
	assert.Equal(t, t0.Add(8*time.Second), res.LockDelayUntil, "the earlier run's TTL, the longer")
	assert.Equal(t, 8*time.Second, res.RetryAfter)
	assert.Contains(t, res.Waiting, "fence 3 of an earlier run")

	res = runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 1, LeaseTTL: 20 * time.Second})
	assert.Equal(t, t0.Add(18*time.Second), res.LockDelayUntil, "the task's TTL, the longer")

	res = runSelect(t, selectEnv(reg, t0.Add(8*time.Second)), api.SelectWorkerInput{TaskID: "t1", Fence: 1, LeaseTTL: 5 * time.Second})
	assert.Equal(t, "a", res.WorkerID, "the lock-delay is over: %s", res.Waiting)
	assert.Equal(t, int64(4), res.Fence)
	assert.Zero(t, res.LockDelayUntil)
}

// An earlier run that visibility lists as running is read from its
// description: visibility indexes a grant's fence, and the run's close,
// after the fact. The lock-delay runs from the close the description
// gives.
func TestSelectWorkerReadsAnEarlierRunThatVisibilityTrails(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0))
	reg.fenceFloor, reg.fenceClosed, reg.fenceTTL = 2, t0.Add(-time.Second), 6*time.Second
	reg.fenceOpen, reg.fenceListed = true, 1
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 2, LeaseTTL: 5 * time.Second})
	assert.Empty(t, res.WorkerID)
	assert.Empty(t, reg.reserves, "nothing reserved during the lock-delay")
	assert.Equal(t, int64(3), res.Fence, "above the fence visibility had not indexed yet")
	assert.Equal(t, t0.Add(5*time.Second), res.LockDelayUntil, "from its close, with its TTL")
	assert.Contains(t, res.Waiting, "fence 2 of an earlier run")
}

// A run started by a reset also judges the runs its history says the
// reset replaced, which visibility may not list yet.
func TestSelectWorkerOfAResetRunReadsTheRunItReplaced(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0))
	reg.fenceFloor, reg.fenceClosed, reg.fenceTTL = 2, t0.Add(-time.Second), 6*time.Second
	reg.fenceUnlisted = true
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 2, LeaseTTL: 5 * time.Second, Reset: true})
	assert.Empty(t, res.WorkerID)
	assert.Empty(t, reg.reserves, "nothing reserved during the lock-delay")
	assert.Equal(t, int64(3), res.Fence, "above the fence the replaced run granted")
	assert.Equal(t, t0.Add(5*time.Second), res.LockDelayUntil)
}

// A run that visibility still lists as running, other than the caller's,
// and that cannot be described (deleted) is closing now: the lock-delay
// runs from now, not from a close time nobody knows.
func TestSelectWorkerCountsAnEarlierRunStillListedAsClosingNow(t *testing.T) {
	reg := newFakeRegistry(idleWorker("a", 0))
	reg.fenceFloor, reg.fenceTTL, reg.fenceOpen, reg.fenceGone = 2, 6*time.Second, true, true
	res := runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 2, LeaseTTL: 5 * time.Second})
	assert.Empty(t, res.WorkerID)
	assert.Empty(t, reg.reserves, "nothing reserved during the lock-delay")
	assert.Equal(t, int64(3), res.Fence)
	assert.Equal(t, t0.Add(6*time.Second), res.LockDelayUntil, "from now, with the earlier run's TTL")
	assert.Contains(t, res.Waiting, "fence 2 of an earlier run of the task (closing now)")

	// The caller's own run is not an earlier one.
	reg = newFakeRegistry(idleWorker("a", 0))
	reg.fenceFloor, reg.fenceTTL, reg.fenceOpen, reg.fenceSelf = 2, 6*time.Second, true, true
	res = runSelect(t, selectEnv(reg, t0), api.SelectWorkerInput{TaskID: "t1", Fence: 2, LeaseTTL: 5 * time.Second})
	assert.Equal(t, "a", res.WorkerID, "its own published fence delays nothing: %s", res.Waiting)
	assert.Equal(t, int64(2), res.Fence)
}
