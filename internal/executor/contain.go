package executor

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wdc-runtime/wdc/internal/blobstore"
)

// Containment names how an attempt's processes are held, so that none
// outlives the attempt whatever it does (setsid, double fork, env -i).
type Containment string

const (
	// ContainCgroup2: each attempt in its own cgroup v2 (started in it
	// with clone3 CLONE_INTO_CGROUP), killed with cgroup.kill.
	ContainCgroup2 Containment = "cgroup2"
	// ContainCgroup1: each attempt in its own cgroup under the v1 pids
	// controller (forks frozen with pids.max=0, then every member killed)
	// or, without it, the v1 freezer.
	ContainCgroup1 Containment = "cgroup1"
	// ContainSubreaper: no writable cgroup hierarchy. The agent is a
	// child subreaper (orphans re-parent to it) and kills the command's
	// process group, session, every process it saw descend from the
	// command (scanned every TrackInterval), every orphan re-parented to
	// it that started after the command and may be no other running
	// attempt's (else at the end of the last attempt it may be), and what
	// carries the attempt's WDC_TASK_DIR, works in its task directory or
	// holds a file of it open.
	ContainSubreaper Containment = "subreaper"
)

// TrackInterval is how often, without a cgroup (ContainSubreaper), the
// executor records the descendants of each running command.
const TrackInterval = 100 * time.Millisecond

// ContainmentFile is the record, in the task directory, of the cgroups
// that hold an attempt's processes; a restarted agent kills what is left
// in them (ReapContained).
const ContainmentFile = "containment.json"

// host is what this machine offers, detected once.
type host struct {
	mode Containment
	// tracker is the parent of the attempts' tracking cgroups (v2, or v1
	// pids/freezer); trackerKind is "cgroup2", "pids" or "freezer".
	tracker, trackerKind string
	// memory is the parent of the attempts' memory cgroups ("" none);
	// memoryKind is "cgroup2" (then the tracker cgroup is also the
	// memory cgroup) or "cgroup1".
	memory, memoryKind string
	// why explains what was not usable.
	why []string
}

var (
	hostOnce sync.Once
	hostInfo host
	// hostOverride, when set (tests), replaces detection.
	hostOverride *host
)

func currentHost() host {
	if hostOverride != nil {
		return *hostOverride
	}
	hostOnce.Do(func() { hostInfo = detectHost(nil) })
	return hostInfo
}

// DescribeContainment says which containment Local attempts get on this
// machine, and why a better one is not used, for the agent's log.
func DescribeContainment() string {
	h := currentHost()
	s := string(h.mode)
	if h.mode != ContainSubreaper {
		s += " (" + h.trackerKind + " " + h.tracker + ")"
	}
	if h.memory != "" {
		s += ", memory limits and OOM detection by " + h.memoryKind + " " + h.memory
	} else {
		s += ", no memory cgroup (memory_bytes is not enforced, OOM kills are not told apart)"
	}
	if len(h.why) > 0 {
		s += "; " + strings.Join(h.why, "; ")
	}
	return s
}

// mount is one cgroup mount of /proc/self/mountinfo.
type mount struct {
	dir     string
	v2      bool
	options map[string]bool // v1 controllers
}

func cgroupMounts() []mount {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent maj:min root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+1 >= len(fields) {
			continue
		}
		fstype := fields[sep+1]
		switch fstype {
		case "cgroup2":
			out = append(out, mount{dir: fields[4], v2: true})
		case "cgroup":
			opts := map[string]bool{}
			if sep+3 < len(fields) {
				for _, o := range strings.Split(fields[sep+3], ",") {
					opts[o] = true
				}
			}
			out = append(out, mount{dir: fields[4], options: opts})
		}
	}
	return out
}

