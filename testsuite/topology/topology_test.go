package topology

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
)

// outage is how long the Temporal server stays down when a scenario
// restarts it (it starts again in about a second).
const outage = 3 * time.Second

// label selects the topology's own agents (the demo brings its own).
const label = "topology"

// The production topology, natively: PostgreSQL, the official
// temporal-server, the one setup step (`wdc control-plane
// --register-search-attributes`), two control planes and two agents, all
// separate processes. On it: the reference demo, a control plane killed
// under a leased task, and the Temporal server restarted under a leased
// task (agent heartbeating, and agent stopped).
func TestProductionTopology(t *testing.T) {
	began := time.Now()
	c := startCluster(t)

	// On a fresh cluster a control plane refuses to start until wdc's
	// search attributes exist, and says how to add them.
	out, err := c.wdcCmd("control-plane").CombinedOutput()
	require.Error(t, err, "control plane started on a namespace without wdc's search attributes:\n%s", out)
	require.Contains(t, string(out), "lacks wdc's search attributes")
	require.Contains(t, string(out), "--register-search-attributes")

	cps := []*proc{c.spawn("control-plane-1", "control-plane", "--register-search-attributes")}
	cps[0].waitLog(t, 60*time.Second, "control plane polling wdc-control")
	cps = append(cps, c.spawn("control-plane-2", "control-plane"))
	cps[1].waitLog(t, 60*time.Second, "control plane polling wdc-control")
	agents := map[string]*proc{}
	for _, id := range []string{"topo-a", "topo-b"} {
		// Worker liveness windows longer than the scenarios' stops, so
		// that a stopped agent loses its lease by the lease's own TTL.
		agents[id] = c.spawn("agent-"+id, "agent", "--worker-id", id, "--cpu", "1", "--memory", "1Gi",
			"--label", label+"=yes", "--stale-after", "60s", "--offline-after", "5m")
	}
	waitFor(t, 60*time.Second, "agents topo-a and topo-b ACTIVE", func() bool {
		views, err := c.wdc.ListWorkers(context.Background(), string(fleet.Active))
		n := 0
		for _, v := range views {
			if agents[v.WorkerID] != nil {
				n++
			}
		}
		return err == nil && n == len(agents)
	})
	t.Logf("topology up in %s", time.Since(began).Round(100*time.Millisecond))

	t.Run("demo", func(t *testing.T) { testDemo(t, c) })
	if t.Failed() {
		return
	}
	t.Run("control plane killed under a lease", func(t *testing.T) {
		cps = testControlPlaneKilled(t, c, cps)
	})
	if t.Failed() {
		return
	}
	t.Run("server restarted, agent heartbeating", func(t *testing.T) { testServerRestartHeartbeating(t, c) })
	if t.Failed() {
		return
	}
	t.Run("server restarted, agent stopped", func(t *testing.T) { testServerRestartAgentStopped(t, c, agents) })
}

// The reference demo against the official server prints the expected values.
func testDemo(t *testing.T, c *cluster) {
	began := time.Now()
	cmd := c.wdcCmd("demo", "worker-leases")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("wdc demo worker-leases: %s\n%s", time.Since(began).Round(100*time.Millisecond), stderr.String())
	require.NoError(t, err, "wdc demo worker-leases failed:\n%s", stdout.String())
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, 12, stdout.String())
	assert.Equal(t, []string{
		"attempt_1 = 1",
		"fence_1 = 1",
		"retry_reason = lease_expired",
		"attempt_2 = 2",
		"fence_2 = 2",
		"stale_result_rejected = true",
		"final_run_status = COMPLETED",
		"final_lease_status = COMPLETED",
		"worker_result_event_count = 1",
		"evidence = 0 -> 0",
		"parent_time = 0 -> 0",
	}, lines[:11])
	assert.Regexp(t, regexp.MustCompile(`^accepted_artifact = outputs/summary\.json sha256:[0-9a-f]{64}$`), lines[11])
}

