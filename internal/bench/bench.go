package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/identity"
)

// Phase names a part of the bench that can be run on its own.
type Phase string

// The phases, in the order they run.
const (
	// PhaseThroughput: N bare workflows, then N wdc tasks; also the
	// events per task of both.
	PhaseThroughput Phase = "throughput"
	// PhaseHeartbeat: one task heartbeating for the heartbeat window.
	PhaseHeartbeat Phase = "heartbeat"
	// PhaseFailover: SIGKILL the agent holding a lease, time the retry.
	PhaseFailover Phase = "failover"
	// PhaseSelection: W simulated workers heartbeating; selection times
	// and false staleness.
	PhaseSelection Phase = "selection"
	// PhaseSweep: N tasks in one run through `wdc tasks submit --batch`;
	// rates, the run's largest history and pending state, CPU per task.
	PhaseSweep Phase = "sweep"
)

// AllPhases lists every phase in running order.
var AllPhases = []Phase{PhaseThroughput, PhaseHeartbeat, PhaseFailover, PhaseSelection, PhaseSweep}

// DefaultPhases are the phases run when none are named: all but the
// sweep, which `make bench` runs on its own at its own size.
var DefaultPhases = []Phase{PhaseThroughput, PhaseHeartbeat, PhaseFailover, PhaseSelection}

// Defaults of Options (`wdc bench` flags).
const (
	DefaultTasks                  = 200
	DefaultSimWorkers             = 1000
	DefaultSimHeartbeatInterval   = 5 * time.Second
	DefaultAgents                 = 2
	DefaultAgentHeartbeatInterval = 2 * time.Second
	DefaultFailoverTrials         = 10
	DefaultHeartbeatWindow        = 30 * time.Second
	DefaultLeaseHeartbeatInterval = 2 * time.Second
	DefaultSelections             = 50
	// SubmitConcurrency bounds concurrent starts (bare) and submits (wdc)
	// alike; below Temporal's 10 in-flight updates per workflow, since
	// every submit is an update of the one run.
	SubmitConcurrency = 8
)

// Options configures a bench run. Zero numeric fields take the defaults
// above, except SimWorkers (zero: no simulated workers).
type Options struct {
	// Client reaches the Temporal namespace to use. Required.
	Client client.Client
	// DataDir holds the blob store (unless BlobURL), the agents' task
	// directories and their logs (DataDir/logs/<worker>.log). Required.
	DataDir string
	// BlobURL is the artifact store (default file://<DataDir>/blobs).
	BlobURL string
	// Suffix makes IDs unique (runs, tasks, workers); required when the
	// namespace is shared.
	Suffix string
	// Phases to run (default DefaultPhases), run in AllPhases order.
	Phases []Phase
	// Tasks is N: bare workflows and wdc tasks (throughput), tasks in
	// the sweep's run.
	Tasks int
	// SimWorkers is W: simulated fleet workers (selection phase); `wdc
	// bench` defaults it to DefaultSimWorkers.
	SimWorkers int
	// SimHeartbeatInterval is the simulated workers' heartbeat period;
	// their stale window is fleet.HeartbeatsPerStaleWindow intervals and
	// their offline window 15 intervals, as for an agent.
	SimHeartbeatInterval time.Duration
	// Agents is how many real agents run (at least 2: failover moves a
	// task from one to another).
	Agents int
	// AgentHeartbeatInterval is the real agents' worker heartbeat period
	// (windows derived as for simulated workers). Default the agent's, 2 s.
	AgentHeartbeatInterval time.Duration
	// FailoverTrials is how many agents are killed under a lease.
	FailoverTrials int
	// HeartbeatWindow is how long the heartbeat phase's task runs.
	HeartbeatWindow time.Duration
	// LeaseHeartbeatInterval is the heartbeat phase's task's lease
	// heartbeat period; its lease TTL is three times that (the default
	// ratio).
	LeaseHeartbeatInterval time.Duration
	// Selections is how many tasks the selection phase places.
	Selections int
	// Executable is the wdc binary the control plane, the agents and the
	// CLI paths run as (`<Executable> agent …`). Required.
	Executable string
	// AgentArgs are appended to the command line of every subprocess
	// (connection flags: --address, --namespace, TLS; --data-dir,
	// --blob-url).
	AgentArgs []string
	// AgentEnv is added to every subprocess's environment.
	AgentEnv []string
	// Shared says the server outlives the bench (--address): the bench
	// then cancels its leftover tasks and deregisters its simulated
	// workers at the end; an embedded server just goes away.
	Shared bool
	// ServerVersion is the Temporal server's version when the caller
	// knows it better than GetClusterInfo (optional).
	ServerVersion string
	// Identity is the control plane's identity mode (default required):
	// with it on, the bench's issuer enrolls every agent, simulated worker
	// and its own client (a submitter), so signatures are part of every
	// figure; off measures without them.
	Identity identity.Mode
	// Logger receives the in-process components' logs (nil: discarded).
	Logger *slog.Logger
	// Progress, when set, is called with short progress lines.
	Progress func(string)
}

