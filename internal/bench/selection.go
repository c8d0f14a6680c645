package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/fleet"
	"github.com/wdc-runtime/wdc/internal/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// registerConcurrency bounds concurrent registrations of simulated workers.
const registerConcurrency = 16

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
		// Take them out of the registry (deregister completes the
		// workflow); on a shared server this keeps the namespace clean.
		_ = forEach(context.Background(), ids, registerConcurrency, func(ctx context.Context, id string) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, _ = b.wc.DeregisterWorker(ctx, id, true, "bench finished")
			return nil
		})
	}()
	idx := make([]int, w)
	for i := range idx {
		idx[i] = i
	}
	err := forEach(ctx, idx, registerConcurrency, func(ctx context.Context, i int) error {
		reg := fleet.Registration{
			WorkerID: ids[i], Capacity: resource.List{CPUMillis: 4000, MemoryBytes: 8 << 30},
			Labels:     map[string]string{labelKey: b.label},
			StaleAfter: stale, OfflineAfter: offlineAfter(interval), HeartbeatInterval: interval,
		}
		h, err := worker.StartHeartbeater(ctx, b.opts.Client, worker.HeartbeaterOptions{Registration: reg, Interval: interval, Logger: b.opts.Logger})
		if err != nil {
			return fmt.Errorf("register simulated worker %s: %w", ids[i], err)
		}
		mu.Lock()
		sims[i] = h
		registered++
		if registered%100 == 0 || registered == w {
			b.say("selection: %d/%d simulated workers registered", registered, w)
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return err
	}
	watched := append(slices.Clone(ids), b.agentIDs...)
	if err := b.waitActive(ctx, watched); err != nil {
		return err
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
	placeErr := func() error {
		for i, id := range taskIDs {
			if i > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
			}
			if _, err := b.wc.SubmitTask(ctx, b.trueTask(id, runID, false), api.TaskOptions{}); err != nil {
				return err
			}
		}
		return nil
	}()
	var samples []float64
	if placeErr == nil {
		samples, placeErr = b.selectionTimes(ctx, taskIDs)
	}
	// Cancel what did not end (tasks on simulated workers never launch).
	_ = forEach(context.Background(), taskIDs, SubmitConcurrency, func(ctx context.Context, id string) error {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if _, err := b.wc.CancelTask(cctx, id, "bench selection sample"); err == nil {
			_, _ = b.wc.WaitEnded(cctx, id)
		}
		return nil
	})
	b.closeRun(ctx, runID)
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
	var sent, failed int64
	for _, h := range sims {
		if h == nil {
			continue
		}
		s := h.Stats()
		sent += s.Sent
		failed += s.Failed
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
	res.SimHeartbeatsSent, res.SimHeartbeatsFailed = ptr(sent), ptr(failed)
	res.ObservedSeconds = ptr(round3(observed))
	res.SelectionP50 = ptr(round3(Percentile(samples, 50)))
	res.SelectionP99 = ptr(round3(Percentile(samples, 99)))
	b.say("selection: p50 %.3fs, p99 %.3fs over %d tasks; %d false stale over %.0fs; %d heartbeats sent, %d not delivered",
		*res.SelectionP50, *res.SelectionP99, len(samples), len(names), observed, sent, failed)
	return nil
}

// selectionTimes waits until every task has a lease and returns, for
// each, its first lease's grant time minus its workflow's start time
// (both Temporal's), in seconds.
func (b *bench) selectionTimes(ctx context.Context, taskIDs []string) ([]float64, error) {
	wfIDs := make([]string, len(taskIDs))
	for i, id := range taskIDs {
		wfIDs[i] = api.TaskWorkflowID(id)
	}
	starts, _, err := b.windows(ctx, wfIDs)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(taskIDs))
	for i, id := range taskIDs {
		var granted time.Time
		if err := b.until(ctx, 5*time.Minute, "task "+id+" granted a lease", func(v api.TaskView) bool {
			if len(v.Leases) > 0 {
				granted = v.Leases[0].GrantedAt
				return true
			}
			return false
		}, id); err != nil {
			return nil, err
		}
		out[i] = round3(granted.Sub(starts[i]).Seconds())
	}
	return out, nil
}

// waitActive waits until visibility lists every worker in ids ACTIVE.
func (b *bench) waitActive(ctx context.Context, ids []string) error {
	deadline := time.Now().Add(5 * time.Minute)
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
		if err == nil && missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d workers not ACTIVE in visibility after 5m (%v)", missing, len(ids), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
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
		if states, err := b.wc.WorkerStates(ctx); err == nil {
			for _, s := range states {
				if want[s.WorkerID] && (s.State == fleet.Stale || s.State == fleet.Offline) {
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
