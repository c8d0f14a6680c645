package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
)

// payloadLimit is Temporal's default payload size limit (limit.blobSize.error).
const payloadLimit = 2 << 20

// worstResult is the largest worker_result reference a task named id can
// become: worker ID at its limit, output error at its cap.
func worstResult(t *testing.T, id string) *api.ResultRef {
	ref, err := api.ResultRefOf(api.TaskResult{TaskID: id, WorkerID: strings.Repeat("w", 63), Attempt: api.MaxAttemptsLimit, Fence: api.MaxAttemptsLimit,
		EnvelopeDigest: "sha256:" + strings.Repeat("b", 64), ExitCode: 255, OutputError: strings.Repeat("e", 4096), Artifacts: make([]api.Artifact, 10)})
	require.NoError(t, err)
	return &ref
}

// The largest state a run can carry: its pending state at
// api.MaxRunPendingBytes (open tasks whose results all became
// uncommitted worker_results, IDs at their 63-character limit), plus the
// ended tasks, committed events and commits it keeps listed, all at their
// largest. It stays under Temporal's payload limit however many tasks the
// run had before.
func TestRunCarryAtItsBoundsStaysUnderThePayloadLimit(t *testing.T) {
	long := strings.Repeat("x", 63)
	st := api.RunState{RunID: long, WorldID: long, Status: api.RunRunning, TCDDigest: "sha256:" + strings.Repeat("a", 64),
		EndedNotListed: 1 << 40, EventsNotListed: 1 << 40}
	id := func(i int) string { return fmt.Sprintf("%s-%012d", long[:50], i) }
	n := 0
	for pending := int64(0); pending+api.PendingTaskBytes(id(n)) <= api.MaxRunPendingBytes; n++ {
		pending += api.PendingTaskBytes(id(n))
		st.Tasks = append(st.Tasks, api.RunTask{TaskID: id(n), EnvelopeDigest: "sha256:" + strings.Repeat("b", 64), State: api.TaskCompleted, Attempts: api.MaxAttemptsLimit})
		st.Events = append(st.Events, api.Event{Seq: int64(n + 1), Type: api.EventWorkerResult, Time: time.Now(), Result: worstResult(t, id(n))})
	}
	for i := range api.RunListedEndedTasks {
		st.Tasks = append(st.Tasks, api.RunTask{TaskID: id(n + i), EnvelopeDigest: "sha256:" + strings.Repeat("b", 64), State: api.TaskAborted, Attempts: api.MaxAttemptsLimit, EndDetail: "workflow TERMINATED"})
	}
	for i := range api.RunListedCommittedEvents {
		st.Events = append(st.Events, api.Event{Seq: int64(n + i + 1), Type: api.EventWorkerResult, Time: time.Now(), Result: worstResult(t, id(i)), Committed: true})
	}
	seqs := make([]int64, 1000)
	for i := range api.RunListedCommits {
		st.Events = append(st.Events, api.Event{Seq: 1 << 40, Type: api.EventCommit, Time: time.Now(), Commit: &api.CommitRecord{EventSeqs: seqs, ParentTime: 1 << 40, Evidence: 1 << 40, TCDDigest: st.TCDDigest, Note: strings.Repeat("n", api.MaxNoteBytes)}})
		_ = i
	}
	b, err := json.Marshal(api.RunInput{RunID: long, WorldID: long, Carry: &st})
	require.NoError(t, err)
	require.Less(t, len(b), maxCarryBytes, "a run carrying %d pending results is %d bytes", n, len(b))
	require.Less(t, maxCarryBytes, payloadLimit)
	t.Logf("largest carry: %d pending results at their largest, %d bytes", n, len(b))
	// With short IDs and ordinary results the budget holds a few thousand.
	assert.Greater(t, api.MaxRunPendingBytes/api.PendingTaskBytes("sweep-000001"), int64(1600))
}

