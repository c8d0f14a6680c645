package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/wdc-runtime/wdc/api"
)

// Sweep is what the sweep phase measured: N trivial tasks in one run,
// submitted by one `wdc tasks submit --batch` subprocess while a consumer
// commits their results, as `make scale`'s run test does.
type Sweep struct {
	// Tasks is N; Submitted what the CLI reported submitting; Completed
	// the run's completed tasks at the end.
	Tasks     int   `json:"tasks"`
	Submitted int64 `json:"submitted"`
	Completed int64 `json:"completed"`
	// SubmitSeconds is the CLI subprocess's run time, start to exit;
	// SubmitRate is Tasks over it (tasks per second).
	SubmitSeconds float64 `json:"submit_seconds"`
	SubmitRate    float64 `json:"submit_rate"`
	// CompletionSeconds runs from the CLI's start to the last result the
	// run accepted (its worker_result event's time); CompletionRate is
	// Tasks over it.
	CompletionSeconds float64 `json:"completion_seconds"`
	CompletionRate    float64 `json:"completion_rate"`
	// WaitedForRoom: the CLI waited for room in the full run.
	WaitedForRoom bool `json:"waited_for_room"`
	// ContinuedAsNew counts the run's continue-as-new generations.
	ContinuedAsNew int64 `json:"continued_as_new"`
	// Commits counts the consumer's commits.
	Commits int64 `json:"commits"`
	// Max is the largest of each RunLoad figure seen, polled every
	// SweepPollInterval; End is the run's load once every task completed.
	Max RunLoad `json:"max"`
	End RunLoad `json:"end"`
	// CPUCost is the CPU per task from the CLI's start to the end.
	CPUCost
}

// RunLoad is a run workflow's history and pending state at one moment.
type RunLoad struct {
	// HistoryLength (events) and HistoryBytes are the current run's
	// history (DescribeWorkflowExecution; continue-as-new starts anew).
	HistoryLength int64 `json:"history_length"`
	HistoryBytes  int64 `json:"history_bytes"`
	// PendingChildren and PendingActivities are Temporal's pending
	// child workflows (task starts not yet acknowledged) and activities.
	PendingChildren   int64 `json:"pending_children"`
	PendingActivities int64 `json:"pending_activities"`
	// PendingBytes is the run's pending state against
	// api.MaxRunPendingBytes (the run query's pending_bytes).
	PendingBytes int64 `json:"pending_bytes"`
}

// SweepPollInterval is how often the sweep's consumer looks at the run.
const SweepPollInterval = 2 * time.Second

