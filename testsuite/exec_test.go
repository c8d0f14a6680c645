package testsuite

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
)

// These tests play an external launcher: the worker's agent runs with
// --launcher external and only spools each attempt's `wdc exec` command;
// the test runs that command as a separate process of this binary (as
// wdc), the way a Kubernetes Job or a Ray job would.

// handOffAgent spawns an agent that hands its launches off to spool/.
func handOffAgent(t *testing.T, id string) (spool string) {
	t.Helper()
	spool = filepath.Join(t.TempDir(), "spool")
	spawnAgentArgs(t, id, "--launcher", "external", "--spool-dir", spool, "--exec-binary", os.Args[0])
	waitWorkersActive(t, id)
	return spool
}

// spooled reads the command the agent spooled for the task's attempt n,
// once it has handed it off.
func spooled(t *testing.T, taskID string, n int64) external.Command {
	t.Helper()
	view := waitAttemptRunning(t, taskID, n)
	b, err := os.ReadFile(view.AttemptDir)
	require.NoError(t, err, "the launch result names the spool file")
	var c external.Command
	require.NoError(t, json.Unmarshal(b, &c))
	require.Equal(t, lease.ClaimOf(*view.Lease), c.Claim)
	return c
}

// hostileEnv is the environment `wdc exec` runs with: this process's (in
// the S3 mode of the suite its AWS credentials are needed), the switch
// that makes this binary wdc, and secrets that must not reach the task.
func hostileEnv() []string {
	env := append(os.Environ(), envRunCLI+"=1", "WDC_SECRET=swordfish", "TEMPORAL_API_KEY_FILE=/secret/key")
	if os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
		env = append(env, "AWS_SECRET_ACCESS_KEY=hunter2", "AWS_ACCESS_KEY_ID=AKIAEXAMPLE")
	}
	return env
}

// execProcess is a running `wdc exec`.
type execProcess struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
}

// startExec runs argv (a rendered `wdc exec` command) plus extra flags
// with hostileEnv.
func startExec(t *testing.T, argv []string, extra ...string) *execProcess {
	t.Helper()
	p := &execProcess{stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], append(slices.Clone(argv[1:]), extra...)...)
	p.cmd.Env = hostileEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("wdc exec %v\nstdout:\n%s\nstderr:\n%s", argv[1:], p.stdout, p.stderr)
		}
	})
	return p
}

