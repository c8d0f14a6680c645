package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/lease"
)

// User metadata of the workflows' commands and their current details
// (docs/operations.md, "The Temporal Web UI"). Summaries ride on commands
// the workflows issue anyway and current details are kept in memory
// (workflow.SetCurrentDetails, answered by the __temporal_workflow_metadata
// query): neither adds a history event. Current details are rebuilt only
// when what they show changed.

// detailsRows is the most rows a current-details table lists; older rows
// are counted in one "… N earlier" line.
const detailsRows = 10

// Handler descriptions, shown by `temporal workflow metadata` and the UI.
const (
	descLeaseQuery     = "The task's lease view: state, phase, every lease, directives, result."
	descSubmitResult   = "An attempt's result, under its lease (fence-checked); answers once ingested."
	descCancelTask     = "Cancel the task: its lease is revoked and it ends CANCELLED."
	descLeaseHeartbeat = "An executor's lease heartbeat, fence-checked; renews the lease TTL."
	descWorkerLost     = "The registry lost the worker holding a reservation; revokes that lease."
	descAttemptFailed  = "An executor's report of an attempt that ended without a result."

	descRunQuery   = "The run's state: tasks, counts, events, evidence, parent_time, TCD digest."
	descAddTask    = "Add one sealed envelope's task to the run (idempotent by task ID)."
	descAddTasks   = "Add many sealed envelopes' tasks to the run in one update."
	descCommit     = "Commit worker_result events as evidence; advances parent_time."
	descCloseRun   = "Close the run: it ends once every task has ended."
	descTaskEnded  = "A task's outcome, sent once by its WdcTask when it has ended."
	descWorkerView = "The worker's registry record and free capacity."
	descRegister   = "Register the worker (a new incarnation); sent with UpdateWithStart."
	descReserve    = "Reserve capacity for a task's next fence (eligibility re-checked)."
	descDrain      = "Drain the worker: no new reservations; running attempts go on."
	descUndrain    = "Undo a drain: the worker takes reservations again."
	descRevoke     = "Revoke the worker's identity: its incarnation ends OFFLINE, its leases move, and it registers again only with a newer certificate."
	descDeregister = "Take the worker out of the registry; the entry then completes."
	descHeartbeat  = "A worker heartbeat, sent while no liveness activity is held for it."
	descRelease    = "A task hands back its reservation for one fence."
	descSweep      = "Re-apply the liveness windows now."
)

// shortDuration is d rounded for a summary: "1.2s", "150ms", "2m0s".
func shortDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func launchSummary(l lease.Lease) string {
	return fmt.Sprintf("LaunchAttempt attempt %d · fence %d → %s", l.Attempt, l.Fence, l.WorkerID)
}

func cancelSummary(l lease.Lease, reason string) string {
	return fmt.Sprintf("CancelAttempt attempt %d · fence %d on %s · %s", l.Attempt, l.Fence, l.WorkerID, reason)
}

func leaseTimerSummary(l lease.Lease) string {
	return fmt.Sprintf("lease TTL · fence %d", l.Fence)
}

func leaseActivitySummary(l lease.Lease) string {
	return fmt.Sprintf("lease held by heartbeats · attempt %d · fence %d · %s", l.Attempt, l.Fence, l.WorkerID)
}

func selectSummary(in api.SelectWorkerInput) string {
	s := fmt.Sprintf("SelectWorker for fence %d", in.Fence)
	if in.Reset {
		s += " · after a reset"
	}
	if len(in.AvoidWorkers) > 0 {
		s += " · avoiding " + strings.Join(in.AvoidWorkers, ", ")
	}
	return api.ClipSummary(s)
}

func ingestSummary(in api.SubmitResultInput) string {
	return fmt.Sprintf("Ingest attempt %d · %s", in.Attempt, plural(len(in.Artifacts), "artifact"))
}

// plural is "1 artifact", "3 artifacts".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func backoffSummary(d time.Duration, reason lease.RetryReason) string {
	return fmt.Sprintf("backoff %s after %s", shortDuration(d), reason)
}

func selectWaitSummary(d time.Duration) string {
	return fmt.Sprintf("wait %s for an eligible worker", shortDuration(d))
}

// taskDetailsKey is what a task's current details show; they are rebuilt
// when it changes.
type taskDetailsKey struct {
	phase         taskPhase
	state         api.TaskState
	leases        int
	last          lease.State
	lastReason    string
	resultPending bool
	waiting       string
	cancelled     bool
}

// showDetails keeps the task's current details up to date: its phase and
// state, why it waits, and a table of its leases (the last detailsRows).
func (t *taskWorkflow) showDetails(ctx workflow.Context) {
	key := taskDetailsKey{phase: t.phase, state: t.state, leases: len(t.ledger.Leases), waiting: t.waiting, cancelled: t.carry.Cancelled}
	cur := t.ledger.Current()
	if cur != nil {
		key.last, key.lastReason, key.resultPending = cur.State, cur.EndReason, cur.ResultPending
	}
	if key == t.shown {
		return
	}
	t.shown = key
	workflow.SetCurrentDetails(ctx, t.details())
}

