package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/logrepeat"
	"github.com/wdc-runtime/wdc/lease"
)

// Heartbeater is a fleet worker's registration and worker-heartbeat loop:
// the part of an agent that keeps its registry entry alive. The agent runs
// one next to its Temporal worker; `wdc bench` runs many without one to
// simulate a large fleet with exactly the agent's registry traffic.
type Heartbeater struct {
	reg      fleet.Registration
	interval time.Duration
	client   *wdcclient.Client
	log      *slog.Logger
	// onTakenOver is called (once, from the loop) when another agent
	// registered a newer incarnation of the worker; the loop then ends.
	onTakenOver func(error)
	metrics     client.MetricsHandler
	// running, when set, is sampled into api.MetricAttemptsRunning after
	// every heartbeat (an agent's launcher).
	running func() int
	healthy func(context.Context) error
	// adopter, when set, names the attempts each registration adopts
	// (an agent's cluster launcher; worker/adopt.go).
	adopter Adopter
	signer  *identity.Signer
	// beatLog and withheldLog log a run of failed or withheld heartbeats
	// once at its start, every 30 s with a count, and once at its end.
	beatLog, withheldLog *logrepeat.Failure

	mu          sync.Mutex
	incarnation int64
	// lastAccepted is the send time of the last worker heartbeat the
	// registry counted (or of the registration); see LivenessDeadline.
	lastAccepted time.Time

	sent, byActivity, failed, unanswered, registrations, skipped atomic.Int64

	stop   chan struct{}
	done   chan struct{}
	hbOnce sync.Once
}

// HeartbeaterOptions configures StartHeartbeater.
type HeartbeaterOptions struct {
	// Registration is what the worker declares. Required (validated).
	Registration fleet.Registration
	// Interval is the worker heartbeat period. Default: the registration's
	// stale-after window / fleet.HeartbeatsPerStaleWindow (2 s by default).
	Interval time.Duration
	// Logger receives warnings (nil: slog.Default()).
	Logger *slog.Logger
	// OnTakenOver is called once when another agent registered the same
	// worker ID with a newer incarnation; the heartbeats have stopped then.
	OnTakenOver func(error)
	// Metrics receives api.MetricHeartbeatRoundTrip for each delivered
	// heartbeat (nil: not measured).
	Metrics client.MetricsHandler
	// Healthy, when set, is asked before every heartbeat (bounded by the
	// interval); while it returns an error no heartbeat is sent, so the
	// registry marks the worker STALE (its leases are revoked) and then
	// OFFLINE, as if the agent were gone. A Ray agent asks its cluster's
	// dashboard, a Kubernetes agent its API server's /readyz.
	Healthy func(ctx context.Context) error
	// Signer, when set, signs every registration as the worker (its
	// X.509-SVID); a control plane with identity required refuses an
	// unsigned one.
	Signer *identity.Signer
}

// StartHeartbeater registers the worker (a new incarnation) and starts its
// heartbeat loop. Errors: an invalid registration (field named), or the
// registration update failed (server or control plane unreachable within
// ctx).
func StartHeartbeater(ctx context.Context, c client.Client, opts HeartbeaterOptions) (*Heartbeater, error) {
	h, err := newHeartbeater(c, opts)
	if err != nil {
		return nil, err
	}
	if err := h.register(ctx); err != nil {
		return nil, err
	}
	go h.loop()
	return h, nil
}

func newHeartbeater(c client.Client, opts HeartbeaterOptions) (*Heartbeater, error) {
	reg := opts.Registration
	if err := reg.Validate(); err != nil {
		return nil, err
	}
	if opts.Interval == 0 {
		stale := reg.StaleAfter
		if stale == 0 {
			stale = fleet.DefaultStaleAfter
		}
		opts.Interval = stale / fleet.HeartbeatsPerStaleWindow
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.OnTakenOver == nil {
		opts.OnTakenOver = func(error) {}
	}
	if opts.Metrics == nil {
		opts.Metrics = client.MetricsNopHandler
	}
	return &Heartbeater{
		reg: reg, interval: opts.Interval, client: &wdcclient.Client{C: c}, log: opts.Logger,
		onTakenOver: opts.OnTakenOver, metrics: opts.Metrics, healthy: opts.Healthy, signer: opts.Signer, stop: make(chan struct{}), done: make(chan struct{}),
		beatLog:     &logrepeat.Failure{Log: opts.Logger, Msg: "worker heartbeat", Recovered: "worker heartbeat delivered again"},
		withheldLog: &logrepeat.Failure{Log: opts.Logger, Msg: "worker heartbeat withheld: what this worker runs on does not answer", Recovered: "worker heartbeats resumed: what this worker runs on answers again"},
	}, nil
}

// WorkerID is the fleet worker's ID.
func (h *Heartbeater) WorkerID() string { return h.reg.WorkerID }

// Incarnation is the current registration's incarnation.
func (h *Heartbeater) Incarnation() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.incarnation
}

