package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUCost is what a batch of tasks cost in CPU time, per task: user plus
// system seconds, each process's own and its reaped children's (an
// agent's executors and their programs), over the batch's window.
type CPUCost struct {
	// Server is the bench's own process (getrusage): the in-process
	// Temporal server and the bench's polling; null with --address (the
	// server runs elsewhere).
	Server *float64 `json:"cpu_seconds_per_task_server"`
	// ControlPlane is the control plane subprocess (/proc/<pid>/stat).
	ControlPlane *float64 `json:"cpu_seconds_per_task_control_plane"`
	// Agents is every agent subprocess with its executors (/proc).
	Agents *float64 `json:"cpu_seconds_per_task_agents"`
	// CLI is the `wdc tasks submit --batch` subprocess (its rusage).
	CLI *float64 `json:"cpu_seconds_per_task_cli"`
}

// cpuSample is the CPU seconds the bench's processes have used so far.
type cpuSample struct {
	self, controlPlane, agents float64
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports (the kernel's ABI, whatever HZ).
const clockTicks = 100

// procCPUSeconds is utime+stime+cutime+cstime of process pid, from
// /proc/<pid>/stat, in seconds. Errors: the process is gone or /proc is
// not Linux's.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return statCPUSeconds(string(b))
}

// statCPUSeconds is utime+stime+cutime+cstime (fields 14 to 17, in
// clockTicks) of a /proc/<pid>/stat line, in seconds.
func statCPUSeconds(stat string) (float64, error) {
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses: count fields from the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc stat: no command name")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime..cstime are fields 14..17.
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc stat: %d fields, want at least 17", len(f)+2)
	}
	var ticks int64
	for _, v := range f[11:15] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: %w", err)
		}
		ticks += n
	}
	return float64(ticks) / clockTicks, nil
}

// selfCPUSeconds is this process's user plus system time (getrusage).
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// cpuNow samples the bench's processes. An agent restarted within the
// window would make its figure wrong: the phases that sample kill none.
func (b *bench) cpuNow() cpuSample {
	s := cpuSample{self: selfCPUSeconds()}
	if b.controlPlane != nil {
		s.controlPlane, _ = procCPUSeconds(b.controlPlane.cmd.Process.Pid)
	}
	for _, pid := range b.agents.pids() {
		v, _ := procCPUSeconds(pid)
		s.agents += v
	}
	return s
}

// cost is the CPU per task between two samples for n tasks, with cli the
// submitting subprocess's CPU time.
func (b *bench) cost(from, to cpuSample, cli time.Duration, n int) CPUCost {
	per := func(v float64) *float64 { return ptr(round6(v / float64(n))) }
	c := CPUCost{ControlPlane: per(to.controlPlane - from.controlPlane), Agents: per(to.agents - from.agents), CLI: per(cli.Seconds())}
	if !b.opts.Shared {
		c.Server = per(to.self - from.self)
	}
	return c
}

// round6 keeps six decimals (microseconds for seconds).
func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// String renders the cost for progress lines ("-" for a null part).
func (c CPUCost) String() string {
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%.4fs", *v)
	}
	return fmt.Sprintf("server %s, control plane %s, agents %s, CLI %s", f(c.Server), f(c.ControlPlane), f(c.Agents), f(c.CLI))
}
