package executor

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// fenceKeeperPeriod is how often a running attempt's fence deadline is
// re-read and handed to its watchdog: well inside the shortest stale
// window a worker may declare (fleet.MinStaleAfter).
const fenceKeeperPeriod = 100 * time.Millisecond

// watchdogShell runs the watchdog: it reads deadlines (seconds from now,
// one per line) from its standard input and kills the process group $1,
// and the attempt's cgroup through its cgroup.kill file $3 when there is
// one, when a deadline passes with no newer line or when its input ends
// (the executor died). bash's read -t takes fractional seconds; POSIX sh
// has no -t.
const watchdogShell = "/bin/bash"

const watchdogScript = `d=$2; while IFS= read -r -t "$d" d; do :; done; kill -KILL -- "-$1" 2>/dev/null; [ -z "$3" ] || echo 1 > "$3"`

// awaitFenceLeft returns the fence deadline once at least minFenceLeft
// remains, or the last one read. A worker liveness deadline may be
// behind for a moment (the agent's worker heartbeat is being confirmed
// after the worker was STALE), so while it binds it is read again for up
// to livenessGrace.
func (e *Execution) awaitFenceLeft() (time.Time, string) {
	end := time.Now().Add(livenessGrace)
	for {
		d, why, byLiveness := e.fenceDeadline()
		if time.Until(d) >= minFenceLeft || !byLiveness || time.Now().After(end) {
			return d, why
		}
		select {
		case <-e.ctx().Done():
			return d, why
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// livenessGrace bounds how long a launch waits for its worker's liveness
// deadline to move on.
const livenessGrace = 2 * time.Second

// livenessLost is why a command is killed at its worker's liveness
// deadline.
const livenessLost = "no worker heartbeat accepted for the worker's stale-after window: the registry may mark it STALE and revoke the lease"

// fenceDeadline is when the running command must be dead at the latest:
// a lease TTL after the send time of the last accepted heartbeat, and —
// with Options.Liveness — the moment the worker's registry entry may go
// STALE, which revokes the lease. why names the earlier one; byLiveness
// says it is the worker's.
func (e *Execution) fenceDeadline() (deadline time.Time, why string, byLiveness bool) {
	e.mu.Lock()
	last, lastErr := e.lastAccepted, e.heartbeatErr
	e.mu.Unlock()
	ttl := e.opts.Attempt.Lease.TTL
	deadline = last.Add(ttl)
	why = fmt.Sprintf("Temporal unreachable: no heartbeat accepted for the lease TTL %s, counted from the send time of the last accepted one", ttl)
	if lastErr != nil {
		why += ": " + lastErr.Error()
	}
	if e.opts.Liveness != nil {
		if l := e.opts.Liveness(); !l.IsZero() && l.Before(deadline) {
			deadline, byLiveness = l, true
			why = livenessLost
		}
	}
	return deadline, why, byLiveness
}

// watchdog is a process outside the executor that kills the command's
// process group at its fence deadline unless the executor moves it on:
// the fence then holds while the executor cannot act (the agent stopped
// by SIGSTOP, a long GC pause, a debugger) and when it dies.
type watchdog struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	// deadline is the last one handed over.
	deadline time.Time
}

// startWatchdog starts the watchdog of process group pgid (and of the
// cgroup whose cgroup.kill file is killFile, "" none) with deadline.
// Errors: bash missing, or the process could not start; the executor then
// fences in-process only.
func startWatchdog(pgid int, deadline time.Time, killFile string) (*watchdog, error) {
	cmd := exec.Command(watchdogShell, "-c", watchdogScript, "wdc-fence-watchdog", strconv.Itoa(pgid), seconds(time.Until(deadline)), killFile)
	cmd.Env = []string{}
	cmd.Dir = "/"
	// Its own process group, so the command's group kill spares it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fence watchdog: %w", err)
	}
	return &watchdog{cmd: cmd, in: in, deadline: deadline}, nil
}

// extend hands the watchdog a new deadline (a later or an earlier one).
func (w *watchdog) extend(deadline time.Time) {
	if deadline.Equal(w.deadline) {
		return
	}
	if _, err := io.WriteString(w.in, seconds(time.Until(deadline))+"\n"); err == nil {
		w.deadline = deadline
	}
}

// stop ends the watchdog without it killing anything.
func (w *watchdog) stop() {
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
	w.in.Close()
}

// watchdogMargin is how much earlier than the fence deadline the watchdog
// kills: well over the time a deadline takes through the pipe and a
// SIGKILL takes to end a process.
const watchdogMargin = 100 * time.Millisecond

// minFenceLeft is the least time before its fence deadline at which an
// attempt's command may still start.
const minFenceLeft = 2*watchdogMargin + fenceKeeperPeriod

// WatchdogAvailable reports whether fence watchdogs can run here (bash
// is installed); without them a command is fenced only while its
// executor runs, so its worker must not declare itself liveness-fenced.
func WatchdogAvailable() bool {
	fi, err := os.Stat(watchdogShell)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// seconds renders the time until deadline, less watchdogMargin, for
// read -t: at least a millisecond (-t 0 only polls).
func seconds(d time.Duration) string {
	return strconv.FormatFloat(max(d-watchdogMargin, time.Millisecond).Seconds(), 'f', 3, 64)
}

// keepFence runs while the command runs: it keeps the watchdog's
// deadline equal to the fence deadline, and kills the command once the
// worker's liveness deadline passes (the heartbeat loop does at the lease
// TTL, naming the heartbeats' last error).
//
// A liveness deadline that passed counts though a later worker heartbeat
// moved it on before the keeper looked: the registry may have marked the
// worker STALE meanwhile.
func (e *Execution) keepFence(ctx context.Context, wd *watchdog) {
	t := time.NewTicker(fenceKeeperPeriod)
	defer t.Stop()
	var passed time.Time // the liveness deadline seen last
	for {
		deadline, _, byLiveness := e.fenceDeadline()
		now := time.Now()
		if byLiveness && !now.Before(deadline) || !passed.IsZero() && !now.Before(passed) {
			e.stop(OutcomeSelfFenced, livenessLost)
			return
		}
		passed = time.Time{}
		if byLiveness {
			passed = deadline
		}
		if wd != nil {
			wd.extend(deadline)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// fencedByWatchdog reports whether a command that died of SIGKILL that
// the executor did not send was killed by its watchdog: at or after the
// last deadline the watchdog was given.
func (e *Execution) fencedByWatchdog(wd *watchdog, signal string, finished time.Time) bool {
	return wd != nil && signal == "SIGKILL" && !finished.Before(wd.deadline.Add(-watchdogMargin))
}
