package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/internal/telemetry"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/worker"
)

func (a *app) newAgentCommand() *cobra.Command {
	var (
		reg       registrationFlags
		dataDir   string
		blobURL   string
		workDir   string
		heartbeat time.Duration
		limits    outputLimitFlags
		launcher  string
		spoolDir  string
		execBin   string
		metrics   string
		rayFlags  rayAgentFlags
		k8sf      k8sFlags
		runAs     runAsFlags
		svid      svidFlags
		launchID  string
		uidRange  string
	)
	c := &cobra.Command{
		Use:   "agent --worker-id ID",
		Short: "Run a fleet worker: register, heartbeat, and run attempts (locally, or on Ray, Kubernetes or an external launcher)",
		Long: `Run a fleet worker. The agent registers the worker (a new incarnation), sends
worker heartbeats every --heartbeat-interval, and polls task queue
wdc-agent/<worker-id> for attempts. With the default --launcher local each
attempt runs in
<work-dir>/<task>/<attempt>-<fence>/ in its own process group, with only the
envelope's environment plus WDC_TASK_ID, WDC_ATTEMPT, WDC_FENCE and WDC_TASK_DIR
(nothing of the agent's environment); the command is killed if the agent dies.
The agent must share the blob store (--blob-url, default under --data-dir)
with the control plane: inputs and staged outputs pass through it.

A command runs as the agent's user unless --run-as-user names another. The
agent makes itself non-dumpable, so a command of its own user cannot read
its environment, memory or open files through /proc; a command of another
user cannot read them either, nor the agent's files (keep --data-dir mode
0700). An agent run as root must give --run-as-user: a command run as root
can read everything the agent holds (AWS_*, TEMPORAL_API_KEY).

A control plane must be polling wdc-control (the agent registers through
it): without one the agent exits 5 within a few seconds.

With --launcher external the agent runs nothing itself: for each launch it
stores the sealed envelope in the blob store, writes the attempt's
` + "`wdc exec`" + ` command line to --spool-dir (one JSON file per attempt: argv,
the same settings as environment variables, and the names of the
credentials the runner must supply) and prints it. Another system (a
Kubernetes Job, a Ray job, a batch scheduler) runs that command; its
heartbeats keep the lease. If nothing runs it, the lease expires and the
task retries. Placement does not know how an agent launches: give such a
worker a label or capability and have its tasks select it.

With --launcher ray the worker is a Ray cluster: the agent reads the
dashboard's Ray version (--ray-address, GET /api/version) once, declares
the capability launcher/ray (tasks with "launcher": "ray" need it), and
submits each attempt as a Ray job whose entrypoint is ` + "`wdc exec`" + ` (the
claim and connection in runtime_env.env_vars; credentials such as AWS_* or
TEMPORAL_API_KEY must be set on the Ray nodes, never in the request).
Capacity comes from --cpu/--memory/--gpus/--resource as for any worker.
It heartbeats only while the dashboard answers, so a cluster that stops
answering goes STALE and its leases are revoked. Jobs PENDING longer than
--ray-pending-timeout are stopped (launch_failed); a job that fails without
a result is reported infra_killed with the last lines of its log.

With --launcher k8s each attempt is a Kubernetes Job in --k8s-namespace
whose pod runs ` + "`wdc exec`" + ` (image --k8s-image, binary --exec-binary), plus a
Lease the agent renews (with --svid-dir or --spiffe-socket, also a Secret
holding the key delegated to that attempt, owned by its Job); see
docs/launchers.md, "Running on Kubernetes". Cluster
writes are off unless --k8s-apply is given. The worker declares capability
launcher/k8s (tasks with "launcher": "k8s" need it), takes its capacity
from --cpu/--memory/--gpus or else the namespace's ResourceQuota, and
heartbeats only while the API server answers /readyz.

Identity: with --svid-dir (as 'wdc workers enroll' writes it) or
--spiffe-socket (SPIRE) the agent signs its registration with the worker's
SVID and delegates to each attempt a key that signs its result, as a control
plane with identity required demands; with only --ca-dir (WDC_CA_DIR, as
'wdc server start-dev' prints it) it first enrolls itself from that issuer.

Stop with Ctrl-C: the worker is drained, its running attempts are killed and
reported infra_killed, so their tasks retry elsewhere at once. Starting the
agent again registers a new incarnation (ACTIVE) and first kills any process
an earlier agent of this work directory left behind.`,
		Example: `  wdc agent --worker-id worker-a --cpu 4 --memory 8Gi
  wdc agent --worker-id gpu-01 --gpus 2 --label zone=eu-1 --capability cuda12 --data-dir /shared/wdc
  wdc agent --worker-id ray-prod --launcher ray --ray-address http://ray-head:8265 --cpu 64 --gpus 8 \
      --exec-binary /usr/local/bin/wdc --blob-url 's3://wdc?region=eu-1'
  wdc agent --worker-id k8s-pool --launcher k8s --kubeconfig ~/.kube/config --k8s-namespace wdc-jobs \
      --k8s-image registry.example/wdc:1.0 --exec-binary /usr/local/bin/wdc --k8s-executor-secret wdc-executor \
      --blob-url 's3://wdc?region=eu-1' --k8s-apply`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r, err := reg.registration()
			if err != nil {
				return err
			}
			if heartbeat < 0 || (heartbeat > 0 && heartbeat >= r.StaleAfter) {
				return usagef("--heartbeat-interval %s: must be positive and below --stale-after %s", heartbeat, r.StaleAfter)
			}
			// Placement ranks a worker by how late its heartbeat is against
			// the interval it declares.
			r.HeartbeatInterval = heartbeat
			a.heartbeat = agentHeartbeat(heartbeat, r.StaleAfter)
			a.identity = api.AgentIdentity(r.WorkerID)
			lim, err := limits.limits()
			if err != nil {
				return err
			}
			switch launcher {
			case launcherLocal, launcherExternal, launcherRay, launcherK8s:
			default:
				return usagef("--launcher %q: want %s, %s, %s or %s", launcher, launcherLocal, launcherExternal, launcherRay, launcherK8s)
			}
			if err := rayFlags.validate(c, launcher); err != nil {
				return err
			}
			if err := k8sf.check(c, launcher); err != nil {
				return err
			}
			if launcher == launcherLocal && (spoolDir != "" || c.Flags().Changed("exec-binary")) {
				return usagef("--spool-dir and --exec-binary go with --launcher %s (--exec-binary also with %s or %s)", launcherExternal, launcherRay, launcherK8s)
			}
			if err := svid.enrollFromCA(a.deps.Stderr, "workers", r.WorkerID, func(td spiffeid.TrustDomain) (spiffeid.ID, error) {
				return identity.WorkerID(td, r.WorkerID)
			}); err != nil {
				return err
			}
			// With --tls, the SVID is also the agent's client certificate.
			a.global.svidDir = svid.dir
			if svid.dir != "" && a.global.tls && a.global.tlsCertPath == "" && launcher != launcherLocal {
				fmt.Fprintf(a.deps.Stderr, "wdc: warning: --launcher %s: its executors do not present the agent's SVID; against a server that requires client certificates, give --tls-cert-path and --tls-key-path for them\n", launcher)
			}
			signer, closeSigner, err := svid.signer(c.Context(), isWorker(r.WorkerID))
			if err != nil {
				return err
			}
			defer closeSigner()
			if signer != nil {
				signer.ClockOffset = a.deps.ClockOffset
			}
			if launcher != launcherExternal && spoolDir != "" {
				return usagef("--spool-dir goes with --launcher %s", launcherExternal)
			}
			if launcher != launcherLocal {
				for _, name := range []string{"work-dir", "max-output-file-bytes", "max-output-bytes", "max-output-files", "run-as-user", "run-as-group", "run-as-uid-range"} {
					if c.Flags().Changed(name) {
						return usagef("--%s: applies to attempts run here, not with --launcher %s (give it to `wdc exec`)", name, launcher)
					}
				}
			}
			runAsUser, err := runAs.lookup()
			if err != nil {
				return err
			}
			uids, err := lookupUIDRange(uidRange, runAsUser)
			if err != nil {
				return err
			}
			verifier, err := launchVerifier(launchID, signer)
			if err != nil {
				return err
			}
			ctx := c.Context()
			msrv, stopMetrics, err := a.startMetrics(metrics)
			if err != nil {
				return err
			}
			defer stopMetrics()
			if a.metrics != nil {
				telemetry.ExportAgentZeros(a.metrics)
			}
			// Registering is an update the control plane answers: without
			// one the agent would hang before it says anything.
			tc, store, err := a.connectExecutor(ctx, dataDir, blobURL)
			if err != nil {
				return err
			}
			defer tc.Close()
			defer store.Close()
			if workDir == "" {
				if dataDir == "" {
					dataDir = a.defaultDataDir()
				}
				if dataDir, err = filepath.Abs(dataDir); err != nil {
					return err
				}
				workDir = defaultWorkDir(dataDir, r.WorkerID)
			}
			var handOff *external.Options
			if launcher == launcherExternal {
				if dataDir == "" {
					dataDir = a.defaultDataDir()
				}
				if spoolDir == "" {
					spoolDir = filepath.Join(dataDir, "spool", r.WorkerID)
				}
				u, err := a.storeURL(dataDir, blobURL)
				if err != nil {
					return err
				}
				handOff = &external.Options{SpoolDir: spoolDir, Target: a.execTarget(execBin, u),
					OnHandOff: func(cmd external.Command, path string) {
						fmt.Fprintf(a.deps.Stdout, "attempt %s handed off (%s): %s\n", cmd.Claim, path, cmd)
					}}
			}
			if err := checkWorkDir(runAsUser, workDir); err != nil {
				return err
			}
			if uids != nil {
				if err := uids.RunAs(uids.First).CheckWorkDir(workDir); err != nil {
					return usagef("--run-as-uid-range %d-%d: the work dir: %s", uids.First, uids.Last, err)
				}
			}
			a.protectProcess(launcher == launcherLocal && runAsUser == nil && uids == nil)
			log := a.logger()
			opts := worker.AgentOptions{
				WorkDir: workDir, Blobs: store, HeartbeatInterval: heartbeat,
				Limits: lim, RunAs: runAsUser, UIDs: uids,
				Logger: log, HandOff: handOff, Metrics: a.metrics,
				OnReport: func(rep executor.Report) {
					fmt.Fprintf(a.deps.Stdout, "attempt %s ended: %s\n", rep.Claim, describeReport(rep))
				},
			}
			where := "task dirs in " + workDir
			if handOff != nil {
				where = "handing launches off to " + handOff.SpoolDir
			}
			switch launcher {
			case launcherRay:
				u, err := a.storeURL(dataDir, blobURL)
				if err != nil {
					return err
				}
				a.warnLocalStore(u, launcherRay)
				if opts.Launcher, opts.Healthy, where, err = a.rayAgent(ctx, rayFlags, r.WorkerID, execBin, u, tc, store, log, signer); err != nil {
					return err
				}
				declareLauncher(&r, envelope.LauncherRay)
			case launcherK8s:
				storeURL := func() (string, error) {
					u, err := a.storeURL(dataDir, blobURL)
					if err == nil {
						a.warnLocalStore(u, launcherK8s)
					}
					return u, err
				}
				if where, err = a.k8sAgentSetup(ctx, c, &k8sf, &r, tc, store, storeURL, execBin, signer, &opts); err != nil {
					return err
				}
			}
			opts.Registration = r
			opts.Identity, opts.Verifier = signer, verifier
			// StartAgent's ctx bounds its registration only.
			sctx, cancelStart := context.WithTimeout(ctx, a.global.controlPlaneTimeout)
			defer cancelStart()
			agent, err := worker.StartAgent(sctx, tc, opts)
			if err != nil && ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded) {
				return &wdcclient.UnavailableError{TaskQueue: api.ControlTaskQueue, Address: a.global.address, Namespace: a.global.namespace,
					Op: "register worker " + r.WorkerID, Waited: a.global.controlPlaneTimeout}
			}
			if err != nil {
				return appError(err)
			}
			// Ready: registered, not given way to another agent, Temporal
			// answers and, for a Ray or Kubernetes agent, so does the
			// cluster.
			temporalReady := telemetry.TemporalReady(tc)
			msrv.SetReady(func(ctx context.Context) error {
				if err := agent.LostErr(); err != nil {
					return err
				}
				if opts.Healthy != nil {
					if err := opts.Healthy(ctx); err != nil {
						return err
					}
				}
				return temporalReady(ctx)
			})
			fmt.Fprintf(a.deps.Stdout, "agent %s (pid %d) registered (incarnation %d); polling %s; %s\n",
				r.WorkerID, os.Getpid(), agent.Incarnation(), "wdc-agent/"+r.WorkerID, where)
			select {
			case <-ctx.Done():
			case <-agent.Lost():
				return agent.LostErr()
			}
			a.notice(fmt.Sprintf("agent %s stopping; handing back %d running attempt(s)", r.WorkerID, agent.Launcher().Running()))
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			agent.Stop(sctx)
			return nil
		},
	}
	reg.bind(c.Flags())
	f := c.Flags()
	f.StringVar(&dataDir, "data-dir", "", dataDirHelp)
	f.StringVar(&blobURL, "blob-url", "", blobURLHelp)
	f.StringVar(&workDir, "work-dir", "", "root of task directories (default <data-dir>/work/<worker-id>)")
	f.DurationVar(&heartbeat, "heartbeat-interval", 0, "worker heartbeat period (default: --stale-after / 4, 2s with the default --stale-after)")
	limits.bind(f)
	runAs.bind(f)
	f.StringVar(&uidRange, "run-as-uid-range", "", "run each attempt's command as a uid of its own from FIRST-LAST (gid the same, no supplementary groups; root only), its task directory 0700 to that uid and given back when the attempt ends: attempts cannot read each other's envelopes, inputs or outputs, and at most LAST-FIRST+1 run at once (instead of --run-as-user)")
	svid.bind(f, a.deps.Getenv)
	f.StringVar(&launchID, "identity", a.deps.Getenv(envIdentity), "off, optional or required: whether a launch must carry its submitter's signature over the task, checked against the trust bundle that comes with the SVID before anything is created (env "+envIdentity+"; default required with an SVID; without one, give off explicitly)")
	f.StringVar(&launcher, "launcher", launcherLocal, "how attempts run: local (in this process, each in its own process group), external (hand each launch off as a 'wdc exec' command in --spool-dir, for another system to run), ray (submit each as a job to the Ray cluster at --ray-address) or k8s (a Kubernetes Job per attempt; see --k8s-*)")
	f.StringVar(&spoolDir, "spool-dir", "", "with --launcher external: where each attempt's 'wdc exec' command is written, as <task>-a<attempt>-f<fence>.json (default <data-dir>/spool/<worker-id>)")
	f.StringVar(&execBin, "exec-binary", "wdc", "with --launcher external, ray or k8s: "+execBinaryHelp)
	a.bindMetricsAddress(f, &metrics)
	rayFlags.bind(f, a.deps.Getenv)
	k8sf.bind(f)
	return c
}