func (o *Options) defaults() {
	if o.Identity == "" {
		o.Identity = identity.ModeRequired
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Tasks, DefaultTasks)
	def(&o.Agents, DefaultAgents)
	def(&o.FailoverTrials, DefaultFailoverTrials)
	def(&o.Selections, DefaultSelections)
	defd(&o.SimHeartbeatInterval, DefaultSimHeartbeatInterval)
	defd(&o.AgentHeartbeatInterval, DefaultAgentHeartbeatInterval)
	defd(&o.HeartbeatWindow, DefaultHeartbeatWindow)
	defd(&o.LeaseHeartbeatInterval, DefaultLeaseHeartbeatInterval)
	if len(o.Phases) == 0 {
		o.Phases = DefaultPhases
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
}

// Validate checks the options after defaulting; every error names the
// option as its `wdc bench` flag.
func (o Options) Validate() error {
	var errs []error
	if o.Tasks < 1 {
		errs = append(errs, fmt.Errorf("--tasks %d: must be at least 1", o.Tasks))
	}
	if o.SimWorkers < 0 {
		errs = append(errs, fmt.Errorf("--workers %d: must not be negative", o.SimWorkers))
	}
	if o.SimHeartbeatInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--heartbeat-interval %s: must be at least 100ms", o.SimHeartbeatInterval))
	}
	if o.Agents < 2 {
		errs = append(errs, fmt.Errorf("--agents %d: must be at least 2 (failover moves a task to another agent)", o.Agents))
	}
	if o.AgentHeartbeatInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--agent-heartbeat-interval %s: must be at least 100ms", o.AgentHeartbeatInterval))
	}
	if o.FailoverTrials < 1 {
		errs = append(errs, fmt.Errorf("--trials %d: must be at least 1", o.FailoverTrials))
	}
	if o.HeartbeatWindow < time.Second {
		errs = append(errs, fmt.Errorf("--heartbeat-window %s: must be at least 1s", o.HeartbeatWindow))
	}
	if o.LeaseHeartbeatInterval < 100*time.Millisecond || o.LeaseHeartbeatInterval*2 > o.HeartbeatWindow {
		errs = append(errs, fmt.Errorf("--lease-heartbeat-interval %s: must be at least 100ms and at most half of --heartbeat-window %s", o.LeaseHeartbeatInterval, o.HeartbeatWindow))
	}
	if o.Selections < 1 {
		errs = append(errs, fmt.Errorf("--selections %d: must be at least 1", o.Selections))
	}
	for _, p := range o.Phases {
		if !slices.Contains(AllPhases, p) {
			errs = append(errs, fmt.Errorf("--phases %q: unknown phase (want some of %s)", p, phaseList()))
		}
	}
	return errors.Join(errs...)
}

func phaseList() string {
	s := make([]string, len(AllPhases))
	for i, p := range AllPhases {
		s[i] = string(p)
	}
	return strings.Join(s, ",")
}

// ParsePhases parses a comma-separated phase list ("throughput,failover").
// Errors name the --phases flag.
func ParsePhases(s string) ([]Phase, error) {
	var out []Phase
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p := Phase(f)
		if !slices.Contains(AllPhases, p) {
			return nil, fmt.Errorf("--phases %q: unknown phase %q (want some of %s)", s, f, phaseList())
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--phases %q: name at least one of %s", s, phaseList())
	}
	return out, nil
}