// wait returns the exit code (-1 when killed by a signal).
func (p *execProcess) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("wdc exec did not exit within %s; stderr:\n%s", timeout, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// runToAcceptance runs the command of the task's attempt and expects it
// accepted (exit 0) and the task COMPLETED by it.
func runToAcceptance(t *testing.T, c external.Command) api.TaskView {
	t.Helper()
	p := startExec(t, c.Argv)
	require.Equal(t, cmd.ExitOK, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	out, view := waitOutcome(t, c.Claim.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Equal(t, c.Claim.Fence, view.Result.Fence)
	return view
}

// The full path: render-launch prints the same command the agent
// spooled; run with a hostile environment, it is accepted (exit 0), and
// the task's environment holds nothing of it.
func TestExternalLaunchRunsWithWdcExecAndLeaksNoSecret(t *testing.T) {
	spool := handOffAgent(t, "ext-a")
	env := taskEnvelope(t, "ext-secret", `env | sort > outputs/env.txt; echo ok > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 10 * time.Second})

	spooledCmd := spooled(t, env.TaskID, 1)
	assert.FileExists(t, external.SpoolFile(spool, spooledCmd.Claim))
	code, stdout, stderr := cli(t, "workers", "render-launch", "--task", env.TaskID, "--exec-binary", os.Args[0], "--data-dir", suite.dataDir, "-o", "json")
	require.Equal(t, cmd.ExitOK, code, stderr)
	var rendered external.Command
	require.NoError(t, json.Unmarshal([]byte(stdout), &rendered))
	assert.Equal(t, spooledCmd, rendered, "render-launch --task prints what the agent spooled")
	for _, kv := range rendered.Env {
		assert.NotContains(t, kv, "hunter2")
	}

	p := startExec(t, rendered.Argv, "-o", "json")
	require.Equal(t, cmd.ExitOK, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	assert.True(t, p.stderr.Contains("started pid"), "a progress line says it started: %s", p.stderr)
	var rep executor.Report
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep))
	assert.Equal(t, executor.OutcomeAccepted, rep.Outcome)
	assert.Equal(t, spooledCmd.Claim, rep.Claim)

	out, view := waitOutcome(t, env.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Len(t, view.Leases, 1, "no retry")
	assert.Equal(t, "ext-a", view.Result.WorkerID)
	envTxt := readArtifact(t, view.Result, "env.txt")
	for _, secret := range []string{"hunter2", "swordfish", "AWS_", "WDC_SECRET", "TEMPORAL", "WDC_EXEC", envRunCLI, "HOME="} {
		assert.NotContains(t, envTxt, secret, "wdc exec's environment leaked into the task")
	}
	if s := os.Getenv("AWS_SECRET_ACCESS_KEY"); s != "" {
		assert.NotContains(t, envTxt, s)
	}
	assert.Contains(t, envTxt, "WDC_TASK_ID=ext-secret\n")
	assert.Contains(t, envTxt, "WDC_FENCE=1\n")
	assert.Contains(t, envTxt, "PATH=/usr/bin:/bin\n")
	assert.Equal(t, "ok\n", readArtifact(t, view.Result, "done.txt"))
}

// kill -9 of a `wdc exec` mid-run: its command dies with it, the lease
// expires and the task retries on attempt 2 (fence 2), whose command the
// test runs to acceptance. The stale fence-1 command, run while attempt
// 2 holds the lease and again after the task completed, is refused as not
// current (exit 6) and starts nothing.
func TestKilledWdcExecRetriesAndItsStaleCommandIsRefused(t *testing.T) {
	handOffAgent(t, "ext-b")
	env := taskEnvelope(t, "ext-kill", `if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 60; fi
echo "done on attempt $WDC_ATTEMPT" > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 3 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})

	first := spooled(t, env.TaskID, 1)
	work1 := t.TempDir()
	p1 := startExec(t, first.Argv, "--work-dir", work1)
	waitFor(t, 15*time.Second, "attempt 1 started", func() bool { return p1.stderr.Contains("started pid") })
	taskDir1 := filepath.Join(work1, env.TaskID, "1-1")
	waitFor(t, 5*time.Second, "attempt 1's command running", func() bool { return len(processesIn(taskDir1)) > 0 })
	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGKILL))
	p1.wait(t, 5*time.Second)
	waitFor(t, 5*time.Second, "attempt 1's command killed with its executor", func() bool { return len(processesIn(taskDir1)) == 0 })

	second := spooled(t, env.TaskID, 2)
	assert.Equal(t, int64(2), second.Claim.Fence)
	assert.Equal(t, first.Claim.EnvelopeDigest, second.Claim.EnvelopeDigest, "same envelope")

	stale := func(when string) {
		t.Helper()
		work := t.TempDir()
		p := startExec(t, first.Argv, "--work-dir", work, "-o", "json")
		require.Equal(t, cmd.ExitNotCurrent, p.wait(t, 30*time.Second), "%s: stderr: %s", when, p.stderr)
		var rep executor.Report
		require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep), when)
		assert.Equal(t, executor.OutcomeRejected, rep.Outcome, when)
		assert.Equal(t, string(lease.RejectStaleFence), rep.Reason, when)
		assert.True(t, p.stderr.Contains("nothing was started"), "%s: %s", when, p.stderr)
		assert.False(t, p.stderr.Contains("started pid"), when)
		entries, err := os.ReadDir(work)
		require.NoError(t, err)
		assert.Empty(t, entries, "%s: no task directory", when)
	}
	stale("while attempt 2 holds the lease")
	assert.Equal(t, int64(2), currentLease(t, env.TaskID).Fence)
	assert.Equal(t, lease.Active, currentLease(t, env.TaskID).State, "the stale command did not disturb attempt 2")

	view := runToAcceptance(t, second)
	require.Len(t, view.Leases, 2)
	assert.Equal(t, lease.Expired, view.Leases[0].State)
	require.Len(t, view.Directives, 1)
	assert.Equal(t, lease.ReasonLeaseExpired, view.Directives[0].Reason)
	assert.Equal(t, int64(2), view.Result.Fence)
	assert.Equal(t, "done on attempt 2\n", readArtifact(t, view.Result, "done.txt"))

	stale("after the task completed")
}