// ownCgroups maps "" (v2) and each v1 controller to this process's cgroup
// path, from /proc/self/cgroup.
func ownCgroups(file string) map[string]string {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// probe makes parent/wdc and checks that a child can be made in it
// holding file; it returns parent/wdc.
func probe(parent, file string) (string, error) {
	base := filepath.Join(parent, "wdc")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(base, "probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	defer os.Remove(p)
	if _, err := os.Stat(filepath.Join(p, file)); err != nil {
		return "", err
	}
	return base, nil
}

// detectHost finds the best containment this machine offers, trying the
// tracker kinds ("cgroup2", "pids", "freezer") not in skip.
func detectHost(skip map[string]bool) host {
	var h host
	own := ownCgroups("/proc/self/cgroup")
	mounts := cgroupMounts()
	for _, m := range mounts {
		if !m.v2 || h.tracker != "" || skip["cgroup2"] {
			continue
		}
		base, err := probe(filepath.Join(m.dir, own[""]), "cgroup.kill")
		if err == nil {
			err = probeCloneInto(base)
		}
		if err != nil {
			h.why = append(h.why, "cgroup2 at "+m.dir+": "+err.Error())
			continue
		}
		h.tracker, h.trackerKind, h.mode = base, "cgroup2", ContainCgroup2
		// Memory in v2 needs the controller enabled down to base.
		if enableV2Memory(base) {
			h.memory, h.memoryKind = base, "cgroup2"
		}
	}
	for _, kind := range []string{"pids", "freezer"} {
		if h.tracker != "" || skip[kind] {
			continue
		}
		for _, m := range mounts {
			if m.v2 || !m.options[kind] {
				continue
			}
			file := map[string]string{"pids": "pids.max", "freezer": "freezer.state"}[kind]
			base, err := probe(filepath.Join(m.dir, own[kind]), file)
			if err != nil {
				h.why = append(h.why, "cgroup v1 "+kind+" at "+m.dir+": "+err.Error())
				continue
			}
			h.tracker, h.trackerKind, h.mode = base, kind, ContainCgroup1
			break
		}
	}
	if h.memory == "" {
		for _, m := range mounts {
			if m.v2 || !m.options["memory"] {
				continue
			}
			base, err := probe(filepath.Join(m.dir, own["memory"]), "memory.oom_control")
			if err != nil {
				h.why = append(h.why, "cgroup v1 memory at "+m.dir+": "+err.Error())
				continue
			}
			h.memory, h.memoryKind = base, "cgroup1"
			break
		}
	}
	if h.tracker == "" {
		h.mode = ContainSubreaper
	}
	return h
}

// probeCloneInto starts /bin/true in a child cgroup of base with clone3
// CLONE_INTO_CGROUP (Linux 5.7), which the v2 containment needs.
func probeCloneInto(base string) error {
	if _, err := os.Stat("/bin/true"); err != nil {
		return nil // nothing to try it with; the first attempt will tell
	}
	p := filepath.Join(base, "probe-clone-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	defer os.Remove(p)
	fd, err := unix.Open(p, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("clone3 into a cgroup: %w", err)
	}
	return nil
}

// enableV2Memory turns the memory controller on for base's children
// (base's cgroup.subtree_control), which works when the agent's own
// cgroup delegates it; it reports whether they get memory files.
func enableV2Memory(base string) bool {
	_ = os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+memory"), 0)
	b, err := os.ReadFile(filepath.Join(base, "cgroup.subtree_control"))
	return err == nil && strings.Contains(string(b), "memory")
}

var subreaperOnce sync.Once

// becomeSubreaper makes this process a child subreaper (once).
func becomeSubreaper(log *slog.Logger) {
	subreaperOnce.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			log.Warn("could not become a child subreaper: orphans of an attempt re-parent to init", "error", err)
		}
	})
}

// record is ContainmentFile's content.
type record struct {
	Mode    Containment `json:"mode"`
	Cgroups []string    `json:"cgroups,omitempty"`
	PID     int         `json:"pid"`
}

// cell holds one attempt's processes.
type cell struct {
	host    host
	taskDir string
	log     *slog.Logger
	// tracker and memory are the attempt's cgroups ("" none); with
	// cgroup2 memory they are the same directory.
	tracker, memory string
	leader          int
	leaderStart     uint64

	mu sync.Mutex
	// seen: processes recorded as the attempt's (pid → start time).
	seen      map[int]uint64
	stopTrack chan struct{}
	trackDone chan struct{}
}

