package hosts

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/resource"
)

// The nemesis soak's settings: how long the nemesis runs (default 2m),
// its seed (default: from the clock, logged), where the history and the
// figures go besides the test log ("" a temporary directory), and its
// Temporal server: "dev" (default: `wdc server start-dev`) or "official"
// (PostgreSQL and the official temporal-server).
const (
	envSoakDuration = "WDC_SOAK_DURATION"
	envSoakSeed     = "WDC_SOAK_SEED"
	envSoakOut      = "WDC_SOAK_OUT"
	envSoakServer   = "WDC_SOAK_SERVER"
)

// soakTTLs are the lease TTLs a batch of the soak's workload gets, one
// each.
var soakTTLs = []time.Duration{2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}

// TestNemesisSoak runs a fleet of six hosts — a: the dev server (Temporal
// and the S3 store), or with $WDC_SOAK_SERVER=official PostgreSQL and the
// official temporal-server beside it; b, c: a control plane each; d, e,
// f: an agent each —
// under a seeded nemesis for $WDC_SOAK_DURATION while a workload submits
// batches of tasks and commits their results, then records the history
// and checks it (internal/soak). `make soak` runs it long, CI for 5
// minutes; make test does not run it.
func TestNemesisSoak(t *testing.T) {
	duration := 2 * time.Minute
	if s := os.Getenv(envSoakDuration); s != "" {
		d, err := time.ParseDuration(s)
		require.NoError(t, err, "%s=%q: want a duration such as 5m", envSoakDuration, s)
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSoakSeed); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "%s=%q: want a number", envSoakSeed, s)
		seed = n
	}
	official := false
	switch v := os.Getenv(envSoakServer); v {
	case "", "dev":
	case "official":
		official = true
	default:
		t.Fatalf("%s=%q: want dev or official", envSoakServer, v)
	}
	out := os.Getenv(envSoakOut)
	if out == "" {
		out = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(out, 0o755))
	server := "dev"
	if official {
		server = "official"
	}
	t.Logf("soak: seed %d, nemesis for %s, %s server (its choices again: make soak-nemesis SEED=%d DURATION=%s SOAK_SERVER=%s); history in %s",
		seed, duration, server, seed, duration, server, out)

	var s *soakRun
	// Registered first, so it runs after every process's cleanup has
	// printed its log: the reasons come last, where a truncated log
	// shows them.
	t.Cleanup(func() {
		if t.Failed() && s != nil {
			s.failMu.Lock()
			defer s.failMu.Unlock()
			errs := strings.Join(s.failures, "\n  ")
			if errs == "" {
				errs = "(a failed assertion: see its Error Trace above)"
			}
			t.Logf("soak: FAILED (seed %d), its errors:\n  %s\nlogs and history in %s", seed, errs, out)
		}
	})
	s = newSoak(t, seed, out, official)
	s.start()
	s.run(duration)
	s.quiesce()
	h := s.record()
	s.finish()
	s.check(h)
	if t.Failed() {
		s.keepLogs()
	}
}

// finish stops starting processes again: the soak is over.
func (s *soakRun) finish() {
	for _, p := range s.procs {
		p.mu.Lock()
		p.done = true
		p.mu.Unlock()
	}
}

// soakRun is one nemesis soak: its cluster, processes, workload and log of
// faults.
type soakRun struct {
	t      *testing.T
	c      *cluster
	out    string
	traces string

	rngMu sync.Mutex
	rng   *rand.Rand
	// submitterSVID is the --svid-dir the committer signs with.
	submitterSVID string

	mu    sync.Mutex
	procs map[string]*soakProc // by host name (and storeProc)
	// openByRun is each run's open tasks: the count the committer last
	// read (kept while a read fails) plus the tasks submitted since;
	// heldBack is the batches the submitter did not send because their sum
	// reached maxOpenTasks.
	openByRun map[string]int
	heldBack  int
	tasks     []soakTask
	runs      []string
	faults    []soakFault
	busy      map[string]bool // hosts with a fault in progress (operatorHost too)
	// touched are the tasks an operator's fault hit: record reads every
	// execution of their workflows.
	touched map[string]bool
	log     *os.File
	// failures are the errors reported through errorf, for the summary
	// the test prints last.
	failMu   sync.Mutex
	failures []string
}

// errorf reports a soak failure (t.Errorf) and keeps it for the summary.
func (s *soakRun) errorf(format string, args ...any) {
	s.t.Helper()
	msg := fmt.Sprintf(format, args...)
	s.failMu.Lock()
	s.failures = append(s.failures, msg)
	s.failMu.Unlock()
	s.t.Error(msg)
}

