package testsuite

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/cmd"
)

// dialNamespace connects to the suite server in namespace ns.
func dialNamespace(t *testing.T, ns string) client.Client {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: suite.srv.FrontendHostPort(), Namespace: ns, Logger: quietLogger{}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// assertNoWorkflow asserts that workflow id was never started in c's
// namespace.
func assertNoWorkflow(t *testing.T, c client.Client, id string) {
	t.Helper()
	_, err := c.DescribeWorkflowExecution(context.Background(), id, "")
	var nf *serviceerror.NotFound
	assert.ErrorAs(t, err, &nf, "%s must not exist", id)
}

// Every command that needs the control plane says, within a few seconds,
// that none is polling, exits 5 and leaves nothing behind — rather than
// hanging (the register update used to wait forever).
func TestCommandsWithoutAControlPlaneSaySoAndStartNothing(t *testing.T) {
	nsc := dialNamespace(t, nsNoControlPlane)
	dir := t.TempDir()
	env := filepath.Join(dir, "task.json")
	require.NoError(t, os.WriteFile(env, []byte(`{"task_id":"nocp-task","run_id":"nocp-run","world_id":"w",
		"command":["true"],"env":{"PATH":"/usr/bin:/bin"}}`), 0o644))
	want := "wdc: no control plane is polling wdc-control on " + suite.srv.FrontendHostPort() +
		" (namespace " + nsNoControlPlane + "); start `wdc control-plane`\n"

	tests := []struct {
		name string
		args []string
	}{
		{"workers register", []string{"workers", "register", "--worker-id", "nocp-w1", "--cpu", "2", "--memory", "1Gi"}},
		{"workers drain", []string{"workers", "drain", "nocp-w1"}},
		{"workers heartbeat", []string{"workers", "heartbeat", "nocp-w1"}},
		{"workers sweep", []string{"workers", "sweep"}},
		{"workers lease", []string{"workers", "lease", "nocp-task"}},
		{"tasks submit", []string{"tasks", "submit", env, "--wait", "--data-dir", dir}},
		{"tasks status", []string{"tasks", "status", "nocp-task"}},
		{"tasks cancel", []string{"tasks", "cancel", "nocp-task"}},
		{"runs start", []string{"runs", "start", "nocp-run", "--world-id", "w", env, "--data-dir", dir}},
		{"runs commit", []string{"runs", "commit", "nocp-run", "--expected-parent-time", "0", "--event", "1"}},
		{"runs close", []string{"runs", "close", "nocp-run"}},
		{"agent", []string{"agent", "--identity", "off", "--worker-id", "nocp-agent", "--cpu", "1", "--memory", "1Gi", "--data-dir", dir}},
		{"exec", []string{"exec", "--task-id", "nocp-task", "--attempt", "1", "--fence", "1", "--worker-id", "nocp-w1",
			"--envelope-digest", "sha256:" + strings.Repeat("a", 64), "--data-dir", dir, "--work-dir", filepath.Join(dir, "exec")}},
		{"workers render-launch --task", []string{"workers", "render-launch", "--task", "nocp-task", "--data-dir", dir}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			code, stdout, stderr := cli(t, append(tc.args, "-n", nsNoControlPlane)...)
			elapsed := time.Since(began)
			t.Logf("%s: exit %d after %s: %s", tc.name, code, elapsed.Round(100*time.Millisecond), stderr)
			assert.Equal(t, cmd.ExitUnavailable, code)
			assert.Equal(t, want, stderr, "one line naming the queue, the server and the command to start")
			assert.Empty(t, stdout)
			assert.Less(t, elapsed, 10*time.Second, "says so within a few seconds")
		})
	}
	t.Cleanup(func() {
		for _, id := range []string{api.WorkerWorkflowID("nocp-w1"), api.WorkerWorkflowID("nocp-agent"), api.RunWorkflowID("nocp-run"), api.TaskWorkflowID("nocp-task")} {
			assertNoWorkflow(t, nsc, id)
		}
	})
}