// lookupUIDRange parses --run-as-uid-range (nil when not given). Errors:
// a malformed range, one given with --run-as-user, or a process that is
// not root (usage errors naming the flag).
func lookupUIDRange(s string, runAsUser *executor.RunAs) (*executor.UIDRange, error) {
	if s == "" {
		return nil, nil
	}
	r, err := executor.ParseUIDRange(s)
	if err != nil {
		return nil, usagef("%s", err)
	}
	switch {
	case runAsUser != nil:
		return nil, usagef("--run-as-uid-range and --run-as-user: give one")
	case os.Geteuid() != 0:
		return nil, usagef("--run-as-uid-range %s: switching user needs root (this process is uid %d)", s, os.Geteuid())
	}
	return &r, nil
}

// launchVerifier is the verifier of launches' task authorities that
// --identity (mode; default required with an SVID, else off) and the
// agent's SVID give: nil when off. Errors name the flag.
func launchVerifier(mode string, signer *identity.Signer) (*identity.Verifier, error) {
	if mode == "" {
		if signer == nil {
			return nil, usagef("identity: no SVID: give --svid-dir, --spiffe-socket or --ca-dir (%s) so that the worker signs what it sends and checks what it launches, or --identity off to run without (anyone with namespace access can then speak for this worker and have it run any command)", envCADir)
		}
		mode = string(identity.ModeRequired)
	}
	m, err := identity.ParseMode(mode)
	if err != nil {
		return nil, usagef("--identity: %v", err)
	}
	if m == identity.ModeOff {
		return nil, nil
	}
	if signer == nil {
		return nil, usagef("--identity %s: needs the worker's SVID (--svid-dir, --spiffe-socket or --ca-dir), whose trust bundle judges the launches", m)
	}
	v, err := signer.Verifier(m)
	if err != nil {
		return nil, usagef("--identity %s: %v", m, err)
	}
	return v, nil
}

