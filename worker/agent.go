package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/internal/fleet"
	"github.com/wdc-runtime/wdc/internal/wdcclient"
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
	// OnReport is called with every attempt's final report.
	OnReport func(executor.Report)
	// HandOff, when set, makes the agent hand every launch to an external
	// system instead of running it (launchers/external: the sealed
	// envelope is stored and the attempt's `wdc exec` command spooled);
	// its WorkerID, Blobs and Logger are the agent's. Limits, Faults and
	// OnReport then do not apply: the external `wdc exec` runs the
	// executor.
	HandOff *external.Options
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

	mu          sync.Mutex
	incarnation int64

	stop     chan struct{}
	done     chan struct{}
	lost     chan struct{}
	lostErr  error
	hbOnce   sync.Once
	stopOnce sync.Once
}

// StartAgent registers the worker (a new incarnation), starts its Temporal
// worker on api.AgentTaskQueue and its heartbeat loop. The agent
// re-registers by itself when the registry says it went OFFLINE.
//
// Errors: invalid registration (field named), an unreachable server.
func StartAgent(ctx context.Context, c client.Client, opts AgentOptions) (*Agent, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	reg := opts.Registration
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	if opts.HeartbeatInterval == 0 {
		stale := reg.StaleAfter
		if stale == 0 {
			stale = fleet.DefaultStaleAfter
		}
		opts.HeartbeatInterval = stale / fleet.HeartbeatsPerStaleWindow
	}
	log := opts.Logger.With("worker", reg.WorkerID)
	wc := &wdcclient.Client{C: c}
	var launcher AgentLauncher
	var err error
	if h := opts.HandOff; h != nil {
		ho := *h
		ho.WorkerID, ho.Blobs, ho.Logger = reg.WorkerID, opts.Blobs, log
		launcher, err = external.New(ho)
	} else {
		launcher, err = local.New(local.Options{
			WorkerID: reg.WorkerID, WorkDir: opts.WorkDir, Blobs: opts.Blobs,
			Control: &executor.TemporalControl{Client: c}, Limits: opts.Limits, Faults: opts.Faults,
			Logger: log, OnReport: opts.OnReport,
		})
	}
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: opts, client: wc, launcher: launcher, log: log, stop: make(chan struct{}), done: make(chan struct{}), lost: make(chan struct{})}
	a.worker = sdkworker.New(c, api.AgentTaskQueue(reg.WorkerID), sdkworker.Options{})
	a.worker.RegisterActivityWithOptions(&activities.Agent{WorkerID: reg.WorkerID, Launcher: launcher}, activity.RegisterOptions{SkipInvalidStructFunctions: true})
	if err := a.worker.Start(); err != nil {
		return nil, fmt.Errorf("start agent worker: %w", err)
	}
	if err := a.register(ctx); err != nil {
		a.worker.Stop()
		return nil, err
	}
	go a.heartbeatLoop()
	return a, nil
}

// WorkerID is the fleet worker's ID.
func (a *Agent) WorkerID() string { return a.opts.Registration.WorkerID }

// Incarnation is the current registration's incarnation.
func (a *Agent) Incarnation() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.incarnation
}

// Launcher is the agent's launcher: Local, or external with HandOff.
func (a *Agent) Launcher() AgentLauncher { return a.launcher }

func (a *Agent) register(ctx context.Context) error {
	res, err := a.client.RegisterWorker(ctx, a.opts.Registration)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.incarnation = res.Incarnation
	a.mu.Unlock()
	a.log.Info("registered", "incarnation", res.Incarnation)
	return nil
}

// heartbeatLoop sends worker heartbeats every HeartbeatInterval, retrying
// an undelivered one every HeartbeatInterval/4 (so that a short network
// partition does not add up to the registry's stale-after window), and
// re-registers when the registry lost this worker (OFFLINE, deregistered,
// or the workflow is gone). When another agent registered the same worker
// ID (a newer incarnation while this one is not OFFLINE), this agent gives
// way: it stops and Lost reports why, instead of the two re-registering in
// turn and revoking each other's leases.
func (a *Agent) heartbeatLoop() {
	defer close(a.done)
	var seq int64
	wait := a.opts.HeartbeatInterval
	tick := time.NewTimer(wait)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-tick.C:
		}
		seq++
		wait = a.opts.HeartbeatInterval
		ctx, cancel := context.WithTimeout(context.Background(), a.opts.HeartbeatInterval)
		err := a.client.WorkerHeartbeat(ctx, api.WorkerHeartbeatSignal{WorkerID: a.WorkerID(), Incarnation: a.Incarnation(), Seq: seq})
		switch {
		case errors.Is(err, wdcclient.ErrNotFound):
			err = a.register(ctx)
		case err != nil:
			err = fmt.Errorf("worker heartbeat not delivered (retrying in %s): %w", a.opts.HeartbeatInterval/4, err)
			wait = a.opts.HeartbeatInterval / 4
		default:
			v, qerr := a.client.Worker(ctx, a.WorkerID())
			switch {
			case errors.Is(qerr, wdcclient.ErrNotFound):
				err = a.register(ctx)
			case qerr != nil:
				err = fmt.Errorf("heartbeat delivered, but the registry did not answer (is the control plane running?): %w", qerr)
			case v.State == fleet.Offline:
				a.log.Warn("the registry marked this worker OFFLINE; registering again", "incarnation", v.Incarnation)
				err = a.register(ctx)
			case v.Incarnation > a.Incarnation():
				cancel()
				a.giveWay(fmt.Errorf("another agent registered worker %s (incarnation %d, this agent has %d); this agent stops", a.WorkerID(), v.Incarnation, a.Incarnation()))
				return
			}
		}
		if err != nil {
			a.log.Warn("worker heartbeat", "error", err)
		}
		cancel()
		tick.Reset(wait)
	}
}

// giveWay stops this agent's polling and attempts after another agent took
// its worker ID over; Lost then reports why.
func (a *Agent) giveWay(why error) {
	a.log.Error("giving way", "error", why)
	a.lostErr = why
	close(a.lost)
	go func() {
		a.worker.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.launcher.Shutdown(ctx, "another agent took over this worker")
	}()
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
		if a.LostErr() != nil {
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
	a.hbOnce.Do(func() {
		close(a.stop)
		<-a.done
	})
}
