package testsuite

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/lease"
)

// taskHistory counts a task's history: its length, the lease heartbeats
// its executor reported sending with its result, the lease-heartbeat
// signals in it, and the lease activities that timed out by heartbeat.
type taskHistory struct {
	events, reportedBeats, signals int64
	leaseScheduled                 []string
	heartbeatTimeouts              int
}

func readTaskHistory(t *testing.T, taskID string) taskHistory {
	t.Helper()
	iter := suite.client.GetWorkflowHistory(context.Background(), api.TaskWorkflowID(taskID), "", false, 0)
	var h taskHistory
	scheduled := map[int64]string{}
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		h.events++
		if n, ok := wdcclient.ReportedHeartbeats(ev); ok && n > h.reportedBeats {
			h.reportedBeats = n
		}
		if s := ev.GetWorkflowExecutionSignaledEventAttributes(); s.GetSignalName() == api.SignalLeaseHeartbeat {
			h.signals++
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a.GetActivityType().GetName() == "HoldLease" {
			scheduled[ev.GetEventId()] = a.GetActivityId()
			h.leaseScheduled = append(h.leaseScheduled, a.GetActivityId())
		}
		if a := ev.GetActivityTaskTimedOutEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] != "" &&
			a.GetFailure().GetTimeoutFailureInfo().GetTimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT {
			h.heartbeatTimeouts++
		}
	}
	return h
}

// waitHeartbeatByID waits until Temporal recorded a heartbeat by ID on
// the task's lease activity of fence.
func waitHeartbeatByID(t *testing.T, taskID string, fence int64) {
	t.Helper()
	waitFor(t, 20*time.Second, "a heartbeat by ID on "+api.LeaseActivityID(fence), func() bool {
		at, err := suite.wdc.LeaseHeartbeatAt(context.Background(), taskID, fence)
		return err == nil && !at.IsZero()
	})
}