// workerIDOf is the fleet worker ID of host h's agent.
func workerIDOf(h *host) string { return "soak-" + h.name }

// storeProc is the key in soakRun.procs of start-dev when it serves the
// S3 store only (beside the official server, "a").
const storeProc = "a/store"

// soakProc is the process a host runs (the dev server, the official
// temporal-server, a control plane or an agent) and how to start it
// again. Like a service manager, it starts the process again a second
// after it exits on its own (a control plane that cannot reach the server
// at start exits, for one).
type soakProc struct {
	h    *host
	role string
	args []string

	mu       sync.Mutex
	p        *proc
	n        int
	killed   bool // by the nemesis, which starts it again itself
	selfExit int  // exits on its own
	done     bool // the soak is over
}

// soakTask is one task of the workload.
type soakTask struct {
	ID, Run string
	Ticks   int
	TTL     time.Duration
}

// soakFault is one fault the nemesis injected: Kind on Host (or on Task,
// by an operator) from At until Healed (zero: not yet).
type soakFault struct {
	Kind        string    `json:"kind"`
	Host        string    `json:"host"`
	Task        string    `json:"task,omitempty"`
	Offset      string    `json:"clock_offset,omitempty"` // skew-clock's
	At          time.Time `json:"at"`
	Healed      time.Time `json:"healed"`
	RecoveredIn float64   `json:"recovered_in_seconds,omitempty"`
}

func newSoak(t *testing.T, seed uint64, out string, official bool) *soakRun {
	s := &soakRun{t: t, out: out, traces: filepath.Join(out, "traces"), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		procs: map[string]*soakProc{}, busy: map[string]bool{}, touched: map[string]bool{}, openByRun: map[string]int{}}
	require.NoError(t, os.MkdirAll(s.traces, 0o777))
	require.NoError(t, os.MkdirAll(filepath.Join(out, "porcupine"), 0o755))
	log, err := os.Create(filepath.Join(out, "nemesis.jsonl"))
	require.NoError(t, err)
	t.Cleanup(func() { log.Close() })
	s.log = log
	s.c = newHostsOn(t, official, "a", "b", "c", "d", "e", "f")
	return s
}

func (s *soakRun) intn(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.IntN(n)
}

func (s *soakRun) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.intn(int(hi-lo)/int(time.Millisecond)+1))*time.Millisecond
}

