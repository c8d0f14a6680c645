package executor

import (
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startGroup starts `sleep 60` as the leader of its own process group.
func startGroup(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd
}

// waitDead waits for cmd to exit and returns when it did.
func waitDead(t *testing.T, cmd *exec.Cmd, within time.Duration) time.Time {
	t.Helper()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
		return time.Now()
	case <-time.After(within):
		t.Fatalf("process group %d still running after %s", cmd.Process.Pid, within)
		return time.Time{}
	}
}

// The watchdog is a process of its own: it kills the group at the last
// deadline it was given (never before), at once when its input ends (the
// executor died), and never once stopped.
func TestTheWatchdogKillsAtItsDeadline(t *testing.T) {
	t.Run("deadline passes", func(t *testing.T) {
		cmd := startGroup(t)
		first := time.Now().Add(300 * time.Millisecond)
		wd, err := startWatchdog(cmd.Process.Pid, first, "")
		require.NoError(t, err)
		defer wd.stop()
		time.Sleep(100 * time.Millisecond)
		moved := time.Now().Add(700 * time.Millisecond)
		wd.extend(moved)
		died := waitDead(t, cmd, 3*time.Second)
		assert.False(t, died.Before(moved.Add(-watchdogMargin)), "killed %s before the moved deadline", moved.Sub(died))
		assert.Less(t, died.Sub(moved), 300*time.Millisecond, "killed at the deadline")
	})
	t.Run("executor gone", func(t *testing.T) {
		cmd := startGroup(t)
		wd, err := startWatchdog(cmd.Process.Pid, time.Now().Add(time.Minute), "")
		require.NoError(t, err)
		closed := time.Now()
		wd.in.Close()
		died := waitDead(t, cmd, 3*time.Second)
		assert.Less(t, died.Sub(closed), time.Second)
		_ = wd.cmd.Wait()
	})
	t.Run("stopped", func(t *testing.T) {
		cmd := startGroup(t)
		wd, err := startWatchdog(cmd.Process.Pid, time.Now().Add(200*time.Millisecond), "")
		require.NoError(t, err)
		wd.stop()
		time.Sleep(500 * time.Millisecond)
		assert.NoError(t, syscall.Kill(cmd.Process.Pid, 0), "a stopped watchdog kills nothing")
	})
}

// With Options.Liveness the command is killed by the worker's liveness
// deadline (when the registry may mark the worker STALE and revoke the
// lease) though its own heartbeats are accepted: the revocation never
// finds it running.
func TestTheWorkersLivenessDeadlineFencesTheCommand(t *testing.T) {
	f := newFixture(t, `sleep 30 & echo $! > child.pid; wait`, nil)
	f.ctl.held = true
	liveUntil := time.Now().Add(700 * time.Millisecond)
	ex := f.start(func(o *Options) { o.Liveness = func() time.Time { return liveUntil } })
	rep := f.wait(ex)
	ended := time.Now()
	assert.Equal(t, OutcomeSelfFenced, rep.Outcome, "%+v", rep)
	assert.Contains(t, rep.Message, "stale-after")
	assert.False(t, rep.FinishedAt.After(liveUntil), "the command ran %s past the liveness deadline", rep.FinishedAt.Sub(liveUntil))
	assert.Less(t, ended.Sub(liveUntil), time.Second)
	_, byID := f.ctl.sent()
	assert.Positive(t, byID, "its lease heartbeats were accepted meanwhile")
	assertGroupDead(t, f, ex)
}
