package hosts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
)

// The nemesis's faults.
const (
	faultKillAgent        = "kill-agent"
	faultKillControlPlane = "kill-control-plane"
	faultKillCommand      = "kill-command"
	faultRestartServer    = "restart-server"
	faultRestartPostgres  = "restart-postgres" // the official server's database
	faultStoreDown        = "store-down"       // the S3 store refuses connections
	faultPauseAgent       = "pause-agent"
	faultSkewClock        = "skew-clock" // an agent restarted with its clock off
	faultBlackholeShort   = "blackhole-short"
	faultBlackholeLong    = "blackhole-long"
	faultRefuseShort      = "refuse-short"
	faultRefuseLong       = "refuse-long"
	faultTerminateTask    = "terminate-task" // then submitted again
	faultResetTask        = "reset-task"     // to its first or last workflow task
	// An agent's registry entry (WdcWorker) terminated, or reset to its
	// first or last workflow task.
	faultTerminateWorker = "terminate-worker"
	faultResetWorker     = "reset-worker"
)

// operatorHost is the "host" of an operator's faults (they run on a): one
// at a time.
const operatorHost = "operator"

// nemesisKinds weighs the faults: each appears as often as it is listed.
var nemesisKinds = []string{faultKillAgent, faultKillAgent, faultKillControlPlane, faultKillCommand, faultKillCommand,
	faultPauseAgent, faultPauseAgent, faultBlackholeShort, faultBlackholeShort, faultBlackholeLong, faultRefuseShort,
	faultRefuseLong, faultRestartServer, faultStoreDown, faultTerminateTask, faultResetTask, faultSkewClock,
	faultTerminateWorker, faultResetWorker}

// kinds are the faults the nemesis draws from: nemesisKinds, and with
// the official server a restart of PostgreSQL.
func (s *soakRun) kinds() []string {
	if s.c.official == nil {
		return nemesisKinds
	}
	return append(slices.Clip(nemesisKinds), faultRestartPostgres)
}

// nemesis injects a fault every 0.3–2 s on a host that has none in
// progress, each healed on its own schedule, until stop; then it waits
// for them to heal.
func (s *soakRun) nemesis(stop <-chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-stop:
			return
		case <-time.After(s.between(300*time.Millisecond, 2*time.Second)):
		}
		kinds := s.kinds()
		kind := kinds[s.intn(len(kinds))]
		if kind == faultTerminateTask || kind == faultResetTask || kind == faultTerminateWorker || kind == faultResetWorker {
			s.mu.Lock()
			busy := s.busy[operatorHost]
			s.busy[operatorHost] = true
			s.mu.Unlock()
			if !busy {
				wg.Add(1)
				go func() { defer wg.Done(); s.operatorFault(kind, s.between(500*time.Millisecond, 4*time.Second)) }()
			}
			continue
		}
		var candidates []*host
		switch kind {
		case faultKillAgent, faultPauseAgent, faultKillCommand, faultSkewClock:
			candidates = s.c.all[3:]
		case faultKillControlPlane:
			candidates = s.c.all[1:3]
		case faultRestartServer, faultRestartPostgres, faultStoreDown:
			candidates = s.c.all[:1]
		case faultBlackholeShort, faultRefuseShort:
			candidates = s.c.all
		default: // a long partition of a would stop everything
			candidates = s.c.all[1:]
		}
		var h *host
		s.mu.Lock()
		for _, i := range s.perm(len(candidates)) {
			if !s.busy[candidates[i].name] {
				h = candidates[i]
				break
			}
		}
		if h == nil {
			s.mu.Unlock()
			continue
		}
		s.busy[h.name] = true
		s.mu.Unlock()
		short, long := s.between(500*time.Millisecond, 4*time.Second), s.between(12*time.Second, 40*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := soakFault{Kind: kind, Host: h.name, At: time.Now()}
			switch kind {
			case faultKillAgent, faultKillControlPlane, faultRestartServer:
				p := s.procs[h.name]
				p.kill()
				time.Sleep(short)
				p.restart(s.t)
			case faultSkewClock:
				off, err := s.skewClock(h, short, long)
				if err != nil {
					s.errorf("soak: %s: %v", kind, err)
				}
				f.Offset = off.String()
			case faultRestartPostgres:
				stopped, err := s.c.restartPostgres(short)
				if err != nil {
					s.errorf("soak: %s: %v", kind, err)
				}
				if !stopped {
					f.Kind = ""
				}
			case faultKillCommand:
				if !killCommand(h, s.intn) {
					f.Kind = "" // nothing to kill: no fault
				}
			case faultPauseAgent:
				pause := short
				if s.intn(2) == 0 {
					pause = long
				}
				signalHost(h, syscall.SIGSTOP)
				time.Sleep(pause)
				signalHost(h, syscall.SIGCONT)
			case faultStoreDown, faultBlackholeShort, faultBlackholeLong, faultRefuseShort, faultRefuseLong:
				rules, d := partitionFault(kind, short, long, s.intn)
				if err := h.partition(rules); err != nil {
					s.errorf("soak: %s: %v", kind, err)
					f.Kind = ""
					break
				}
				time.Sleep(d)
				s.heal(h)
			}
			f.Healed = time.Now()
			s.mu.Lock()
			defer s.mu.Unlock()
			s.busy[h.name] = false
			if f.Kind == "" {
				return
			}
			s.logFault(f)
		}()
	}
}