// newCell makes the attempt's cgroups and sets the memory limit (bytes,
// 0: none) where a memory cgroup exists. A cgroup it cannot make is
// logged and done without (the attempt is then held as in subreaper
// mode, or without a memory limit).
func newCell(taskDir string, memLimit int64, log *slog.Logger) *cell {
	c := &cell{host: currentHost(), taskDir: taskDir, log: log, seen: map[int]uint64{}}
	name := cellName(taskDir)
	if c.host.tracker != "" {
		c.tracker = filepath.Join(c.host.tracker, name)
		if err := mkCgroup(c.tracker); err != nil {
			log.Warn("no cgroup for the attempt; holding it as a subreaper", "error", err)
			c.tracker, c.host.tracker, c.host.trackerKind, c.host.mode = "", "", "", ContainSubreaper
			if c.host.memoryKind == "cgroup2" {
				c.host.memory, c.host.memoryKind = "", ""
			}
		}
	}
	switch {
	case c.host.memoryKind == "cgroup2":
		c.memory = c.tracker
	case c.host.memory != "":
		c.memory = filepath.Join(c.host.memory, name)
		if err := mkCgroup(c.memory); err != nil {
			log.Warn("no memory cgroup for the attempt", "error", err)
			c.memory, c.host.memory, c.host.memoryKind = "", "", ""
		}
	}
	if memLimit > 0 {
		if err := c.setMemoryLimit(memLimit); err != nil {
			log.Warn("memory_bytes not enforced", "memory_bytes", memLimit, "error", err)
		}
	}
	if c.host.mode == ContainSubreaper {
		becomeSubreaper(log)
	}
	return c
}

// cellName is the name of the cgroups of the attempt in taskDir: unique
// per work directory, task, attempt and fence.
func cellName(taskDir string) string {
	sum := sha256.Sum256([]byte(taskDir))
	return "a-" + hex.EncodeToString(sum[:8])
}

// mkCgroup makes dir, after clearing a leftover of the same name.
func mkCgroup(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, os.ErrExist) {
		killCgroup(dir)
		err = nil
	}
	return err
}

func (c *cell) setMemoryLimit(n int64) error {
	if c.memory == "" {
		c.log.Warn("memory_bytes not enforced: no memory cgroup on this machine", "memory_bytes", n)
		return nil
	}
	v := []byte(strconv.FormatInt(n, 10))
	if c.host.memoryKind == "cgroup2" {
		if err := os.WriteFile(filepath.Join(c.memory, "memory.max"), v, 0); err != nil {
			return fmt.Errorf("memory.max: %w", err)
		}
		_ = os.WriteFile(filepath.Join(c.memory, "memory.swap.max"), []byte("0"), 0)
		return nil
	}
	if err := os.WriteFile(filepath.Join(c.memory, "memory.limit_in_bytes"), v, 0); err != nil {
		return fmt.Errorf("memory.limit_in_bytes: %w", err)
	}
	// No swapping past the limit, where swap is accounted.
	_ = os.WriteFile(filepath.Join(c.memory, "memory.memsw.limit_in_bytes"), v, 0)
	return nil
}

// writeRecord keeps the cell's cgroups in the task directory for a
// restarted agent.
func (c *cell) writeRecord() error {
	r := record{Mode: c.host.mode, PID: c.leader}
	for _, d := range []string{c.tracker, c.memory} {
		if d != "" && (len(r.Cgroups) == 0 || r.Cgroups[0] != d) {
			r.Cgroups = append(r.Cgroups, d)
		}
	}
	return blobstore.WriteFileAtomic(filepath.Join(c.taskDir, ContainmentFile), 0o644, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(r)
	})
}