// Commands that only read visibility still work without a control plane:
// `workers list` warns once and lists nothing unknown as known.
func TestWorkersListWithoutAControlPlaneWarnsAndExitsZero(t *testing.T) {
	code, stdout, stderr := cli(t, "workers", "list", "-n", nsNoControlPlane)
	assert.Equal(t, cmd.ExitOK, code, stderr)
	assert.Contains(t, stderr, "wdc: warning: no control plane is polling wdc-control")
	assert.Contains(t, stdout, "no workers")
	code, stdout, stderr = cli(t, "tasks", "list", "-n", nsNoControlPlane)
	assert.Equal(t, cmd.ExitOK, code, stderr)
	assert.Contains(t, stdout, "no tasks")
}

// `tasks wait` legitimately waits long: without a control plane it warns
// on stderr and keeps waiting (here until the test stops it).
func TestTasksWaitWithoutAControlPlaneWarnsAndKeepsWaiting(t *testing.T) {
	nsc := dialNamespace(t, nsNoControlPlane)
	// A task workflow nobody runs: started directly, as a run would.
	_, err := nsc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: api.TaskWorkflowID("nocp-wait"), TaskQueue: api.ControlTaskQueue}, api.TaskWorkflowType, api.TaskInput{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = nsc.TerminateWorkflow(context.Background(), api.TaskWorkflowID("nocp-wait"), "", "test done")
	})

	var out, errb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- cmd.MainContext(ctx, cmd.Deps{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }},
			[]string{"tasks", "wait", "nocp-wait", "-n", nsNoControlPlane, "--address", suite.srv.FrontendHostPort()})
	}()
	waitFor(t, 15*time.Second, "the warning", func() bool {
		return errb.Contains("wdc: warning: no control plane is polling wdc-control")
	})
	select {
	case code := <-done:
		t.Fatalf("tasks wait returned %d instead of waiting: %s", code, errb.String())
	default:
	}
	assert.Contains(t, errb.String(), "still following task nocp-wait")
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, cmd.ExitFailure, code)
		assert.Contains(t, errb.String(), "stopped following task nocp-wait (it keeps running)")
	case <-time.After(15 * time.Second):
		t.Fatal("tasks wait did not stop when its context ended")
	}
}

// The poller check cannot see a control plane that polls but never
// answers (or was killed a moment ago): --control-plane-timeout bounds the
// wait and says the request may still take effect.
func TestAControlPlaneThatNeverAnswersIsBounded(t *testing.T) {
	nsc := dialNamespace(t, nsMuteControlPlane)
	// It polls the control plane's queues, the registry's among them.
	for _, q := range []string{api.ControlTaskQueue, api.RegistryTaskQueue} {
		mute := sdkworker.New(nsc, q, sdkworker.Options{})
		mute.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "NotWdc"})
		require.NoError(t, mute.Start())
		defer mute.Stop()
	}

	began := time.Now()
	code, stdout, stderr := cli(t, "workers", "register", "--worker-id", "mute-w1", "--cpu", "1", "--memory", "1Gi",
		"-n", nsMuteControlPlane, "--control-plane-timeout", "2s")
	elapsed := time.Since(began)
	t.Logf("exit %d after %s: %s", code, elapsed.Round(100*time.Millisecond), stderr)
	assert.Equal(t, cmd.ExitUnavailable, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "register worker mute-w1: no answer within 2s from the control plane polling wdc-control on "+suite.srv.FrontendHostPort())
	assert.Contains(t, stderr, "may still take effect")
	assert.GreaterOrEqual(t, elapsed, 2*time.Second)
	assert.Less(t, elapsed, 15*time.Second)
}

// An agent whose artifact store cannot be reached stops at startup with
// the store named, instead of registering and failing every attempt after
// its command ran.
func TestAgentWithAnUnusableStoreStopsAtStartup(t *testing.T) {
	url := "s3://nowhere?endpoint=http://127.0.0.1:1&use_path_style=true&region=us-east-1&disable_https=true"
	began := time.Now()
	code, _, stderr := cli(t, "agent", "--identity", "off", "--worker-id", "bad-store", "--blob-url", url, "--data-dir", t.TempDir())
	assert.NotEqual(t, 0, code)
	assert.Contains(t, stderr, "artifact store not usable")
	assert.Contains(t, stderr, "127.0.0.1:1")
	assert.Less(t, time.Since(began), 30*time.Second)
	_, err := suite.wdc.Worker(context.Background(), "bad-store")
	assert.ErrorIs(t, err, wdcclient.ErrNotFound, "it never registered")
}
