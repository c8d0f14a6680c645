package cmd

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/bench"
)

func (a *app) newBenchCommand() *cobra.Command {
	var (
		o       bench.Options
		phases  string
		dataDir string
		blobURL string
		keep    bool
		cpuProf string
	)
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure wdc against bare Temporal on the same server: throughput, history events, failover, selection, sweep",
		Long: `Measure wdc against bare Temporal in one run, on real parts: an in-process
Temporal server (unless --address or TEMPORAL_ADDRESS is given), the control
plane and --agents real agents started as subprocesses of this binary
(wdc control-plane, wdc agent ...). Phases (--phases, in this order):

  throughput  --tasks N bare Temporal workflows, each running one activity that
              execs /bin/true, started together; then N wdc tasks (/bin/true)
              submitted together, leased, launched on the agents and accepted.
              Both throughputs (per second) come from the workflows' start and
              close times as Temporal recorded them; then N more tasks
              submitted as users do, by one 'wdc tasks submit --batch'
              subprocess (the *_cli figures), with their CPU time per task.
              Also the history length of a single-attempt task (by event
              type) and of a bare workflow.
  heartbeat   one task that runs --heartbeat-window with lease heartbeats every
              --lease-heartbeat-interval: history events per heartbeat, beyond
              a trivial task's history.
  failover    --trials times: SIGKILL the agent process holding a running
              task's lease; time until the next attempt runs on another worker
              (the killed agent is started again between trials).
  selection   --workers W simulated fleet workers register and heartbeat every
              --heartbeat-interval exactly as agents do (the agent's own
              heartbeat code, without running tasks); --selections tasks are
              placed among them and the agents, and the time from submit to
              lease grant is taken; workers seen STALE or OFFLINE meanwhile,
              although they kept heartbeating, are false_stale.
  sweep       (only when named) --tasks N tasks in one run through one
              'wdc tasks submit --batch' while their results are committed:
              submission and completion rates, the run's largest history and
              pending state, CPU time per task.

The result is a table (or -o json; field names are stable): throughputs in
tasks per second, every duration in seconds, p50/p99 by nearest rank, CPU
time in seconds per task (user + system, from /proc and getrusage), the
machine (cores, OS/arch, Go) and the versions (wdc, Temporal server, SDK).
Progress goes to stderr. At full size it takes several minutes; the figures
depend on the machine and on whatever else runs on it.

The exit code is 0 when every phase ran, whatever the figures; 1 when a phase
could not be carried out. Ctrl-C stops the bench and its agents.`,
		Example: `  wdc bench
  wdc bench -o json > bench.json
  wdc bench --tasks 20 --workers 20 --trials 3 --heartbeat-window 10s
  wdc bench --phases throughput,failover
  wdc bench --phases sweep --tasks 1000`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := a.global.validate(); err != nil {
				return err
			}
			ps, err := bench.ParsePhases(phases)
			if err != nil {
				return usageError{err}
			}
			o.Phases = ps
			if err := o.Validate(); err != nil {
				return usageError{err}
			}
			ctx := c.Context()
			progress := func(s string) {
				fmt.Fprintf(a.deps.Stderr, "%s  %s\n", time.Now().Format("15:04:05.000"), s)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this binary to start agents: %w", err)
			}
			sc, err := a.startScratch(ctx, c, "wdc-bench-", dataDir, blobURL, keep, progress)
			if err != nil {
				return err
			}
			defer sc.Close()
			if cpuProf != "" {
				stop, err := startCPUProfile(cpuProf)
				if err != nil {
					return err
				}
				defer stop()
			}
			external, dataDir := sc.External, sc.DataDir
			o.Suffix = sc.Suffix
			o.Client, o.DataDir, o.BlobURL, o.Executable = sc.Client, dataDir, sc.BlobURL, exe
			o.AgentArgs, o.AgentEnv = a.agentArgs(sc.Address, dataDir, sc.BlobURL)
			o.Progress, o.Logger, o.Shared = progress, a.logger(), external
			res, err := bench.Run(ctx, o)
			if keep {
				progress("data and agent logs kept in " + dataDir)
			}
			if err != nil {
				if !keep && !external {
					err = fmt.Errorf("%w (run again with --keep to keep the agents' logs)", err)
				}
				return err
			}
			progress(fmt.Sprintf("bench done in %.1fs", res.ElapsedSeconds))
			return a.emit(res, func(w io.Writer) error { return writeBenchTable(w, res) })
		},
	}
	f := c.Flags()
	f.IntVar(&o.Tasks, "tasks", bench.DefaultTasks, "N: bare workflows and wdc tasks (each path) in the throughput phase; tasks in the sweep's run")
	f.IntVar(&o.SimWorkers, "workers", bench.DefaultSimWorkers, "W: simulated fleet workers in the selection phase (0: only the agents)")
	f.DurationVar(&o.SimHeartbeatInterval, "heartbeat-interval", bench.DefaultSimHeartbeatInterval, "the simulated workers' heartbeat period (stale after 4, offline after 15 periods, as agents)")
	f.IntVar(&o.Agents, "agents", bench.DefaultAgents, "real agents started as subprocesses (at least 2)")
	f.DurationVar(&o.AgentHeartbeatInterval, "agent-heartbeat-interval", bench.DefaultAgentHeartbeatInterval, "the agents' heartbeat period (the agent's default; failover time follows its stale window, 4 periods)")
	f.IntVar(&o.FailoverTrials, "trials", bench.DefaultFailoverTrials, "failover trials (agents killed under a lease)")
	f.DurationVar(&o.HeartbeatWindow, "heartbeat-window", bench.DefaultHeartbeatWindow, "how long the heartbeat phase's task runs")
	f.DurationVar(&o.LeaseHeartbeatInterval, "lease-heartbeat-interval", bench.DefaultLeaseHeartbeatInterval, "the heartbeat phase's lease heartbeat period (lease TTL: 3 periods)")
	f.IntVar(&o.Selections, "selections", bench.DefaultSelections, "tasks placed in the selection phase, one every 200ms")
	f.Var(&identityModeFlag{m: &o.Identity}, "identity", "the control plane's identity mode: required (every agent, simulated worker and the bench's commands signed by SVIDs of a bench issuer) or off, to price the signatures")
	f.StringVar(&phases, "phases", phaseNames(bench.DefaultPhases), "which phases to run, comma-separated (throughput, heartbeat, failover, selection, sweep)")
	f.StringVar(&dataDir, "data-dir", "", "blob store, task directories and agent logs (default: a temporary directory, removed afterwards; with --address the standard data dir: env WDC_DATA_DIR)")
	f.StringVar(&blobURL, "blob-url", "", blobURLHelp)
	f.BoolVar(&keep, "keep", false, "keep the temporary data directory (agent logs in <data-dir>/logs)")
	f.StringVar(&cpuProf, "cpu-profile", "", "write a CPU profile of this process (the in-process server, the bare worker, the simulated workers; not the control plane or the agents) over the phases to FILE, for 'go tool pprof'")
	return c
}

