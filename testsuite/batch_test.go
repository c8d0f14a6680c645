package testsuite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/envelope"
	"github.com/wdc-runtime/wdc/internal/wdcclient"
	"github.com/wdc-runtime/wdc/worker"
)

// Many tasks go into one run in a few add-tasks updates: a batch with one
// bad envelope is refused whole (its index and field named, no task
// created), a good batch is started at once, and every task completes.
func TestBatchSubmission(t *testing.T) {
	many := func(o *worker.AgentOptions) { o.Registration.Capacity.Slots = 64 }
	startAgent(t, "batch-a", many)
	startAgent(t, "batch-b", many)
	const n = api.MaxTasksPerBatch + 50 // two batches, one full
	envs := make([]envelope.Envelope, n)
	for i := range envs {
		envs[i] = taskEnvelope(t, fmt.Sprintf("batch-%03d", i), "true")
		envs[i].RunID = "run-batch"
	}
	ctx := context.Background()

	bad := append([]envelope.Envelope(nil), envs[:api.MaxTasksPerBatch]...)
	bad[7].Command = nil
	_, err := suite.wdc.SubmitTasks(ctx, bad, api.TaskOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "envelope 7 (batch-007)")
	assert.Contains(t, err.Error(), "command")
	_, err = suite.wdc.Run(ctx, "run-batch")
	assert.ErrorIs(t, err, wdcclient.ErrNotFound, "a refused batch creates nothing, not even the run")

	began := time.Now()
	for from := 0; from < n; from += api.MaxTasksPerBatch {
		batch := envs[from:min(n, from+api.MaxTasksPerBatch)]
		res, err := suite.wdc.SubmitTasks(ctx, batch, api.TaskOptions{})
		require.NoError(t, err)
		require.Len(t, res.Results, len(batch))
		for i, e := range res.Errors {
			require.Empty(t, e, "task %d", from+i)
			require.Equal(t, envs[from+i].TaskID, res.Results[i].TaskID)
		}
	}
	submitted := time.Since(began)
	t.Logf("%d tasks submitted in %s (%.0f tasks/s)", n, submitted.Round(time.Millisecond), float64(n)/submitted.Seconds())

	again, err := suite.wdc.SubmitTasks(ctx, envs[:3], api.TaskOptions{})
	require.NoError(t, err)
	for _, r := range again.Results {
		assert.True(t, r.Existing, "re-adding the same envelope is idempotent")
	}

	waitFor(t, 5*time.Minute, "every task of the batch completed", func() bool {
		v, err := suite.wdc.Run(ctx, "run-batch")
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
	t.Logf("%d tasks completed %s after the first submit", n, time.Since(began).Round(time.Millisecond))
}