// kill -9 of the control plane that runs a leased task's workflow: the
// other control plane carries on; no second lease, the task completes on
// attempt 1.
func testControlPlaneKilled(t *testing.T, c *cluster, cps []*proc) []*proc {
	// The task workflow stalls on the killed control plane's sticky queue
	// until Temporal's sticky schedule-to-start timeout (5 s) sends it to
	// the shared queue; heartbeats wait as signals meanwhile.
	env := topoTask(t, "cp-killed", `sleep 20; echo done > outputs/done.txt`)
	c.submit(t, env, api.TaskOptions{LeaseTTL: 15 * time.Second, MaxAttempts: 3})
	t.Cleanup(func() { c.logHistoryIfFailed(t, env.TaskID) })
	v := c.waitRunning(t, env.TaskID)
	held := v.Lease.HeartbeatSeq

	// The control plane that completed the task's last workflow task holds
	// it in its cache (sticky queue): that is the one to kill.
	victim := c.lastWorkflowTaskWorker(t, env.TaskID, cps)
	require.NotNil(t, victim, "no control plane's identity in %s's history", api.TaskWorkflowID(env.TaskID))
	var survivor *proc
	for _, p := range cps {
		if p != victim {
			survivor = p
		}
	}
	require.NoError(t, syscall.Kill(-victim.cmd.Process.Pid, syscall.SIGKILL))
	killed := time.Now()
	t.Logf("killed %s (pid %d) while attempt 1 held the lease (heartbeat seq %d)", victim.name, victim.cmd.Process.Pid, held)

	out, v := c.waitOutcome(t, env.TaskID, 90*time.Second)
	assert.Equal(t, api.TaskCompleted, out.State)
	assert.Equal(t, int64(1), out.Attempts, "the task completed on attempt 1")
	require.Len(t, v.Leases, 1, "no second lease")
	assert.Equal(t, int64(1), v.Leases[0].Fence)
	assert.Equal(t, lease.Completed, v.Leases[0].State)
	assert.Greater(t, v.Leases[0].HeartbeatSeq, held, "heartbeats went on after the kill")
	assert.Empty(t, v.Directives, "no retry directive")
	require.NotNil(t, v.Result)
	assert.Equal(t, 0, v.Result.ExitCode)

	// Every workflow task after the kill ran on the survivor.
	after := c.workflowTaskIdentities(t, env.TaskID, killed)
	require.NotEmpty(t, after, "no workflow task after the kill")
	for _, id := range after {
		assert.True(t, strings.HasSuffix(id, fmt.Sprintf("/%d", survivor.cmd.Process.Pid)),
			"workflow task after the kill by %s, not %s (pid %d)", id, survivor.name, survivor.cmd.Process.Pid)
	}
	c.checkRunResult(t, env.RunID)

	// A replacement joins, for the scenarios after this one.
	cp := c.spawn("control-plane-3", "control-plane")
	cp.waitLog(t, 60*time.Second, "control plane polling wdc-control")
	return []*proc{survivor, cp}
}

// The Temporal server process is killed and started again while a task is
// leased and its agent keeps heartbeating: the lease survives (heartbeats
// resume), the task completes on attempt 1, nothing is lost.
func testServerRestartHeartbeating(t *testing.T, c *cluster) {
	env := topoTask(t, "restart-hb", `sleep 15; echo done > outputs/done.txt`)
	c.submit(t, env, api.TaskOptions{LeaseTTL: 20 * time.Second, HeartbeatInterval: 2 * time.Second, MaxAttempts: 3})
	v := c.waitRunning(t, env.TaskID)

	down := time.Now()
	c.killServer()
	time.Sleep(outage)
	c.startServer()
	back := time.Now()
	t.Logf("server down for %s", time.Since(down).Round(100*time.Millisecond))
	// Heartbeats resume: Temporal records one on the lease activity after
	// the restart (the task sleeps well past it).
	var beat time.Time
	waitFor(t, 10*time.Second, "a lease heartbeat after the restart", func() bool {
		beat = c.leaseHeartbeatAt(t, env.TaskID, v.Lease.Fence)
		return beat.After(back)
	})

	out, v := c.waitOutcome(t, env.TaskID, 90*time.Second)
	assert.Equal(t, api.TaskCompleted, out.State)
	assert.Equal(t, int64(1), out.Attempts, "the task completed on attempt 1")
	require.Len(t, v.Leases, 1, "no second lease")
	assert.Equal(t, lease.Completed, v.Leases[0].State)
	assert.Empty(t, v.Directives, "no retry directive")
	require.NotNil(t, v.Result)
	assert.Equal(t, 0, v.Result.ExitCode)
	c.checkRunResult(t, env.RunID)
}

