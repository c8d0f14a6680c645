package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/lease"
)

// throughput runs N bare workflows, then N wdc tasks, each batch started
// concurrently (SubmitConcurrency at a time), and takes both windows from
// Temporal's start and close times; then one history of each kind.
func (b *bench) throughput(ctx context.Context, res *Result) error {
	n := b.opts.Tasks
	c := b.opts.Client

	b.say("throughput: starting %d bare workflows (one activity: %s)", n, TrueCommand)
	bareIDs := make([]string, n)
	for i := range bareIDs {
		bareIDs[i] = fmt.Sprintf("wdc-bench-bare%s-%04d", b.opts.Suffix, i+1)
	}
	cpuFrom := selfCPUSeconds()
	err := forEach(ctx, bareIDs, SubmitConcurrency, func(ctx context.Context, id string) error {
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: b.bareQueue}, BareWorkflowType, BareInput{})
		return err
	})
	if err != nil {
		return fmt.Errorf("start bare workflows: %w", err)
	}
	if err := forEach(ctx, bareIDs, n, func(ctx context.Context, id string) error {
		var r BareResult
		return c.GetWorkflow(ctx, id, "").Get(ctx, &r)
	}); err != nil {
		return fmt.Errorf("bare workflow: %w", err)
	}
	starts, closes, err := b.windows(ctx, bareIDs)
	if err != nil {
		return err
	}
	if !b.opts.Shared {
		res.CPUPerWorkflowBare = ptr(round6((selfCPUSeconds() - cpuFrom) / float64(n)))
	}
	bare := Throughput(n, starts, closes)
	res.BareThroughput = ptr(round3(bare))
	b.say("throughput: bare %.1f workflows/s (%d starts at a time)", bare, SubmitConcurrency)

	runID := "bench-tp" + b.opts.Suffix
	b.say("throughput: submitting %d wdc tasks (%s) to run %s", n, TrueCommand, runID)
	taskIDs := make([]string, n)
	for i := range taskIDs {
		taskIDs[i] = fmt.Sprintf("bench-tp%s-%04d", b.opts.Suffix, i+1)
	}
	submitFrom := time.Now()
	err = forEach(ctx, taskIDs, SubmitConcurrency, func(ctx context.Context, id string) error {
		_, err := b.wc.SubmitTask(ctx, b.trueTask(id, runID, true), api.TaskOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("submit tasks: %w", err)
	}
	res.SubmitRate = ptr(round3(float64(n) / time.Since(submitFrom).Seconds()))
	var mu sync.Mutex
	single := ""
	if err := forEach(ctx, taskIDs, n, func(ctx context.Context, id string) error {
		out, err := b.wc.WaitTask(ctx, id)
		if err != nil {
			return err
		}
		if out.State != api.TaskCompleted || out.Result == nil || out.Result.ExitCode != 0 {
			return fmt.Errorf("task %s ended %s after %d attempt(s), want COMPLETED with exit code 0", id, out.State, out.Attempts)
		}
		mu.Lock()
		if out.Attempts == 1 && (single == "" || id < single) {
			single = id
		}
		mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	wfIDs := make([]string, n)
	for i, id := range taskIDs {
		wfIDs[i] = api.TaskWorkflowID(id)
	}
	starts, closes, err = b.windows(ctx, append([]string{api.RunWorkflowID(runID)}, wfIDs...))
	if err != nil {
		return err
	}
	wdc := Throughput(n, starts[:1], closes[1:])
	res.WdcThroughput = ptr(round3(wdc))
	if bare > 0 {
		res.ThroughputRatio = ptr(round3(wdc / bare))
	}
	b.say("throughput: wdc %.1f tasks/s (ratio %.2f), submitted at %.1f tasks/s (%d submits at a time)", wdc, wdc/bare, *res.SubmitRate, SubmitConcurrency)
	b.closeRun(ctx, runID)

	if err := b.throughputCLI(ctx, res, bare); err != nil {
		return err
	}

	if single == "" {
		return errors.New("no task completed in a single attempt: events per task not measured")
	}
	h, err := b.history(ctx, api.TaskWorkflowID(single))
	if err != nil {
		return err
	}
	res.EventsPerTask, res.EventsByType = ptr(h.events), h.byType
	if h, err = b.history(ctx, bareIDs[0]); err != nil {
		return err
	}
	res.BareEvents, res.BareEventsByType = ptr(h.events), h.byType
	b.say("events: %d per wdc task (%s), %d per bare workflow", *res.EventsPerTask, single, *res.BareEvents)
	return nil
}

// throughputCLI submits N tasks as users do, through `wdc tasks submit
// --batch` in a subprocess, and takes the window as throughput does; it
// also prices the batch in CPU time.
func (b *bench) throughputCLI(ctx context.Context, res *Result, bare float64) error {
	n := b.opts.Tasks
	runID := "bench-tpc" + b.opts.Suffix
	path, err := b.writeBatch(runID, runID, n)
	if err != nil {
		return err
	}
	b.say("throughput: wdc tasks submit --batch of %d tasks to run %s", n, runID)
	registryFrom, err := b.historyLengths(ctx, b.registryIDs())
	if err != nil {
		return err
	}
	from := b.cpuNow()
	sub, err := b.submitBatch(ctx, path)
	if err != nil {
		return err
	}
	if sub.submitted != n || sub.failed != 0 {
		return fmt.Errorf("wdc tasks submit --batch: %d submitted, %d failed, want %d submitted", sub.submitted, sub.failed, n)
	}
	if _, err := b.waitRunDone(ctx, runID, n, 500*time.Millisecond, 10*time.Minute+time.Duration(n)*time.Second, nil); err != nil {
		return err
	}
	cost := b.cost(from, b.cpuNow(), sub.cpu, n)
	res.RunEventsPerTask, err = b.eventsPerTask(ctx, map[string]execLength{api.RunWorkflowID(runID): {}}, n)
	if err != nil {
		return err
	}
	if res.RegistryEventsPerTask, err = b.eventsPerTask(ctx, registryFrom, n); err != nil {
		return err
	}
	wfIDs := []string{api.RunWorkflowID(runID)}
	for i := range n {
		wfIDs = append(wfIDs, api.TaskWorkflowID(fmt.Sprintf("%s-%05d", runID, i+1)))
	}
	starts, closes, err := b.windows(ctx, wfIDs)
	if err != nil {
		return err
	}
	wdc := Throughput(n, starts[:1], closes[1:])
	res.SubmitRateCLI = ptr(round3(float64(n) / sub.took.Seconds()))
	res.WdcThroughputCLI = ptr(round3(wdc))
	if bare > 0 {
		res.ThroughputRatioCLI = ptr(round3(wdc / bare))
	}
	res.CPUCost = cost
	b.say("throughput: CLI path %.1f tasks/s (ratio %.2f), accepted in %.1fs (%.1f tasks/s); CPU per task: %s; events per task on the run %s, on the registry %s",
		wdc, wdc/bare, sub.took.Seconds(), *res.SubmitRateCLI, cost, orNull(res.RunEventsPerTask), orNull(res.RegistryEventsPerTask))
	b.closeRun(ctx, runID)
	return nil
}

// heartbeat runs one task for the heartbeat window and prices its lease
// heartbeats in history events against a single-attempt trivial task.
func (b *bench) heartbeat(ctx context.Context, res *Result) error {
	runID := "bench-hb" + b.opts.Suffix
	if res.EventsPerTask == nil {
		b.say("heartbeat: one trivial task for the baseline history")
		id := "bench-hb-base" + b.opts.Suffix
		if _, err := b.wc.SubmitTask(ctx, b.trueTask(id, runID, true), api.TaskOptions{}); err != nil {
			return err
		}
		out, err := b.wc.WaitTask(ctx, id)
		if err != nil {
			return err
		}
		if out.State != api.TaskCompleted || out.Attempts != 1 {
			return fmt.Errorf("baseline task %s ended %s after %d attempt(s), want COMPLETED after 1", id, out.State, out.Attempts)
		}
		h, err := b.history(ctx, api.TaskWorkflowID(id))
		if err != nil {
			return err
		}
		res.EventsPerTask, res.EventsByType = ptr(h.events), h.byType
	}
	id := "bench-hb" + b.opts.Suffix
	env := b.trueTask(id, runID, true)
	env.Command = []string{"/bin/sleep", fmt.Sprintf("%g", b.opts.HeartbeatWindow.Seconds())}
	interval := b.opts.LeaseHeartbeatInterval
	b.say("heartbeat: one task sleeping %s, lease heartbeats every %s (lease TTL %s)", b.opts.HeartbeatWindow, interval, 3*interval)
	if _, err := b.wc.SubmitTask(ctx, env, api.TaskOptions{LeaseTTL: 3 * interval, HeartbeatInterval: interval}); err != nil {
		return err
	}
	out, err := b.wc.WaitTask(ctx, id)
	if err != nil {
		return err
	}
	if out.State != api.TaskCompleted || out.Attempts != 1 {
		return fmt.Errorf("task %s ended %s after %d attempt(s), want COMPLETED after 1 (a lease expired under load?)", id, out.State, out.Attempts)
	}
	h, err := b.history(ctx, api.TaskWorkflowID(id))
	if err != nil {
		return err
	}
	total := h.events
	// The beats the executor sent, as it reported them with its result:
	// heartbeats by ID on the lease activity leave no event to count. An
	// executor that reports none (older than the report) sent signals
	// only, which the history counts.
	beats := h.reportedBeats
	if beats == 0 {
		beats = h.signals[api.SignalLeaseHeartbeat]
	}
	if beats == 0 {
		return fmt.Errorf("task %s: no lease heartbeat reported or signalled in %d events", id, total)
	}
	res.HeartbeatTaskEvents, res.Heartbeats = ptr(total), ptr(beats)
	res.EventsPerHeartbeat = ptr(round3(float64(total-*res.EventsPerTask) / float64(beats)))
	b.say("heartbeat: %d events for %d heartbeats: %.2f events per heartbeat", total, beats, *res.EventsPerHeartbeat)
	b.closeRun(ctx, runID)
	return nil
}

// failover kills the agent holding a running task's lease, trial after
// trial, and times the next attempt's start on another worker.
func (b *bench) failover(ctx context.Context, res *Result) error {
	runID := "bench-fo" + b.opts.Suffix
	res.FailoverSamples = []float64{}
	for i := range b.opts.FailoverTrials {
		id := fmt.Sprintf("bench-fo%s-%02d", b.opts.Suffix, i+1)
		env := b.trueTask(id, runID, true)
		env.Command = []string{"/bin/sleep", "3600"}
		if _, err := b.wc.SubmitTask(ctx, env, api.TaskOptions{}); err != nil {
			return err
		}
		var holder lease.Lease
		if err := b.until(ctx, 2*time.Minute, "task "+id+" running", func(v api.TaskView) bool {
			if v.Lease != nil && v.Phase == "Running" {
				holder = *v.Lease
				return true
			}
			return false
		}, id); err != nil {
			return err
		}
		// The holder's registry entry, to restart the agent above it.
		before, err := b.wc.Worker(ctx, holder.WorkerID)
		if err != nil {
			return err
		}
		killed := time.Now()
		if err := b.agents.kill(holder.WorkerID); err != nil {
			return err
		}
		var next lease.Lease
		if err := b.until(ctx, 3*time.Minute, "task "+id+"'s next attempt running", func(v api.TaskView) bool {
			if v.Lease != nil && v.Lease.Attempt > holder.Attempt && v.Lease.WorkerID != holder.WorkerID && v.Phase == "Running" {
				next = *v.Lease
				return true
			}
			return false
		}, id); err != nil {
			return err
		}
		d := time.Since(killed).Seconds()
		res.FailoverSamples = append(res.FailoverSamples, round3(d))
		reason := ""
		if v, err := b.wc.Task(ctx, id); err == nil && len(v.Directives) > 0 {
			reason = string(v.Directives[len(v.Directives)-1].Reason)
		}
		b.say("failover %d/%d: killed %s (attempt %d); attempt %d running on %s after %.2fs (%s)",
			i+1, b.opts.FailoverTrials, holder.WorkerID, holder.Attempt, next.Attempt, next.WorkerID, d, reason)
		if _, err := b.wc.CancelTask(ctx, id, "bench trial done"); err != nil {
			return err
		}
		if _, err := b.wc.WaitEnded(ctx, id); err != nil {
			return err
		}
		if err := b.agents.start(ctx, holder.WorkerID, before.Incarnation); err != nil {
			return err
		}
	}
	res.FailoverP50 = ptr(Percentile(res.FailoverSamples, 50))
	res.FailoverP99 = ptr(Percentile(res.FailoverSamples, 99))
	b.closeRun(ctx, runID)
	return nil
}

// until polls task id's lease query every 50 ms until cond holds.
func (b *bench) until(ctx context.Context, timeout time.Duration, what string, cond func(api.TaskView) bool, id string) error {
	deadline := time.Now().Add(timeout)
	for {
		v, err := b.wc.Task(ctx, id)
		if err == nil && cond(v) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s (last: %s, %v)", timeout, what, v.Phase, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// trueTask is a trivial task envelope for the bench's workers; onAgents
// keeps it on the real agents (simulated workers cannot run anything).
func (b *bench) trueTask(taskID, runID string, onAgents bool) envelope.Envelope {
	sel := map[string]string{labelKey: b.label}
	if onAgents {
		sel[roleKey] = roleAgent
	}
	return envelope.Envelope{
		TaskID: taskID, RunID: runID, WorldID: "bench" + b.opts.Suffix,
		Command: []string{TrueCommand}, Env: map[string]string{"PATH": "/usr/bin:/bin"},
		Selector: sel,
	}
}

// windows describes each workflow and returns its start and close times,
// as Temporal recorded them, in order. Errors: a workflow not closed.
func (b *bench) windows(ctx context.Context, wfIDs []string) (starts, closes []time.Time, err error) {
	starts, closes = make([]time.Time, len(wfIDs)), make([]time.Time, len(wfIDs))
	idx := make([]int, len(wfIDs))
	for i := range idx {
		idx[i] = i
	}
	err = forEach(ctx, idx, SubmitConcurrency, func(ctx context.Context, i int) error {
		d, err := b.opts.Client.DescribeWorkflowExecution(ctx, wfIDs[i], "")
		if err != nil {
			return fmt.Errorf("describe %s: %w", wfIDs[i], err)
		}
		info := d.GetWorkflowExecutionInfo()
		starts[i] = info.GetStartTime().AsTime()
		if info.GetCloseTime() != nil {
			closes[i] = info.GetCloseTime().AsTime()
		}
		return nil
	})
	return starts, closes, err
}

// execLength is one workflow execution's history length; continued says
// it is not the workflow's first execution.
type execLength struct {
	runID     string
	events    int64
	continued bool
}

// registryIDs are the workflow IDs of the agents' registry entries.
func (b *bench) registryIDs() []string {
	var ids []string
	for _, id := range b.agentIDs {
		ids = append(ids, api.WorkerWorkflowID(id))
	}
	return ids
}

// historyLengths describes each workflow's current execution.
func (b *bench) historyLengths(ctx context.Context, wfIDs []string) (map[string]execLength, error) {
	out := map[string]execLength{}
	for _, id := range wfIDs {
		d, err := b.opts.Client.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return nil, fmt.Errorf("describe %s: %w", id, err)
		}
		info := d.GetWorkflowExecutionInfo()
		run := info.GetExecution().GetRunId()
		out[id] = execLength{runID: run, events: info.GetHistoryLength(), continued: info.GetFirstRunId() != "" && info.GetFirstRunId() != run}
	}
	return out, nil
}

// eventsPerTask is the events the workflows in from gained since from was
// taken (a zero execLength: since their first execution started), per
// task; nil when one of them continued as new meanwhile.
func (b *bench) eventsPerTask(ctx context.Context, from map[string]execLength, n int) (*float64, error) {
	now, err := b.historyLengths(ctx, slices.Collect(maps.Keys(from)))
	if err != nil {
		return nil, err
	}
	var sum int64
	for id, f := range from {
		cur := now[id]
		if (f.runID == "" && cur.continued) || (f.runID != "" && cur.runID != f.runID) {
			return nil, nil
		}
		sum += cur.events - f.events
	}
	return ptr(round3(float64(sum) / float64(n))), nil
}

// orNull formats a figure that may be missing.
func orNull(v *float64) string {
	if v == nil {
		return "null"
	}
	return strconv.FormatFloat(*v, 'f', -1, 64)
}

// history counts a workflow's history (see historyCount).
func (b *bench) history(ctx context.Context, wfID string) (historyCount, error) {
	it := b.opts.Client.GetWorkflowHistory(ctx, wfID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := historyCount{byType: map[string]int64{}, signals: map[string]int64{}}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return historyCount{}, fmt.Errorf("history of %s: %w", wfID, err)
		}
		h.events++
		h.byType[strings.TrimPrefix(ev.GetEventType().String(), "EVENT_TYPE_")]++
		if s := ev.GetWorkflowExecutionSignaledEventAttributes(); s != nil {
			h.signals[s.GetSignalName()]++
		}
		if n, ok := wdcclient.ReportedHeartbeats(ev); ok && n > h.reportedBeats {
			h.reportedBeats = n
		}
	}
	return h, nil
}

// historyCount is what bench.history counts in a workflow's history.
type historyCount struct {
	// events is the history length; byType counts the events by type
	// (the Temporal enum's name: "WorkflowExecutionSignaled"), signals
	// the signals by name.
	events          int64
	byType, signals map[string]int64
	// reportedBeats is the most lease heartbeats an attempt reported
	// sending with its result (0 for other workflows).
	reportedBeats int64
}

// closeRun closes a bench run (best effort: it ends once its tasks have).
func (b *bench) closeRun(ctx context.Context, runID string) {
	if _, err := b.wc.CloseRun(ctx, runID); err != nil && !errors.Is(err, wdcclient.ErrNotFound) {
		b.opts.Logger.Warn("close bench run", "run", runID, "error", err)
	}
}

// forEach runs f on every item, at most limit at a time, and returns the
// first error (the others are cancelled).
func forEach[T any](ctx context.Context, items []T, limit int, f func(context.Context, T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f(ctx, it); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
