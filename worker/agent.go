package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/launchers/local"
)

// AgentOptions configures a fleet worker's agent.
type AgentOptions struct {
	// Registration is what the worker declares (ID, capacity, labels,
	// capabilities, liveness windows).
	Registration fleet.Registration
	// WorkDir is the root of task directories. Required.
	WorkDir string
	// Blobs is the data dir shared with the control plane. Required.
	Blobs *blobstore.Store
	// HeartbeatInterval is the worker heartbeat period. Default: a third of
	// the registration's stale-after window.
	HeartbeatInterval time.Duration
	Limits            executor.OutputLimits
	Faults            executor.Faults
	Logger            *slog.Logger
	// RunAs is the user Local attempts' commands run as
	// (executor.Options.RunAs; nil: the agent's own).
	RunAs *executor.RunAs
	// UIDs, instead of RunAs, gives each Local attempt a uid of its own
	// (local.Options.UIDs).
	UIDs *executor.UIDRange
	// OnReport is called with every attempt's final report.
	OnReport func(executor.Report)
	// Metrics receives the agent's metrics: api.MetricAttemptsRunning
	// and api.MetricHeartbeatRoundTrip after every worker heartbeat, and
	// the executors' (nil: none). Give the same handler to the client's
	// options for the SDK's metrics.
	Metrics client.MetricsHandler
	// HandOff, when set, makes the agent hand every launch to an external
	// system instead of running it (launchers/external: the sealed
	// envelope is stored and the attempt's `wdc exec` command spooled);
	// its WorkerID, Blobs and Logger are the agent's. Limits, Faults and
	// OnReport then do not apply: the external `wdc exec` runs the
	// executor.
	HandOff *external.Options
	// Launcher, when set, runs the agent's attempts instead of Local or
	// HandOff (launchers/ray: a cluster as one fleet worker; launchers/k8s:
	// Jobs in a namespace), built by the caller; Limits, Faults and
	// OnReport then do not apply. One that is also an Adopter has every
	// registration adopt its attempts still running.
	Launcher AgentLauncher
	// Healthy, when set, gates every worker heartbeat
	// (HeartbeaterOptions.Healthy): a cluster's worker heartbeats only
	// while its cluster's API answers.
	Healthy func(ctx context.Context) error
	// Verifier, when set, judges every launch's task authority (its
	// submitter's signature) before anything is created or started
	// (activities.Agent.Verifier); nil launches unsigned work.
	Verifier *identity.Verifier
	// Identity, when set, is the worker's X.509-SVID signer: it signs the
	// registration, and the Local and external launchers delegate a key to
	// each attempt to sign its result (identity.Signer.Delegate).
	Identity *identity.Signer
}

// AgentLauncher is what the agent runs its attempts through: the Local
// launcher, or the external one (AgentOptions.HandOff).
type AgentLauncher interface {
	launchers.Launcher
	// Running counts the attempts running in this process.
	Running() int
	// Shutdown kills the attempts running in this process, reporting
	// each infra_killed, and waits for their reports or ctx.
	Shutdown(ctx context.Context, reason string)
}

// Agent is a running fleet worker: registered, heartbeating, and polling
// its task queue for Local attempts.
type Agent struct {
	opts     AgentOptions
	client   *wdcclient.Client
	launcher AgentLauncher
	worker   sdkworker.Worker
	log      *slog.Logger
	hb       *Heartbeater

	lost     chan struct{}
	lostErr  error
	stopOnce sync.Once
	// givingWay is set when giveWay begins: Stop then leaves the
	// worker's entry, which another registration owns, undrained.
	givingWay atomic.Bool
}

