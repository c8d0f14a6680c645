package testsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/worker"
)

// suggestContinueAsNewAt is the history length at which Temporal
// suggests continue-as-new on the suite's default namespace: the server's
// default of limit.historyCount.suggestContinueAsNew (4 × 1024 events).
const suggestContinueAsNewAt = 4 * 1024

// Many trivial tasks in one run (scaleTasks: 2,000 in `make test`, 10,000
// in `make scale`), as a user would run them: one `wdc tasks submit
// --batch` of the whole file while a consumer commits the results as
// they arrive. The run's pending state stays under its bound (the
// submission waits for room when it is full), the run continues as new
// with its state compacted, and every task completes with its result
// committed exactly once.
func TestManyTasksInOneRun(t *testing.T) {
	n := scaleTasks(t)
	many := func(o *worker.AgentOptions) { o.Registration.Capacity.Slots = 100 }
	startAgent(t, "scale-a", many)
	startAgent(t, "scale-b", many)
	label := testLabel(t)
	const runID = "run-scale"
	var file strings.Builder
	for i := range n {
		fmt.Fprintf(&file, `{"task_id":"scale-%05d","run_id":%q,"world_id":"suite","command":["/bin/true"],"selector":{"suite-test":%q}}`+"\n", i, runID, label)
	}
	path := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(file.String()), 0o644))

	// The consumer: commits every uncommitted worker_result event it sees,
	// and records the largest pending state and task listing it saw.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var (
		mu                        sync.Mutex
		committed                 = map[int64]bool{}
		maxPending, maxListed     int64
		commitErrs, commitsIssued int
	)
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		for ctx.Err() == nil {
			v, err := suite.wdc.Run(ctx, runID)
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			var seqs []int64
			for _, e := range v.Events {
				if e.Result != nil && !e.Committed {
					seqs = append(seqs, e.Seq)
				}
			}
			mu.Lock()
			maxPending = max(maxPending, v.PendingBytes)
			maxListed = max(maxListed, int64(len(v.Tasks)))
			mu.Unlock()
			if len(seqs) == 0 {
				time.Sleep(time.Second)
				continue
			}
			_, err = suite.wdc.Commit(ctx, runID, api.CommitInput{ExpectedParentTime: v.ParentTime, EventSeqs: seqs, Note: "scale consumer"})
			mu.Lock()
			if err != nil {
				commitErrs++
			} else {
				commitsIssued++
				for _, s := range seqs {
					assert.False(t, committed[s], "event %d committed twice", s)
					committed[s] = true
				}
			}
			mu.Unlock()
			time.Sleep(2 * time.Second)
		}
	}()

	began := time.Now()
	code, stdout, stderr := cli(t, "tasks", "submit", "--batch", path, "-o", "json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Submitted int `json:"submitted"`
		Failed    int `json:"failed"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Equal(t, n, rep.Submitted)
	require.Zero(t, rep.Failed)
	if strings.Contains(stderr, "wait for room in run "+runID) {
		t.Log("the submission waited for room in the run")
	}
	t.Logf("%d tasks submitted in %s", n, time.Since(began).Round(time.Second))

	var last api.RunView
	waitFor(t, 25*time.Minute, "every task completed and its result committed", func() bool {
		v, err := suite.wdc.Run(context.Background(), runID)
		if err != nil {
			return false
		}
		last = v
		return v.TaskCounts.Completed == int64(n) && v.Evidence == int64(n)
	})
	stop()
	<-consumerDone
	elapsed := time.Since(began)
	t.Logf("%d tasks completed and committed in %s (%.1f tasks/s); %d commits, %d refused (stale parent_time), %d continue-as-new; largest pending state %d B, largest listing %d tasks",
		n, elapsed.Round(time.Second), float64(n)/elapsed.Seconds(), commitsIssued, commitErrs, last.ContinuedAsNew, maxPending, maxListed)

	assert.Equal(t, int64(n), last.TaskCounts.Total)
	assert.Equal(t, int64(n), last.WorkerResultEvents, "one accepted result per task")
	assert.Len(t, committed, n, "every result committed once")
	assert.LessOrEqual(t, maxPending, int64(api.MaxRunPendingBytes))
	assert.Positive(t, last.ContinuedAsNew, "the run continued as new")
	// The listing keeps the last RunListedEndedTasks ended tasks across a
	// continue-as-new, plus those that ended since: the current run
	// started with at most that many ended tasks listed, some ended tasks
	// are no longer listed, and every task is either listed or counted.
	carried := carriedRunState(t, runID)
	carriedEnded := 0
	for _, task := range carried.Tasks {
		if task.State.Terminal() {
			carriedEnded++
		}
	}
	t.Logf("the current run started with %d tasks listed, %d of them ended; %d listed now", len(carried.Tasks), carriedEnded, len(last.Tasks))
	assert.LessOrEqual(t, carriedEnded, api.RunListedEndedTasks, "continue-as-new carries at most RunListedEndedTasks ended tasks")
	// A continue-as-new drops ended tasks from the listing only when more
	// than RunListedEndedTasks had ended by then; on a slow machine the
	// last one may come before that, and every task stays listed until
	// the next.
	if carried.EndedNotListed > 0 {
		assert.Less(t, len(last.Tasks), n, "a bounded listing, not every task")
	} else {
		t.Logf("the last continue-as-new came before %d tasks had ended: nothing dropped from the listing yet", api.RunListedEndedTasks)
	}
	if n >= 4*api.RunListedEndedTasks {
		assert.Less(t, len(last.Tasks), n/4, "a listing that does not grow with the run")
	}
	assert.Equal(t, int64(n-len(last.Tasks)), last.EndedNotListed)
	assert.Zero(t, last.PendingBytes, "nothing open, nothing uncommitted")

	// Its current history is one continue-as-new generation's: shorter
	// than twice the length at which Temporal suggests continue-as-new,
	// however many tasks the run has had (three child events each would
	// take 3n).
	desc, err := suite.client.DescribeWorkflowExecution(context.Background(), api.RunWorkflowID(runID), "")
	require.NoError(t, err)
	t.Logf("the run's current history: %d events", desc.WorkflowExecutionInfo.HistoryLength)
	assert.Less(t, desc.WorkflowExecutionInfo.HistoryLength, int64(2*suggestContinueAsNewAt))
	assert.Less(t, desc.WorkflowExecutionInfo.HistoryLength, int64(3*n))

	// `runs status` pages: counts of all, a bounded listing.
	code, stdout, stderr = cli(t, "runs", "status", runID, "--limit", "5")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, fmt.Sprintf("tasks        %d: 0 open, %d completed", n, n))
	if last.EndedNotListed > 0 {
		assert.Contains(t, stdout, fmt.Sprintf("%d ended tasks are not listed here", last.EndedNotListed))
	} else {
		assert.NotContains(t, stdout, "ended tasks are not listed here", "every task is listed")
	}
	assert.Contains(t, stdout, fmt.Sprintf("... %d more (--limit 0 for all)", len(last.Tasks)-5))

	code, _, stderr = cli(t, "runs", "close", runID)
	require.Equal(t, 0, code, stderr)
}

// carriedRunState is the state the current run of runID started with:
// the Carry of its continue-as-new input (zero before the first).
func carriedRunState(t *testing.T, runID string) api.RunState {
	t.Helper()
	iter := suite.client.GetWorkflowHistory(context.Background(), api.RunWorkflowID(runID), "", false, 0)
	require.True(t, iter.HasNext())
	ev, err := iter.Next()
	require.NoError(t, err)
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	require.NotNil(t, attrs, "the first event starts the run")
	var in api.RunInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(attrs.GetInput(), &in))
	if in.Carry == nil {
		return api.RunState{}
	}
	return *in.Carry
}