// start runs the control planes on b and c and the agents on d, e, f,
// with identity required: each agent signs with an SVID of its own from
// an issuer on a, and the control planes hold its bundle.
func (s *soakRun) start() {
	c := s.c
	ca := filepath.Join(c.a.dir, "ca")
	iss, err := identity.LoadOrCreateIssuer(ca, spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	require.NoError(s.t, err)
	for _, h := range []*host{c.all[1], c.all[2]} {
		s.procs[h.name] = &soakProc{h: h, role: "control-plane", args: []string{"control-plane", "--address", c.address, "--log-level", "info",
			"--trust-bundle", filepath.Join(ca, identity.CACertFile), "--identity", string(identity.ModeRequired)}}
		if c.official != nil { // the one setup step a new namespace needs
			s.procs[h.name].args = append(s.procs[h.name].args, "--register-search-attributes")
		}
	}
	// The committer signs as submitter "soak": identity required refuses
	// an unsigned commit.
	sub, err := identity.SubmitterID(iss.TrustDomain(), "soak")
	require.NoError(s.t, err)
	svid, err := iss.Issue(sub, 24*time.Hour)
	require.NoError(s.t, err)
	s.submitterSVID = filepath.Join(c.a.dir, "submitter-svid")
	require.NoError(s.t, identity.WriteSVID(s.submitterSVID, svid, iss.Bundle()))
	for _, h := range c.all[3:] {
		svid, err := iss.IssueWorker("soak-"+h.name, 24*time.Hour)
		require.NoError(s.t, err)
		svidDir := filepath.Join(h.dir, "svid")
		require.NoError(s.t, identity.WriteSVID(svidDir, svid, iss.Bundle()))
		s.procs[h.name] = &soakProc{h: h, role: "agent", args: []string{"agent", "--worker-id", workerIDOf(h),
			"--cpu", "4", "--memory", "4Gi", "--label", "soak=1", "--data-dir", filepath.Join(h.dir, "data"),
			"--address", c.address, "--log-level", "info", "--svid-dir", svidDir}}
	}
	for _, name := range []string{"b", "c", "d", "e", "f"} {
		s.procs[name].restart(s.t)
	}
	s.procs["a"] = &soakProc{h: c.a, role: "start-dev", p: c.server}
	if c.official != nil {
		// The nemesis restarts the Temporal server of a: here that is
		// temporal-server; start-dev serves the S3 store only.
		s.procs[storeProc] = s.procs["a"]
		s.procs["a"] = &soakProc{h: c.a, role: "temporal-server", p: c.official.server}
		go s.procs[storeProc].supervise(s.t, c.server)
	}
	go s.procs["a"].supervise(s.t, s.procs["a"].p)
	s.t.Cleanup(s.finish)
	for _, name := range []string{"b", "c"} {
		s.procs[name].p.waitOut(s.t, 60*time.Second, "control plane polling")
	}
	for _, name := range []string{"d", "e", "f"} {
		s.procs[name].p.waitOut(s.t, 60*time.Second, "registered (incarnation")
	}
}

// restart starts the process again (a new log file each time; a Temporal
// server is waited for until it answers, up to 2 minutes a try), trying
// 30 times a second apart before it fails the test. It may run off the test's goroutine.
func (p *soakProc) restart(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for try := 1; !p.done; try++ {
		p.n++
		name := fmt.Sprintf("%s-%d", p.role, p.n)
		var srv *proc
		var err error
		switch p.role {
		case "start-dev":
			srv, err = p.h.c.startServerOnce(t, name)
		case "temporal-server":
			srv, err = p.h.c.startTemporalOnce(t, name)
		default:
			srv = p.h.start(t, name, p.args...)
		}
		if err == nil {
			p.p = srv
			break
		}
		if try == 30 {
			t.Errorf("soak: %s does not start again: %v", p.role, err)
			return
		}
		t.Logf("soak: %s did not start (try %d): %v", p.role, try, err)
		p.mu.Unlock()
		time.Sleep(time.Second)
		p.mu.Lock()
	}
	if p.done {
		return
	}
	p.killed = false
	go p.supervise(t, p.p)
}

// kill SIGKILLs the process for the nemesis, which starts it again.
func (p *soakProc) kill() {
	p.mu.Lock()
	p.killed = true
	cur := p.p
	p.mu.Unlock()
	cur.stop()
}

// supervise starts cur again a second after it exits on its own.
func (p *soakProc) supervise(t *testing.T, cur *proc) {
	<-cur.exited
	time.Sleep(time.Second)
	p.mu.Lock()
	again := p.p == cur && !p.killed && !p.done
	if again {
		p.selfExit++
		t.Logf("soak: host %s: %s exited on its own: %s", p.h.name, p.role, strings.TrimSpace(lastLine(cur.log)))
	}
	p.mu.Unlock()
	if again {
		p.restart(t)
	}
}

// lastLine is the last line of the file at path.
func lastLine(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// run drives the workload, the committer and the nemesis for d.
func (s *soakRun) run(d time.Duration) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.submitter(stop) }()
	go func() { defer wg.Done(); s.committer(stop) }()
	go func() { defer wg.Done(); s.nemesis(stop) }()
	time.Sleep(d)
	close(stop)
	wg.Wait()
}

// maxOpenTasks is how many open tasks the workload keeps at most: more
// than the fleet runs at once, less than it falls behind on for good
// under the nemesis on a 2-core machine (a long soak without a bound
// ended with thousands open).
const maxOpenTasks = 120

// submitter submits a batch of 3–8 tasks every 1–3 s, into a run that
// takes 80 tasks, while the runs have fewer than maxOpenTasks open; up to
// three batches are in flight, and a failed submission is retried with
// the same file.
func (s *soakRun) submitter(stop <-chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	inFlight := make(chan struct{}, 3)
	run, inRun := 0, 0
	for batch := 1; ; batch++ {
		select {
		case <-stop:
			return
		case <-time.After(s.between(time.Second, 3*time.Second)):
		}
		s.mu.Lock()
		full := s.openTasks() >= maxOpenTasks
		if full {
			s.heldBack++
		}
		s.mu.Unlock()
		if full {
			batch--
			continue
		}
		if run == 0 || inRun >= 80 {
			run, inRun = run+1, 0
		}
		runID := fmt.Sprintf("soak-r%d", run)
		ttl := soakTTLs[s.intn(len(soakTTLs))]
		var lines []string
		var tasks []soakTask
		for range 3 + s.intn(6) {
			task := soakTask{ID: fmt.Sprintf("soak-%d-%d", batch, len(tasks)), Run: runID, TTL: ttl, Ticks: 3 + s.intn(13)}
			if s.intn(10) < 3 {
				task.Ticks = 30 + s.intn(120)
			}
			lines = append(lines, s.envelope(task))
			tasks = append(tasks, task)
		}
		inRun += len(tasks)
		path := filepath.Join(s.out, fmt.Sprintf("batch-%d.jsonl", batch))
		require.NoError(s.t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
		select {
		case inFlight <- struct{}{}:
		case <-stop:
			return
		}
		s.mu.Lock()
		if !slices.Contains(s.runs, runID) {
			s.runs = append(s.runs, runID)
		}
		s.tasks = append(s.tasks, tasks...)
		s.openByRun[runID] += len(tasks)
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inFlight }()
			s.submit(fmt.Sprintf("batch %d", batch), path, ttl)
		}()
	}
}

