package executor

import (
	"context"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
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

// A launch that reaches its command past the fence deadline (its inputs
// staged, or its agent stopped, for longer than the window) starts
// nothing: the lease may have ended and its retry may run.
func TestNothingStartsPastTheFenceDeadline(t *testing.T) {
	for name, mod := range map[string]func(*fixture, *Options){
		"lease TTL": func(f *fixture, o *Options) {
			o.Attempt.Lease.GrantedAt = time.Now().Add(-f.lease.TTL + 100*time.Millisecond)
			o.Faults.Stall = func(context.Context, lease.Claim) { time.Sleep(300 * time.Millisecond) }
		},
		"worker liveness": func(f *fixture, o *Options) {
			past := time.Now().Add(-time.Second)
			o.Liveness = func() time.Time { return past }
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, `echo ran > "$WDC_TASK_DIR/../ran"; sleep 5`, nil)
			opts := Options{
				Attempt: launchers.Attempt{Envelope: f.env, Lease: f.lease, HeartbeatInterval: 100 * time.Millisecond},
				Root:    f.root, Blobs: f.blobs, Control: f.ctl,
			}
			mod(f, &opts)
			_, err := Start(opts)
			require.ErrorContains(t, err, "fence deadline")
			time.Sleep(200 * time.Millisecond)
			assert.NoFileExists(t, filepath.Join(f.root, "t1", "ran"))
		})
	}
}

// A liveness deadline that passes between two of the keeper's looks and
// is then moved on by a late worker heartbeat still fences the command:
// the registry may have marked the worker STALE meanwhile.
func TestALapsedLivenessDeadlineIsNotRevived(t *testing.T) {
	cmd := startGroup(t)
	start := time.Now()
	e := &Execution{cmd: cmd, log: discardLogger(), lastAccepted: start}
	e.opts.Attempt.Lease.TTL = time.Minute
	e.opts.Liveness = func() time.Time {
		if time.Since(start) < 170*time.Millisecond {
			return start.Add(150 * time.Millisecond)
		}
		return start.Add(10 * time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go e.keepFence(ctx, nil)
	time.Sleep(400 * time.Millisecond)
	cause, msg := e.stopped()
	assert.Equal(t, OutcomeSelfFenced, cause)
	assert.Equal(t, livenessLost, msg)
}