// HeartbeaterStats counts what a Heartbeater did since it started.
type HeartbeaterStats struct {
	// Sent is heartbeats delivered: recorded on the entry's liveness
	// activity, or delivered as a signal.
	Sent int64 `json:"sent"`
	// ByActivity is the part of Sent that Temporal recorded on the
	// entry's liveness activity, without a signal.
	ByActivity int64 `json:"by_activity"`
	// Failed is heartbeats that were not delivered (retried after a
	// quarter interval).
	Failed int64 `json:"failed"`
	// Unanswered is delivered heartbeats after which the registry entry
	// could not be described, or showed messages waiting unprocessed for
	// longer than the interval (a busy or absent control plane).
	Unanswered int64 `json:"unanswered"`
	// Registrations counts registrations, the first one included: more
	// than one means the registry lost the worker (OFFLINE, gone) and it
	// registered again.
	Registrations int64 `json:"registrations"`
	// Withheld is heartbeats not sent because Alive said the worker's
	// cluster did not answer.
	Withheld int64 `json:"withheld,omitempty"`
}

// Stats returns the counters so far.
func (h *Heartbeater) Stats() HeartbeaterStats {
	return HeartbeaterStats{Sent: h.sent.Load(), ByActivity: h.byActivity.Load(), Failed: h.failed.Load(), Unanswered: h.unanswered.Load(), Registrations: h.registrations.Load(), Withheld: h.skipped.Load()}
}

// LivenessDeadline is the earliest moment the registry may mark this
// worker STALE (and revoke its leases): the send time of the last worker
// heartbeat it counted, or of the registration, plus the stale-after
// window. The registry counts from when Temporal took the heartbeat,
// which is never before it was sent. Zero before the registration.
func (h *Heartbeater) LivenessDeadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lastAccepted.IsZero() {
		return time.Time{}
	}
	return h.lastAccepted.Add(h.staleAfter())
}

func (h *Heartbeater) staleAfter() time.Duration {
	if h.reg.StaleAfter > 0 {
		return h.reg.StaleAfter
	}
	return fleet.DefaultStaleAfter
}

// accepted notes a worker heartbeat, sent at sent, that the registry
// counted.
func (h *Heartbeater) accepted(sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sent.After(h.lastAccepted) {
		h.lastAccepted = sent
	}
}

// signed returns hb with the worker's proof over the rest of it, dated at
// (hb itself without a signer, or unsigned with the error when signing
// fails): a heartbeat signal is believed only so when the control plane
// requires identity.
func (h *Heartbeater) signed(hb api.WorkerHeartbeatSignal, at time.Time) (api.WorkerHeartbeatSignal, error) {
	if h.signer == nil {
		return hb, nil
	}
	p, err := h.signer.Sign(api.SignalWorkerHeartbeat, hb, at)
	if err != nil {
		return hb, fmt.Errorf("sign the worker heartbeat: %w", err) // hb unsigned
	}
	hb.Proof = p
	return hb, nil
}

func (h *Heartbeater) register(ctx context.Context) error {
	reg := h.reg
	var claims []lease.Claim
	if h.adopter != nil {
		var err error
		if claims, err = h.adopter.Adoptable(ctx); err != nil {
			return fmt.Errorf("list the attempts to adopt: %w", err)
		}
		reg.Adopt = adoptions(claims)
	}
	sent := time.Now()
	if h.signer != nil {
		proof, err := h.signer.Sign(api.UpdateRegister, reg, sent)
		if err != nil {
			return fmt.Errorf("sign the registration: %w", err)
		}
		reg.Proof = proof
	}
	res, err := h.client.RegisterWorker(ctx, reg)
	if err != nil {
		return err
	}
	if h.adopter != nil && len(claims) > 0 {
		adopted, refused := splitAdopted(claims, res.Adopted)
		h.log.Info("adopted running attempts", "adopted", len(adopted), "refused", len(refused))
		h.adopter.Adopt(ctx, adopted, refused)
	}
	h.registrations.Add(1)
	h.mu.Lock()
	h.incarnation = res.Incarnation
	h.lastAccepted = sent
	h.mu.Unlock()
	h.log.Info("registered", "incarnation", res.Incarnation)
	return nil
}

