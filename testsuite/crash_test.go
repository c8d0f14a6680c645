package testsuite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// A program that segfaults is its own result: COMPLETED on attempt 1 with
// the signal recorded, and `tasks result` says so. One that allocates past
// its memory_bytes is killed by the OOM killer in its attempt's memory
// cgroup: oom_killed, retried after the backoff (not at once, as an
// infrastructure kill is), until its attempts are used up.
func TestACrashIsAResultAndAnOOMKillIsRetriedWithBackoff(t *testing.T) {
	startAgent(t, "crash-a")
	waitWorkersActive(t, "crash-a")

	segv := taskEnvelope(t, "crash-segv", `echo partial > outputs/p.txt; kill -SEGV $$`)
	submit(t, segv, api.TaskOptions{})
	out, view := waitOutcome(t, segv.TaskID)
	require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
	require.NotNil(t, view.Result)
	assert.Equal(t, int64(1), view.Result.Attempt)
	assert.Equal(t, "SIGSEGV", view.Result.Signal)
	assert.Equal(t, 139, view.Result.ExitCode, "128 + SIGSEGV, as a shell reports it")
	assert.Empty(t, view.Directives, "a crash is not retried")
	code, stdout, stderr := cli(t, "tasks", "result", segv.TaskID)
	assert.Equal(t, 4, code, "a program that failed: %s", stderr)
	assert.Contains(t, stdout, "exit code 139 (killed by SIGSEGV)")
	assert.Contains(t, stderr, "the program was killed by SIGSEGV")

	oom := taskEnvelope(t, "crash-oom", `x=$(head -c 300000000 /dev/zero | tr '\0' a); echo survived > outputs/x`)
	oom.Resources.MemoryBytes = 32 << 20
	require.NoError(t, oom.Validate(true))
	backoff := lease.Backoff{Initial: 3 * time.Second, Max: 10 * time.Second, Multiplier: 2}
	submit(t, oom, api.TaskOptions{MaxAttempts: 2, Backoff: backoff})
	out, view = waitOutcome(t, oom.TaskID)
	require.Equal(t, api.TaskRetriesExhausted, out.State, "%+v", view)
	require.Len(t, view.Directives, 2)
	for _, d := range view.Directives {
		assert.Equal(t, lease.ReasonOOMKilled, d.Reason)
		assert.Contains(t, d.Detail, "OOM killed")
	}
	require.Len(t, view.Leases, 2)
	delay, err := backoff.Delay(1, oom.TaskID)
	require.NoError(t, err)
	waited := view.Leases[1].GrantedAt.Sub(view.Leases[0].EndedAt)
	assert.GreaterOrEqual(t, waited, delay, "attempt 2 waited the backoff after the OOM kill")
	t.Logf("OOM kill at %s, attempt 2 granted %s later (backoff %s)", view.Leases[0].EndedAt.Format(time.StampMilli), waited, delay)
}
