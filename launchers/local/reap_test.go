package local

import (
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
