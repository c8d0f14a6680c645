package testsuite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
)

// Three agents; kill -9 the holder of attempt 1, then the holder of
// attempt 2. Both dead workers stay ACTIVE for a while (until their stale
// window ends), but a retry never goes back to a worker that lost a lease
// of the task, nor to one whose heartbeat is late, while the live third
// worker can take it: attempt 3 runs there and completes.
func TestRetryAfterTwoKilledHoldersGoesToTheLiveWorker(t *testing.T) {
	ids := []string{"place-kill-a", "place-kill-b", "place-kill-c"}
	agents := map[string]*os.Process{}
	for _, id := range ids {
		agents[id] = spawnAgent(t, id).Process
	}
	waitWorkersActive(t, ids...)
	env := taskEnvelope(t, "place-kill-task", `sleep 4; echo "done on attempt $WDC_ATTEMPT" > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 5 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})

	began := time.Now()
	first := waitAttemptRunning(t, env.TaskID, 1).Lease.WorkerID
	require.NoError(t, agents[first].Signal(syscall.SIGKILL))
	t.Logf("killed %s (attempt 1) at %.1fs", first, time.Since(began).Seconds())
	second := waitAttemptRunning(t, env.TaskID, 2).Lease.WorkerID
	require.NotEqual(t, first, second, "attempt 2 went back to the killed worker")
	require.NoError(t, agents[second].Signal(syscall.SIGKILL))
	t.Logf("attempt 2 on %s at %.1fs; killed it", second, time.Since(began).Seconds())

	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State, "waiting: %s", view.Waiting)
	var holders []string
	for _, l := range view.Leases {
		holders = append(holders, fmt.Sprintf("%d:%s:%s", l.Attempt, l.WorkerID, l.State))
	}
	t.Logf("completed at %.1fs; leases %v", time.Since(began).Seconds(), holders)
	require.Len(t, view.Leases, 3, "the task completes on attempt 3")
	third := view.Leases[2].WorkerID
	assert.NotContains(t, []string{first, second}, third, "attempt 3 runs on the worker that is alive")
	assert.Contains(t, ids, third)
	assert.Equal(t, lease.Completed, view.Leases[2].State)
	assert.Equal(t, int64(3), out.Attempts)
	assert.Equal(t, "done on attempt 3\n", readArtifact(t, view.Result, "done.txt"))
}

// 30 tasks that request no resources on two idle workers: each takes a
// slot (the default request), ties between equally loaded workers are
// broken per task, so both workers run a fair share (at least 10 each).
func TestResourcelessTasksSpreadOverIdleWorkers(t *testing.T) {
	ids := []string{"place-spread-a", "place-spread-b"}
	for _, id := range ids {
		spawnAgentArgs(t, id, "--cpu", "16") // 16 slots each
	}
	waitWorkersActive(t, ids...)
	const n = 30
	var tasks []string
	for i := range n {
		env := taskEnvelope(t, fmt.Sprintf("place-spread-%02d", i), "sleep 1")
		env.Resources = resource.List{}
		env.Normalize()
		require.NoError(t, env.Validate(true))
		submit(t, env, api.TaskOptions{})
		tasks = append(tasks, env.TaskID)
	}
	ran := map[string]int{}
	for _, id := range tasks {
		out, view := waitOutcome(t, id)
		assert.Equal(t, api.TaskCompleted, out.State, "task %s", id)
		if assert.NotEmpty(t, view.Leases, "task %s", id) {
			ran[view.Leases[len(view.Leases)-1].WorkerID]++
		}
	}
	t.Logf("distribution: %s %d / %s %d", ids[0], ran[ids[0]], ids[1], ran[ids[1]])
	for _, id := range ids {
		assert.GreaterOrEqual(t, ran[id], 10, "worker %s ran %d of %d tasks (%v)", id, ran[id], n, ran)
	}
	for id := range ran {
		assert.Contains(t, ids, id, "only this test's workers run its tasks")
	}
}

// spawnAgentArgs is spawnAgent with extra agent flags (later flags win,
// e.g. "--cpu", "16").
func spawnAgentArgs(t *testing.T, id string, args ...string) *exec.Cmd {
	t.Helper()
	return spawnAgentEnvArgs(t, id, nil, args...)
}

// spawnAgentEnvArgs is spawnAgentArgs with extra environment variables.
func spawnAgentEnvArgs(t *testing.T, id string, env []string, args ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), id+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	argv := append([]string{"agent", "--identity", "off", "--worker-id", id, "--cpu", "1", "--memory", "1Gi",
		"--label", "suite-test=" + testLabel(t), "--data-dir", suite.dataDir,
		"--address", suite.srv.FrontendHostPort(), "--log-level", "info"}, args...)
	c := exec.Command(os.Args[0], argv...)
	c.Env = append(append(os.Environ(), envRunCLI+"=1"), env...)
	c.Stdout, c.Stderr = logFile, logFile
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, c.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _, _ = c.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			_ = c.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agent %s log:\n%s", id, b)
		}
	})
	return c
}
