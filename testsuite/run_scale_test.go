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

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/worker"
)

// tenThousand is the size of the run in TestTenThousandTasksInOneRun.
const tenThousand = 10000

// Ten thousand trivial tasks in one run, as a user would run them: one
// `wdc tasks submit --batch` of the whole file while a consumer commits
// the results as they arrive. The run's pending state stays under its
// bound (the submission waits for room when it is full), the run
// continues as new with its state compacted, and every task completes
// with its result committed exactly once.
func TestTenThousandTasksInOneRun(t *testing.T) {
	many := func(o *worker.AgentOptions) { o.Registration.Capacity.Slots = 100 }
	startAgent(t, "run10k-a", many)
	startAgent(t, "run10k-b", many)
	label := testLabel(t)
	const runID = "run-10k"
	var file strings.Builder
	for i := range tenThousand {
		fmt.Fprintf(&file, `{"task_id":"r10k-%05d","run_id":%q,"world_id":"suite","command":["/bin/true"],"selector":{"suite-test":%q}}`+"\n", i, runID, label)
	}
	path := filepath.Join(t.TempDir(), "10k.jsonl")
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
			_, err = suite.wdc.Commit(ctx, runID, api.CommitInput{ExpectedParentTime: v.ParentTime, EventSeqs: seqs, Note: "run10k consumer"})
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
	require.Equal(t, tenThousand, rep.Submitted)
	require.Zero(t, rep.Failed)
	if strings.Contains(stderr, "wait for room in run "+runID) {
		t.Log("the submission waited for room in the run")
	}
	t.Logf("%d tasks submitted in %s", tenThousand, time.Since(began).Round(time.Second))

	var last api.RunView
	waitFor(t, 25*time.Minute, "every task completed and its result committed", func() bool {
		v, err := suite.wdc.Run(context.Background(), runID)
		if err != nil {
			return false
		}
		last = v
		return v.TaskCounts.Completed == tenThousand && v.Evidence == tenThousand
	})
	stop()
	<-consumerDone
	elapsed := time.Since(began)
	t.Logf("%d tasks completed and committed in %s (%.1f tasks/s); %d commits, %d refused (stale parent_time), %d continue-as-new; largest pending state %d B, largest listing %d tasks",
		tenThousand, elapsed.Round(time.Second), tenThousand/elapsed.Seconds(), commitsIssued, commitErrs, last.ContinuedAsNew, maxPending, maxListed)

	assert.Equal(t, int64(tenThousand), last.TaskCounts.Total)
	assert.Equal(t, int64(tenThousand), last.WorkerResultEvents, "one accepted result per task")
	assert.Len(t, committed, tenThousand, "every result committed once")
	assert.LessOrEqual(t, maxPending, int64(api.MaxRunPendingBytes))
	assert.Positive(t, last.ContinuedAsNew, "the run continued as new")
	// The listing keeps the last RunListedEndedTasks ended tasks across a
	// continue-as-new, plus those that ended since.
	assert.Less(t, len(last.Tasks), tenThousand/4, "a bounded listing, not every task")
	assert.Equal(t, int64(tenThousand-len(last.Tasks)), last.EndedNotListed)
	assert.Zero(t, last.PendingBytes, "nothing open, nothing uncommitted")

	// Its current history is one continue-as-new generation's: far less
	// than the three child events each of ten thousand tasks would take.
	desc, err := suite.client.DescribeWorkflowExecution(context.Background(), api.RunWorkflowID(runID), "")
	require.NoError(t, err)
	t.Logf("the run's current history: %d events", desc.WorkflowExecutionInfo.HistoryLength)
	assert.Less(t, desc.WorkflowExecutionInfo.HistoryLength, int64(tenThousand))

	// `runs status` pages: counts of all, a bounded listing.
	code, stdout, stderr = cli(t, "runs", "status", runID, "--limit", "5")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "tasks        10000: 0 open, 10000 completed")
	assert.Contains(t, stdout, fmt.Sprintf("%d ended tasks are not listed here", last.EndedNotListed))
	assert.Contains(t, stdout, fmt.Sprintf("... %d more (--limit 0 for all)", len(last.Tasks)-5))

	code, _, stderr = cli(t, "runs", "close", runID)
	require.Equal(t, 0, code, stderr)
}
