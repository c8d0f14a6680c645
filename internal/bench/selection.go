package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// registerConcurrency bounds concurrent registrations of simulated workers.
const registerConcurrency = 16

// registerWait bounds the registration of the whole simulated fleet.
const registerWait = 5 * time.Minute

// submitWait bounds the selection phase's submits.
const submitWait = 3 * time.Minute

// selectionGrantWait bounds the wait for the selection phase's grants,
// from its last submit.
const selectionGrantWait = 2 * time.Minute

// selection registers W simulated workers that heartbeat as agents do
// (worker.Heartbeater), then places Selections tasks among them and the
// agents, one every 200 ms, timing submit → grant; meanwhile it watches
// visibility for workers that went STALE or OFFLINE.
func (b *bench) selection(ctx context.Context, res *Result) error {
	w := b.opts.SimWorkers
	interval := b.opts.SimHeartbeatInterval
	stale := fleet.HeartbeatsPerStaleWindow * interval
	b.say("selection: registering %d simulated workers (heartbeats every %s, stale after %s)", w, interval, stale)
	ids := make([]string, w)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-sim%s-%04d", b.opts.Suffix, i+1)
	}
	sims := make([]*worker.Heartbeater, w)
	var mu sync.Mutex
	registered := 0
	defer func() {
		b.say("selection: stopping %d simulated workers", len(ids))
		var wg sync.WaitGroup
		for _, h := range sims {
			if h != nil {
				wg.Add(1)
				go func() { defer wg.Done(); h.Stop() }()
			}
		}
		wg.Wait()
		if !b.opts.Shared {
			return // the registry goes with the server
		}
		// Take them out of the shared registry (deregister completes the
		// workflow), within a minute in all.
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = forEach(dctx, ids, registerConcurrency, func(ctx context.Context, id string) error {
			_, _ = b.wc.DeregisterWorker(ctx, id, true, "bench finished")
			return nil
		})
	}()
	idx := make([]int, w)
	for i := range idx {
		idx[i] = i
	}
	// Registration is bounded: one registration by a minute, all of them
	// by registerWait. A fleet the control plane cannot register in time is
	// a finding (workers_registered), not a failure.
	rctx, cancelReg := context.WithTimeout(ctx, registerWait)
	defer cancelReg()
	regFailed := 0
	_ = forEach(rctx, idx, registerConcurrency, func(ctx context.Context, i int) error {
		reg := fleet.Registration{
			WorkerID: ids[i], Capacity: resource.List{CPUMillis: 4000, MemoryBytes: 8 << 30},
			Labels:     map[string]string{labelKey: b.label},
			StaleAfter: stale, OfflineAfter: offlineAfter(interval), HeartbeatInterval: interval,
		}
		// A thousand workers' warnings would drown the progress lines; the
		// counters (Stats) say what went wrong.
		one, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		signer, err := b.ids.signer(ids[i])
		if err != nil {
			return err
		}
		h, err := worker.StartHeartbeater(one, b.opts.Client, worker.HeartbeaterOptions{Registration: reg, Interval: interval, Logger: slog.New(slog.DiscardHandler), Signer: signer})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			regFailed++
			if regFailed == 1 {
				b.say("selection: registering %s failed: %v", ids[i], err)
			}
			return nil
		}
		sims[i] = h
		registered++
		if registered%100 == 0 || registered == w {
			b.say("selection: %d/%d simulated workers registered", registered, w)
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	res.WorkersRegistered = ptr(int64(registered))
	var watched []string
	for _, h := range sims {
		if h != nil {
			watched = append(watched, h.WorkerID())
		}
	}
	if registered < w {
		b.say("selection: only %d of %d simulated workers registered within %s (%d registrations failed or timed out); going on with them", registered, w, registerWait, regFailed)
	}
	watched = append(watched, b.agentIDs...)
	// A fleet that does not show ACTIVE all at once is a finding, not a
	// failure: wait a while, then watch (the watch counts the stale ones).
	if missing, err := b.waitActive(ctx, watched, max(30*time.Second, 2*stale)); err != nil {
		return err
	} else if missing > 0 {
		b.say("selection: %d of %d workers still not ACTIVE in visibility; going on", missing, len(watched))
	}

	// Watch visibility for false staleness while tasks are placed.
	watchStart := time.Now()
	minWatch := 3 * max(stale, fleet.HeartbeatsPerStaleWindow*b.opts.AgentHeartbeatInterval)
	b.say("selection: fleet ACTIVE; watching for false staleness for at least %s while placing %d tasks", minWatch, b.opts.Selections)
	wctx, stopWatch := context.WithCancel(ctx)
	falseStale := map[string]bool{}
	watchDone := make(chan error, 1)
	go func() { watchDone <- b.watchStale(wctx, watched, falseStale) }()

	runID := "bench-sel" + b.opts.Suffix
	taskIDs := make([]string, b.opts.Selections)
	for i := range taskIDs {
		taskIDs[i] = fmt.Sprintf("bench-sel%s-%03d", b.opts.Suffix, i+1)
	}
	// Submits are bounded too (a minute each, submitWait in all); a task
	// that could not be submitted in time counts as not granted.
	submitted := taskIDs[:0:0]
	placeErr := func() error {
		deadline := time.Now().Add(submitWait)
		for i, id := range taskIDs {
			if i > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
			if time.Now().After(deadline) {
				b.say("selection: submitting took over %s; %d of %d tasks submitted", submitWait, len(submitted), len(taskIDs))
				return nil
			}
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			_, err := b.wc.SubmitTask(sctx, b.trueTask(id, runID, false), api.TaskOptions{})
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil {
				b.say("selection: submit %s failed within a minute: %v", id, err)
				continue
			}
			submitted = append(submitted, id)
		}
		return nil
	}()
	var samples []float64
	ungranted := len(taskIDs) - len(submitted)
	if placeErr == nil && len(submitted) > 0 {
		b.say("selection: %d tasks submitted; waiting up to %s for their grants", len(submitted), selectionGrantWait)
		var n int
		samples, n, placeErr = b.selectionTimes(ctx, submitted, selectionGrantWait)
		ungranted += n
	}
	if b.opts.Shared {
		// Cancel what did not end (tasks on simulated workers never
		// launch), within a minute in all.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = forEach(cctx, taskIDs, SubmitConcurrency, func(ctx context.Context, id string) error {
			if _, err := b.wc.CancelTask(ctx, id, "bench selection sample"); err == nil {
				_, _ = b.wc.WaitEnded(ctx, id)
			}
			return nil
		})
		cancel()
		b.closeRun(ctx, runID)
	}
	if placeErr != nil {
		stopWatch()
		<-watchDone
		return placeErr
	}
	if rest := minWatch - time.Since(watchStart); rest > 0 {
		b.say("selection: %d tasks placed; watching %s more", len(samples), rest.Round(time.Second))
		select {
		case <-ctx.Done():
		case <-time.After(rest):
		}
	}
	stopWatch()
	if err := <-watchDone; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	observed := time.Since(watchStart).Seconds()
	var sent, failed, unanswered int64
	for _, h := range sims {
		if h == nil {
			continue
		}
		s := h.Stats()
		sent += s.Sent
		failed += s.Failed
		unanswered += s.Unanswered
		if s.Registrations > 1 {
			falseStale[h.WorkerID()] = true
		}
	}
	names := make([]string, 0, len(falseStale))
	for id := range falseStale {
		names = append(names, id)
	}
	sort.Strings(names)
	res.FalseStale = ptr(int64(len(names)))
	res.FalseStaleWorkers = names[:min(len(names), 20)]
	res.SimHeartbeatsSent, res.SimHeartbeatsFailed, res.SimHeartbeatsUnanswered = ptr(sent), ptr(failed), ptr(unanswered)
	res.ObservedSeconds = ptr(round3(observed))
	if len(samples) > 0 { // else null: no task was even submitted in time
		res.SelectionP50 = ptr(round3(Percentile(samples, 50)))
		res.SelectionP99 = ptr(round3(Percentile(samples, 99)))
	}
	res.SelectionUngranted = ptr(int64(ungranted))
	if ungranted > 0 {
		b.say("selection: %d of %d tasks got no lease (not submitted in time, or not granted within %s: counted as that long)", ungranted, len(taskIDs), selectionGrantWait)
	}
	b.say("selection: p50 %.3fs, p99 %.3fs over %d tasks; %d false stale over %.0fs; %d heartbeats sent, %d not delivered, %d unanswered",
		Percentile(samples, 50), Percentile(samples, 99), len(samples), len(names), observed, sent, failed, unanswered)
	return nil
}