// startCPUProfile starts Go's CPU profiler writing to path; stop ends the
// profile and closes the file. The file is created first, so a path that
// cannot be written fails before any phase runs.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// agentArgs are the command-line flags and environment that connect a
// subprocess agent to the same server, namespace and store as this
// command. The API key travels in the environment, not on the command
// line.
func (a *app) agentArgs(address, dataDir, blobURL string) (args, env []string) {
	g := &a.global
	args = []string{"--address", address, "--namespace", g.namespace, "--data-dir", dataDir}
	if blobURL != "" {
		args = append(args, "--blob-url", blobURL)
	}
	for _, kv := range [][2]string{{"--tls-cert-path", g.tlsCertPath}, {"--tls-key-path", g.tlsKeyPath}, {"--tls-ca-path", g.tlsCAPath}, {"--tls-server-name", g.tlsServerName}} {
		if kv[1] != "" {
			args = append(args, kv[0], kv[1])
		}
	}
	if g.tls {
		args = append(args, "--tls")
	}
	if g.apiKey != "" {
		env = append(env, "TEMPORAL_API_KEY="+g.apiKey)
	}
	return args, env
}

// writeBenchTable prints a bench result for humans: one row per figure
// with its unit and the project's target, then the machine and versions.
func writeBenchTable(w io.Writer, r bench.Result) error {
	p := r.Params
	fmt.Fprintf(w, "wdc bench, %s: N=%d tasks, W=%d simulated workers (heartbeat %gs), %d agents, %d failover trials, identity %s\n\n",
		r.StartedAt.Format(time.RFC3339), p.Tasks, p.SimWorkers, p.SimHeartbeatIntervalSeconds, p.Agents, p.FailoverTrials, r.Identity)
	tw := table(w)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tUNIT\tTARGET")
	f := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	i := func(v *int64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatInt(*v, 10)
	}
	rows := [][4]string{
		{"bare_throughput", f(r.BareThroughput), "workflows/s", ""},
		{"wdc_throughput", f(r.WdcThroughput), "tasks/s", ""},
		{"throughput_ratio", f(r.ThroughputRatio), "wdc/bare", ">= 0.5"},
		{"submit_rate", f(r.SubmitRate), "tasks/s", ""},
		{"submit_rate_cli", f(r.SubmitRateCLI), "tasks/s", ""},
		{"wdc_throughput_cli", f(r.WdcThroughputCLI), "tasks/s", ""},
		{"throughput_ratio_cli", f(r.ThroughputRatioCLI), "wdc/bare", ">= 0.8"},
		{"cpu_seconds_per_workflow_bare", f(r.CPUPerWorkflowBare), "s", ""},
		{"cpu_seconds_per_task_server", f(r.Server), "s", ""},
		{"cpu_seconds_per_task_control_plane", f(r.ControlPlane), "s", ""},
		{"cpu_seconds_per_task_agents", f(r.Agents), "s", ""},
		{"cpu_seconds_per_task_cli", f(r.CLI), "s", ""},
		{"run_events_per_task", f(r.RunEventsPerTask), "events", ""},
		{"registry_events_per_task", f(r.RegistryEventsPerTask), "events", ""},
		{"events_per_task", i(r.EventsPerTask), "events", "<= 18"},
		{"bare_events", i(r.BareEvents), "events", ""},
		{"events_per_heartbeat", f(r.EventsPerHeartbeat), "events", ""},
		{"failover_p50", f(r.FailoverP50), "s", ""},
		{"failover_p99", f(r.FailoverP99), "s", ""},
		{"selection_p50", f(r.SelectionP50), "s", ""},
		{"selection_p99", f(r.SelectionP99), "s", "< 1 (W=1000)"},
		{"false_stale", i(r.FalseStale), "workers", "0 (W=1000)"},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row[0], row[1], row[2], row[3])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.EventsByType) > 0 {
		fmt.Fprintf(w, "\nevents of a single-attempt task: %s\n", byType(r.EventsByType))
		fmt.Fprintf(w, "events of a bare workflow:      %s\n", byType(r.BareEventsByType))
	}
	if r.Heartbeats != nil {
		fmt.Fprintf(w, "heartbeat task: %d events for %d heartbeats over %gs\n", *r.HeartbeatTaskEvents, *r.Heartbeats, p.HeartbeatWindowSeconds)
	}
	if len(r.FailoverSamples) > 0 {
		fmt.Fprintf(w, "failover samples (s): %v\n", r.FailoverSamples)
	}
	if r.FalseStale != nil {
		if r.SelectionUngranted != nil && *r.SelectionUngranted > 0 {
			fmt.Fprintf(w, "selection: %d of %d tasks got no lease (not submitted within 3m, or not granted within 2m); the percentiles are lower bounds\n", *r.SelectionUngranted, p.Selections)
		}
		if r.WorkersRegistered != nil && int(*r.WorkersRegistered) < p.SimWorkers {
			fmt.Fprintf(w, "selection: only %d of %d simulated workers registered in time\n", *r.WorkersRegistered, p.SimWorkers)
		}
		fmt.Fprintf(w, "selection: %d tasks; fleet watched %.0fs; simulated heartbeats %d sent, %d not delivered, %d unanswered by the registry",
			p.Selections, *r.ObservedSeconds, *r.SimHeartbeatsSent, *r.SimHeartbeatsFailed, *r.SimHeartbeatsUnanswered)
		if len(r.FalseStaleWorkers) > 0 {
			fmt.Fprintf(w, "; false stale: %s", strings.Join(r.FalseStaleWorkers, ", "))
		}
		fmt.Fprintln(w)
	}
	if r.BareThroughput != nil {
		fmt.Fprintf(w, "throughput: bare starts and SubmitTask calls %d at a time; the CLI one update of up to 100 tasks at a time\n", p.SubmitConcurrency)
	}
	if s := r.Sweep; s != nil {
		fmt.Fprintf(w, "sweep: %d tasks, %d submitted in %gs (%g tasks/s), %d completed in %gs (%g tasks/s); %d continue-as-new, %d commits\n",
			s.Tasks, s.Submitted, s.SubmitSeconds, s.SubmitRate, s.Completed, s.CompletionSeconds, s.CompletionRate, s.ContinuedAsNew, s.Commits)
		fmt.Fprintf(w, "sweep: largest history %d events, %d B; pending state %d B, %d children, %d activities (at the end: %d events, %d B, %d B pending)\n",
			s.Max.HistoryLength, s.Max.HistoryBytes, s.Max.PendingBytes, s.Max.PendingChildren, s.Max.PendingActivities,
			s.End.HistoryLength, s.End.HistoryBytes, s.End.PendingBytes)
		fmt.Fprintf(w, "sweep: CPU seconds per task: %s\n", s.CPUCost)
	}
	m, v := r.Machine, r.Versions
	fmt.Fprintf(w, "\nmachine: %d cores, %s/%s, %s, %s, %.1f GiB\n", m.Cores, m.GOOS, m.GOARCH, m.GoVersion, m.CPUModel, float64(m.MemoryBytes)/(1<<30))
	fmt.Fprintf(w, "versions: wdc %s; Temporal server %s (module %s), SDK %s, API %s\n", v.Wdc, v.TemporalServer, v.ServerModule, v.SDKModule, v.APIModule)
	fmt.Fprintf(w, "elapsed: %.1fs\n", r.ElapsedSeconds)
	return nil
}

// phaseNames joins phases with commas, as --phases takes them.
func phaseNames(ps []bench.Phase) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ",")
}

// byType renders an events-by-type map as "type n, ..." by count, then name.
func byType(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// identityModeFlag is a pflag.Value for an identity.Mode (default required).
type identityModeFlag struct{ m *identity.Mode }

func (f *identityModeFlag) String() string {
	if f.m == nil || *f.m == "" {
		return string(identity.ModeRequired)
	}
	return string(*f.m)
}

func (f *identityModeFlag) Set(s string) error {
	m, err := identity.ParseMode(s)
	if err != nil {
		return err
	}
	*f.m = m
	return nil
}

func (f *identityModeFlag) Type() string { return "mode" }
