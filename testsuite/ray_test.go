package testsuite

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	raytest "github.com/wdc-runtime/wdc/internal/testenv/ray"
	"github.com/wdc-runtime/wdc/launchers/ray"
	"github.com/wdc-runtime/wdc/lease"
)

// These tests run a Ray cluster's worker: `wdc agent --launcher ray`
// against the in-repo emulator of the dashboard's Jobs API
// (internal/testenv/ray), whose jobs run their entrypoint — this binary as
// `wdc exec` — as local processes with the emulated node's environment.

// rayNodeSecret is set in the emulated Ray node's environment: the
// entrypoint sees it (as on a real node), the task's command must not.
const rayNodeSecret = "RAY_NODE_SECRET=hunter2-on-the-node"

// startRay starts an emulator whose node environment is this process's
// (in the S3 mode of the suite: the store's credentials, as a real node
// would have them set), the switch that makes this binary wdc, and a
// secret.
func startRay(t *testing.T, opts raytest.Options) *raytest.Emulator {
	t.Helper()
	opts.NodeEnv = append(os.Environ(), envRunCLI+"=1", rayNodeSecret)
	emu, err := raytest.Start(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, j := range emu.Jobs() {
				t.Logf("ray job %s %s (deleted %v): %s\nlogs:\n%s", j.SubmissionID, j.Status, j.Deleted, j.Message, j.Logs())
			}
		}
		emu.Close()
	})
	return emu
}

// rayAgent spawns `wdc agent --launcher ray` on the emulator.
func rayAgent(t *testing.T, id string, emu *raytest.Emulator, extra ...string) {
	t.Helper()
	args := append([]string{"--launcher", "ray", "--ray-address", emu.URL(), "--exec-binary", os.Args[0], "--ray-poll-interval", "200ms"}, extra...)
	spawnAgentArgs(t, id, args...)
	waitWorkersActive(t, id)
}

// rayEnvelope is taskEnvelope for launcher "ray".
func rayEnvelope(t *testing.T, taskID, script string) envelope.Envelope {
	env := taskEnvelope(t, taskID, script)
	env.Launcher = envelope.LauncherRay
	env.Normalize()
	require.NoError(t, env.Validate(true))
	return env
}

func jobOf(t *testing.T, emu *raytest.Emulator, taskID string, attempt, fence int64) raytest.Job {
	t.Helper()
	id := ray.SubmissionID(lease.Claim{TaskID: taskID, Attempt: attempt, Fence: fence})
	j, ok := emu.Job(id)
	require.True(t, ok, "ray job %s exists", id)
	return j
}

