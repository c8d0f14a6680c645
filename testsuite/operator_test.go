package testsuite

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
)

// A running task that an operator terminates from Temporal's own tools
// (the SDK's TerminateWorkflow, what `temporal workflow terminate` and the
// Web UI call) reads as ended within seconds: its view says ABORTED and
// how it closed (its query alone still says LEASED), `wdc tasks wait`
// exits with no result instead of following it for ever, and the agent
// stops its command.
func TestOperatorTerminateEndsTheTaskVisibly(t *testing.T) {
	startAgent(t, "op-term-a")
	waitWorkersActive(t, "op-term-a")
	env := taskEnvelope(t, "op-term", "exec sleep 60")
	submit(t, env, api.TaskOptions{LeaseTTL: 30 * time.Second})
	running := waitAttemptRunning(t, env.TaskID, 1)
	ctx := context.Background()
	require.NoError(t, suite.client.TerminateWorkflow(ctx, api.TaskWorkflowID(env.TaskID), "", "operator test"))

	began := time.Now()
	var v api.TaskView
	waitFor(t, 10*time.Second, "the task reads ABORTED", func() bool {
		var err error
		v, err = suite.wdc.Task(ctx, env.TaskID)
		return err == nil && v.State == api.TaskAborted
	})
	assert.Equal(t, "TERMINATED", v.ClosedAs)
	t.Logf("ABORTED after %.1fs", time.Since(began).Seconds())

	code, _, stderr := cli(t, "tasks", "wait", env.TaskID)
	assert.Equal(t, 3, code, "no result: %s", stderr)
	assert.Contains(t, stderr, "TERMINATED")

	waitFor(t, 20*time.Second, "the attempt's command stopped", func() bool {
		return len(processesIn(running.AttemptDir)) == 0
	})
}