// A run that continues as new carries every open task and uncommitted
// result, the most recent ended tasks and committed events, and counts the
// rest; numbering, counts and pending bytes carry on.
func TestRunContinuesAsNewWithItsStateCompacted(t *testing.T) {
	tcd, _ := InitialTCD("r1", "w1")
	carry := api.RunState{RunID: "r1", WorldID: "w1", Status: api.RunRunning, TCDDigest: tcd, Tasks: []api.RunTask{}, Events: []api.Event{}}
	const ended, open = api.RunListedEndedTasks + 500, 30
	for i := range ended + open {
		id := fmt.Sprintf("t%05d", i)
		task := api.RunTask{TaskID: id, EnvelopeDigest: "sha256:" + strings.Repeat("b", 64), State: api.TaskLeased}
		if i < ended {
			task.State, task.Attempts = api.TaskCompleted, 1
			carry.Events = append(carry.Events, api.Event{Seq: int64(len(carry.Events) + 1), Type: api.EventWorkerResult, Result: &api.ResultRef{TaskID: id}, Committed: i < ended-40})
		}
		carry.Tasks = append(carry.Tasks, task)
	}
	for i := range api.RunListedCommits + 5 {
		carry.Events = append(carry.Events, api.Event{Seq: int64(len(carry.Events) + 1), Type: api.EventCommit, Commit: &api.CommitRecord{ParentTime: int64(i + 1)}})
	}
	carry.TaskCounts = api.RunTaskCounts{Total: ended + open, Open: open, Completed: ended}
	carry.LastSeq = int64(len(carry.Events))
	h := newRunHarness(t)
	var before api.RunView
	h.query(time.Second, &before)
	h.env.RegisterDelayedCallback(func() {
		h.env.SetContinueAsNewSuggested(true)
		h.env.SignalWorkflow(api.SignalTaskEnded, api.TaskEndedSignal{})
	}, 2*time.Second)
	h.env.SetContinuedExecutionRunID("the-previous-run") // a carry comes only from continue-as-new
	h.env.ExecuteWorkflow(api.RunWorkflowType, api.RunInput{RunID: "r1", WorldID: "w1", Carry: &carry})
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(h.env.GetWorkflowError(), &can), "got %v", h.env.GetWorkflowError())
	var next api.RunInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	st := next.Carry

	require.Equal(t, api.RunTaskCounts{Total: ended + open, Open: open, Completed: ended}, before.TaskCounts, "counts derived from the listed tasks")
	assert.Equal(t, before.TaskCounts, st.TaskCounts, "counts carried")
	require.Len(t, st.Tasks, api.RunListedEndedTasks+open, "every open task and the last ended ones listed")
	assert.Equal(t, int64(500), st.EndedNotListed)
	assert.Equal(t, fmt.Sprintf("t%05d", 500), st.Tasks[0].TaskID, "the oldest ended tasks leave first")
	for _, task := range st.Tasks[len(st.Tasks)-open:] {
		assert.Equal(t, api.TaskLeased, task.State)
	}
	uncommitted, committed, commits := 0, 0, 0
	for _, e := range st.Events {
		switch {
		case e.Type == api.EventCommit:
			commits++
		case e.Committed:
			committed++
		default:
			uncommitted++
		}
	}
	assert.Equal(t, 40, uncommitted, "every uncommitted result carried")
	assert.Equal(t, api.RunListedCommittedEvents, committed)
	assert.Equal(t, api.RunListedCommits, commits)
	assert.Equal(t, int64(ended-40-api.RunListedCommittedEvents+5), st.EventsNotListed)
	assert.Equal(t, int64(ended+api.RunListedCommits+5), st.LastSeq, "numbering carries on")
	assert.Equal(t, before.PendingBytes, st.PendingBytes)
	assert.Equal(t, int64(1), st.ContinuedAsNew)
}

// A run whose pending state is full refuses more tasks, whole batches
// included, with run_full; re-adding a task already in the run needs no
// room, and a task ending without a result makes room again.
func TestRunRefusesTasksPastItsPendingBudgetUntilItHasRoom(t *testing.T) {
	tcd, _ := InitialTCD("r1", "w1")
	carry := api.RunState{RunID: "r1", WorldID: "w1", Status: api.RunRunning, TCDDigest: tcd, Events: []api.Event{}}
	fits := int(api.MaxRunPendingBytes / api.PendingTaskBytes("t00000"))
	for i := range fits {
		carry.Tasks = append(carry.Tasks, api.RunTask{TaskID: fmt.Sprintf("t%05d", i), State: api.TaskLeased})
	}
	one := func(id string) api.AddTaskInput {
		e, d := runEnvelope(t, id)
		return api.AddTaskInput{Envelope: e, EnvelopeDigest: d}
	}
	readd := one("t00007")
	carry.Tasks[7].EnvelopeDigest = readd.EnvelopeDigest
	carry.TaskCounts = api.RunTaskCounts{Total: int64(fits), Open: int64(fits)}
	r, err := newRunWorkflow(api.RunInput{RunID: "r1", WorldID: "w1", Carry: &carry})
	require.NoError(t, err)
	require.Equal(t, api.RunTaskCounts{Total: int64(fits), Open: int64(fits)}, r.st.TaskCounts)
	require.LessOrEqual(t, r.st.PendingBytes, int64(api.MaxRunPendingBytes))

	err = r.validateAddTask(nil, one("extra"))
	requireAppErrType(t, err, api.ErrTypeRunFull)
	assert.Contains(t, err.Error(), fmt.Sprintf("%d open tasks and 0 uncommitted results", fits))
	requireAppErrType(t, r.validateAddTasks(nil, batchOf(t, "x1", "x2")), api.ErrTypeRunFull)
	require.NoError(t, r.validateAddTask(nil, readd), "re-adding a task already in the run needs no room")

	r.saDone = true // published already: no workflow context here
	r.onTaskEndedDetail(nil, api.TaskEndedSignal{TaskID: "t00003", RunID: "r1", State: api.TaskCancelled, Attempts: 1}, "")
	require.NoError(t, r.validateAddTask(nil, one("extra")), "room after a task ended")
	assert.Equal(t, api.RunTaskCounts{Total: int64(fits), Open: int64(fits) - 1, Cancelled: 1}, r.st.TaskCounts)
}