// openTasks is the sum of openByRun (s.mu held).
func (s *soakRun) openTasks() int {
	n := 0
	for _, open := range s.openByRun {
		n += open
	}
	return n
}

// submitPatience is how long the workload tries a submission again: as a
// user would, for longer than the nemesis keeps both control planes or
// the server away (a long partition is at most 40 s, and a run whose
// workflow task timed out on a partitioned control plane refuses updates
// until another one completes it).
const submitPatience = 3 * time.Minute

// submit sends a batch file (named name in logs) until it is accepted
// (a second apart, for submitPatience) and returns the CLI's answer.
func (s *soakRun) submit(name, path string, ttl time.Duration) []byte {
	deadline := time.Now().Add(submitPatience)
	for try := 1; ; try++ {
		out, err := s.c.a.cli("tasks", "submit", "--batch", path, "--svid-dir", s.submitterSVID, "--lease-ttl", ttl.String(), "--max-attempts", "20",
			"--backoff-initial", "100ms", "--backoff-max", "2s", "-o", "json")
		if err == nil {
			return out
		}
		s.t.Logf("soak: %s (try %d): %v", name, try, err)
		if time.Now().After(deadline) {
			s.errorf("soak: %s not submitted after %d tries in %s", name, try, submitPatience)
			return nil
		}
		time.Sleep(time.Second)
	}
}

// soakScript is every task's command: a line "<unix time> <attempt>
// <fence> <pid> <what>" in its trace file at start, every 0.1 s for
// $TICKS ticks, and at the end; its outputs are id.txt, a function of the
// task alone (expectedOutput), and fence.txt, of the attempt
// (expectedFence), so that a stale attempt's blob has a digest of its own.
const soakScript = `t() { echo "$EPOCHREALTIME $WDC_ATTEMPT $WDC_FENCE $$ $1" >> "$TRACE"; }
t start; n=0
while [ $n -lt "$TICKS" ]; do t tick; sleep 0.1; n=$((n+1)); done
printf 'task %s\n' "$WDC_TASK_ID" > outputs/id.txt
printf '%s %s %s\n' "$WDC_TASK_ID" "$WDC_ATTEMPT" "$WDC_FENCE" > outputs/fence.txt; t end`

// expectedFence is the digest of the fence.txt attempt/fence of task id
// writes.
func expectedFence(id string, attempt, fence int64) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %d %d\n", id, attempt, fence))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// expectedOutput is the digest of the output every attempt of task id
// writes.
func expectedOutput(id string) string {
	sum := sha256.Sum256([]byte("task " + id + "\n"))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// envelope is task's envelope, one JSON line.
func (s *soakRun) envelope(task soakTask) string {
	env := envelope.Envelope{
		TaskID: task.ID, RunID: task.Run, WorldID: "soak",
		Command:   []string{"/bin/bash", "-c", soakScript},
		Env:       map[string]string{"PATH": "/usr/bin:/bin", "TRACE": filepath.Join(s.traces, task.ID), "TICKS": strconv.Itoa(task.Ticks)},
		Resources: resource.List{CPUMillis: 100},
		Selector:  map[string]string{"soak": "1"},
	}
	env.Normalize()
	require.NoError(s.t, env.Validate(true))
	b, err := json.Marshal(env)
	require.NoError(s.t, err)
	return string(b)
}

// committer commits every run's uncommitted results every 5 s.
func (s *soakRun) committer(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Second):
		}
		s.commitAll()
	}
}