// A task placed on a Ray worker runs as a Ray job (submission_id
// <task>-a1-f1, entrypoint `wdc exec`) and its result is accepted. The
// node's environment reached the entrypoint, never the task's command.
// When the dashboard stops answering, the worker's heartbeats stop and it
// goes STALE.
func TestRayTaskIsAcceptedAndTheNodeEnvironmentStaysOut(t *testing.T) {
	emu := startRay(t, raytest.Options{})
	rayAgent(t, "ray-a", emu, "--stale-after", "3s", "--heartbeat-interval", "500ms")
	env := rayEnvelope(t, "ray-accepted", `env | sort > outputs/env.txt; echo ok > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 10 * time.Second})

	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Len(t, view.Leases, 1, "no retry")
	assert.Equal(t, "ray-a", view.Result.WorkerID)
	assert.Equal(t, emu.URL()+"/api/jobs/ray-accepted-a1-f1", view.AttemptDir, "the launch names the Ray job")
	assert.Equal(t, "ok\n", readArtifact(t, view.Result, "done.txt"))

	job := jobOf(t, emu, env.TaskID, 1, 1)
	require.Eventually(t, func() bool { return jobOf(t, emu, env.TaskID, 1, 1).Status == raytest.Succeeded }, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, os.Args[0]+" exec", job.Entrypoint)
	assert.Equal(t, "ray-accepted", job.Metadata[ray.MetaTask])
	assert.Equal(t, "1", job.Metadata[ray.MetaFence])
	assert.Equal(t, "run-ray-accepted", job.Metadata[ray.MetaRun])
	assert.Contains(t, job.Env, rayNodeSecret, "the entrypoint has the node's environment, as on Ray")
	envTxt := readArtifact(t, view.Result, "env.txt")
	for _, leak := range []string{"hunter2", "RAY_", "PYTHONUNBUFFERED", "WDC_EXEC", "TEMPORAL", "AWS_", envRunCLI, "HOME="} {
		assert.NotContains(t, envTxt, leak, "the node's or the executor's environment reached the task")
	}
	assert.Contains(t, envTxt, "WDC_TASK_ID=ray-accepted\n")
	assert.Contains(t, envTxt, "PATH=/usr/bin:/bin\n")

	// The cluster stops answering: no more worker heartbeats.
	emu.Close()
	waitFor(t, 20*time.Second, "ray-a STALE", func() bool {
		v, err := suite.wdc.Worker(context.Background(), "ray-a")
		return err == nil && v.State == fleet.Stale
	})
}

// A Ray job that stalls (its processes frozen: no heartbeats) past the
// lease TTL is stopped and deleted; the retry is a new job (new
// submission_id, fence 2) and is accepted. While it runs, the stale
// attempt cannot hand anything back: its `wdc exec` run again is refused
// as not current, and a result under its claim is refused stale_fence.
func TestStalledRayJobIsStoppedAndTheRetryIsAccepted(t *testing.T) {
	emu := startRay(t, raytest.Options{})
	rayAgent(t, "ray-b", emu)
	stop := filepath.Join(t.TempDir(), "stop")
	env := rayEnvelope(t, "ray-stall", `if [ "$WDC_ATTEMPT" = 1 ]; then sleep 60; fi
while [ ! -e "$STOP" ]; do sleep 0.1; done; echo "attempt $WDC_ATTEMPT" > outputs/done.txt`)
	env.Env["STOP"] = stop
	submit(t, env, api.TaskOptions{LeaseTTL: 3 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})

	first := ray.SubmissionID(lease.Claim{TaskID: env.TaskID, Attempt: 1, Fence: 1})
	waitFor(t, 20*time.Second, "attempt 1's command running", func() bool {
		j, ok := emu.Job(first)
		return ok && j.Status == raytest.Running && strings.Contains(j.Logs(), "started pid")
	})
	require.NoError(t, emu.Freeze(first))

	second := ray.SubmissionID(lease.Claim{TaskID: env.TaskID, Attempt: 2, Fence: 2})
	waitFor(t, 30*time.Second, "attempt 2's command running in a new job", func() bool {
		j, ok := emu.Job(second)
		return ok && j.Status == raytest.Running && strings.Contains(j.Logs(), "started pid")
	})
	waitFor(t, 20*time.Second, "attempt 1's job stopped and deleted", func() bool {
		j := jobOf(t, emu, env.TaskID, 1, 1)
		return j.Status == raytest.Stopped && j.Deleted
	})

	// The stale job's own command, run again: refused, nothing started.
	stale := jobOf(t, emu, env.TaskID, 1, 1)
	vars := stale.Body["runtime_env"].(map[string]any)["env_vars"].(map[string]any)
	c := exec.Command(os.Args[0], "exec")
	c.Env = append(os.Environ(), envRunCLI+"=1")
	for k, v := range vars {
		c.Env = append(c.Env, k+"="+v.(string))
	}
	outb, _ := c.CombinedOutput()
	assert.Equal(t, cmd.ExitNotCurrent, c.ProcessState.ExitCode(), "%s", outb)
	assert.Contains(t, string(outb), "nothing was started")

	// A result under the stale claim is refused by the fence check.
	v, err := suite.wdc.Task(context.Background(), env.TaskID)
	require.NoError(t, err)
	require.Len(t, v.Leases, 2)
	_, err = submitAs(t, suite.client, "stale-ray-result", api.SubmitResultInput{Claim: lease.ClaimOf(v.Leases[0])})
	require.Error(t, err)
	assert.Contains(t, err.Error(), string(lease.RejectStaleFence))

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Len(t, view.Directives, 1)
	assert.Equal(t, lease.ReasonLeaseExpired, view.Directives[0].Reason)
	assert.Equal(t, int64(2), view.Result.Fence)
	// Retried: on attempt 2, or 3 when attempt 2 was granted while no
	// agent ran and the re-registration found no job of it either.
	assert.Greater(t, view.Result.Fence, int64(1))
	assert.NotEqual(t, "attempt 1\n", readArtifact(t, view.Result, "done.txt"))
}

// The emulator creates the job and cuts the connection before answering
// the submit: the launcher reads the job before anything else, finds it,
// and the attempt runs — one job, one POST, no retry.
func TestRaySubmitWithADroppedAnswerMakesOneJob(t *testing.T) {
	var once sync.Once
	emu := startRay(t, raytest.Options{DropSubmitResponse: func(string) bool {
		dropped := false
		once.Do(func() { dropped = true })
		return dropped
	}})
	rayAgent(t, "ray-c", emu)
	env := rayEnvelope(t, "ray-dropped", `echo ok > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 10 * time.Second})

	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	assert.Len(t, view.Leases, 1, "no retry")
	assert.Empty(t, view.Directives)
	jobs := emu.Jobs()
	require.Len(t, jobs, 1, "one job for the attempt")
	assert.Equal(t, "ray-dropped-a1-f1", jobs[0].SubmissionID)
	assert.Equal(t, 1, emu.Submits(), "the cut submit was followed by a GET, not a second submit")
}