// SIGTERM to `wdc exec` kills the command and reports infra_killed, so
// the task retries at once instead of waiting out the lease; exit 1.
func TestWdcExecStoppedBySigtermHandsTheAttemptBack(t *testing.T) {
	handOffAgent(t, "ext-c")
	env := taskEnvelope(t, "ext-term", `if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 60; fi; echo ok > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 30 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})

	first := spooled(t, env.TaskID, 1)
	work := t.TempDir()
	p := startExec(t, first.Argv, "--work-dir", work, "-o", "json")
	waitFor(t, 15*time.Second, "attempt 1 started", func() bool { return p.stderr.Contains("started pid") })
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	stoppedAt := time.Now()
	require.Equal(t, cmd.ExitFailure, p.wait(t, 10*time.Second), "stderr: %s", p.stderr)
	var rep executor.Report
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep))
	assert.Equal(t, executor.OutcomeInfraKilled, rep.Outcome)
	assert.Empty(t, processesIn(filepath.Join(work, env.TaskID, "1-1")), "the command's process group was killed")

	second := spooled(t, env.TaskID, 2)
	assert.Less(t, time.Since(stoppedAt), 15*time.Second, "retried long before the 30 s lease would expire")
	view := runToAcceptance(t, second)
	require.Len(t, view.Directives, 1)
	assert.Equal(t, lease.ReasonInfraKilled, view.Directives[0].Reason)
	assert.Contains(t, view.Directives[0].Detail, "wdc exec stopped by a signal", "the directive says why")
}

// A `wdc exec` that cannot read its envelope from the blob store starts
// nothing and reports launch_failed (exit 1), so the task retries at once;
// the next hand-off stores the envelope again and that attempt runs.
func TestWdcExecWithoutItsEnvelopeReportsLaunchFailed(t *testing.T) {
	if suite.blobs.LocalDir() == "" {
		t.Skip("removes a blob by its file: needs the file store")
	}
	handOffAgent(t, "ext-d")
	env := taskEnvelope(t, "ext-noenv", `echo ok > outputs/done.txt`)
	submit(t, env, api.TaskOptions{LeaseTTL: 30 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})

	first := spooled(t, env.TaskID, 1)
	key, err := blobstore.ContentKey(first.Claim.EnvelopeDigest)
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(suite.blobs.LocalDir(), key)))
	p := startExec(t, first.Argv)
	require.Equal(t, cmd.ExitFailure, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	assert.True(t, p.stderr.Contains("reported launch_failed"), "%s", p.stderr)
	assert.False(t, p.stderr.Contains("started pid"))

	second := spooled(t, env.TaskID, 2)
	view := runToAcceptance(t, second)
	require.Len(t, view.Directives, 1)
	assert.Equal(t, lease.ReasonLaunchFailed, view.Directives[0].Reason)
	assert.Contains(t, view.Directives[0].Detail, "not found")
}

// `tasks submit` stores the sealed envelope beside the inputs it stores,
// named by the envelope digest, so a `wdc exec` can read it.
func TestCLISubmissionStoresTheSealedEnvelope(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in.txt"), []byte("input\n"), 0o644))
	file := filepath.Join(dir, "task.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"task_id":"ext-stored","run_id":"ext-stored-run","world_id":"suite",
		"command":["/bin/cat","inputs/in.txt"],"env":{"PATH":"/usr/bin:/bin"},"inputs":[{"name":"in.txt","path":"in.txt"}],
		"selector":{"suite-test":"`+testLabel(t)+`"}}`), 0o644))
	code, stdout, stderr := cli(t, "tasks", "submit", file, "--data-dir", suite.dataDir, "-o", "json")
	require.Equal(t, cmd.ExitOK, code, stderr)
	t.Cleanup(func() { cli(t, "tasks", "cancel", "ext-stored") })
	var res api.AddTaskResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &res))

	stored, err := suite.blobs.Envelope(context.Background(), res.EnvelopeDigest)
	require.NoError(t, err, "the envelope is in the store under its digest")
	assert.Equal(t, "ext-stored", stored.TaskID)
	require.Len(t, stored.Inputs, 1)
	has, err := suite.blobs.Has(context.Background(), stored.Inputs[0].Digest)
	require.NoError(t, err)
	assert.True(t, has, "beside its input")
	got, err := suite.wdc.TaskEnvelope(context.Background(), "ext-stored")
	require.NoError(t, err)
	assert.Equal(t, stored, got, "the task runs exactly the stored envelope")
}
