package testsuite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/demo"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// The reference scenario through the real CLI: every printed value
// holds, in under 30 s.
func TestDemoWorkerLeases(t *testing.T) {
	began := time.Now()
	code, out, errOut := cli(t, "demo", "worker-leases", "-o", "json", "--data-dir", suite.dataDir)
	require.Equal(t, 0, code, "stderr:\n%s", errOut)
	var res demo.Result
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Empty(t, res.Violations())
	assert.Equal(t, int64(1), res.Attempt1)
	assert.Equal(t, int64(1), res.Fence1)
	assert.Equal(t, "lease_expired", res.RetryReason)
	assert.Equal(t, int64(2), res.Attempt2)
	assert.Equal(t, int64(2), res.Fence2)
	assert.True(t, res.StaleResultRejected)
	assert.Equal(t, "stale_fence", res.StaleRejectReason)
	assert.Equal(t, "COMPLETED", res.FinalRunStatus)
	assert.Equal(t, "COMPLETED", res.FinalLeaseStatus)
	assert.Equal(t, int64(1), res.WorkerResultEventCount)
	assert.Equal(t, [2]int64{0, 0}, [2]int64{res.EvidenceBefore, res.EvidenceAfter})
	assert.Equal(t, [2]int64{0, 0}, [2]int64{res.ParentTimeBefore, res.ParentTimeAfter})
	assert.False(t, res.StaleArtifactInStore)
	assert.NotEqual(t, res.StaleArtifactDigest, res.AcceptedDigest, "the two attempts' summaries differ (they name their fence)")
	assert.Less(t, time.Since(began), 30*time.Second)
	t.Logf("demo took %.1fs", time.Since(began).Seconds())

	if *updateHistories {
		for _, wf := range []string{api.RunWorkflowID(res.RunID), api.TaskWorkflowID(res.TaskID), api.WorkerWorkflowID(res.Worker1)} {
			writeHistory(t, wf)
		}
	}
}

// taskEnvelope builds a sealed envelope that only this test's workers take.
func taskEnvelope(t *testing.T, taskID, script string) envelope.Envelope {
	env := envelope.Envelope{
		TaskID: taskID, RunID: "run-" + taskID, WorldID: "suite",
		Command:   []string{"/bin/sh", "-c", script},
		Env:       map[string]string{"PATH": "/usr/bin:/bin"},
		Resources: resource.List{CPUMillis: 100},
		Selector:  map[string]string{"suite-test": testLabel(t)},
	}
	env.Normalize()
	require.NoError(t, env.Validate(true))
	return env
}

func submit(t *testing.T, env envelope.Envelope, opts api.TaskOptions) {
	t.Helper()
	_, err := suite.wdc.SubmitTask(context.Background(), env, opts)
	require.NoError(t, err)
}

func waitOutcome(t *testing.T, taskID string) (api.TaskOutcome, api.TaskView) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := suite.wdc.WaitTask(ctx, taskID)
	require.NoError(t, err)
	view, err := suite.wdc.Task(ctx, taskID)
	require.NoError(t, err)
	return out, view
}

func readArtifact(t *testing.T, res *api.TaskResult, name string) string {
	t.Helper()
	return readArtifactFrom(t, suite.blobs, res, name)
}

// readArtifactFrom reads the result's artifact name from store.
func readArtifactFrom(t *testing.T, store *blobstore.Store, res *api.TaskResult, name string) string {
	t.Helper()
	require.NotNil(t, res)
	for _, a := range res.Artifacts {
		if a.Name == name {
			f, err := store.Open(context.Background(), a.Digest)
			require.NoError(t, err)
			defer f.Close()
			b := new(strings.Builder)
			_, err = io.Copy(b, f)
			require.NoError(t, err)
			return b.String()
		}
	}
	t.Fatalf("no artifact %s in %+v", name, res.Artifacts)
	return ""
}

