package testsuite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/lease"
)

// currentLease is the task's current lease, from the lease query.
func currentLease(t *testing.T, taskID string) lease.Lease {
	t.Helper()
	v, err := suite.wdc.Task(context.Background(), taskID)
	require.NoError(t, err)
	require.NotNil(t, v.Lease)
	return *v.Lease
}

// heardLease is the task's current lease as Temporal has heard it: its
// RenewedAt is the later of the last heartbeat signal's renewal and the
// last heartbeat by ID recorded on its lease activity (which the task
// does not see), and its ExpiresAt a TTL after that.
func heardLease(t *testing.T, taskID string) lease.Lease {
	t.Helper()
	l := currentLease(t, taskID)
	at, err := suite.wdc.LeaseHeartbeatAt(context.Background(), taskID, l.Fence)
	require.NoError(t, err)
	if at.After(l.RenewedAt) {
		l.RenewedAt, l.ExpiresAt = at, at.Add(l.TTL)
	}
	return l
}

// Cutting an agent off the frontend for half the lease TTL (3 s of 6 s,
// heartbeats every 2 s) and healing, 10 times in a row (each pause below
// twice; in `make soak`, until soakFor has passed) at varying phases of
// the heartbeat cycle, costs no lease: the executor retries every
// interval/4 and the agent redials within 0.5 s, so a heartbeat gets
// through before the control plane would expire the lease. The task
// completes on attempt 1 without a retry directive.
func TestShortPartitionsCostNoLease(t *testing.T) {
	const minCuts = 10
	soak := soakFor(t, 0)
	ttl := 6 * time.Second
	proxy := startTCPProxy(t, suite.srv.FrontendHostPort())
	agent := spawnAgentVia(t, "partition-short-a", proxy.Addr())
	agentLog := agent.Stdout.(*os.File).Name()
	waitWorkersActive(t, "partition-short-a")
	stop := filepath.Join(t.TempDir(), "stop")
	env := taskEnvelope(t, "partition-short", `while [ ! -e "$STOP" ]; do sleep 0.1; done; echo ok > outputs/ok`)
	env.Env["STOP"] = stop
	submit(t, env, api.TaskOptions{LeaseTTL: ttl}) // heartbeats every TTL/3
	waitAttemptRunning(t, env.TaskID, 1)

	// Pauses after each recovery, so that cuts fall at different points of
	// the 2 s heartbeat cycle (up to just before the next heartbeat).
	pauses := []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 1900 * time.Millisecond}
	var worstRecovery time.Duration
	minMargin := ttl
	cuts, began := 0, time.Now()
	for ; cuts < minCuts || time.Since(began) < soak; cuts++ {
		i := cuts
		recovered := countLogLines(t, agentLog, executorRecovered)
		proxy.Cut()
		time.Sleep(ttl / 2)
		before := heardLease(t, env.TaskID) // as the last heartbeat before the cut left it
		proxy.Heal()
		healed := time.Now()
		var after lease.Lease
		waitFor(t, ttl, "a heartbeat after the heal", func() bool {
			after = heardLease(t, env.TaskID)
			return after.State != lease.Active || after.RenewedAt.After(healed)
		})
		// Each partition is a short one: the link stays up until the
		// worker's own heartbeat has also got through (back-to-back cuts
		// would be one long partition, in which going STALE is right).
		waitFor(t, ttl, "a worker heartbeat after the heal", func() bool {
			e, err := suite.wdc.DescribeWorker(context.Background(), "partition-short-a")
			return err == nil && e.LastHeartbeatAt.After(healed)
		})
		// ... and until the executor has counted one: a delivered
		// heartbeat signal counts once its confirming lease query is
		// answered, and a cut before the answer fails it.
		waitFor(t, ttl, "the executor to count a heartbeat after the heal", func() bool {
			return countLogLines(t, agentLog, executorRecovered) > recovered
		})
		require.Equal(t, lease.Active, after.State, "cut %d: the lease ended: %s", i+1, after.EndReason)
		require.Equal(t, int64(1), after.Fence)
		recovery, margin := after.RenewedAt.Sub(healed), before.ExpiresAt.Sub(after.RenewedAt)
		require.Positive(t, margin, "cut %d: renewed after the lease's expiry", i+1)
		worstRecovery, minMargin = max(worstRecovery, recovery), min(minMargin, margin)
		time.Sleep(pauses[i%len(pauses)])
	}
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	assert.Len(t, view.Leases, 1, "no retry")
	assert.Empty(t, view.Directives)
	require.NotNil(t, view.Result)
	assert.Equal(t, int64(1), view.Result.Attempt)
	t.Logf("%d/%d partitions of %s survived; heartbeat renewed the lease at most %s after a heal; smallest margin to expiry %s",
		cuts, cuts, ttl/2, worstRecovery.Round(time.Millisecond), minMargin.Round(time.Millisecond))
}