// agentHeartbeat is the agent's worker heartbeat period: --heartbeat-interval,
// else a fleet.HeartbeatsPerStaleWindow-th of --stale-after (as
// worker.StartAgent takes it).
func agentHeartbeat(heartbeat, staleAfter time.Duration) time.Duration {
	if heartbeat > 0 {
		return heartbeat
	}
	if staleAfter <= 0 {
		staleAfter = fleet.DefaultStaleAfter
	}
	return staleAfter / fleet.HeartbeatsPerStaleWindow
}

func (a *app) newControlPlaneCommand() *cobra.Command {
	var (
		dataDir    string
		blobURL    string
		registerSA bool
		metrics    string
		deployment deploymentFlags
		trust      trustFlags
	)
	c := &cobra.Command{
		Use:   "control-plane",
		Short: "Run the control plane: every wdc workflow and the control activities (task queue wdc-control)",
		Long: `Run Temporal workers on task queue wdc-control with the WdcWorker, WdcTask and
WdcRun workflows and the control activities: worker selection and reservation,
parent ingest into the blob store (--blob-url, default under --data-dir),
staging cleanup. Runs and registry entries have their workflow tasks on
wdc-control-runs and wdc-control-registry, which it polls too, so they do
not wait behind the tasks'. Run several for availability; they share the task queues and
must share the blob store with each other and the agents. Stop with Ctrl-C.

The namespace needs wdc's search attributes (WdcKind, WdcWorkerState,
WdcTaskState, WdcWorkerID, WdcRunID: Keyword; WdcAttempt, WdcFence: Int);
'wdc server start-dev' registers them, --register-search-attributes adds them
to another server.

Versions: the control plane's workers join the Temporal Worker Deployment
--deployment-name as version --build-id (default: the binary's version, see
'wdc version'). A task runs to its end on the version it started on; the
registry and runs move to the current version. The first control plane of a
deployment without a current version makes its own current, so a new
installation needs no step. Any other version starts without taking over and
says how to make it current:
  temporal worker deployment set-current-version --deployment-name wdc --build-id <id>
Keep the old version running until 'temporal worker deployment
describe-version' shows it drained (docs/upgrading.md).

Identity: with --trust-bundle, --spiffe-socket or --ca-dir (WDC_CA_DIR: the
issuer 'wdc server start-dev' runs) the control plane refuses a registration
not signed by the worker's own SVID, a result or failure report not signed by
the key its lease holder delegated to that attempt, and a commit, close,
cancel or revoke not signed by a submitter (unauthenticated, wrong_identity,
replayed); --identity optional also accepts unsigned ones, for a rolling
change; --revocations adds a revocation list. It prints its mode at start.
See 'wdc workers enroll' and docs/security.md.`,
		Example: `  wdc control-plane --data-dir /shared/wdc
  wdc control-plane --trust-bundle /etc/wdc/ca/ca.pem
  WDC_BUILD_ID=v1.4.0 wdc control-plane --data-dir /shared/wdc`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			version, err := deployment.version()
			if err != nil {
				return err
			}
			verifier, closeVerifier, err := trust.verifier(ctx)
			if err != nil {
				return err
			}
			defer closeVerifier()
			if list, ok := revocationFile(verifier); ok {
				log := a.logger()
				go list.Watch(ctx, time.Second, func(err error) {
					if err != nil {
						log.Error("revocation list not read again; keeping what it held", "file", trust.revocations, "error", err)
					} else {
						log.Info("revocation list read again", "file", trust.revocations)
					}
				})
			}
			msrv, stopMetrics, err := a.startMetrics(metrics)
			if err != nil {
				return err
			}
			defer stopMetrics()
			if a.metrics != nil {
				telemetry.ExportControlPlaneZeros(a.metrics, a.global.namespace)
			}
			a.identity = api.ControlPlaneIdentity(hostname(), os.Getpid())
			tc, store, err := a.connect(ctx, dataDir, blobURL, worker.DialOptions()...)
			if err != nil {
				return err
			}
			defer tc.Close()
			defer store.Close()
			// Calls wait for the connection (worker.DialOptions): bound
			// this one, or an unreachable server would hang it silently.
			sctx, cancel := context.WithTimeout(ctx, a.global.controlPlaneTimeout)
			err = wdcclient.CheckSearchAttributes(sctx, tc, a.global.namespace, registerSA)
			cancel()
			if err != nil {
				return err
			}
			w := worker.NewControlPlaneWith(tc, store, worker.ControlPlaneOptions{Version: version, Identity: verifier})
			if err := w.StartContext(ctx); err != nil {
				if ctx.Err() != nil {
					return nil // stopped (Ctrl-C) while it started
				}
				return fmt.Errorf("start control plane: %w", err)
			}
			msrv.SetReady(telemetry.TemporalReady(tc))
			if a.metrics != nil {
				go telemetry.CountWorkers(ctx, tc, a.metrics, telemetry.WorkersCountInterval)
			}
			fmt.Fprintf(a.deps.Stdout, "control plane polling wdc-control on %s (namespace %s); blob store %s\n", a.global.address, a.global.namespace, store)
			fmt.Fprintf(a.deps.Stdout, "identity %s\n", trust.describe(verifier))
			fmt.Fprintf(a.deps.Stdout, "control plane %s\n", w.Status().Describe(a.temporalFlags()))
			<-ctx.Done()
			w.Stop()
			return nil
		},
	}
	c.Flags().StringVar(&dataDir, "data-dir", "", dataDirHelp)
	c.Flags().StringVar(&blobURL, "blob-url", "", blobURLHelp)
	a.bindMetricsAddress(c.Flags(), &metrics)
	deployment.bind(c.Flags(), a.deps.Getenv)
	trust.bind(c.Flags(), a.deps.Getenv)
	c.Flags().BoolVar(&registerSA, "register-search-attributes", false, "add wdc's search attributes to the namespace if missing (needs operator rights; 'wdc server start-dev' has them already)")
	return c
}