// details is the task's current details in Markdown.
func (t *taskWorkflow) details() string {
	var b strings.Builder
	phase := t.phase
	if phase == "" {
		phase = phaseSelecting
	}
	fmt.Fprintf(&b, "**%s** · %s", phase, t.state)
	if cur := t.ledger.Current(); cur != nil {
		fmt.Fprintf(&b, " · attempt %d · fence %d → %s", cur.Attempt, cur.Fence, cur.WorkerID)
	}
	b.WriteString("\n\n")
	if t.waiting != "" {
		fmt.Fprintf(&b, "waiting: %s\n\n", api.ClipSummary(t.waiting))
	}
	if t.carry.Cancelled {
		fmt.Fprintf(&b, "cancel requested: %s\n\n", api.ClipSummary(orNone(t.carry.CancelReason)))
	}
	if len(t.ledger.Leases) == 0 {
		b.WriteString("no lease yet\n")
		return b.String()
	}
	b.WriteString("| attempt | fence | worker | state | reason |\n|:---|:---|:---|:---|:---|\n")
	leases := t.ledger.Leases
	if n := len(leases) - detailsRows; n > 0 {
		fmt.Fprintf(&b, "| … %d earlier | | | | |\n", n)
		leases = leases[n:]
	}
	for _, l := range leases {
		reason := l.EndReason
		if l.ResultPending {
			reason = "result pending"
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %s | %s |\n", l.Attempt, l.Fence, l.WorkerID, l.State, reason)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(no reason given)"
	}
	return s
}

// runDetailsKey is what a run's current details show.
type runDetailsKey struct {
	counts           api.RunTaskCounts
	status           api.RunStatus
	closed           bool
	evidence, parent int64
	results          int64
}

// showDetails keeps the run's current details up to date: status, task
// counts, evidence and parent_time.
func (r *runWorkflow) showDetails(ctx workflow.Context) {
	key := runDetailsKey{counts: r.st.TaskCounts, status: r.st.Status, closed: r.st.Closed, evidence: r.st.Evidence, parent: r.st.ParentTime, results: r.st.WorkerResultEvents}
	if key == r.shown {
		return
	}
	r.shown = key
	c := r.st.TaskCounts
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**", r.st.Status)
	if r.st.Closed {
		b.WriteString(" · closed")
	}
	fmt.Fprintf(&b, "\n\n| tasks | open | completed | retries exhausted | cancelled | aborted |\n|---:|---:|---:|---:|---:|---:|\n| %d | %d | %d | %d | %d | %d |\n\n",
		c.Total, c.Open, c.Completed, c.RetriesExhausted, c.Cancelled, c.Aborted)
	fmt.Fprintf(&b, "evidence %d · parent_time %d · worker_result events %d\n", r.st.Evidence, r.st.ParentTime, r.st.WorkerResultEvents)
	workflow.SetCurrentDetails(ctx, b.String())
}

// workerDetailsKey is what a worker's current details show.
type workerDetailsKey struct {
	registered   bool
	state        fleet.State
	incarnation  int64
	reservations string
	liveness     string
}

// showDetails keeps the worker's current details up to date: state,
// incarnation, free capacity and the leases it holds (reservations).
func (w *workerWorkflow) showDetails(ctx workflow.Context) {
	var res strings.Builder
	for _, r := range w.rec.Reservations {
		fmt.Fprintf(&res, "%s/%d ", r.TaskID, r.Fence)
	}
	key := workerDetailsKey{registered: w.registered, state: w.rec.State, incarnation: w.rec.Incarnation, reservations: res.String(), liveness: w.rec.LivenessActivity}
	if key == w.shown {
		return
	}
	w.shown = key
	var b strings.Builder
	if !w.registered {
		fmt.Fprintf(&b, "**UNREGISTERED** · worker %s\n", w.id)
		workflow.SetCurrentDetails(ctx, b.String())
		return
	}
	fmt.Fprintf(&b, "**%s** · incarnation %d", w.rec.State, w.rec.Incarnation)
	if w.rec.Draining && w.rec.DrainReason != "" {
		fmt.Fprintf(&b, " · drain: %s", api.ClipSummary(w.rec.DrainReason))
	}
	fmt.Fprintf(&b, "\n\nfree: %s (of %s)\n\n", api.FormatResources(w.rec.Free()), api.FormatResources(w.rec.TotalCapacity()))
	if w.rec.LivenessActivity != "" {
		fmt.Fprintf(&b, "liveness: activity %s (heartbeats by ID)\n\n", w.rec.LivenessActivity)
	} else {
		b.WriteString("liveness: heartbeat signals\n\n")
	}
	if len(w.rec.Reservations) == 0 {
		b.WriteString("no leases\n")
		workflow.SetCurrentDetails(ctx, b.String())
		return
	}
	b.WriteString("| task | fence | resources |\n|---|---:|---|\n")
	rs := w.rec.Reservations
	if n := len(rs) - detailsRows; n > 0 {
		fmt.Fprintf(&b, "| … %d earlier | | |\n", n)
		rs = rs[n:]
	}
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %s |\n", r.TaskID, r.Fence, api.FormatResources(r.Resources))
	}
	workflow.SetCurrentDetails(ctx, b.String())
}

// nextLivenessState is the state a worker in s reaches at its next
// liveness boundary (fleet.Worker.NextDeadline).
func nextLivenessState(s fleet.State) fleet.State {
	if s == fleet.Stale {
		return fleet.Offline
	}
	return fleet.Stale
}