// loop sends worker heartbeats every interval: each one heartbeats the
// registry entry's liveness activity by ID (Client.LivenessHeartbeat),
// and only when the entry has none for this incarnation is it a heartbeat
// signal followed by a description of the entry. It retries an
// undelivered one every interval/4 (so that a short network partition does not add up
// to the registry's stale-after window), and re-registers when the
// registry lost this worker (OFFLINE, deregistered, or the workflow is
// gone). When another agent registered the same worker ID (a newer
// incarnation while this one is not OFFLINE), it gives way: the loop ends
// and OnTakenOver says why, instead of the two re-registering in turn and
// revoking each other's leases.
func (h *Heartbeater) loop() {
	defer close(h.done)
	var seq int64
	wait := h.interval
	tick := time.NewTimer(wait)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-tick.C:
		}
		wait = h.interval
		ctx, cancel := context.WithTimeout(context.Background(), h.interval)
		if h.healthy != nil {
			if err := h.healthy(ctx); err != nil {
				cancel()
				h.skipped.Add(1)
				h.withheldLog.Fail(err)
				tick.Reset(wait)
				continue
			}
		}
		h.withheldLog.OK()
		seq++
		began := time.Now()
		hb, err := h.signed(api.WorkerHeartbeatSignal{WorkerID: h.WorkerID(), Incarnation: h.Incarnation(), Seq: seq}, began)
		if err != nil {
			// A heartbeat by ID needs no signature; only a signal
			// falling back unsigned may be refused.
			h.log.Warn("worker heartbeat sent unsigned", "error", err)
		}
		signalled, err := h.client.Heartbeat(ctx, hb)
		if err == nil && !signalled {
			// Temporal recorded it on the entry's liveness activity:
			// nothing else to send or check.
			h.sent.Add(1)
			h.byActivity.Add(1)
			h.accepted(began)
			h.metrics.Timer(api.MetricHeartbeatRoundTrip).Record(time.Since(began))
			h.beatLog.OK()
			h.afterBeat()
			cancel()
			tick.Reset(wait)
			continue
		}
		// A heartbeat signal (the entry holds no liveness activity for
		// this incarnation: it is STALE or OFFLINE, between runs,
		// re-registered by another agent, or predates liveness
		// activities), or none delivered: the entry's description says
		// which.
		switch {
		case errors.Is(err, wdcclient.ErrNotFound):
			h.failed.Add(1)
			err = h.register(ctx)
		case err != nil:
			h.failed.Add(1)
			err = fmt.Errorf("worker heartbeat not delivered (retrying in %s): %w", h.interval/4, err)
			wait = h.interval / 4
		default:
			h.sent.Add(1)
			// The entry as Temporal describes it: no control-plane work,
			// so a heartbeat signal costs the control plane nothing more.
			e, derr := h.client.DescribeWorker(ctx, h.WorkerID())
			if derr == nil {
				h.metrics.Timer(api.MetricHeartbeatRoundTrip).Record(time.Since(began))
			}
			var mine int64
			if e.Profile != nil {
				mine = e.Profile.Incarnation
			}
			switch {
			case errors.Is(derr, wdcclient.ErrNotFound):
				err = h.register(ctx)
			case derr != nil:
				h.unanswered.Add(1)
				err = fmt.Errorf("heartbeat delivered, but describing the registry entry failed: %w", derr)
			case e.State == fleet.Offline:
				h.log.Warn("the registry marked this worker OFFLINE; registering again", "incarnation", mine)
				err = h.register(ctx)
			case mine > h.Incarnation():
				cancel()
				h.onTakenOver(fmt.Errorf("another agent registered worker %s (incarnation %d, this agent has %d); this agent stops", h.WorkerID(), mine, h.Incarnation()))
				return
			case e.Unprocessed > h.interval:
				h.unanswered.Add(1)
				err = fmt.Errorf("heartbeats delivered, but the registry has not processed its messages for %s (is the control plane running?)", e.Unprocessed.Round(time.Second))
			default:
				cctx, ccancel := context.WithTimeout(ctx, h.interval/2)
				if h.confirmed(cctx, e) {
					h.accepted(began)
				}
				ccancel()
			}
		}
		if err != nil {
			h.beatLog.Fail(err)
		} else {
			h.beatLog.OK()
		}
		h.afterBeat()
		cancel()
		tick.Reset(wait)
	}
}

// confirmed reports whether the registry counted the heartbeat signal
// just delivered: it holds this incarnation ACTIVE (or DRAINING) with no
// message left unprocessed. While the signal waits it describes the
// entry again, every confirmPoll, until ctx ends.
func (h *Heartbeater) confirmed(ctx context.Context, e wdcclient.WorkerEntry) bool {
	for {
		mine := int64(0)
		if e.Profile != nil {
			mine = e.Profile.Incarnation
		}
		if mine != h.Incarnation() {
			return false
		}
		if e.Unprocessed == 0 {
			return e.State == fleet.Active || e.State == fleet.Draining
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(confirmPoll):
		}
		var err error
		if e, err = h.client.DescribeWorker(ctx, h.WorkerID()); err != nil {
			return false
		}
	}
}

// confirmPoll is how often confirmed describes the registry entry again.
const confirmPoll = 20 * time.Millisecond

// afterBeat samples the launcher's running attempts after a heartbeat.
func (h *Heartbeater) afterBeat() {
	if h.running != nil {
		h.metrics.Gauge(api.MetricAttemptsRunning).Update(float64(h.running()))
	}
}

// Stop stops the heartbeats (the registry will mark the worker STALE,
// then OFFLINE) and waits for the loop to end. Safe to call more than
// once.
func (h *Heartbeater) Stop() {
	h.hbOnce.Do(func() {
		close(h.stop)
		<-h.done
	})
}