// sweep submits N tasks through the CLI into one run, commits their
// results as they come, and follows the run's history and pending state.
func (b *bench) sweep(ctx context.Context, res *Result) error {
	n := b.opts.Tasks
	runID := "bench-sw" + b.opts.Suffix
	path, err := b.writeBatch(runID, runID, n)
	if err != nil {
		return err
	}
	b.say("sweep: wdc tasks submit --batch of %d tasks to run %s; results committed every %s", n, runID, SweepPollInterval)
	sw := &Sweep{Tasks: n}
	var (
		mu         sync.Mutex
		lastResult time.Time
	)
	watch := func(v api.RunView) {
		var seqs []int64
		for _, e := range v.Events {
			if e.Result == nil {
				continue
			}
			if !e.Committed {
				seqs = append(seqs, e.Seq)
			}
			mu.Lock()
			if e.Time.After(lastResult) {
				lastResult = e.Time
			}
			mu.Unlock()
		}
		load := b.runLoad(ctx, runID, v)
		mu.Lock()
		sw.Max = maxLoad(sw.Max, load)
		mu.Unlock()
		if len(seqs) == 0 {
			return
		}
		if _, err := b.wc.Commit(ctx, runID, api.CommitInput{ExpectedParentTime: v.ParentTime, EventSeqs: seqs, Note: "bench sweep"}); err == nil {
			mu.Lock()
			sw.Commits++
			mu.Unlock()
		}
	}

	// The consumer runs while the CLI submits; the run appears with the
	// CLI's first update.
	from := b.cpuNow()
	cctx, stop := context.WithCancel(ctx)
	consumer := make(chan struct{})
	go func() {
		defer close(consumer)
		said := time.Now()
		for cctx.Err() == nil {
			if v, err := b.wc.Run(cctx, runID); err == nil {
				watch(v)
				if time.Since(said) >= 30*time.Second {
					said = time.Now()
					b.say("sweep: %d of %d tasks in the run, %d completed", v.TaskCounts.Total, n, v.TaskCounts.Completed)
				}
			}
			select {
			case <-cctx.Done():
			case <-time.After(SweepPollInterval):
			}
		}
	}()
	sub, err := b.submitBatch(ctx, path)
	if err == nil && (sub.submitted != n || sub.failed != 0) {
		err = fmt.Errorf("wdc tasks submit --batch: %d submitted, %d failed, want %d submitted", sub.submitted, sub.failed, n)
	}
	stop()
	<-consumer
	if err != nil {
		return err
	}
	sw.Submitted, sw.WaitedForRoom = int64(sub.submitted), sub.waitedForRoom
	sw.SubmitSeconds = round3(sub.took.Seconds())
	sw.SubmitRate = round3(float64(n) / sub.took.Seconds())
	b.say("sweep: %d tasks accepted in %.1fs (%.1f tasks/s)%s", n, sw.SubmitSeconds, sw.SubmitRate, map[bool]string{true: "; it waited for room in the run", false: ""}[sub.waitedForRoom])

	said := time.Now()
	last, err := b.waitRunDone(ctx, runID, n, SweepPollInterval, 10*time.Minute+time.Duration(n)*time.Second, func(v api.RunView) {
		watch(v)
		if time.Since(said) >= 30*time.Second {
			said = time.Now()
			b.say("sweep: %d of %d tasks completed", v.TaskCounts.Completed, n)
		}
	})
	if err != nil {
		return err
	}
	sw.CPUCost = b.cost(from, b.cpuNow(), sub.cpu, n)
	sw.Completed, sw.ContinuedAsNew = last.TaskCounts.Completed, last.ContinuedAsNew
	sw.End = b.runLoad(ctx, runID, last)
	sw.Max = maxLoad(sw.Max, sw.End)
	end := lastResult
	if end.IsZero() || end.Before(sub.began) {
		end = time.Now()
	}
	sw.CompletionSeconds = round3(end.Sub(sub.began).Seconds())
	sw.CompletionRate = round3(float64(n) / end.Sub(sub.began).Seconds())
	res.Sweep = sw
	b.say("sweep: %d tasks completed in %.1fs (%.1f tasks/s); largest history %d events, %d B; largest pending state %d B, %d children, %d activities; %d continue-as-new; CPU per task: %s",
		sw.Completed, sw.CompletionSeconds, sw.CompletionRate, sw.Max.HistoryLength, sw.Max.HistoryBytes, sw.Max.PendingBytes,
		sw.Max.PendingChildren, sw.Max.PendingActivities, sw.ContinuedAsNew, sw.CPUCost)
	b.closeRun(ctx, runID)
	return nil
}

// runLoad describes run runID's current workflow; v gives its pending
// bytes. A describe that fails leaves the history figures zero.
func (b *bench) runLoad(ctx context.Context, runID string, v api.RunView) RunLoad {
	l := RunLoad{PendingBytes: v.PendingBytes}
	d, err := b.opts.Client.DescribeWorkflowExecution(ctx, api.RunWorkflowID(runID), "")
	if err != nil {
		return l
	}
	info := d.GetWorkflowExecutionInfo()
	l.HistoryLength, l.HistoryBytes = info.GetHistoryLength(), info.GetHistorySizeBytes()
	l.PendingChildren, l.PendingActivities = int64(len(d.GetPendingChildren())), int64(len(d.GetPendingActivities()))
	return l
}

// maxLoad is the larger of each figure.
func maxLoad(a, b RunLoad) RunLoad {
	return RunLoad{
		HistoryLength: max(a.HistoryLength, b.HistoryLength), HistoryBytes: max(a.HistoryBytes, b.HistoryBytes),
		PendingChildren: max(a.PendingChildren, b.PendingChildren), PendingActivities: max(a.PendingActivities, b.PendingActivities),
		PendingBytes: max(a.PendingBytes, b.PendingBytes),
	}
}