// StartAgent registers the worker (a new incarnation), starts its Temporal
// worker on api.AgentTaskQueue and its heartbeat loop (a Heartbeater). The
// agent re-registers by itself when the registry says it went OFFLINE.
//
// Errors: invalid registration (field named), an unreachable server.
func StartAgent(ctx context.Context, c client.Client, opts AgentOptions) (*Agent, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	reg := opts.Registration
	log := opts.Logger.With("worker", reg.WorkerID)
	// The agent's own commands to its entry (the drain on stop) are signed
	// with the worker's SVID.
	a := &Agent{opts: opts, client: &wdcclient.Client{C: c, Signer: opts.Identity}, log: log, lost: make(chan struct{})}
	runsLocal := opts.Launcher == nil && opts.HandOff == nil
	// Local attempts die by their worker's liveness deadline (their
	// executors run in this process), so a STALE revocation needs no
	// lock-delay.
	reg.LivenessFenced = runsLocal && executor.WatchdogAvailable()
	hb, err := newHeartbeater(c, HeartbeaterOptions{Registration: reg, Interval: opts.HeartbeatInterval, Logger: log, OnTakenOver: a.giveWay, Metrics: opts.Metrics, Healthy: opts.Healthy, Signer: opts.Identity})
	if err != nil {
		return nil, err
	}
	a.hb = hb
	a.opts.HeartbeatInterval = hb.interval
	var launcher AgentLauncher
	if opts.Launcher != nil {
		launcher = opts.Launcher
	} else if h := opts.HandOff; h != nil {
		ho := *h
		ho.WorkerID, ho.Blobs, ho.Logger, ho.Signer = reg.WorkerID, opts.Blobs, log, opts.Identity
		launcher, err = external.New(ho)
	} else {
		launcher, err = local.New(local.Options{
			Liveness: hb.LivenessDeadline,
			WorkerID: reg.WorkerID, WorkDir: opts.WorkDir, Blobs: opts.Blobs,
			Control: &executor.TemporalControl{Client: c}, Limits: opts.Limits, Faults: opts.Faults,
			Logger: log, OnReport: opts.OnReport, Metrics: opts.Metrics, RunAs: opts.RunAs, UIDs: opts.UIDs, Signer: opts.Identity,
		})
	}
	if err != nil {
		return nil, err
	}
	a.launcher = launcher
	hb.running = launcher.Running
	if ad, ok := launcher.(Adopter); ok {
		hb.adopter = ad
	}
	// The identity of the agent's activity events, whatever the client's.
	a.worker = sdkworker.New(c, api.AgentTaskQueue(reg.WorkerID), sdkworker.Options{Identity: api.AgentIdentity(reg.WorkerID)})
	a.worker.RegisterActivityWithOptions(&activities.Agent{WorkerID: reg.WorkerID, Launcher: launcher, Incarnation: hb.Incarnation, Signer: opts.Identity, Verifier: opts.Verifier}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	if hb.adopter != nil {
		// Register before polling: a launch taken meanwhile (one queued
		// for the previous incarnation) would start a Job the
		// registration's list of running attempts does not see, and its
		// reservation would be dropped under it.
		if err := hb.register(ctx); err != nil {
			return nil, err
		}
	}
	if err := a.worker.Start(); err != nil {
		return nil, fmt.Errorf("start agent worker: %w", err)
	}
	if hb.adopter == nil {
		if err := hb.register(ctx); err != nil {
			a.worker.Stop()
			return nil, err
		}
	}
	go hb.loop()
	return a, nil
}

// WorkerID is the fleet worker's ID.
func (a *Agent) WorkerID() string { return a.opts.Registration.WorkerID }

// Incarnation is the current registration's incarnation.
func (a *Agent) Incarnation() int64 { return a.hb.Incarnation() }

// Launcher is the agent's launcher: Local, or external with HandOff.
func (a *Agent) Launcher() AgentLauncher { return a.launcher }

// giveWay stops the launcher (a Local attempt is killed first, so a
// process exiting on Lost leaves none running) and polling after another
// registration of the worker ID took over; Lost then reports why.
func (a *Agent) giveWay(why error) {
	a.givingWay.Store(true)
	a.log.Error("giving way", "error", why)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a.launcher.Shutdown(ctx, "another registration took over this worker")
	go a.worker.Stop()
	a.lostErr = why
	close(a.lost)
}

// Lost is closed when the agent stopped itself because another agent took
// over its worker ID; LostErr says so.
func (a *Agent) Lost() <-chan struct{} { return a.lost }

// LostErr is why the agent stopped itself (after Lost is closed).
func (a *Agent) LostErr() error {
	select {
	case <-a.lost:
		return a.lostErr
	default:
		return nil
	}
}

// Stop takes the worker out of service: it drains it in the registry (no
// new reservations), stops heartbeats and polling, and kills running
// attempts, reporting each as infra_killed so its task retries elsewhere at
// once. It waits up to ctx. Safe to call more than once. A restarted agent
// registers a new incarnation, which is ACTIVE again.
func (a *Agent) Stop(ctx context.Context) {
	a.stopOnce.Do(func() {
		if a.givingWay.Load() {
			a.StopHeartbeats()
			return // another agent owns the worker now: do not drain it
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := a.client.DrainWorker(dctx, a.WorkerID(), "agent stopping"); err != nil {
			a.log.Warn("drain on stop", "error", err)
		}
		cancel()
		a.StopHeartbeats()
		a.worker.Stop()
		a.launcher.Shutdown(ctx, "agent stopping")
	})
}

// StopHeartbeats stops only the worker heartbeats (the registry will mark
// the worker STALE, then OFFLINE); tests use it to simulate a silent
// worker.
func (a *Agent) StopHeartbeats() {
	a.hb.Stop()
}