// Cutting an agent off for twice the lease TTL: its executor kills the
// command no later than the control plane expires the lease (the command's
// last trace line is before the lease's EndedAt), and the retry runs on
// another agent with no overlap between the two commands.
func TestLongPartitionSelfFencesBeforeExpiry(t *testing.T) {
	ttl := 6 * time.Second
	proxy := startTCPProxy(t, suite.srv.FrontendHostPort())
	victim, other := "partition-long-a", "partition-long-b"
	spawnAgentVia(t, victim, proxy.Addr())
	waitWorkersActive(t, victim)
	trace := filepath.Join(t.TempDir(), "trace")
	env := taskEnvelope(t, "partition-long", `t() { echo "$(date +%s.%N) $WDC_ATTEMPT $1" >> "$TRACE"; }
t start; n=0
while [ "$WDC_ATTEMPT" = 1 ] || [ $n -lt 5 ]; do t hb; sleep 0.2; n=$((n+1)); done
t end; echo ok > outputs/ok`)
	env.Env["TRACE"] = trace
	submit(t, env, api.TaskOptions{LeaseTTL: ttl, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	waitAttemptRunning(t, env.TaskID, 1) // on the victim: the only worker
	spawnAgent(t, other)
	waitWorkersActive(t, other)

	proxy.Cut()
	cutAt := time.Now()
	time.Sleep(2 * ttl)
	proxy.Heal()
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Len(t, view.Leases, 2)
	first, second := view.Leases[0], view.Leases[1]
	assert.Equal(t, victim, first.WorkerID)
	// The server ends the lease on whichever comes first: its expiry (TTL
	// after the last heartbeat) or the worker going STALE (its stale
	// window after the last worker heartbeat); both lie after the
	// executor's own deadline.
	assert.Contains(t, []lease.State{lease.Expired, lease.Revoked}, first.State)
	assert.Equal(t, other, second.WorkerID, "the retry runs elsewhere")
	assert.Equal(t, lease.Completed, second.State)
	require.Len(t, view.Directives, 1)
	assert.Contains(t, []lease.RetryReason{lease.ReasonLeaseExpired, lease.ReasonWorkerLost}, view.Directives[0].Reason)

	lines := readTrace(t, trace)
	require.NotEmpty(t, lines[1], "attempt 1 traced")
	require.NotEmpty(t, lines[2], "attempt 2 traced")
	last1 := lines[1][len(lines[1])-1]
	assert.True(t, last1.Before(first.EndedAt), "attempt 1 still ran %s after its lease ended", last1.Sub(first.EndedAt))
	assert.True(t, last1.Before(lines[2][0]), "the two attempts overlap")
	var rep executor.Report
	b, err := os.ReadFile(filepath.Join(suite.dataDir, "work", victim, env.TaskID, "1-1", "result.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.Equal(t, executor.OutcomeSelfFenced, rep.Outcome)
	assert.Contains(t, rep.Message, "Temporal unreachable")
	t.Logf("cut at 0; attempt 1's last trace line at %s, its lease ended (%s) at %s (%s later); attempt 2 started at %s",
		last1.Sub(cutAt).Round(time.Millisecond), first.EndReason, first.EndedAt.Sub(cutAt).Round(time.Millisecond),
		first.EndedAt.Sub(last1).Round(time.Millisecond), lines[2][0].Sub(cutAt).Round(time.Millisecond))
}

// readTrace parses "<unix seconds>.<nanoseconds> <attempt> <what...>"
// lines into each attempt's times, in file order.
func readTrace(t *testing.T, path string) map[int64][]time.Time {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[int64][]time.Time{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.GreaterOrEqual(t, len(fields), 3, "trace line %q", sc.Text())
		secs, nanos, ok := strings.Cut(fields[0], ".")
		require.True(t, ok, "trace line %q", sc.Text())
		s, err1 := strconv.ParseInt(secs, 10, 64)
		ns, err2 := strconv.ParseInt(nanos, 10, 64)
		attempt, err3 := strconv.ParseInt(fields[1], 10, 64)
		require.NoError(t, errors.Join(err1, err2, err3), "trace line %q", sc.Text())
		out[attempt] = append(out[attempt], time.Unix(s, ns))
	}
	require.NoError(t, sc.Err())
	return out
}

// executorRecovered is what an executor logs when a heartbeat counts
// again after failing (each cut fails at least one: it is longer than
// the heartbeat interval).
const executorRecovered = "heartbeat accepted again"

// countLogLines counts the lines of the log at path that contain s.
func countLogLines(t *testing.T, path, s string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return strings.Count(string(b), s)
}