// Result is what one bench run measured. The JSON field names are a
// contract. A field of a phase that did not run is null. Throughputs are
// completions per second; every duration is in seconds (float); event
// counts are history events.
type Result struct {
	// Identity is the control plane's identity mode during the run.
	Identity identity.Mode `json:"identity"`
	// BareThroughput: N bare workflows (one activity that execs
	// /bin/true), started concurrently, over the window from the first
	// workflow's start to the last one's close, as Temporal recorded them;
	// workflows per second.
	BareThroughput *float64 `json:"bare_throughput"`
	// WdcThroughput: N trivial tasks (/bin/true) submitted, leased,
	// launched on real agents and accepted, over the window from the
	// run's start (the first submit starts it) to the last task
	// workflow's close; tasks per second.
	WdcThroughput *float64 `json:"wdc_throughput"`
	// ThroughputRatio is WdcThroughput / BareThroughput.
	ThroughputRatio *float64 `json:"throughput_ratio"`
	// SubmitRate is N over the time the SubmitTask calls took (tasks
	// per second); bare starts and submits run SubmitConcurrency at a time.
	SubmitRate *float64 `json:"submit_rate"`
	// SubmitRateCLI, WdcThroughputCLI and ThroughputRatioCLI are the same
	// for N tasks submitted as users do: one `wdc tasks submit --batch`
	// subprocess (up to 100 tasks per update, one update at a time), its
	// rate over its run time from start to exit.
	SubmitRateCLI      *float64 `json:"submit_rate_cli"`
	WdcThroughputCLI   *float64 `json:"wdc_throughput_cli"`
	ThroughputRatioCLI *float64 `json:"throughput_ratio_cli"`
	// CPUCost prices the CLI path's tasks, from the CLI's start to the
	// last task's end; CPUPerWorkflowBare is the bench's process (server
	// and bare worker) over the bare batch, per workflow (null with
	// --address).
	CPUCost
	CPUPerWorkflowBare *float64 `json:"cpu_seconds_per_workflow_bare"`
	// RunEventsPerTask and RegistryEventsPerTask are what the CLI path's
	// tasks wrote beyond their own histories, per task: the events of
	// their run's workflow, and those the agents' registry entries gained
	// over the batch (null when a history continued as new meanwhile).
	RunEventsPerTask      *float64 `json:"run_events_per_task"`
	RegistryEventsPerTask *float64 `json:"registry_events_per_task"`
	// EventsPerTask is the history length of a single-attempt WdcTask
	// from the throughput phase; EventsByType breaks it down by event type
	// (Temporal's enum names: "WorkflowTaskCompleted").
	EventsPerTask *int64           `json:"events_per_task"`
	EventsByType  map[string]int64 `json:"events_by_type"`
	// BareEvents is a bare workflow's history length; BareEventsByType
	// breaks it down.
	BareEvents       *int64           `json:"bare_events"`
	BareEventsByType map[string]int64 `json:"bare_events_by_type"`
	// EventsPerHeartbeat is what one lease heartbeat costs in history:
	// (HeartbeatTaskEvents − EventsPerTask) / Heartbeats, where
	// HeartbeatTaskEvents is the history length of a task that ran (and
	// heartbeated) for the heartbeat window and Heartbeats the lease
	// heartbeats its executor sent — lease-heartbeat signals and
	// heartbeats by ID on its lease activity alike, as the executor
	// reported them with its result (api.SubmitResultInput.HeartbeatSeq);
	// the lease-heartbeat signals in the history when it reported none.
	EventsPerHeartbeat  *float64 `json:"events_per_heartbeat"`
	HeartbeatTaskEvents *int64   `json:"heartbeat_task_events"`
	Heartbeats          *int64   `json:"heartbeats"`
	// FailoverP50 and FailoverP99 (seconds, nearest rank): from SIGKILL of
	// the agent process holding a task's lease to the task's next attempt
	// running on another worker (lease granted, launch done: phase
	// Running), observed by polling the task's lease query every 50 ms.
	// FailoverSamples are the trials' times in seconds, in order.
	FailoverP50     *float64  `json:"failover_p50"`
	FailoverP99     *float64  `json:"failover_p99"`
	FailoverSamples []float64 `json:"failover_samples"`
	// SelectionP50 and SelectionP99 (seconds, nearest rank): from a task
	// workflow's start (submit) to its first lease's grant, both Temporal
	// times, with the simulated fleet and the agents registered and
	// heartbeating.
	// SelectionUngranted counts tasks not submitted within three minutes
	// (no sample) or not granted a lease within two minutes after the last
	// submit (counted as that long); either makes the percentiles lower
	// bounds.
	SelectionP50       *float64 `json:"selection_p50"`
	SelectionP99       *float64 `json:"selection_p99"`
	SelectionUngranted *int64   `json:"selection_ungranted"`
	// FalseStale counts workers (simulated or real agents) that went
	// STALE or OFFLINE during the selection phase although they kept
	// heartbeating: seen so in visibility (polled every second), or made
	// to register again. FalseStaleWorkers names up to 20 of them.
	FalseStale        *int64   `json:"false_stale"`
	FalseStaleWorkers []string `json:"false_stale_workers,omitempty"`
	// SimHeartbeatsSent and SimHeartbeatsFailed count the simulated
	// workers' heartbeat signals delivered and not delivered;
	// SimHeartbeatsUnanswered the delivered ones after which the registry
	// did not answer the agent's worker query within the interval.
	SimHeartbeatsSent       *int64 `json:"sim_heartbeats_sent"`
	SimHeartbeatsFailed     *int64 `json:"sim_heartbeats_failed"`
	SimHeartbeatsUnanswered *int64 `json:"sim_heartbeats_unanswered"`
	// WorkersRegistered is how many simulated workers registered (within
	// a minute each and five minutes in all); the others take no part.
	WorkersRegistered *int64 `json:"workers_registered"`
	// ObservedSeconds is how long false staleness was watched.
	ObservedSeconds *float64 `json:"observed_seconds"`
	// Sweep is the sweep phase's figures.
	Sweep *Sweep `json:"sweep"`

	Params   Params   `json:"params"`
	Machine  Machine  `json:"machine"`
	Versions Versions `json:"versions"`
	// StartedAt is when the bench began (RFC 3339); ElapsedSeconds how
	// long it took.
	StartedAt      time.Time `json:"started_at"`
	ElapsedSeconds float64   `json:"elapsed_seconds"`
}

