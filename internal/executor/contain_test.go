package executor

import (
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/wdc-runtime/wdc/lease"
)

// withMemory gives the fixture's envelope a memory_bytes request (the
// attempt's memory limit), keeping the lease's digest in step.
func (f *fixture) withMemory(bytes int64) {
	f.t.Helper()
	f.env.Resources.MemoryBytes = bytes
	d, err := f.env.Digest()
	require.NoError(f.t, err)
	f.lease.EnvelopeDigest = d
	f.ctl.lease.EnvelopeDigest = d
}

// A program's own end is its result, whatever the code — 137 included —
// and so is a crash signal it dies of (recorded with the result); a stop
// signal the executor did not send is infra_killed.
func TestExitClassification(t *testing.T) {
	tests := []struct {
		script  string
		outcome Outcome
		code    int
		signal  string
	}{
		{`exit 137`, OutcomeAccepted, 137, ""},
		{`exit 139`, OutcomeAccepted, 139, ""},
		{`kill -SEGV $$`, OutcomeAccepted, 139, "SIGSEGV"},
		{`kill -ABRT $$`, OutcomeAccepted, 134, "SIGABRT"},
		{`kill -BUS $$`, OutcomeAccepted, 135, "SIGBUS"},
		{`kill -FPE $$`, OutcomeAccepted, 136, "SIGFPE"},
		{`kill -ILL $$`, OutcomeAccepted, 132, "SIGILL"},
		{`kill -KILL $$`, OutcomeInfraKilled, 137, "SIGKILL"},
		{`kill -TERM $$`, OutcomeInfraKilled, 143, "SIGTERM"},
	}
	for _, tc := range tests {
		t.Run(tc.script, func(t *testing.T) {
			f := newFixture(t, `echo partial > outputs/p.txt; `+tc.script, nil)
			rep := f.wait(f.start(nil))
			assert.Equal(t, tc.outcome, rep.Outcome, "%+v", rep)
			assert.Equal(t, tc.code, rep.ExitCode)
			assert.Equal(t, tc.signal, rep.Signal)
			if tc.outcome == OutcomeAccepted {
				require.Len(t, f.ctl.submitted, 1)
				assert.Equal(t, tc.code, f.ctl.submitted[0].ExitCode)
				assert.Equal(t, tc.signal, f.ctl.submitted[0].Signal, "the signal travels with the result")
				assert.Empty(t, f.ctl.failures)
				return
			}
			assert.Empty(t, f.ctl.submitted, "no result is submitted")
			require.Len(t, f.ctl.failures, 1)
			assert.Equal(t, lease.ReasonInfraKilled, f.ctl.failures[0].Reason)
			assert.Contains(t, f.ctl.failures[0].Detail, tc.signal)
		})
	}
}

// A command that allocates past its memory_bytes is killed by the OOM
// killer in the attempt's memory cgroup and reported oom_killed, whether
// it dies itself or its shell reports the child's death as exit 137.
func TestOOMKillIsOOMKilled(t *testing.T) {
	require.NotEmpty(t, currentHost().memory, "no memory cgroup can be made on this machine (as root: a writable v1 memory hierarchy or v2 with the memory controller delegated): %s", DescribeContainment())
	for name, script := range map[string]string{
		"the command":        `x=$(head -c 300000000 /dev/zero | tr '\0' a); echo survived > outputs/x`,
		"a child of a shell": `/bin/sh -c 'x=$(head -c 300000000 /dev/zero | tr "\0" a)'; exit $?`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, script, nil)
			f.withMemory(32 << 20)
			rep := f.wait(f.start(nil))
			assert.Equal(t, OutcomeOOMKilled, rep.Outcome, "%+v", rep)
			assert.Positive(t, rep.OOMKills)
			assert.Empty(t, f.ctl.submitted)
			require.Len(t, f.ctl.failures, 1)
			assert.Equal(t, lease.ReasonOOMKilled, f.ctl.failures[0].Reason)
			assert.Contains(t, f.ctl.failures[0].Detail, "OOM killed")
		})
	}
	t.Run("within the limit", func(t *testing.T) {
		f := newFixture(t, `x=$(head -c 1000000 /dev/zero | tr '\0' a); echo ok > outputs/x`, nil)
		f.withMemory(32 << 20)
		rep := f.wait(f.start(nil))
		assert.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)
		assert.Zero(t, rep.OOMKills)
	})
}

// hosts are the containments this machine offers, each forced in turn:
// cgroup v2, v1 pids, v1 freezer, and the subreaper without a cgroup.
func hosts(t *testing.T) map[string]host {
	out := map[string]host{}
	for _, skip := range []map[string]bool{nil, {"cgroup2": true}, {"cgroup2": true, "pids": true}} {
		h := detectHost(skip)
		if h.mode != ContainSubreaper {
			out[h.trackerKind] = h
		}
	}
	out["subreaper"] = host{mode: ContainSubreaper}
	for _, kind := range []string{"cgroup2", "pids", "freezer"} {
		if _, ok := out[kind]; !ok {
			t.Logf("containment %s is not available here: %s", kind, DescribeContainment())
		}
	}
	return out
}

func useHost(t *testing.T, h host) {
	hostOverride = &h
	t.Cleanup(func() {
		hostOverride = nil
		if h.mode == ContainSubreaper {
			_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
			subreaperOnce = sync.Once{}
		}
	})
}

