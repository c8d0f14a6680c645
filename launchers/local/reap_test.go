package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// An attempt's shell started a background child, then died with its agent:
// the child is orphaned. A new agent on the same work dir kills it, and
// leaves alone a process of another work dir.
func TestReapOrphansKillsLeftoversOfThisWorkDirOnly(t *testing.T) {
	work := t.TempDir()
	other := t.TempDir()
	spawn := func(taskDir string) int {
		require.NoError(t, os.MkdirAll(taskDir, 0o755))
		c := exec.Command("/bin/sh", "-c", `sleep 60 & echo $! > child.pid; wait`)
		c.Dir = taskDir
		c.Env = []string{"PATH=/usr/bin:/bin", "WDC_TASK_DIR=" + taskDir}
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, c.Start())
		var child int
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(filepath.Join(taskDir, "child.pid"))
			if err != nil {
				return false
			}
			child, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil
		}, 5*time.Second, 10*time.Millisecond)
		// The "agent" dies: only the shell is killed, its child lives on.
		require.NoError(t, c.Process.Kill())
		_, _ = c.Process.Wait()
		require.NoError(t, syscall.Kill(child, 0), "the orphan is alive before reaping")
		return child
	}
	orphan := spawn(filepath.Join(work, "t1", "1-1"))
	bystander := spawn(filepath.Join(other, "t2", "1-1"))
	t.Cleanup(func() { _ = syscall.Kill(bystander, syscall.SIGKILL) })

	killed, err := ReapOrphans(work)
	require.NoError(t, err)
	assert.Contains(t, killed, orphan)
	assert.NotContains(t, killed, bystander)
	require.Eventually(t, func() bool { return !alive(orphan) }, 5*time.Second, 20*time.Millisecond, "orphan %d survived", orphan)
	assert.True(t, alive(bystander), "a process of another work dir is left alone")
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// helperWorkDir, when set in the environment, makes this test binary the
// "agent" of TestARestartedAgentKillsWhatTheDeadOneLeft.
const helperWorkDir = "WDC_TEST_AGENT_WORK_DIR"

// An agent (another process) runs an attempt whose command double-forks a
// grandchild that leaves the process group, the session, the task
// directory and its files and clears its environment; the agent is
// killed (kill -9). The grandchild outlives it; a new launcher on the
// same work dir kills it.
func TestARestartedAgentKillsWhatTheDeadOneLeft(t *testing.T) {
	work := t.TempDir()
	agent := exec.Command(os.Args[0], "-test.run=^TestHelperAgent$", "-test.count=1")
	agent.Env = append(os.Environ(), helperWorkDir+"="+work)
	agent.Stdout, agent.Stderr = os.Stderr, os.Stderr
	require.NoError(t, agent.Start())
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	pidFile := filepath.Join(work, "t1", "1-1", "gc.pid")
	var gc int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		gc, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the helper agent's attempt did not start")
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) })
	time.Sleep(200 * time.Millisecond)

	// The whole agent dies at once, its fence watchdogs with it (they
	// would kill the attempt's process group and cgroup when their agent
	// dies alone).
	for _, w := range watchdogsOf(t, agent.Process.Pid) {
		require.NoError(t, syscall.Kill(w, syscall.SIGKILL))
	}
	require.NoError(t, agent.Process.Kill())
	_ = agent.Wait()
	time.Sleep(200 * time.Millisecond)
	require.True(t, alive(gc), "the grandchild outlives its agent until one starts again")

	_, err := New(Options{WorkerID: "w-a", WorkDir: work, Blobs: openBlobs(t), Control: &leaseControl{}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !alive(gc) }, 5*time.Second, 20*time.Millisecond,
		"grandchild %d survived the restart (containment: %s)", gc, executor.DescribeContainment())
}

// TestHelperAgent is the agent process of
// TestARestartedAgentKillsWhatTheDeadOneLeft: it runs one attempt and
// waits to be killed.
func TestHelperAgent(t *testing.T) {
	work := os.Getenv(helperWorkDir)
	if work == "" {
		t.Skip("the agent process of TestARestartedAgentKillsWhatTheDeadOneLeft")
	}
	env := envelope.Envelope{
		TaskID: "t1", RunID: "r1", WorldID: "w1",
		Command: []string{"/bin/sh", "-c", `(cd / && setsid env -i /bin/sleep 600 </dev/null >/dev/null 2>&1 & echo $! > "$WDC_TASK_DIR/gc.pid.tmp"); ` +
			`mv gc.pid.tmp gc.pid; sleep 600`},
		Env: map[string]string{"PATH": "/usr/bin:/bin"},
	}
	env.Normalize()
	digest, err := env.Digest()
	require.NoError(t, err)
	l := lease.Lease{TaskID: "t1", EnvelopeDigest: digest, WorkerID: "w-a", Attempt: 1, Fence: 1, State: lease.Active, TTL: time.Minute}
	launcher, err := New(Options{WorkerID: "w-a", WorkDir: work, Blobs: openBlobs(t), Control: &leaseControl{lease: l}})
	require.NoError(t, err)
	_, err = launcher.Submit(context.Background(), launchers.Attempt{Envelope: env, Lease: l, HeartbeatInterval: time.Second})
	require.NoError(t, err)
	select {} // until killed
}

func openBlobs(t *testing.T) *blobstore.Store {
	t.Helper()
	blobs, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	return blobs
}

// watchdogsOf lists the fence watchdog processes whose parent is pid.
func watchdogsOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err1 := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		cmdline, err2 := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err1 != nil || err2 != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && strings.Contains(string(cmdline), "wdc-fence-watchdog") {
			out = append(out, p)
		}
	}
	require.NotEmpty(t, out, "the attempt's fence watchdog")
	return out
}