// Params echoes the options that shape the figures (durations in seconds).
type Params struct {
	Phases                        []Phase `json:"phases"`
	Tasks                         int     `json:"tasks"`
	SimWorkers                    int     `json:"workers"`
	SimHeartbeatIntervalSeconds   float64 `json:"heartbeat_interval_seconds"`
	Agents                        int     `json:"agents"`
	AgentHeartbeatIntervalSeconds float64 `json:"agent_heartbeat_interval_seconds"`
	FailoverTrials                int     `json:"trials"`
	HeartbeatWindowSeconds        float64 `json:"heartbeat_window_seconds"`
	LeaseHeartbeatIntervalSeconds float64 `json:"lease_heartbeat_interval_seconds"`
	Selections                    int     `json:"selections"`
	// SubmitConcurrency is how many bare starts and SubmitTask calls
	// run at a time (SubmitConcurrency).
	SubmitConcurrency int `json:"submit_concurrency"`
}

// Run runs the phases and returns what they measured. Errors mean a phase
// could not be carried out (a task did not complete, an agent did not
// register, ctx ended); every subprocess is gone when Run returns.
func Run(ctx context.Context, opts Options) (Result, error) {
	began := time.Now()
	opts.defaults()
	res := Result{StartedAt: began.UTC().Truncate(time.Second), Params: Params{
		Phases: opts.Phases, Tasks: opts.Tasks, SimWorkers: opts.SimWorkers,
		SimHeartbeatIntervalSeconds: opts.SimHeartbeatInterval.Seconds(), Agents: opts.Agents,
		AgentHeartbeatIntervalSeconds: opts.AgentHeartbeatInterval.Seconds(), FailoverTrials: opts.FailoverTrials,
		HeartbeatWindowSeconds: opts.HeartbeatWindow.Seconds(), LeaseHeartbeatIntervalSeconds: opts.LeaseHeartbeatInterval.Seconds(),
		Selections: opts.Selections, SubmitConcurrency: SubmitConcurrency,
	}}
	if err := opts.Validate(); err != nil {
		return res, err
	}
	res.Machine = ThisMachine()
	res.Versions = BuildVersions()
	res.Versions.TemporalServer = opts.ServerVersion
	if info, err := opts.Client.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{}); err == nil && info.GetServerVersion() != "" {
		res.Versions.TemporalServer = info.GetServerVersion()
	}
	b := &bench{opts: opts, wc: &wdcclient.Client{C: opts.Client}, say: func(format string, args ...any) {
		opts.Progress(fmt.Sprintf(format, args...))
	}, label: "b" + strings.TrimPrefix(strings.ToLower(opts.Suffix), "-")}
	if b.label == "b" {
		b.label = "local"
	}

	if opts.Executable == "" {
		return res, errors.New("bench: Options.Executable is required to run the control plane and agents")
	}
	logDir := filepath.Join(opts.DataDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return res, err
	}
	res.Identity = opts.Identity
	ids, err := newIdentities(opts, b.wc)
	if err != nil {
		return res, err
	}
	b.ids = ids
	// The control plane, as a subprocess: its CPU time is its own.
	cp, err := startControlPlane(ctx, opts, ids.controlPlaneArgs(), filepath.Join(logDir, "control-plane.log"))
	if err != nil {
		return res, err
	}
	b.controlPlane = cp
	defer func() {
		b.say("stopping the control plane")
		cp.stop(10 * time.Second)
	}()
	b.say("control plane started as a subprocess (pid %d)", cp.cmd.Process.Pid)

	// The bare baseline's worker, in process.
	b.bareQueue = "wdc-bench-bare" + opts.Suffix
	bw := sdkworker.New(opts.Client, b.bareQueue, sdkworker.Options{})
	bw.RegisterWorkflowWithOptions(BareWorkflow, workflow.RegisterOptions{Name: BareWorkflowType})
	bw.RegisterActivityWithOptions(ExecTrue, activity.RegisterOptions{Name: BareActivityType})
	if err := bw.Start(); err != nil {
		return res, fmt.Errorf("start bare worker: %w", err)
	}
	defer bw.Stop()

	// The real agents, as subprocesses (every phase uses them).
	{
		b.agents = &agents{
			exe: opts.Executable, args: opts.AgentArgs, env: opts.AgentEnv, logDir: logDir, ids: b.ids,
			workRoot: filepath.Join(opts.DataDir, "work"),
			labels:   map[string]string{labelKey: b.label, roleKey: roleAgent},
			slots:    max(opts.Tasks, 4), interval: opts.AgentHeartbeatInterval, wc: b.wc,
			procs: map[string]*proc{}, logs: map[string]*os.File{},
		}
		defer func() {
			b.say("stopping the agents")
			b.agents.stopAll(10 * time.Second)
		}()
		var wg sync.WaitGroup
		errs := make([]error, opts.Agents)
		for i := range opts.Agents {
			id := fmt.Sprintf("bench-agent-%d%s", i+1, opts.Suffix)
			b.agentIDs = append(b.agentIDs, id)
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = b.agents.start(ctx, id, 0) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return res, err
		}
		b.say("%d agents registered as subprocesses (%s)", opts.Agents, strings.Join(b.agentIDs, ", "))
	}

	for _, p := range AllPhases {
		if !slices.Contains(opts.Phases, p) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var err error
		switch p {
		case PhaseThroughput:
			err = b.throughput(ctx, &res)
		case PhaseHeartbeat:
			err = b.heartbeat(ctx, &res)
		case PhaseFailover:
			err = b.failover(ctx, &res)
		case PhaseSelection:
			err = b.selection(ctx, &res)
		case PhaseSweep:
			err = b.sweep(ctx, &res)
		}
		if err != nil {
			return res, fmt.Errorf("phase %s: %w", p, err)
		}
	}
	res.ElapsedSeconds = round3(time.Since(began).Seconds())
	return res, nil
}

