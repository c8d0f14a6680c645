package testsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/worker"
)

// batchTasks is three add-tasks updates of `tasks submit --batch`, which
// adds 100 tasks per update (cmd's batchChunk).
const batchTasks = 300

// A file of batchTasks tasks through `wdc tasks submit --batch`: a file
// with one malformed line is refused whole (the line and field named, no
// run created); the valid file is submitted in three add-tasks updates (a
// progress line each) and every task completes. TestManyTasksInOneRun
// submits thousands the same way.
func TestBatchSubmitInSeveralUpdates(t *testing.T) {
	const n = batchTasks
	many := func(o *worker.AgentOptions) { o.Registration.Capacity.Slots = 64 }
	startAgent(t, "batch-a", many)
	startAgent(t, "batch-b", many)
	label := testLabel(t)
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"task_id":"batch-%04d","run_id":"run-batch","world_id":"suite","command":["/bin/true"],"selector":{"suite-test":%q}}`, i, label)
	}
	dir := t.TempDir()
	write := func(name string, lines []string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
		return p
	}
	bad := append([]string(nil), lines...)
	bad[241] = strings.Replace(bad[241], `"command"`, `"comand"`, 1)
	code, stdout, stderr := cli(t, "tasks", "submit", "--batch", write("bad.jsonl", bad))
	require.Equal(t, 2, code, stderr)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "line 242:")
	assert.Contains(t, stderr, "comand")
	assert.Contains(t, stderr, fmt.Sprintf("1 of %d lines refused; nothing was submitted", n))
	_, err := suite.wdc.Run(context.Background(), "run-batch")
	assert.ErrorIs(t, err, wdcclient.ErrNotFound, "a refused file creates nothing, not even the run")

	code, stdout, stderr = cli(t, "tasks", "submit", "--batch", write("good.jsonl", lines), "-o", "json")
	require.Equal(t, 0, code, stderr)
	var rep struct {
		Submitted   int     `json:"submitted"`
		Failed      int     `json:"failed"`
		TasksPerSec float64 `json:"tasks_per_second"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	assert.Equal(t, n, rep.Submitted)
	assert.Zero(t, rep.Failed)
	for _, sent := range []int{n / 3, 2 * n / 3, n} {
		assert.Contains(t, stderr, fmt.Sprintf("sent %d/%d (run run-batch)", sent, n), "a progress line per add-tasks update")
	}
	t.Logf("%d tasks submitted at %.0f tasks/s", n, rep.TasksPerSec)

	began := time.Now()
	waitFor(t, 5*time.Minute, "every task of the batch completed", func() bool {
		v, err := suite.wdc.Run(context.Background(), "run-batch")
		if err != nil || len(v.Tasks) != n {
			return false
		}
		for _, task := range v.Tasks {
			if task.State != api.TaskCompleted {
				return false
			}
		}
		return true
	})
	t.Logf("all %d completed %s after submission", n, time.Since(began).Round(time.Millisecond))

	// The client call behind it: re-adding is idempotent, a batch of
	// another run in one call is refused.
	var again []envelope.Envelope
	for _, l := range lines[:3] {
		env, err := envelope.Decode(strings.NewReader(l), true)
		require.NoError(t, err)
		again = append(again, env)
	}
	res, err := suite.wdc.SubmitTasks(context.Background(), again, api.TaskOptions{})
	require.NoError(t, err)
	for _, r := range res.Results {
		assert.True(t, r.Existing)
	}
	again[1].RunID = "other-run"
	_, err = suite.wdc.SubmitTasks(context.Background(), again, api.TaskOptions{})
	assert.ErrorContains(t, err, "envelope 1 (batch-0001): run other-run")
}
