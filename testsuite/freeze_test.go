package testsuite

import (
	"encoding/json"
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
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/executor"
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

// An agent stopped (SIGSTOP) while its attempt's command runs can neither
// heartbeat nor kill the command, and the cancel the task sends when it
// revokes the lease (worker_lost, at the worker's stale window) goes
// unanswered until it expires. The attempt's fence watchdog, a process of
// its own, kills the command by the time the worker may go STALE, so the
// retry on another worker starts after it died. Resumed, the agent's
// executor reports the attempt self-fenced.
func TestAStoppedAgentsCommandDiesBeforeItsRetryStarts(t *testing.T) {
	holder := spawnAgent(t, "stopped-hold")
	waitWorkersActive(t, "stopped-hold")
	trace := filepath.Join(t.TempDir(), "trace")
	pidFile := filepath.Join(t.TempDir(), "pid")
	env := taskEnvelope(t, "stopped-task", `echo "$(date +%s.%N) $WDC_ATTEMPT $WDC_FENCE start" >> "$TRACE"
if [ "$WDC_ATTEMPT" = 1 ]; then echo $$ > "$PIDFILE"; exec sleep 300; fi
echo ok > outputs/ok`)
	env.Env["TRACE"], env.Env["PIDFILE"] = trace, pidFile
	submit(t, env, api.TaskOptions{LeaseTTL: time.Minute, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	v := waitAttemptRunning(t, env.TaskID, 1)
	require.Equal(t, "stopped-hold", v.Lease.WorkerID)
	var pid int
	waitFor(t, 10*time.Second, "attempt 1's command", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	startAgent(t, "stopped-take")
	waitWorkersActive(t, "stopped-take")

	require.NoError(t, syscall.Kill(holder.Process.Pid, syscall.SIGSTOP))
	stoppedAt := time.Now()
	t.Cleanup(func() { _ = syscall.Kill(holder.Process.Pid, syscall.SIGCONT) })
	var died time.Time
	waitFor(t, 30*time.Second, "attempt 1's command killed", func() bool { // polled every 50 ms
		if !running(pid) {
			died = time.Now()
			return true
		}
		return false
	})
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Equal(t, int64(2), view.Result.Attempt)
	assert.Equal(t, string(lease.ReasonWorkerLost), view.Leases[0].EndReason)
	// Stay stopped past the cancel's 30 s schedule-to-close: the fence
	// owes nothing to it.
	time.Sleep(time.Until(stoppedAt.Add(45 * time.Second)))
	require.NoError(t, syscall.Kill(holder.Process.Pid, syscall.SIGCONT))

	starts := readTrace(t, trace)
	require.Len(t, starts[2], 1, "attempt 2 started once")
	t.Logf("agent stopped; its command killed %s later; lease revoked %s later; attempt 2 started %s after the kill",
		died.Sub(stoppedAt).Round(time.Millisecond), view.Leases[0].EndedAt.Sub(stoppedAt).Round(time.Millisecond), starts[2][0].Sub(died).Round(time.Millisecond))
	assert.True(t, died.Before(starts[2][0]), "attempt 1's command died %s after attempt 2 started", died.Sub(starts[2][0]))
	assert.Less(t, died.Sub(stoppedAt), fleet.DefaultStaleAfter+time.Second, "killed by the worker's stale window, not the 1 min TTL")

	dir := executor.TaskDir(filepath.Join(suite.dataDir, "work", "stopped-hold"), lease.ClaimOf(view.Leases[0]))
	var rep executor.Report
	waitFor(t, 15*time.Second, "the resumed executor's report", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "result.json"))
		return err == nil && json.Unmarshal(b, &rep) == nil
	})
	// Killed while the agent was stopped, so by its watchdog; the resumed
	// executor may tell it first, by the same deadline.
	assert.Equal(t, executor.OutcomeSelfFenced, rep.Outcome)
	assert.Contains(t, rep.Message, "stale-after window")
}

// running reports whether pid is a live process: not gone, and not a
// zombie (a stopped agent cannot reap its dead command).
func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}