// skewClock sets h's clock off by 5 s to 5 min, either way (envClockFile:
// what its agent signs by), restarts its agent after restartIn, and sets
// the clock right after hold; it returns the offset. The control planes believe a registration
// signed within identity.MaxSignedAge of their clock and after the last
// they accepted.
func (s *soakRun) skewClock(h *host, restartIn, hold time.Duration) (time.Duration, error) {
	off := s.between(5*time.Second, 5*time.Minute)
	if s.intn(2) == 0 {
		off = -off
	}
	if err := os.WriteFile(h.clockFile(), []byte(off.String()), 0o644); err != nil {
		return off, err
	}
	time.Sleep(restartIn)
	p := s.procs[h.name]
	p.kill()
	p.restart(s.t)
	time.Sleep(hold)
	return off, os.Remove(h.clockFile())
}

// partitionFault is the nft rules and duration of a partition fault of
// kind: store-down lasts short or long (drawn with intn), the others as
// their kind names.
func partitionFault(kind string, short, long time.Duration, intn func(int) int) (string, time.Duration) {
	switch kind {
	case faultStoreDown:
		if intn(2) == 0 {
			return storeDownRules, long
		}
		return storeDownRules, short
	case faultBlackholeShort:
		return blackholeRules, short
	case faultBlackholeLong:
		return blackholeRules, long
	case faultRefuseShort:
		return refuseRules, short
	default:
		return refuseRules, long
	}
}

// logFault records f (s.mu held).
func (s *soakRun) logFault(f soakFault) {
	s.faults = append(s.faults, f)
	b, _ := json.Marshal(f)
	fmt.Fprintf(s.log, "%s\n", b)
}

// operatorFault is an operator's intervention from Temporal's own tools
// on a task whose attempt runs: a terminate, and after pause the same
// envelope submitted again (as docs/operations.md tells an operator to),
// or a reset to the first or the last workflow task. A task that ended
// meanwhile is no fault.
func (s *soakRun) operatorFault(kind string, pause time.Duration) {
	defer func() {
		s.mu.Lock()
		s.busy[operatorHost] = false
		s.mu.Unlock()
	}()
	if kind == faultTerminateWorker || kind == faultResetWorker {
		s.workerEntryFault(kind)
		return
	}
	task, ok := s.leasedTask()
	if !ok {
		s.t.Logf("soak: %s: no task's lease seen held", kind)
		return
	}
	cmd, recorded := s.operatorCommand(kind, "")
	f := soakFault{Kind: recorded, Host: operatorHost, Task: task.ID, At: time.Now()}
	s.mu.Lock()
	s.touched[task.ID] = true // its executions are all recorded
	s.mu.Unlock()
	if _, err := s.c.a.operator(cmd, task.ID); err != nil {
		s.t.Logf("soak: %s of %s: %v", cmd, task.ID, err)
		return
	}
	if kind == faultTerminateTask {
		time.Sleep(pause)
		path := filepath.Join(s.out, fmt.Sprintf("again-%s-%d.jsonl", task.ID, time.Now().UnixNano()))
		require.NoError(s.t, os.WriteFile(path, []byte(s.envelope(task)+"\n"), 0o644))
		out := s.submit("again "+task.ID, path, task.TTL)
		s.t.Logf("soak: %s terminated and submitted again: %s", task.ID, bytes.TrimSpace(out))
	}
	f.Healed = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logFault(f)
}