// A task that heartbeats for 30 s (TTL 6 s, a beat every 2 s) holds its
// lease on a lease activity from its first heartbeat on: its executor
// heartbeats it by ID, which writes nothing to the task's history, so the
// task costs at most 4 history events per heartbeat above a trivial task
// (counting the beats its executor reports sending), and a trivial task
// holds no lease activity at all.
func TestLeaseHeartbeatsByIDCostTheTaskNoHistory(t *testing.T) {
	startAgent(t, "leaseact-a")

	base := taskEnvelope(t, "leaseact-true", "true")
	submit(t, base, api.TaskOptions{})
	out, _ := waitOutcome(t, base.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	trivial := readTaskHistory(t, base.TaskID)
	assert.Empty(t, trivial.leaseScheduled, "a task that ends before its first heartbeat holds no lease activity")
	assert.LessOrEqual(t, trivial.events, int64(27), "events per single-attempt task")

	env := taskEnvelope(t, "leaseact-sleep", "sleep 30")
	submit(t, env, api.TaskOptions{LeaseTTL: 6 * time.Second, HeartbeatInterval: 2 * time.Second})
	waitFor(t, 20*time.Second, "the lease held by its lease activity", func() bool {
		v, err := suite.wdc.Task(context.Background(), env.TaskID)
		return err == nil && v.LeaseActivity == api.LeaseActivityID(1)
	})
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Equal(t, int64(1), out.Attempts, "no lease expired")
	h := readTaskHistory(t, env.TaskID)
	require.GreaterOrEqual(t, h.reportedBeats, int64(12), "about one beat every 2 s for 30 s")
	perBeat := float64(h.events-trivial.events) / float64(h.reportedBeats)
	t.Logf("trivial task %d events; heartbeating task %d events for %d heartbeats (%d by signal): %.2f events per heartbeat",
		trivial.events, h.events, h.reportedBeats, h.signals, perBeat)
	assert.LessOrEqual(t, perBeat, 4.0, "history events per heartbeat")
	assert.Equal(t, []string{api.LeaseActivityID(1)}, h.leaseScheduled)
	assert.LessOrEqual(t, h.signals, int64(2), "the first heartbeat is a signal; the rest go by ID")
	assert.Equal(t, int64(h.signals), view.Stats.HeartbeatsAccepted)
	if *updateHistories {
		writeHistory(t, api.TaskWorkflowID(env.TaskID))
	}
}

// A holder frozen while its lease activity holds the lease (a stopped
// `wdc exec`: no heartbeat, though its worker stays live) loses the lease
// when Temporal times the activity out, a TTL after its last heartbeat;
// the next attempt completes the task.
func TestFrozenHolderLosesItsLeaseByTheLeaseActivityTimeout(t *testing.T) {
	handOffAgent(t, "leaseact-ext")
	ttl := 6 * time.Second
	env := taskEnvelope(t, "leaseact-freeze", `if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 60; fi
echo "done on attempt $WDC_ATTEMPT" > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: ttl, HeartbeatInterval: 2 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})

	first := spooled(t, env.TaskID, 1)
	p1 := startExec(t, first.Argv, "--work-dir", t.TempDir())
	wfID := api.TaskWorkflowID(env.TaskID)
	waitHeartbeatByID(t, env.TaskID, 1)
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGSTOP))
	frozen := time.Now()

	var expired lease.Lease
	waitFor(t, ttl+10*time.Second, "lease 1 expired", func() bool {
		v, err := suite.wdc.Task(context.Background(), env.TaskID)
		if err != nil || len(v.Leases) == 0 || v.Leases[0].State != lease.Expired {
			return false
		}
		expired = v.Leases[0]
		return true
	})
	after := expired.EndedAt.Sub(frozen)
	t.Logf("lease expired %.2fs after the holder froze (TTL %s)", after.Seconds(), ttl)
	assert.Equal(t, string(lease.ReasonLeaseExpired), expired.EndReason)
	assert.Less(t, after, ttl+time.Second, "a TTL after the last heartbeat, which preceded the freeze")
	h := readTaskHistory(t, env.TaskID)
	assert.Equal(t, 1, h.heartbeatTimeouts, "expired by the lease activity's heartbeat timeout")

	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGKILL))
	second := spooled(t, env.TaskID, 2)
	view := runToAcceptance(t, second)
	assert.Equal(t, "done on attempt 2\n", readArtifact(t, view.Result, "done.txt"))
	if *updateHistories {
		writeHistory(t, wfID)
	}
}

// A lease revoked while its executor heartbeats by ID (its worker is
// deregistered by force: worker_lost) has its lease activity cancelled,
// and the executor's next heartbeat by ID fences it: `wdc exec`, which
// nothing cancels, stops its command within a heartbeat interval. The
// cancelled activity then times out in the task's history without
// disturbing the task.
func TestRevokedLeaseFencesItsExecutorThroughItsLeaseActivity(t *testing.T) {
	handOffAgent(t, "leaseact-rev")
	env := taskEnvelope(t, "leaseact-revoke", "exec sleep 60")
	submit(t, env, api.TaskOptions{LeaseTTL: 6 * time.Second, HeartbeatInterval: 2 * time.Second})
	first := spooled(t, env.TaskID, 1)
	p := startExec(t, first.Argv, "--work-dir", t.TempDir(), "-o", "json")
	waitHeartbeatByID(t, env.TaskID, 1)

	_, err := suite.wdc.DeregisterWorker(context.Background(), "leaseact-rev", true, "test: revoke the lease")
	require.NoError(t, err)
	revoked := time.Now()
	p.wait(t, 15*time.Second)
	t.Logf("wdc exec stopped %.2fs after the revocation", time.Since(revoked).Seconds())
	var rep executor.Report
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep), "stdout: %s", p.stdout)
	assert.Equal(t, executor.OutcomeSelfFenced, rep.Outcome)
	assert.Contains(t, rep.Message, "lease activity was cancelled")
	assert.Less(t, time.Since(revoked), 5*time.Second, "fenced by a heartbeat, not by a TTL")
	v, err := suite.wdc.Task(context.Background(), env.TaskID)
	require.NoError(t, err)
	require.NotEmpty(t, v.Leases)
	assert.Equal(t, lease.Revoked, v.Leases[0].State)
	assert.Equal(t, string(lease.ReasonWorkerLost), v.Leases[0].EndReason)

	waitFor(t, 15*time.Second, "the cancelled lease activity timed out", func() bool {
		return countEvents(t, api.TaskWorkflowID(env.TaskID), enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT) > 0
	})
	_, err = suite.wdc.CancelTask(context.Background(), env.TaskID, "test done")
	require.NoError(t, err)
	out, _ := waitOutcome(t, env.TaskID)
	assert.Equal(t, api.TaskCancelled, out.State)
	assert.Zero(t, countFailedWorkflowTasks(t, api.TaskWorkflowID(env.TaskID)), "no workflow task failed but for a raced completion")
	if *updateHistories {
		writeHistory(t, api.TaskWorkflowID(env.TaskID))
	}
}