// escape double-forks a grandchild that leaves the process group, the
// session and the task directory, closes every file of it and clears its
// environment: only a cgroup, or its parent's death, can tell it from any
// other process. It writes its PID to gc.pid.
const escape = `(cd / && setsid env -i /bin/sleep 600 </dev/null >/dev/null 2>&1 & echo $! > "$WDC_TASK_DIR/gc.pid") ; ` +
	`while [ ! -s gc.pid ]; do sleep 0.01; done; sleep 0.3; echo done > outputs/x`

func readPID(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

// running reports whether pid runs (a zombie does not).
func running(pid int) bool {
	p, ok := readProc(pid)
	return ok && !p.zombie
}

// A double-forked `setsid env -i sleep 600` dies with its attempt, in
// every containment this machine offers; as subreaper the agent also
// reaps it.
func TestADoubleForkedSessionLeaderDiesWithTheAttempt(t *testing.T) {
	for kind, h := range hosts(t) {
		t.Run(kind, func(t *testing.T) {
			useHost(t, h)
			f := newFixture(t, escape, nil)
			ex := f.start(nil)
			rep := f.wait(ex)
			require.Equal(t, OutcomeAccepted, rep.Outcome, "%+v", rep)
			assert.Equal(t, h.mode, rep.Containment)
			gc := readPID(t, filepath.Join(ex.Dir(), "gc.pid"))
			assert.False(t, running(gc), "grandchild %d survived the attempt (%s)", gc, kind)
			if h.mode == ContainSubreaper {
				_, ok := readProc(gc)
				assert.False(t, ok, "grandchild %d is left a zombie of the agent", gc)
			}
			for _, base := range []string{h.tracker, h.memory} {
				if base != "" {
					assert.NoDirExists(t, filepath.Join(base, cellName(ex.Dir())), "the attempt's cgroup is removed")
				}
			}
		})
	}
}

// As subreaper, with two attempts running, an orphan re-parented to the
// agent that started after both commands may be either's: it never
// outlives the second. (The first may kill it already: its tracker may
// have recorded it in its process group before it called setsid.)
func TestASubreaperKillsAnOrphanAtTheEndOfTheLastAttemptItMayBelongTo(t *testing.T) {
	useHost(t, host{mode: ContainSubreaper})
	long := newFixture(t, `sleep 1.5; echo ok > outputs/x`, nil)
	exLong := long.start(nil)
	time.Sleep(100 * time.Millisecond)
	short := newFixture(t, escape, nil)
	exShort := short.start(nil)
	require.Equal(t, OutcomeAccepted, short.wait(exShort).Outcome)
	gc := readPID(t, filepath.Join(exShort.Dir(), "gc.pid"))
	require.Equal(t, OutcomeAccepted, long.wait(exLong).Outcome)
	assert.False(t, running(gc), "orphan %d survived the last attempt it may belong to", gc)
	_, ok := readProc(gc)
	assert.False(t, ok, "orphan %d is left a zombie of the agent", gc)
}

// An agent that dies mid-attempt leaves its command's escaped grandchild
// in the attempt's cgroup; a new agent (ReapContained on the same work
// dir) kills it and removes the cgroup.
func TestReapContainedKillsWhatADeadAgentLeft(t *testing.T) {
	for kind, h := range hosts(t) {
		if h.mode == ContainSubreaper {
			continue // no record survives the agent without a cgroup
		}
		t.Run(kind, func(t *testing.T) {
			useHost(t, h)
			root := t.TempDir()
			dir := filepath.Join(root, "t1", "1-1")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			c := newCell(dir, 0, discardLogger())
			cmd := exec.Command("/bin/sh", "-c", escape+"; sleep 600")
			cmd.Dir, cmd.Env = dir, []string{"PATH=/usr/bin:/bin", "WDC_TASK_DIR=" + dir}
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			require.NoError(t, os.Mkdir(filepath.Join(dir, "outputs"), 0o755))
			require.NoError(t, c.start(cmd))
			waitUntil(t, 5*time.Second, "grandchild started", func() bool {
				b, err := os.ReadFile(filepath.Join(dir, "gc.pid"))
				return err == nil && len(b) > 0
			})
			gc := readPID(t, filepath.Join(dir, "gc.pid"))
			// The agent dies: Pdeathsig kills the command, nothing else.
			require.NoError(t, cmd.Process.Kill())
			_ = cmd.Wait()
			require.True(t, running(gc), "the grandchild outlives the agent until reaped")

			assert.Contains(t, ReapContained(root), gc)
			waitUntil(t, 5*time.Second, "grandchild killed", func() bool { return !running(gc) })
			assert.NoDirExists(t, c.tracker)
		})
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The rule itself, including what only a memory cgroup can tell: an exit
// 137 with an OOM kill counted is a shell reporting its child's OOM kill.
func TestClassifyExit(t *testing.T) {
	tests := []struct {
		code     int
		signal   string
		oomKills int64
		want     lease.RetryReason
	}{
		{0, "", 0, ""},
		{137, "", 0, ""},
		{137, "", 1, lease.ReasonOOMKilled},
		{3, "", 1, ""}, // a child was OOM killed; the program went on and exited
		{137, "SIGKILL", 1, lease.ReasonOOMKilled},
		{137, "SIGKILL", 0, lease.ReasonInfraKilled},
		{143, "SIGTERM", 0, lease.ReasonInfraKilled},
		{130, "SIGINT", 0, lease.ReasonInfraKilled},
		{129, "SIGHUP", 0, lease.ReasonInfraKilled},
		{139, "SIGSEGV", 0, ""},
		{139, "SIGSEGV", 1, ""},
		{134, "SIGABRT", 0, ""},
		{141, "SIGPIPE", 0, ""},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, classifyExit(tc.code, tc.signal, tc.oomKills), "%+v", tc)
	}
}
