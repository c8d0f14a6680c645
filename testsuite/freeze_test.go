package testsuite

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// An agent frozen past its lease TTL and the launch timeout (SIGSTOP of
// the agent and of its attempts' process groups for 10 s, TTL 4 s):
// meanwhile attempt 1's lease expires and later attempts are granted to the
// same (only) worker and given up on. When the agent resumes it receives
// launches whose leases were revoked while it was frozen; it starts none of
// them (every command that starts does so under its ACTIVE lease), and the
// task completes on a later attempt.
func TestFrozenAgentNeverStartsARevokedAttempt(t *testing.T) {
	ttl := 4 * time.Second
	agent := spawnAgent(t, "freeze-a")
	waitWorkersActive(t, "freeze-a")
	trace := filepath.Join(t.TempDir(), "trace")
	env := taskEnvelope(t, "freeze-task", `echo "$(date +%s.%N) $WDC_ATTEMPT $WDC_FENCE start" >> "$TRACE"
if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 60; fi
echo ok > outputs/ok`)
	env.Env["TRACE"] = trace
	submit(t, env, api.TaskOptions{LeaseTTL: ttl, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}}) // launch timeout = TTL
	waitAttemptRunning(t, env.TaskID, 1)
	// Freeze only once attempt 1's command has written its trace line: a
	// shell stopped before it wrote would leave no start to check.
	waitFor(t, 10*time.Second, "attempt 1's trace line", func() bool {
		b, err := os.ReadFile(trace)
		return err == nil && strings.Contains(string(b), " 1 1 start")
	})

	groups := childProcessGroups(t, agent.Process.Pid)
	require.NotEmpty(t, groups, "attempt 1's process group")
	thaw := func() {
		_ = syscall.Kill(agent.Process.Pid, syscall.SIGCONT)
		for _, g := range groups {
			_ = syscall.Kill(-g, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	require.NoError(t, syscall.Kill(agent.Process.Pid, syscall.SIGSTOP))
	for _, g := range groups {
		require.NoError(t, syscall.Kill(-g, syscall.SIGSTOP))
	}
	frozenAt := time.Now()
	time.Sleep(10 * time.Second)
	thaw()
	thawedAt := time.Now()

	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.NotNil(t, view.Result)
	granted := 0 // leases granted to the frozen agent and ended without it
	for _, l := range view.Leases[1:] {
		if l.GrantedAt.Before(thawedAt) && l.State != lease.Completed {
			granted++
		}
	}
	require.Positive(t, granted, "no attempt was granted while the agent was frozen; leases %+v", view.Leases)

	starts := readTrace(t, trace)
	byAttempt := map[int64]lease.Lease{}
	for _, l := range view.Leases {
		byAttempt[l.Attempt] = l
	}
	for attempt, times := range starts {
		l, ok := byAttempt[attempt]
		require.True(t, ok, "attempt %d started without a lease", attempt)
		require.Len(t, times, 1, "attempt %d started more than once", attempt)
		ended := !l.EndedAt.IsZero() && !times[0].Before(l.EndedAt)
		assert.False(t, ended, "attempt %d started %s after its lease ended (%s, %s)", attempt, times[0].Sub(l.EndedAt), l.State, l.EndReason)
	}
	assert.Contains(t, starts, view.Result.Attempt, "the accepted attempt ran")
	assert.Len(t, starts, 2, "only attempt 1 and the accepted attempt started")
	t.Logf("frozen for %s; %d attempts granted meanwhile; directives %v; attempt %d completed %s after the thaw",
		thawedAt.Sub(frozenAt).Round(time.Millisecond), granted, directiveReasons(view.Directives), view.Result.Attempt,
		starts[view.Result.Attempt][0].Sub(thawedAt).Round(time.Millisecond))
}

func directiveReasons(ds []lease.RetryDirective) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d.Reason)
	}
	return out
}

// childProcessGroups lists the process groups of pid's children (an
// agent's attempts each run in their own group).
func childProcessGroups(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	seen := map[int]bool{}
	var out []int
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		// After "pid (comm)": state ppid pgrp ...
		fields := strings.Fields(s[i+1:])
		if len(fields) < 3 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		if g, err := strconv.Atoi(fields[2]); err == nil && g != pid && !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out
}