// start starts cmd inside the cell: into the v2 cgroup by clone3
// (CLONE_INTO_CGROUP), into v1 cgroups by forking from a thread moved
// into them for the fork (a child starts in its forking thread's
// cgroups), so the command is contained before its first instruction.
func (c *cell) start(cmd *exec.Cmd) error {
	var v1 []string
	if c.tracker != "" && c.host.trackerKind == "cgroup2" {
		fd, err := unix.Open(c.tracker, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("attempt cgroup: %w", err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	} else if c.tracker != "" {
		v1 = append(v1, c.tracker)
	}
	if c.memory != "" && c.host.memoryKind == "cgroup1" {
		v1 = append(v1, c.memory)
	}
	if c.host.mode == ContainSubreaper {
		// No end may take this command for an orphan before it is known.
		runningCells.Lock()
		defer runningCells.Unlock()
	}
	var err error
	if len(v1) == 0 {
		err = cmd.Start()
	} else {
		err = startInV1(cmd, v1)
	}
	if err != nil {
		return err
	}
	c.leader = cmd.Process.Pid
	if p, ok := readProc(c.leader); ok {
		c.leaderStart = p.start
	}
	if c.host.mode == ContainSubreaper {
		if runningCells.cells == nil {
			runningCells.cells = map[*cell]bool{}
		}
		runningCells.cells[c] = true
	}
	if err := c.writeRecord(); err != nil {
		c.log.Warn("containment record not written: a restarted agent relies on its environment scan", "error", err)
	}
	if c.host.mode == ContainSubreaper {
		c.stopTrack, c.trackDone = make(chan struct{}), make(chan struct{})
		go c.track()
	}
	return nil
}

// startInV1 starts cmd from a locked OS thread moved into each v1 cgroup
// of dirs for the fork and moved back after it. Should the way back fail
// the thread stays locked and the start fails: the child is killed.
func startInV1(cmd *exec.Cmd, dirs []string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid := unix.Gettid()
		own := ownCgroups("/proc/self/task/" + strconv.Itoa(tid) + "/cgroup")
		var back []string
		restore := func() error {
			var errs []error
			for _, d := range back {
				errs = append(errs, os.WriteFile(d, []byte(strconv.Itoa(tid)), 0))
			}
			return errors.Join(errs...)
		}
		for _, d := range dirs {
			orig, err := originalTasks(d, own)
			if err == nil {
				err = os.WriteFile(filepath.Join(d, "tasks"), []byte(strconv.Itoa(tid)), 0)
			}
			if err != nil {
				if restore() == nil {
					runtime.UnlockOSThread()
				}
				errc <- fmt.Errorf("join %s: %w", d, err)
				return
			}
			back = append(back, orig)
		}
		err := cmd.Start()
		if rerr := restore(); rerr != nil {
			if err == nil {
				_ = cmd.Process.Kill()
				_, _ = cmd.Process.Wait()
				err = fmt.Errorf("leave the attempt's cgroups: %w", rerr)
			}
			errc <- err
			return // the thread stays locked and ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// originalTasks is the tasks file of the thread's current cgroup in the
// v1 hierarchy that holds dir.
func originalTasks(dir string, own map[string]string) (string, error) {
	for _, m := range cgroupMounts() {
		if m.v2 || !strings.HasPrefix(dir, m.dir+"/") {
			continue
		}
		for ctrl := range m.options {
			if p, ok := own[ctrl]; ok {
				return filepath.Join(m.dir, p, "tasks"), nil
			}
		}
	}
	return "", fmt.Errorf("no v1 hierarchy holds %s", dir)
}

// runningCells holds the cells of this process's running commands in
// subreaper mode: an orphan re-parented to it (a subreaper) carries no
// sign of its attempt, only its start time, so it is taken for the
// attempt of the only running command that started before it, and
// killed at the end of the last such attempt.
var runningCells struct {
	sync.Mutex
	cells map[*cell]bool
}

// others is what collect needs of the other running cells: their
// leaders and their leaders' start times. The caller holds runningCells.
func (c *cell) others() (leaders map[int]bool, starts []uint64) {
	leaders = map[int]bool{}
	for d := range runningCells.cells {
		if d != c {
			leaders[d.leader] = true
			starts = append(starts, d.leaderStart)
		}
	}
	return leaders, starts
}

// track records, every TrackInterval, the processes that descend from the
// command or share its process group or session (subreaper mode).
func (c *cell) track() {
	defer close(c.trackDone)
	t := time.NewTicker(TrackInterval)
	defer t.Stop()
	for {
		runningCells.Lock()
		leaders, starts := c.others()
		runningCells.Unlock()
		c.collect(false, leaders, starts)
		select {
		case <-c.stopTrack:
			return
		case <-t.C:
		}
	}
}

// collect returns the live processes of the attempt it can find (the
// leader excluded) and records them in seen. In subreaper mode it also
// counts an orphan re-parented to this process that started after the
// command and before every other running command (leaders, starts:
// theirs); wide also counts processes that started after the command and
// work in its task directory or hold a file of it open.
func (c *cell) collect(wide bool, leaders map[int]bool, starts []uint64) []proc {
	procs := listProcs()
	byPID := make(map[int]proc, len(procs))
	for _, p := range procs {
		byPID[p.pid] = p
	}
	self := os.Getpid()
	c.mu.Lock()
	defer c.mu.Unlock()
	member := func(p proc) bool {
		if p.pid == self || p.pid == c.leader && p.start == c.leaderStart {
			return p.pid != self
		}
		if s, ok := c.seen[p.pid]; ok && s == p.start {
			return true
		}
		if p.start < c.leaderStart {
			return false
		}
		return p.pgid == c.leader || p.sid == c.leader
	}
	in := map[int]bool{}
	var walk func(p proc, depth int) bool
	walk = func(p proc, depth int) bool {
		if v, ok := in[p.pid]; ok {
			return v
		}
		if member(p) {
			in[p.pid] = true
			return true
		}
		in[p.pid] = false
		if parent, ok := byPID[p.ppid]; ok && depth < 64 && p.ppid != self && p.ppid > 1 {
			in[p.pid] = walk(parent, depth+1)
		}
		return in[p.pid]
	}
	var out []proc
	for _, p := range procs {
		if p.pid == self || p.zombie {
			continue
		}
		ok := walk(p, 0)
		after := c.leaderStart > 0 && p.start >= c.leaderStart
		if !ok && after && c.host.mode == ContainSubreaper && p.ppid == self && !leaders[p.pid] && p.pid != c.leader {
			ok = true
			for _, s := range starts {
				if s <= p.start {
					ok = false // another attempt's, as well as it may be ours
				}
			}
		}
		if !ok && wide && after && touches(p.pid, c.taskDir) {
			ok = true
		}
		if ok {
			c.seen[p.pid] = p.start
			if !(p.pid == c.leader && p.start == c.leaderStart) {
				out = append(out, p)
			}
		}
	}
	return out
}

// end kills every process of the attempt and removes its cgroups; it
// reports whether the memory cgroup saw an OOM kill.
func (c *cell) end() (oomKills int64) {
	if c.stopTrack != nil {
		close(c.stopTrack)
		<-c.trackDone
	}
	oomKills = c.oomKills()
	for _, d := range []string{c.tracker, c.memory} {
		if d == "" {
			continue
		}
		c.mu.Lock()
		for _, pid := range cgroupProcs(d) {
			if p, ok := readProc(pid); ok {
				c.seen[pid] = p.start
			}
		}
		c.mu.Unlock()
		killCgroup(d)
	}
	// The second net, and the only one without a cgroup: process group,
	// session, recorded descendants, and (without a cgroup) what works
	// in the task directory.
	subreaper := c.host.mode == ContainSubreaper
	var leaders map[int]bool
	var starts []uint64
	if subreaper {
		runningCells.Lock()
		defer func() {
			delete(runningCells.cells, c)
			runningCells.Unlock()
		}()
		leaders, starts = c.others()
	}
	for round := 0; round < 50; round++ {
		found := c.collect(subreaper, leaders, starts)
		if len(found) == 0 {
			break
		}
		var pids []int
		for _, p := range found {
			if syscall.Kill(p.pid, syscall.SIGKILL) == nil {
				pids = append(pids, p.pid)
			}
		}
		c.log.Info("killed processes the command left behind", "pids", pids)
		time.Sleep(10 * time.Millisecond)
	}
	c.reap()
	c.remove()
	return oomKills
}

// reap waits for the zombies of the attempt's processes (seen) that
// re-parented to this process (a subreaper); the command itself is waited
// for by os/exec. A PID is reaped only with the start time it was seen
// with, so a reused PID is never waited for.
func (c *cell) reap() {
	self := os.Getpid()
	deadline := time.Now().Add(2 * time.Second)
	pending := map[int]uint64{}
	c.mu.Lock()
	for pid, start := range c.seen {
		if pid != c.leader && pid != self {
			pending[pid] = start
		}
	}
	c.mu.Unlock()
	for len(pending) > 0 && time.Now().Before(deadline) {
		for pid, start := range pending {
			p, ok := readProc(pid)
			switch {
			case !ok || p.ppid != self || p.start != start:
				delete(pending, pid) // gone, or another parent's to reap
			case p.zombie:
				var ws unix.WaitStatus
				_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
				delete(pending, pid)
			}
		}
		if len(pending) > 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// oomKills reads the memory cgroup's OOM kill count (memory.events in
// v2, memory.oom_control in v1); 0 without a memory cgroup.
func (c *cell) oomKills() int64 {
	if c.memory == "" {
		return 0
	}
	file := "memory.oom_control"
	if c.host.memoryKind == "cgroup2" {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(c.memory, file))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func (c *cell) remove() {
	for _, d := range []string{c.tracker, c.memory} {
		if d != "" {
			removeCgroup(d)
		}
	}
}

// cgroupProcs lists the processes of a cgroup (cgroup.procs).
func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// killCgroup kills every process of the cgroup dir and waits (at most 5
// s) until none is left: cgroup.kill in v2; in v1 it first stops forks
// (pids.max 0) or freezes the cgroup for each round of kills (a frozen
// process dies once thawed), then kills each member until the cgroup is
// empty. This process is never killed.
func killCgroup(dir string) {
	self := os.Getpid()
	freezer := filepath.Join(dir, "freezer.state")
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
	} else if _, err := os.Stat(filepath.Join(dir, "pids.max")); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "pids.max"), []byte("0"), 0)
	} else if _, err := os.Stat(freezer); err != nil {
		freezer = ""
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if freezer != "" {
			_ = os.WriteFile(freezer, []byte("FROZEN"), 0)
			for i := 0; i < 100; i++ {
				if b, _ := os.ReadFile(freezer); strings.TrimSpace(string(b)) != "FREEZING" {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		left := 0
		for _, pid := range cgroupProcs(dir) {
			if pid == self {
				continue
			}
			left++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if freezer != "" {
			_ = os.WriteFile(freezer, []byte("THAWED"), 0)
		}
		if left == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// removeCgroup empties and removes a cgroup directory.
func removeCgroup(dir string) {
	killCgroup(dir)
	for i := 0; i < 50; i++ {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ReapContained kills what is left in the cgroups recorded in the task
// directories under root (ContainmentFile, written by an executor whose
// agent died) and removes those cgroups. It returns the PIDs it found in
// them.
func ReapContained(root string) []int {
	files, _ := filepath.Glob(filepath.Join(root, "*", "*", ContainmentFile))
	var killed []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var r record
		if json.Unmarshal(b, &r) != nil {
			continue
		}
		for _, d := range r.Cgroups {
			if !strings.HasPrefix(d, "/sys/fs/cgroup/") || strings.Contains(d, "..") {
				continue // not ours to touch
			}
			killed = append(killed, cgroupProcs(d)...)
			removeCgroup(d)
		}
	}
	return killed
}

// proc is one line of /proc/<pid>/stat.
type proc struct {
	pid, ppid, pgid, sid int
	start                uint64 // clock ticks after boot
	zombie               bool
}

func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return proc{}, false
	}
	p := proc{pid: pid, zombie: f[0] == "Z" || f[0] == "X"}
	p.ppid, _ = strconv.Atoi(f[1])
	p.pgid, _ = strconv.Atoi(f[2])
	p.sid, _ = strconv.Atoi(f[3])
	p.start, _ = strconv.ParseUint(f[19], 10, 64)
	return p, true
}

func listProcs() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]proc, 0, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// touches reports whether pid works in dir (its cwd is dir or below) or
// holds a file under dir open.
func touches(pid int, dir string) bool {
	base := "/proc/" + strconv.Itoa(pid)
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	if cwd, err := os.Readlink(base + "/cwd"); err == nil && under(cwd) {
		return true
	}
	fds, err := os.ReadDir(base + "/fd")
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if t, err := os.Readlink(base + "/fd/" + fd.Name()); err == nil && under(t) {
			return true
		}
	}
	return false
}

// killFile is the cgroup.kill file of the attempt's cgroup ("" when it
// has none: cgroup v1, or subreaper mode).
func (c *cell) killFile() string {
	if c == nil || c.tracker == "" {
		return ""
	}
	f := filepath.Join(c.tracker, "cgroup.kill")
	if _, err := os.Stat(f); err != nil {
		return ""
	}
	return f
}