// Labels that keep the bench's tasks on the bench's workers: every bench
// worker has labelKey=<run label>; the agents also roleKey=roleAgent.
const (
	labelKey  = "wdc-bench"
	roleKey   = "wdc-bench-role"
	roleAgent = "agent"
)

// bench is one run's shared state.
type bench struct {
	opts      Options
	wc        *wdcclient.Client
	say       func(format string, args ...any)
	label     string
	bareQueue string
	agents    *agents
	agentIDs  []string
	// controlPlane is the `wdc control-plane` subprocess.
	controlPlane *proc
	// ids enrolls the bench's workers (identities).
	ids *identities
}

// controlPlaneReady is what `wdc control-plane` prints once it polls.
const controlPlaneReady = "control plane polling"

// startControlPlane starts `<Executable> control-plane` with the agents'
// connection flags, its output in logPath, and waits (60 s at most) until
// it says it polls.
func startControlPlane(ctx context.Context, opts Options, extra []string, logPath string) (*proc, error) {
	args := append(append([]string{"control-plane", "--log-level", "info"}, opts.AgentArgs...), extra...)
	p, log, err := startProc(opts.Executable, args, opts.AgentEnv, logPath)
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	log.Close() // the child holds its own descriptor
	deadline := time.Now().Add(60 * time.Second)
	for {
		if out, _ := os.ReadFile(logPath); strings.Contains(string(out), controlPlaneReady) {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("control plane exited before it polled (%v); its log: %s", p.err, logPath)
		case <-ctx.Done():
			p.stop(10 * time.Second)
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop(10 * time.Second)
			return nil, fmt.Errorf("control plane did not poll within 60s; its log: %s", logPath)
		}
	}
}