// selectionTimes waits, up to grantWait after the call, until every task
// has a lease, and returns for each its first lease's grant time minus its
// workflow's start time (both Temporal's), in seconds, and how many were
// not granted in time. A task not granted counts as start → end of the
// wait (a lower bound), so a p99 with ungranted tasks is a lower bound too.
func (b *bench) selectionTimes(ctx context.Context, taskIDs []string, grantWait time.Duration) ([]float64, int, error) {
	wfIDs := make([]string, len(taskIDs))
	for i, id := range taskIDs {
		wfIDs[i] = api.TaskWorkflowID(id)
	}
	starts, _, err := b.windows(ctx, wfIDs)
	if err != nil {
		return nil, 0, err
	}
	out := make([]float64, len(taskIDs))
	granted := make([]bool, len(taskIDs))
	left := len(taskIDs)
	deadline := time.Now().Add(grantWait)
	for left > 0 && time.Now().Before(deadline) {
		for i, id := range taskIDs {
			if granted[i] {
				continue
			}
			// A query waits for the control plane; a busy one must not
			// hold the whole wait.
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			v, err := b.wc.Task(qctx, id)
			cancel()
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			if time.Now().After(deadline) {
				break
			}
			if err == nil && len(v.Leases) > 0 {
				out[i] = round3(v.Leases[0].GrantedAt.Sub(starts[i]).Seconds())
				granted[i] = true
				left--
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	end := time.Now()
	for i := range taskIDs {
		if !granted[i] {
			out[i] = round3(end.Sub(starts[i]).Seconds())
		}
	}
	return out, left, nil
}

// waitActive waits up to timeout until visibility lists every worker in
// ids ACTIVE, and returns how many are not. Errors: ctx ended.
func (b *bench) waitActive(ctx context.Context, ids []string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		states, err := b.wc.WorkerStates(ctx)
		active := map[string]bool{}
		for _, s := range states {
			if s.State == fleet.Active {
				active[s.WorkerID] = true
			}
		}
		missing := 0
		for _, id := range ids {
			if !active[id] {
				missing++
			}
		}
		if (err == nil && missing == 0) || time.Now().After(deadline) {
			return missing, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// watchStale lists the workers' states from visibility every second until
// ctx ends and records in seen each watched worker found STALE or
// OFFLINE. A list that fails is retried at the next tick.
func (b *bench) watchStale(ctx context.Context, watched []string, seen map[string]bool) error {
	want := map[string]bool{}
	for _, id := range watched {
		want[id] = true
	}
	for {
		// Only the STALE and OFFLINE entries are listed: listing the whole
		// fleet every second would load the control plane being measured.
		for _, state := range []fleet.State{fleet.Stale, fleet.Offline} {
			states, err := b.wc.WorkerStatesIn(ctx, state)
			if err != nil {
				continue
			}
			for _, s := range states {
				if want[s.WorkerID] {
					if !seen[s.WorkerID] {
						b.say("selection: %s is %s in visibility although it heartbeats", s.WorkerID, s.State)
					}
					seen[s.WorkerID] = true
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