// commitAll commits each run's uncommitted worker_result events; a
// refused or failed commit is tried again next time.
func (s *soakRun) commitAll() {
	s.mu.Lock()
	runs := slices.Clone(s.runs)
	s.mu.Unlock()
	for _, run := range runs {
		v, err := s.runView(run)
		if err != nil {
			continue // its last count stands: an unanswered run is not an empty one
		}
		s.mu.Lock()
		s.openByRun[run] = int(v.TaskCounts.Open)
		s.mu.Unlock()
		args := []string{"runs", "commit", run, "--expected-parent-time", strconv.FormatInt(v.ParentTime, 10), "--note", "soak",
			"--svid-dir", s.submitterSVID}
		seqs := uncommitted(v)
		if len(seqs) == 0 {
			continue
		}
		for _, seq := range seqs {
			args = append(args, "--event", strconv.FormatInt(seq, 10))
		}
		if _, err := s.c.a.cli(args...); err != nil {
			s.t.Logf("soak: commit %d results of run %s: %v", len(seqs), run, err)
		}
	}
}

// uncommitted is the sequence numbers of v's worker_result events not
// committed yet.
func uncommitted(v api.RunView) []int64 {
	var seqs []int64
	for _, e := range v.Events {
		if e.Type == api.EventWorkerResult && !e.Committed {
			seqs = append(seqs, e.Seq)
		}
	}
	return seqs
}

func (s *soakRun) runView(run string) (api.RunView, error) {
	var v api.RunView
	b, err := s.c.a.cli("runs", "status", run, "-o", "json")
	if err != nil {
		return v, err
	}
	return v, json.Unmarshal(b, &v)
}

// quiesceTimeout bounds the wait for every task to end once the nemesis
// stopped: a task that cannot finish still ends RETRIES_EXHAUSTED.
const quiesceTimeout = 10 * time.Minute

// quiesce waits for every task to end (the nemesis has healed all it
// did) and commits what is left. Tasks still open at the timeout are
// logged with where they are.
func (s *soakRun) quiesce() {
	deadline := time.Now().Add(quiesceTimeout)
	for {
		open := 0
		for _, run := range s.runs {
			v, err := s.runView(run)
			if err != nil {
				open++
				continue
			}
			open += int(v.TaskCounts.Open)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			s.errorf("soak: %d tasks still open %s after the nemesis stopped", open, quiesceTimeout)
			for _, run := range s.runs {
				if v, err := s.runView(run); err != nil {
					s.t.Logf("soak: run %s: status: %v", run, err)
				} else if v.TaskCounts.Open > 0 {
					s.t.Logf("soak: run %s counts %d open: %+v", run, v.TaskCounts.Open, v.TaskCounts)
				}
			}
			for _, task := range s.tasks {
				if v, err := s.c.status(task.ID); err != nil || !v.State.Terminal() {
					s.t.Logf("soak: open task %s: %s", task.ID, describeOpen(v, err))
				}
			}
			break
		}
		time.Sleep(2 * time.Second)
	}
	for range 3 {
		s.commitAll()
	}
	// Results arrive in a run as their tasks end: after the last commits
	// none is left out of its run's evidence.
	for _, run := range s.runs {
		v, err := s.runView(run)
		switch {
		case err != nil:
			s.errorf("soak: run %s: status after the last commits: %v", run, err)
		case len(uncommitted(v)) > 0:
			s.errorf("soak: run %s: %d results never committed (events %v)", run, len(uncommitted(v)), uncommitted(v))
		}
	}
}

// describeOpen says where an open task is: state, phase, what it waits
// for, its lease and the last retry directive.
func describeOpen(v api.TaskView, err error) string {
	if err != nil {
		return err.Error()
	}
	d := fmt.Sprintf("%s, phase %s, waiting %q", v.State, v.Phase, v.Waiting)
	if l := v.Lease; l != nil {
		d += fmt.Sprintf(", lease attempt %d fence %d on %s %s %s", l.Attempt, l.Fence, l.WorkerID, l.State, l.EndReason)
	}
	if n := len(v.Directives); n > 0 {
		d += fmt.Sprintf(", last directive %s: %s", v.Directives[n-1].Reason, v.Directives[n-1].Detail)
	}
	return d
}

// keepLogs copies every host's process logs and executor reports into
// out/hosts/<host>/ (the hosts' directories go when the test ends).
func (s *soakRun) keepLogs() {
	for _, h := range s.c.all {
		dst := filepath.Join(s.out, "hosts", h.name)
		_ = filepath.WalkDir(h.dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if ext := filepath.Ext(path); ext != ".log" && ext != ".out" && d.Name() != "result.json" {
				return nil
			}
			rel, _ := filepath.Rel(h.dir, path)
			b, err := os.ReadFile(path)
			if err == nil && os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755) == nil {
				_ = os.WriteFile(filepath.Join(dst, rel), b, 0o644)
			}
			return nil
		})
	}
}