// describeReport renders an attempt's end for the agent's log: outcome,
// exit status and, when refused or killed, why.
func describeReport(r executor.Report) string {
	out := string(r.Outcome)
	switch {
	case r.Signal != "":
		out += ", killed by " + r.Signal
	default:
		out += fmt.Sprintf(", exit code %d", r.ExitCode)
	}
	if r.Reason != "" && r.Reason != string(r.Outcome) {
		out += " (" + r.Reason
		if r.Message != "" {
			out += ": " + r.Message
		}
		out += ")"
	} else if r.Message != "" {
		out += " (" + r.Message + ")"
	}
	if r.OutputError != "" {
		out += "; outputs rejected: " + r.OutputError
	}
	return out
}

// Agent launcher modes (--launcher).
const (
	launcherLocal    = "local"
	launcherExternal = "external"
)

// declareLauncher adds the capability of launcher kind to a
// registration (envelope.LauncherCapability): tasks for that launcher
// require it, so they are placed only on workers that launch them so.
func declareLauncher(r *fleet.Registration, kind string) {
	if c := envelope.LauncherCapability(kind); !slices.Contains(r.Capabilities, c) {
		r.Capabilities = append(r.Capabilities, c)
		sort.Strings(r.Capabilities)
	}
}

// warnLocalStore warns when an agent whose attempts run elsewhere (a Ray
// job, a Kubernetes pod) would hand them a file:// blob store: it is on
// this machine's disk, which those nodes cannot read unless it is a
// shared file system mounted at the same path.
func (a *app) warnLocalStore(u, launcher string) {
	if strings.HasPrefix(u, "file://") {
		a.notice(fmt.Sprintf("warning: with --launcher %s the attempts run on other machines, but the blob store is %s on this one; give --blob-url s3://... (or mount that path on every node)", launcher, u))
	}
}

// revocationFile is v's revocation list when it is a file to watch.
func revocationFile(v *identity.Verifier) (*identity.RevocationFile, bool) {
	if v == nil {
		return nil, false
	}
	f, ok := v.Revocations.(*identity.RevocationFile)
	return f, ok
}