// kill -9 of the agent running attempt 1: the lease expires and attempt 2
// runs on the other worker, with the same digest and a higher fence. A
// secret in the agents' environment never reaches the task.
func TestKillNineOfTheAgentMovesTheTaskElsewhere(t *testing.T) {
	agents := map[string]*os.Process{}
	for _, id := range []string{"kill9-a", "kill9-b"} {
		agents[id] = spawnAgent(t, id, "WDC_TEST_SECRET=hunter2").Process
	}
	waitWorkersActive(t, "kill9-a", "kill9-b")
	env := taskEnvelope(t, "kill9-task", `env | sort > outputs/env.txt
if [ "$WDC_ATTEMPT" = 1 ]; then sleep 60 & wait; fi
echo "done on attempt $WDC_ATTEMPT" > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 3 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})

	first := waitAttemptRunning(t, env.TaskID, 1)
	victim := first.Lease.WorkerID
	require.NoError(t, agents[victim].Signal(syscall.SIGKILL))
	killedAt := time.Now()

	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Len(t, view.Leases, 2)
	assert.Equal(t, victim, view.Leases[0].WorkerID)
	assert.NotEqual(t, victim, view.Leases[1].WorkerID, "attempt 2 runs elsewhere")
	assert.Equal(t, lease.Expired, view.Leases[0].State)
	assert.Equal(t, lease.Completed, view.Leases[1].State)
	assert.Equal(t, view.Leases[0].EnvelopeDigest, view.Leases[1].EnvelopeDigest)
	assert.Equal(t, int64(2), view.Leases[1].Fence)
	require.Len(t, view.Directives, 1)
	assert.Contains(t, []lease.RetryReason{lease.ReasonLeaseExpired, lease.ReasonWorkerLost}, view.Directives[0].Reason)
	t.Logf("attempt 2 accepted %.1fs after kill -9 (lease TTL 3s), retry reason %s", time.Since(killedAt).Seconds(), view.Directives[0].Reason)

	envTxt := readArtifact(t, view.Result, "env.txt")
	assert.NotContains(t, envTxt, "hunter2", "the agent's secret leaked into the task")
	assert.Contains(t, envTxt, "WDC_TASK_ID=kill9-task")
	assert.Contains(t, envTxt, "WDC_FENCE=2")
	assert.NotContains(t, envTxt, "HOME=")
	assert.Equal(t, "done on attempt 2\n", readArtifact(t, view.Result, "done.txt"))

	// Attempt 1 died with its agent: its fence watchdog saw the agent go
	// and killed the command's process group and cgroup, the background
	// sleep included (the agent's next start would reap anything left).
	attemptDir := filepath.Join(suite.dataDir, "work", victim, env.TaskID, "1-1")
	require.DirExists(t, attemptDir)
	waitFor(t, 5*time.Second, "attempt 1's processes gone with its agent", func() bool { return len(processesIn(attemptDir)) == 0 })
	spawnAgent(t, victim)
	waitFor(t, 10*time.Second, "the restarted agent's new incarnation", func() bool {
		v, err := suite.wdc.Worker(context.Background(), victim)
		return err == nil && v.Incarnation == 2 && v.State == fleet.Active
	})
}

// An output symlink is refused with a clear reason; the task still ends
// with the program's own result, and nothing of it enters the blob store.
func TestOutputSymlinkIsRejectedWithAClearReason(t *testing.T) {
	startAgent(t, "symlink-a")
	waitWorkersActive(t, "symlink-a")
	env := taskEnvelope(t, "symlink-task", `echo fine > outputs/ok.txt; ln -s /etc/passwd outputs/passwd`)
	submit(t, env, api.TaskOptions{})
	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.NotNil(t, view.Result)
	assert.Contains(t, view.Result.OutputError, "outputs/passwd: is a symlink")
	assert.Empty(t, view.Result.Artifacts)
	passwd, err := os.ReadFile("/etc/passwd")
	require.NoError(t, err)
	d := blobstore.DigestBytes(passwd)
	assert.False(t, has(t, suite.blobs, d))

	code, stdout, _ := cli(t, "tasks", "result", env.TaskID)
	assert.Equal(t, 4, code, "the result is shown; the exit code says the outputs were rejected")
	assert.Contains(t, stdout, "outputs rejected: outputs/passwd: is a symlink")
}

// A malformed envelope is refused at submit, naming the field, and nothing
// starts: no task workflow, no run.
func TestMalformedEnvelopeIsRefusedAtSubmit(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"task_id":"malformed-1","run_id":"malformed-run","world_id":"w",
		"command":["true"],"resources":{"cpu_millis":-5},"env":{"WDC_FENCE":"1"}}`), 0o644))
	code, _, errOut := cli(t, "tasks", "submit", file)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "resources.cpu_millis")
	assert.Contains(t, errOut, "env.WDC_FENCE")
	for _, wf := range []string{api.TaskWorkflowID("malformed-1"), api.RunWorkflowID("malformed-run")} {
		_, err := suite.client.DescribeWorkflowExecution(context.Background(), wf, "")
		var nf *serviceerror.NotFound
		assert.True(t, errors.As(err, &nf), "%s must not exist, got %v", wf, err)
	}
}