// The agent holding a lease is stopped (SIGSTOP), then the Temporal server
// is killed and started again: the lease expires TTL after its last
// heartbeat, not TTL after the restart; attempt 2 on the other worker
// completes the task; the stopped attempt, resumed, is fenced off.
func testServerRestartAgentStopped(t *testing.T, c *cluster, agents map[string]*proc) {
	ttl := 15 * time.Second
	env := topoTask(t, "restart-stop", `if [ "$WDC_ATTEMPT" = 1 ]; then sleep 60; fi; echo done > outputs/done.txt`)
	c.submit(t, env, api.TaskOptions{LeaseTTL: ttl, HeartbeatInterval: time.Second, MaxAttempts: 3})
	v := c.waitRunning(t, env.TaskID)
	// Heartbeating on its lease activity (task generation 3): Temporal
	// records the heartbeats, the task's view keeps the first one's.
	waitFor(t, 10*time.Second, "attempt 1 heartbeating", func() bool {
		v = c.task(t, env.TaskID)
		return v.LeaseActivity != "" && !c.leaseHeartbeatAt(t, env.TaskID, v.Lease.Fence).IsZero()
	})
	holder := agents[v.Lease.WorkerID]
	require.NotNil(t, holder, "lease held by %s", v.Lease.WorkerID)
	require.NoError(t, syscall.Kill(holder.cmd.Process.Pid, syscall.SIGSTOP))
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(holder.cmd.Process.Pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	// A heartbeat in flight when the agent stopped lands within a moment.
	time.Sleep(1500 * time.Millisecond)
	last := c.task(t, env.TaskID).Lease
	require.Equal(t, lease.Active, last.State)
	lastBeat := c.leaseHeartbeatAt(t, env.TaskID, last.Fence)
	require.False(t, lastBeat.IsZero(), "no heartbeat recorded on the lease activity")
	t.Logf("stopped %s; last heartbeat recorded at %s", holder.name, lastBeat.Format("15:04:05.000"))

	c.killServer()
	time.Sleep(outage)
	c.startServer()
	back := time.Now()
	require.True(t, back.Before(lastBeat.Add(ttl)), "the server came back after the lease's deadline (%s): the scenario needs a longer TTL", lastBeat.Add(ttl))

	var first lease.Lease
	waitFor(t, 2*ttl, "attempt 1's lease ended", func() bool {
		v := c.task(t, env.TaskID)
		if len(v.Leases) == 0 || v.Leases[0].State == lease.Active {
			return false
		}
		first = v.Leases[0]
		return true
	})
	after := first.EndedAt.Sub(lastBeat)
	t.Logf("lease %s (%s) %s after its last heartbeat, %s after the server was back",
		first.State, first.EndReason, after.Round(time.Millisecond), first.EndedAt.Sub(back).Round(time.Millisecond))
	assert.Equal(t, lease.Expired, first.State)
	assert.Equal(t, string(lease.ReasonLeaseExpired), first.EndReason)
	assert.Equal(t, last.HeartbeatSeq, first.HeartbeatSeq, "no heartbeat after the agent stopped")
	// Temporal's heartbeat timeout ends the lease; workflow time and the
	// recorded heartbeat are both the server's clock (whole milliseconds).
	assert.GreaterOrEqual(t, after, ttl-50*time.Millisecond, "expired before TTL after its last heartbeat")
	assert.Less(t, after, ttl+3*time.Second, "expired late: TTL after the last heartbeat is the deadline")
	assert.True(t, first.EndedAt.Before(back.Add(ttl)), "the restart did not push the deadline to TTL after it")

	resume()
	out, v := c.waitOutcome(t, env.TaskID, 90*time.Second)
	assert.Equal(t, api.TaskCompleted, out.State)
	assert.Equal(t, int64(2), out.Attempts)
	require.Len(t, v.Leases, 2)
	assert.Equal(t, int64(2), v.Leases[1].Fence)
	assert.Equal(t, lease.Completed, v.Leases[1].State)
	assert.NotEqual(t, first.WorkerID, v.Leases[1].WorkerID, "attempt 2 avoids the worker that lost the lease")
	require.Len(t, v.Directives, 1)
	assert.Equal(t, lease.ReasonLeaseExpired, v.Directives[0].Reason)
	require.NotNil(t, v.Result)
	assert.Equal(t, int64(2), v.Result.Fence, "the accepted result is attempt 2's")
	c.checkRunResult(t, env.RunID)
}

// topoTask is an envelope for the topology's agents running script.
func topoTask(t *testing.T, id, script string) envelope.Envelope {
	t.Helper()
	env := envelope.Envelope{
		TaskID: id, RunID: "run-" + id, WorldID: "topology",
		Command:   []string{"/bin/sh", "-c", script},
		Env:       map[string]string{"PATH": "/usr/bin:/bin"},
		Resources: resource.List{CPUMillis: 100},
		Selector:  map[string]string{label: "yes"},
	}
	env.Normalize()
	require.NoError(t, env.Validate(true))
	return env
}

// wdcCmd is this test binary as `wdc ARGS --address … --data-dir …`.
func (c *cluster) wdcCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append(args, "--address", c.address(), "--data-dir", c.dataDir)...)
	// This topology runs with identity off (its subject is PostgreSQL and
	// the official server): control planes and agents must say so.
	cmd.Env = append(os.Environ(), envRunCLI+"=1", "WDC_IDENTITY=off")
	return cmd
}

