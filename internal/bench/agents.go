package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
)

// agents runs real agents as subprocesses of the wdc binary
// (`wdc agent …`), each in its own process group and killed by the
// kernel (Pdeathsig) if the bench dies first.
type agents struct {
	exe      string
	args     []string // connection flags and data dir, appended to each
	ids      *identities
	env      []string
	logDir   string
	workRoot string
	labels   map[string]string
	slots    int
	interval time.Duration
	wc       *wdcclient.Client

	mu    sync.Mutex
	procs map[string]*proc
	logs  map[string]*os.File
}

// proc is a started agent; done is closed once it has been reaped.
type proc struct {
	cmd  *exec.Cmd
	err  error // set before done is closed
	done chan struct{}
}

// startProc starts exe with args and env added to the bench's, its output
// appended to logPath, in its own process group and killed by the kernel
// (Pdeathsig) if the bench dies first.
func startProc(exe string, args, env []string, logPath string) (*proc, *os.File, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	c := exec.Command(exe, args...)
	c.Env = append(os.Environ(), env...)
	c.Stdout, c.Stderr = log, log
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		log.Close()
		return nil, nil, err
	}
	p := &proc{cmd: c, done: make(chan struct{})}
	go func() { p.err = c.Wait(); close(p.done) }()
	return p, log, nil
}

// stop sends SIGINT, then SIGKILL to the process group after grace.
func (p *proc) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(os.Interrupt)
	if !p.wait(grace) {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.wait(10 * time.Second)
	}
}

// wait waits up to d for the process to be reaped and reports whether it
// was.
func (p *proc) wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// start launches agent id and waits until the registry has a new
// incarnation of it (above after), ACTIVE.
func (a *agents) start(ctx context.Context, id string, after int64) error {
	args := []string{"agent", "--worker-id", id, "--cpu", "1", "--memory", "1Gi",
		"--slots", strconv.Itoa(a.slots),
		"--heartbeat-interval", a.interval.String(),
		"--stale-after", (fleet.HeartbeatsPerStaleWindow * a.interval).String(),
		"--offline-after", offlineAfter(a.interval).String(),
		"--work-dir", filepath.Join(a.workRoot, id),
		"--log-level", "info"}
	for k, v := range a.labels {
		args = append(args, "--label", k+"="+v)
	}
	args = append(args, a.args...)
	more, err := a.ids.agentArgs(id)
	if err != nil {
		return err
	}
	args = append(args, more...)
	p, log, err := startProc(a.exe, args, a.env, filepath.Join(a.logDir, id+".log"))
	if err != nil {
		return fmt.Errorf("start agent %s: %w", id, err)
	}
	a.mu.Lock()
	if old := a.logs[id]; old != nil {
		old.Close()
	}
	a.procs[id], a.logs[id] = p, log
	a.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, err := a.wc.Worker(ctx, id)
		if err == nil && v.Incarnation > after && v.State == fleet.Active {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("agent %s exited before it registered (%v); its log: %s", id, p.err, log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent %s did not register within 60s; its log: %s", id, log.Name())
		}
	}
}

// kill sends SIGKILL to agent id's process (not its group: the agent's
// attempts die with it by Pdeathsig, as when a machine loses the agent)
// and reaps it.
func (a *agents) kill(id string) error {
	a.mu.Lock()
	p := a.procs[id]
	delete(a.procs, id)
	a.mu.Unlock()
	if p == nil {
		return fmt.Errorf("agent %s is not running", id)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	if !p.wait(time.Minute) {
		return fmt.Errorf("agent %s (pid %d) still there a minute after SIGKILL", id, p.cmd.Process.Pid)
	}
	return nil
}

// stopAll stops every agent: SIGINT (the agent drains its worker and
// hands its attempts back), then SIGKILL to the process group after
// grace. Safe to call more than once.
func (a *agents) stopAll(grace time.Duration) {
	a.mu.Lock()
	procs := a.procs
	a.procs = map[string]*proc{}
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(grace) }()
	}
	wg.Wait()
	a.mu.Lock()
	for id, f := range a.logs {
		f.Close()
		delete(a.logs, id)
	}
	a.mu.Unlock()
}

// pids lists the running agents' process IDs.
func (a *agents) pids() []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]int, 0, len(a.procs))
	for _, p := range a.procs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// offlineAfter is the offline window for a heartbeat interval, in the
// defaults' proportion (30 s for 2 s).
func offlineAfter(interval time.Duration) time.Duration {
	return fleet.DefaultOfflineAfter / fleet.DefaultHeartbeatInterval * interval
}