// Against the real server, with a worker that never runs the attempt (no
// agent): a result naming "../" is refused by the validator with the field
// named; the same submission sent twice (same update ID) is applied once.
func TestResultValidationAndDeduplication(t *testing.T) {
	id := "no-agent-worker"
	_, err := suite.wdc.RegisterWorker(context.Background(), fleet.Registration{
		WorkerID: id, Capacity: resource.List{CPUMillis: 1000}, Labels: map[string]string{"suite-test": testLabel(t)},
	})
	require.NoError(t, err)
	waitWorkersActive(t, id)
	env := taskEnvelope(t, "dedup-task", "true")
	digest, _ := env.Digest()
	submit(t, env, api.TaskOptions{LeaseTTL: time.Minute, LaunchTimeout: time.Minute})
	waitFor(t, 15*time.Second, "lease granted", func() bool {
		v, err := suite.wdc.Task(context.Background(), env.TaskID)
		return err == nil && v.State == api.TaskLeased
	})
	claim := api.Claim{TaskID: env.TaskID, WorkerID: id, Attempt: 1, Fence: 1, EnvelopeDigest: digest}
	wfID := api.TaskWorkflowID(env.TaskID)
	before := historyLength(t, wfID)

	send := func(in api.SubmitResultInput, updateID string) (api.SubmitResultResult, error) {
		var res api.SubmitResultResult
		h, err := suite.client.UpdateWorkflow(context.Background(), client.UpdateWorkflowOptions{
			WorkflowID: wfID, UpdateID: updateID, UpdateName: api.UpdateSubmitResult, Args: []any{in},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = h.Get(context.Background(), &res)
		}
		return res, err
	}
	// "../" in an artifact name.
	_, err = send(api.SubmitResultInput{Claim: claim, Artifacts: []api.Artifact{{Name: "../../etc/passwd", Digest: "sha256:" + strings.Repeat("a", 64)}}}, "evil")
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Equal(t, api.ErrTypeInvalidArgument, appErr.Type())
	assert.Contains(t, appErr.Message(), "artifacts[0].name")
	// Wrong worker and stale fence.
	wrong := claim
	wrong.WorkerID = "impostor"
	_, err = send(api.SubmitResultInput{Claim: wrong}, "impostor")
	require.True(t, errors.As(err, &appErr))
	assert.Equal(t, string(lease.RejectWrongWorker), appErr.Type())
	assert.Equal(t, before, historyLength(t, wfID), "rejected submissions write no history")

	// A heartbeat storm: 100 current-fence heartbeats and one stale one
	// add their signals to the history, and no timer per heartbeat.
	timersBefore := countEvents(t, wfID, enumspb.EVENT_TYPE_TIMER_STARTED)
	for i := int64(1); i <= 100; i++ {
		require.NoError(t, suite.client.SignalWorkflow(context.Background(), wfID, "", api.SignalLeaseHeartbeat, api.LeaseHeartbeatSignal{Claim: claim, Seq: i}))
	}
	stale := claim
	stale.Fence = 0
	require.NoError(t, suite.client.SignalWorkflow(context.Background(), wfID, "", api.SignalLeaseHeartbeat, api.LeaseHeartbeatSignal{Claim: stale, Seq: 1}))
	waitFor(t, 10*time.Second, "the storm applied", func() bool {
		v, err := suite.wdc.Task(context.Background(), env.TaskID)
		return err == nil && v.Stats.HeartbeatsAccepted == 100 && v.Stats.HeartbeatsRejected["stale_fence"] == 1
	})
	assert.Equal(t, 101, countEvents(t, wfID, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED))
	assert.Equal(t, timersBefore, countEvents(t, wfID, enumspb.EVENT_TYPE_TIMER_STARTED), "no timer per heartbeat")

	// A real staged artifact, submitted twice under the same update ID.
	content := []byte("result bytes\n")
	_, _, err = suite.blobs.Stage(context.Background(), blobstore.StagingPrefix(env.TaskID, 1, 1)+"r.txt", strings.NewReader(string(content)))
	require.NoError(t, err)
	d, n := blobstore.DigestBytes(content), int64(len(content))
	in := api.SubmitResultInput{Claim: claim, ExitCode: 0, Artifacts: []api.Artifact{{Name: "r.txt", Digest: d, SizeBytes: n}}}
	first, err := send(in, api.SubmitResultUpdateID(claim))
	require.NoError(t, err)
	second, err := send(in, api.SubmitResultUpdateID(claim))
	require.NoError(t, err)
	assert.Equal(t, first, second, "the resubmission returns the first outcome")
	assert.True(t, has(t, suite.blobs, d))

	out, view := waitOutcome(t, env.TaskID)
	assert.Equal(t, api.TaskCompleted, out.State)
	assert.Equal(t, lease.Completed, view.Lease.State)
	accepted := countEvents(t, wfID, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED)
	assert.Equal(t, 1, accepted, "one update applied")
	run := runWithEndedTasks(t, suite.wdc, env.RunID)
	assert.Equal(t, int64(1), run.WorkerResultEvents)
}

// Stopping an agent cleanly (Ctrl-C) hands its attempts back at once: the
// worker is drained, the attempt is killed and reported infra_killed, and
// the task retries elsewhere without waiting for its (long) lease TTL.
func TestAgentStopHandsAttemptsBack(t *testing.T) {
	agents := map[string]*worker.Agent{}
	for _, id := range []string{"stop-a", "stop-b"} {
		agents[id] = startAgent(t, id)
	}
	waitWorkersActive(t, "stop-a", "stop-b")
	env := taskEnvelope(t, "stop-task", `if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 60; fi; echo ok > outputs/ok`)
	submit(t, env, api.TaskOptions{LeaseTTL: 5 * time.Minute, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	first := waitAttemptRunning(t, env.TaskID, 1)
	victim := first.Lease.WorkerID
	stopped := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	agents[victim].Stop(ctx)

	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	assert.Less(t, time.Since(stopped), 20*time.Second, "no wait for the 5-minute lease TTL")
	require.Len(t, view.Directives, 1)
	assert.Equal(t, lease.ReasonInfraKilled, view.Directives[0].Reason)
	assert.Contains(t, view.Directives[0].Detail, "agent stopping")
	assert.NotEqual(t, victim, view.Leases[1].WorkerID)
	w, err := suite.wdc.Worker(context.Background(), victim)
	require.NoError(t, err)
	assert.Equal(t, fleet.Draining, w.State)
	assert.Equal(t, "agent stopping", w.DrainReason)
	if *updateHistories {
		writeHistory(t, api.TaskWorkflowID(env.TaskID)) // infra_killed retry
	}
}

// A task no worker fits waits (never fails), says why, and warns at submit;
// cancelling it ends it CANCELLED with the reason; cancelling again says it
// already ended. A launcher this version cannot run is refused at submit.
func TestUnfittableTaskWaitsAndCancels(t *testing.T) {
	startAgent(t, "unfit-a")
	waitWorkersActive(t, "unfit-a")
	dir := t.TempDir()
	file := filepath.Join(dir, "big.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"task_id":"unfit-task","run_id":"unfit-run","world_id":"suite",
		"command":["true"],"resources":{"cpu_millis":64000},"selector":{"suite-test":"`+testLabel(t)+`"}}`), 0o644))
	code, _, errOut := cli(t, "tasks", "submit", file)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "warning: task unfit-task will wait")
	assert.Contains(t, errOut, "cpu_millis: need 64000, capacity 2000")

	waitFor(t, 10*time.Second, "the task says why it waits", func() bool {
		v, err := suite.wdc.Task(context.Background(), "unfit-task")
		return err == nil && strings.Contains(v.Waiting, "insufficient_capacity")
	})
	code, _, errOut = cli(t, "tasks", "cancel", "unfit-task", "--reason", "too big")
	require.Equal(t, 0, code, errOut)
	v, err := suite.wdc.Task(context.Background(), "unfit-task")
	require.NoError(t, err)
	assert.Equal(t, api.TaskCancelled, v.State)
	assert.Equal(t, "too big", v.CancelReason)
	assert.Empty(t, v.Waiting)
	code, _, errOut = cli(t, "tasks", "cancel", "unfit-task")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "already ended CANCELLED")
	code, out, _ := cli(t, "tasks", "submit", file)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "already exists and ended CANCELLED")
	if *updateHistories {
		writeHistory(t, api.TaskWorkflowID("unfit-task")) // waiting, then cancelled
	}

	// A Kubernetes task is never placed on a Local worker: with no agent
	// declaring launcher/k8s it waits, and submit says so.
	k8sTask := filepath.Join(dir, "k8s.json")
	require.NoError(t, os.WriteFile(k8sTask, []byte(`{"task_id":"unfit-k8s-task","run_id":"unfit-run","world_id":"suite","command":["true"],"launcher":"k8s",
		"selector":{"suite-test":"`+testLabel(t)+`"}}`), 0o644))
	code, _, errOut = cli(t, "tasks", "submit", k8sTask)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "warning: task unfit-k8s-task will wait")
	assert.Contains(t, errOut, "launcher/k8s")
	code, _, errOut = cli(t, "tasks", "cancel", "unfit-k8s-task", "--reason", "test over")
	assert.Equal(t, 0, code, errOut)
}

// A program that fails is still a result (COMPLETED, not retried); `submit
// --wait` exits 4 and its stdout and stderr are kept with the result.
func TestProgramFailureIsAResultWithLogs(t *testing.T) {
	startAgent(t, "logs-a")
	waitWorkersActive(t, "logs-a")
	file := filepath.Join(t.TempDir(), "fail.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"task_id":"logs-task","run_id":"logs-run","world_id":"suite",
		"command":["/bin/sh","-c","echo hello-out; echo hello-err >&2; exit 3"],"env":{"PATH":"/usr/bin:/bin"},
		"selector":{"suite-test":"`+testLabel(t)+`"}}`), 0o644))
	code, out, errOut := cli(t, "tasks", "submit", file, "--wait", "--data-dir", suite.dataDir)
	assert.Equal(t, 4, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "result accepted: attempt 1, fence 1 from logs-a, exit code 3")
	assert.Contains(t, errOut, "COMPLETED with the program's exit code 3")

	code, out, _ = cli(t, "tasks", "logs", "logs-task", "--data-dir", suite.dataDir)
	assert.Equal(t, 0, code)
	assert.Equal(t, "hello-out\n", out)
	code, out, _ = cli(t, "tasks", "logs", "logs-task", "--stderr", "--data-dir", suite.dataDir)
	assert.Equal(t, 0, code)
	assert.Equal(t, "hello-err\n", out)
	_, view := waitOutcome(t, "logs-task")
	assert.Len(t, view.Leases, 1, "a failing program is not retried")
	// Completed by its first attempt, the task skips the cleanup activity:
	// ingest already removed everything that attempt staged.
	staged, err := suite.blobs.List(context.Background(), blobstore.TaskStagingPrefix("logs-task"))
	require.NoError(t, err)
	assert.Empty(t, staged, "nothing is left staged")
	// Selection and the ingest of a small result are local activities
	// (one marker each), the launch is the one activity, the
	// reservation's release and the report to the run leave from the
	// ingest (the task signals nothing and closes in the workflow task
	// that kept the result), and there are two upserts (LEASED,
	// COMPLETED) and no version marker: at most 21 events in all.
	wf := api.TaskWorkflowID("logs-task")
	assert.Equal(t, 2, countEvents(t, wf, enumspb.EVENT_TYPE_MARKER_RECORDED), "select and ingest")
	assert.Equal(t, 1, countEvents(t, wf, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED), "launch")
	assert.Zero(t, countEvents(t, wf, enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED), "the report and the release leave from the ingest")
	assert.LessOrEqual(t, countEvents(t, wf, enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES), 2)
	t.Logf("%d events", historyLength(t, wf))
	assert.LessOrEqual(t, historyLength(t, wf), 21)
	v := runWithEndedTasks(t, suite.wdc, "logs-run")
	require.Len(t, v.Tasks, 1)
	assert.Equal(t, api.TaskCompleted, v.Tasks[0].State, "the run has the task's report")
	assert.Equal(t, int64(1), v.WorkerResultEvents)
	waitFor(t, 10*time.Second, "the reservation released", func() bool {
		w, err := suite.wdc.Worker(context.Background(), "logs-a")
		return err == nil && len(w.Reservations) == 0
	})
	if *updateHistories {
		writeHistory(t, wf) // one attempt, reported by its ingest
	}
}

// Run and task IDs are never reused, and a closed run takes nothing more:
// each conflict is refused up front with a message that says so, and
// nothing half-created is left behind.
func TestRunAndTaskConflicts(t *testing.T) {
	startAgent(t, "conflict-a")
	waitWorkersActive(t, "conflict-a")
	code, _, errOut := cli(t, "runs", "start", "conflict-run", "--world-id", "w")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = cli(t, "runs", "start", "conflict-run", "--world-id", "w2")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "run conflict-run already exists")

	env := taskEnvelope(t, "conflict-task", "true")
	env.RunID, env.WorldID = "conflict-run", "w"
	submit(t, env, api.TaskOptions{})
	waitOutcome(t, env.TaskID)

	// The same task ID in another run: refused before the other run exists.
	dir := t.TempDir()
	other := filepath.Join(dir, "other.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"task_id":"conflict-task","run_id":"conflict-other","world_id":"w","command":["true"]}`), 0o644))
	code, _, errOut = cli(t, "tasks", "submit", other)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `task_id "conflict-task" is already used (run conflict-run`)
	_, err := suite.client.DescribeWorkflowExecution(context.Background(), api.RunWorkflowID("conflict-other"), "")
	var nf *serviceerror.NotFound
	assert.True(t, errors.As(err, &nf), "no half-created run")

	code, _, errOut = cli(t, "runs", "close", "conflict-run")
	require.Equal(t, 0, code, errOut)
	waitFor(t, 10*time.Second, "the closed run ends", func() bool {
		d, err := suite.client.DescribeWorkflowExecution(context.Background(), api.RunWorkflowID("conflict-run"), "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	})
	code, out, _ := cli(t, "runs", "close", "conflict-run")
	assert.Equal(t, 0, code, "closing again is harmless")
	assert.Contains(t, out, "closed")
	code, _, errOut = cli(t, "runs", "commit", "conflict-run", "--expected-parent-time", "0", "--event", "1")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "has ended")
	late := filepath.Join(dir, "late.json")
	require.NoError(t, os.WriteFile(late, []byte(`{"task_id":"conflict-late","run_id":"conflict-run","world_id":"w","command":["true"]}`), 0o644))
	code, _, errOut = cli(t, "tasks", "submit", late)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "run conflict-run is closed")
}

// waitAttemptRunning waits until the task's attempt n has been launched.
func waitAttemptRunning(t *testing.T, taskID string, n int64) api.TaskView {
	t.Helper()
	var view api.TaskView
	waitFor(t, 15*time.Second, fmt.Sprintf("attempt %d running", n), func() bool {
		v, err := suite.wdc.Task(context.Background(), taskID)
		view = v
		return err == nil && v.AttemptDir != "" && v.Lease != nil && v.Lease.Attempt == n
	})
	return view
}

// A Local attempt whose lease ends while it is connected is stopped by
// the cancel the task sends to its agent (or by its next heartbeat): the
// command's whole process group is gone within seconds, long before the
// lease TTL would have run out.
func TestEndedLeaseKillsTheLocalAttemptThroughItsCancel(t *testing.T) {
	agentID := "cancel-kill-a"
	startAgent(t, agentID)
	waitWorkersActive(t, agentID)
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	env := taskEnvelope(t, "cancel-kill", `sleep 300 & echo $! > "$PIDFILE"; wait`)
	env.Env["PIDFILE"] = pidFile
	submit(t, env, api.TaskOptions{LeaseTTL: time.Minute})
	waitAttemptRunning(t, env.TaskID, 1)
	var pid int
	waitFor(t, 10*time.Second, "the command started its child", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	ended := time.Now()
	_, err := suite.wdc.CancelTask(context.Background(), env.TaskID, "test ends the lease")
	require.NoError(t, err)
	waitFor(t, 15*time.Second, "the attempt's child is killed", func() bool {
		return syscall.Kill(pid, 0) != nil
	})
	assert.Less(t, time.Since(ended), 15*time.Second, "killed by the cancel, not at the 1 min TTL")
}