// A job that stays PENDING (no node has its resources) past
// --ray-pending-timeout is stopped, and the attempt ends launch_failed;
// the retry, which Ray starts, is accepted.
func TestPendingForeverRayJobEndsLaunchFailed(t *testing.T) {
	emu := startRay(t, raytest.Options{HoldPending: func(id string) bool { return strings.HasSuffix(id, "-a1-f1") }})
	rayAgent(t, "ray-d", emu, "--ray-pending-timeout", "2s")
	env := rayEnvelope(t, "ray-pending", `echo ok > outputs/done.txt`)
	d := completedAfterOneRetry(t, env)
	assert.Equal(t, lease.ReasonLaunchFailed, d.Reason)
	assert.Contains(t, d.Detail, "still PENDING after 2s")
	waitFor(t, 20*time.Second, "the pending job stopped and deleted", func() bool {
		j := jobOf(t, emu, env.TaskID, 1, 1)
		return j.Status == raytest.Stopped && j.Deleted
	})
}

// A job that fails without a result (killed on the node) is infra_killed,
// and the retry directive carries the job's last log lines.
func TestFailedRayJobIsInfraKilledWithItsLog(t *testing.T) {
	emu := startRay(t, raytest.Options{})
	rayAgent(t, "ray-e", emu)
	env := rayEnvelope(t, "ray-killed", `if [ "$WDC_ATTEMPT" = 1 ]; then sleep 1; kill -9 $PPID; sleep 5; fi; echo ok > outputs/done.txt`)
	d := completedAfterOneRetry(t, env)
	assert.Equal(t, lease.ReasonInfraKilled, d.Reason)
	assert.Contains(t, d.Detail, "ray job ray-killed-a1-f1 FAILED")
	assert.Contains(t, d.Detail, "last log lines:")
	assert.Contains(t, d.Detail, "started pid", "wdc exec's progress (printed before the kill), from the job's log")
}

// completedAfterOneRetry submits env, expects it COMPLETED by attempt 2
// after one retry, and returns that retry's directive.
func completedAfterOneRetry(t *testing.T, env envelope.Envelope) lease.RetryDirective {
	t.Helper()
	submit(t, env, api.TaskOptions{LeaseTTL: 30 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Len(t, view.Directives, 1)
	require.Equal(t, int64(2), view.Result.Fence)
	return view.Directives[0]
}

// An agent whose dashboard does not answer, or runs a Ray too old for
// submission_id, does not register: it exits 1 naming the dashboard.
func TestRayAgentNeedsAnAnsweringDashboard(t *testing.T) {
	code, _, stderr := cli(t, "agent", "--identity", "off", "--worker-id", "ray-none", "--launcher", "ray", "--ray-address", "http://127.0.0.1:1",
		"--data-dir", t.TempDir(), "--control-plane-timeout", "2s")
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "ray dashboard http://127.0.0.1:1 does not answer GET /api/version")

	old := startRay(t, raytest.Options{RayVersion: "1.13.0"})
	code, _, stderr = cli(t, "agent", "--identity", "off", "--worker-id", "ray-old", "--launcher", "ray", "--ray-address", old.URL(), "--data-dir", t.TempDir())
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "ray version 1.13.0: older than 2.0")
	_, err := suite.wdc.Worker(context.Background(), "ray-old")
	assert.Error(t, err, "never registered")
}