func (c *cluster) submit(t *testing.T, env envelope.Envelope, opts api.TaskOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.wdc.SubmitTask(ctx, env, opts)
	require.NoError(t, err)
}

// task queries the task's lease view, retrying while the server is not
// answering.
// leaseHeartbeatAt is when Temporal last recorded a heartbeat on the
// task's lease activity for fence (zero: none).
func (c *cluster) leaseHeartbeatAt(t *testing.T, id string, fence int64) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	at, err := c.wdc.LeaseHeartbeatAt(ctx, id, fence)
	if err != nil {
		t.Logf("lease heartbeat of %s: %v", id, err)
	}
	return at
}

func (c *cluster) task(t *testing.T, id string) api.TaskView {
	t.Helper()
	var v api.TaskView
	waitFor(t, 30*time.Second, "lease query of "+id, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		v, err = c.wdc.Task(ctx, id)
		return err == nil
	})
	return v
}

// waitRunning waits until attempt 1's command runs.
func (c *cluster) waitRunning(t *testing.T, id string) api.TaskView {
	t.Helper()
	var v api.TaskView
	waitFor(t, 30*time.Second, id+" attempt 1 running", func() bool {
		v = c.task(t, id)
		return v.Lease != nil && v.Lease.State == lease.Active && v.AttemptDir != ""
	})
	return v
}

func (c *cluster) waitOutcome(t *testing.T, id string, timeout time.Duration) (api.TaskOutcome, api.TaskView) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := c.wdc.WaitTask(ctx, id)
	require.NoError(t, err)
	return out, c.task(t, id)
}

// checkRunResult checks that the task's result reached its run: one
// worker_result event, once the run read the ended task's outcome (a
// moment after the task's workflow closed).
func (c *cluster) checkRunResult(t *testing.T, runID string) {
	t.Helper()
	var rv api.RunView
	waitFor(t, 10*time.Second, "run "+runID+" has its task's outcome", func() bool {
		var err error
		rv, err = c.wdc.Run(context.Background(), runID)
		return err == nil && rv.TaskCounts.Total > 0 && rv.TaskCounts.Open == 0
	})
	assert.Equal(t, int64(1), rv.WorkerResultEvents, "one worker_result event in run %s", runID)
}

// workflowTaskIdentities returns the identities of the workers that
// completed the task workflow's workflow tasks after since.
func (c *cluster) workflowTaskIdentities(t *testing.T, id string, since time.Time) []string {
	t.Helper()
	var ids []string
	it := c.client.GetWorkflowHistory(context.Background(), api.TaskWorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED && ev.GetEventTime().AsTime().After(since) {
			ids = append(ids, ev.GetWorkflowTaskCompletedEventAttributes().GetIdentity())
		}
	}
	return ids
}

// lastWorkflowTaskWorker returns the control plane whose process completed
// the task workflow's last workflow task (api.ControlPlaneIdentity ends
// in "/<pid>").
func (c *cluster) lastWorkflowTaskWorker(t *testing.T, id string, cps []*proc) *proc {
	t.Helper()
	ids := c.workflowTaskIdentities(t, id, time.Time{})
	require.NotEmpty(t, ids)
	last := ids[len(ids)-1]
	for _, p := range cps {
		if strings.HasSuffix(last, fmt.Sprintf("/%d", p.cmd.Process.Pid)) {
			return p
		}
	}
	t.Logf("last workflow task of %s by %q", id, last)
	return nil
}

// logHistoryIfFailed logs the task workflow's history when t failed.
func (c *cluster) logHistoryIfFailed(t *testing.T, id string) {
	if !t.Failed() {
		return
	}
	it := c.client.GetWorkflowHistory(context.Background(), api.TaskWorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var b strings.Builder
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			fmt.Fprintf(&b, "history: %v\n", err)
			break
		}
		fmt.Fprintf(&b, "%4d %s %-45s", ev.GetEventId(), ev.GetEventTime().AsTime().Format("15:04:05.000"), ev.GetEventType())
		if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
			fmt.Fprintf(&b, " %s", a.GetSignalName())
		}
		if a := ev.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			fmt.Fprintf(&b, " %s", a.GetIdentity())
		}
		b.WriteString("\n")
	}
	t.Logf("history of %s:\n%s", api.TaskWorkflowID(id), b.String())
}
