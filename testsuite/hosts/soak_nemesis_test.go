package hosts

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The nemesis's faults.
const (
	faultKillAgent        = "kill-agent"
	faultKillControlPlane = "kill-control-plane"
	faultKillCommand      = "kill-command"
	faultRestartServer    = "restart-server"
	faultPauseAgent       = "pause-agent"
	faultBlackholeShort   = "blackhole-short"
	faultBlackholeLong    = "blackhole-long"
	faultRefuseShort      = "refuse-short"
	faultRefuseLong       = "refuse-long"
)

// nemesisKinds weighs the faults: each appears as often as it is listed.
var nemesisKinds = []string{faultKillAgent, faultKillAgent, faultKillControlPlane, faultKillCommand, faultKillCommand,
	faultPauseAgent, faultPauseAgent, faultBlackholeShort, faultBlackholeShort, faultBlackholeLong, faultRefuseShort,
	faultRefuseLong, faultRestartServer}

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
		kind := nemesisKinds[s.intn(len(nemesisKinds))]
		var candidates []*host
		switch kind {
		case faultKillAgent, faultPauseAgent, faultKillCommand:
			candidates = s.c.all[3:]
		case faultKillControlPlane:
			candidates = s.c.all[1:3]
		case faultRestartServer:
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
			case faultBlackholeShort, faultBlackholeLong, faultRefuseShort, faultRefuseLong:
				rules, d := blackholeRules, long
				if kind == faultRefuseShort || kind == faultRefuseLong {
					rules = refuseRules
				}
				if kind == faultBlackholeShort || kind == faultRefuseShort {
					d = short
				}
				if err := h.partition(rules); err != nil {
					s.t.Errorf("soak: %s: %v", kind, err)
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
			s.faults = append(s.faults, f)
			b, _ := json.Marshal(f)
			fmt.Fprintf(s.log, "%s\n", b)
		}()
	}
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
	s.t.Errorf("soak: host %s stays partitioned: %v", h.name, err)
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

// refuseRules refuse every connection in or out of a host's link (TCP
// reset, ICMP unreachable otherwise) instead of dropping its packets.
var refuseRules = fmt.Sprintf(`table inet %s {
	chain input { type filter hook input priority -10; policy accept; iifname "eth0" meta l4proto tcp reject with tcp reset; iifname "eth0" reject; }
	chain output { type filter hook output priority -10; policy accept; oifname "eth0" meta l4proto tcp reject with tcp reset; oifname "eth0" reject; }
}
`, blackholeTable)