// operatorCommand is the operator's command for kind on a task (entry
// "") or a worker's registry entry ("worker"), and the kind to record: a
// reset's names its point, its first or last workflow task, drawn here.
func (s *soakRun) operatorCommand(kind, entry string) (cmd, recorded string) {
	target := ""
	if entry != "" {
		target = "-" + entry
	}
	if kind == faultTerminateTask || kind == faultTerminateWorker {
		return "terminate" + target, kind
	}
	point := "first"
	if s.intn(2) == 0 {
		point = "last"
	}
	return "reset" + target + "-" + point, kind + "-" + point
}

// workerEntryFault is an operator's terminate, or reset to its first or
// last workflow task, of one agent's registry entry (WdcWorker).
func (s *soakRun) workerEntryFault(kind string) {
	agents := s.c.all[3:]
	h := agents[s.intn(len(agents))]
	cmd, recorded := s.operatorCommand(kind, "worker")
	f := soakFault{Kind: recorded, Host: h.name, At: time.Now()}
	if _, err := s.c.a.operator(cmd, workerIDOf(h)); err != nil {
		s.t.Logf("soak: %s of %s: %v", cmd, workerIDOf(h), err)
		return
	}
	f.Healed = time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logFault(f)
}

// leasedTask is one of the workload's tasks that visibility lists
// LEASED (`wdc tasks list --state LEASED`), chosen at random; false when
// none is or the listing fails.
func (s *soakRun) leasedTask() (soakTask, bool) {
	out, err := s.c.a.cli("tasks", "list", "--state", string(api.TaskLeased), "-o", "json")
	if err != nil {
		s.t.Logf("soak: list leased tasks: %v", err)
		return soakTask{}, false
	}
	var listed []struct {
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal(out, &listed); err != nil {
		s.t.Logf("soak: list leased tasks: %v: %s", err, out)
		return soakTask{}, false
	}
	s.mu.Lock()
	byID := make(map[string]soakTask, len(s.tasks))
	for _, task := range s.tasks {
		byID[task.ID] = task
	}
	s.mu.Unlock()
	var leased []soakTask
	for _, l := range listed {
		if task, ok := byID[l.TaskID]; ok {
			leased = append(leased, task)
		}
	}
	if len(leased) == 0 {
		return soakTask{}, false
	}
	return leased[s.intn(len(leased))], true
}

// heal ends h's partition, trying for a minute before it fails the test.
func (s *soakRun) heal(h *host) {
	var err error
	for range 60 {
		if err = h.unpartition(); err == nil {
			return
		}
		time.Sleep(time.Second)
	}
	s.errorf("soak: host %s stays partitioned: %v", h.name, err)
}

// perm is a seeded permutation of [0, n).
func (s *soakRun) perm(n int) []int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Perm(n)
}

// killCommand SIGKILLs one of the task commands running on h (chosen
// with intn), as an infrastructure kill would; false if none runs.
func killCommand(h *host, intn func(int) int) bool {
	out, _ := exec.Command("ip", "netns", "pids", h.ns).Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), "EPOCHREALTIME") {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return false
	}
	return syscall.Kill(pids[intn(len(pids))], syscall.SIGKILL) == nil
}

// signalHost sends sig to every process in h's namespace, its agent and
// the commands, but the executors' fence watchdogs: a stopped agent with
// its attempts, not a paused machine (whose watchdogs stop too, the case
// README guarantee 9 leaves out).
func signalHost(h *host, sig syscall.Signal) {
	out, _ := exec.Command("ip", "netns", "pids", h.ns).Output()
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), "wdc-fence-watchdog") {
			continue
		}
		_ = syscall.Kill(pid, sig)
	}
}

// storeDownRules make the S3 store on host a refuse every connection
// from the other hosts (TCP reset on its port), as a stopped store
// process would, while Temporal's frontend stays reachable.
var storeDownRules = fmt.Sprintf(`table inet %s {
	chain input { type filter hook input priority -10; policy accept; iifname "eth0" tcp dport %s reject with tcp reset; }
}
`, blackholeTable, storePort)

// refuseRules refuse every connection in or out of a host's link (TCP
// reset, ICMP unreachable otherwise) instead of dropping its packets.
var refuseRules = fmt.Sprintf(`table inet %s {
	chain input { type filter hook input priority -10; policy accept; iifname "eth0" meta l4proto tcp reject with tcp reset; iifname "eth0" reject; }
	chain output { type filter hook output priority -10; policy accept; oifname "eth0" meta l4proto tcp reject with tcp reset; oifname "eth0" reject; }
}
`, blackholeTable)