// A Ray agent killed (SIGKILL) while its jobs run, and started again: its
// new incarnation adopts the jobs still running, so their attempts keep
// their leases and complete on attempt 1, and a cancel reaches an adopted
// job. A job stopped while no agent ran is not adopted: its task retries.
func TestRestartedRayAgentAdoptsItsRunningJobs(t *testing.T) {
	const id = "ray-restart"
	ctx := context.Background()
	emu := startRay(t, raytest.Options{})
	args := []string{"--launcher", "ray", "--ray-address", emu.URL(), "--exec-binary", os.Args[0], "--ray-poll-interval", "200ms",
		"--cpu", "4", "--stale-after", "20s", "--offline-after", "60s"}
	first := spawnAgentArgs(t, id, args...)
	waitWorkersActive(t, id)

	release := filepath.Join(t.TempDir(), "release")
	defer os.WriteFile(release, nil, 0o644)
	wait := `while [ ! -e "$RELEASE" ]; do sleep 0.1; done; echo "attempt $WDC_ATTEMPT" > outputs/done.txt`
	kept, gone, cancelled := []string{"ray-adopt-1", "ray-adopt-2"}, "ray-adopt-gone", "ray-adopt-cancel"
	all := append(append([]string{}, kept...), gone, cancelled)
	for _, task := range all {
		env := rayEnvelope(t, task, wait)
		env.Env["RELEASE"] = release
		submit(t, env, api.TaskOptions{LeaseTTL: 6 * time.Second, MaxAttempts: 3, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	}
	for _, task := range all {
		sid := ray.SubmissionID(lease.Claim{TaskID: task, Attempt: 1, Fence: 1})
		waitFor(t, 30*time.Second, task+"'s command running", func() bool {
			j, ok := emu.Job(sid)
			return ok && j.Status == raytest.Running && strings.Contains(j.Logs(), "started pid")
		})
	}

	// The agent dies; the jobs run on. One is stopped meanwhile.
	require.NoError(t, first.Process.Kill())
	_, _ = first.Process.Wait()
	rc, err := ray.NewClient(ray.ClientOptions{Address: emu.URL()})
	require.NoError(t, err)
	goneID := ray.SubmissionID(lease.Claim{TaskID: gone, Attempt: 1, Fence: 1})
	_, err = rc.Stop(ctx, goneID)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, gone+"'s job stopped", func() bool { return jobOf(t, emu, gone, 1, 1).Status == raytest.Stopped })

	spawnAgentArgs(t, id, args...)
	var v api.WorkerView
	waitFor(t, 30*time.Second, id+" registered again", func() bool {
		v, err = suite.wdc.Worker(ctx, id)
		return err == nil && v.Incarnation == 2 && v.State == fleet.Active
	})
	held := map[string]int64{}
	for _, r := range v.Reservations {
		held[r.TaskID] = r.Fence
	}
	for _, task := range append(append([]string{}, kept...), cancelled) {
		assert.Equal(t, int64(1), held[task], "%s adopted: %+v", task, v.Reservations)
		lv, err := suite.wdc.Task(ctx, task)
		require.NoError(t, err)
		require.Len(t, lv.Leases, 1, "%s: no retry", task)
		assert.Equal(t, lease.Active, lv.Leases[0].State, "%s keeps its lease", task)
	}

	_, err = suite.wdc.CancelTask(ctx, cancelled, "test")
	require.NoError(t, err)
	// The agent's stop, or the job's own `wdc exec` finding its lease
	// revoked first (then the job FAILED), whichever comes first.
	waitFor(t, 30*time.Second, "the cancelled task's adopted job ended", func() bool {
		return raytest.Terminal(jobOf(t, emu, cancelled, 1, 1).Status)
	})

	require.NoError(t, os.WriteFile(release, nil, 0o644))
	for _, task := range kept {
		out, view := waitOutcome(t, task)
		require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
		require.Len(t, view.Leases, 1, "%s: completed on attempt 1, no retry", task)
		assert.Empty(t, view.Directives)
		assert.Equal(t, "attempt 1\n", readArtifact(t, view.Result, "done.txt"))
	}
	out, view := waitOutcome(t, gone)
	require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
	require.GreaterOrEqual(t, len(view.Directives), 1)
	// worker_lost (the re-registration did not adopt it), or the
	// executor's own report of its stop, or the lease's expiry.
	assert.Contains(t, []lease.RetryReason{lease.ReasonWorkerLost, lease.ReasonInfraKilled, lease.ReasonLeaseExpired}, view.Directives[0].Reason, view.Directives[0].Detail)
	// Retried: on attempt 2, or 3 when attempt 2 was granted while no
	// agent ran and the re-registration found no job of it either.
	assert.Greater(t, view.Result.Fence, int64(1))
	assert.NotEqual(t, "attempt 1\n", readArtifact(t, view.Result, "done.txt"))
}
