package workflows

import (
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// Lease and result metrics (api.Metric*) are emitted through the
// workflow's metrics handler: it writes no command, so histories are
// unchanged, and it drops what a replay emits, so each event is counted
// once, by the control plane whose workflow task decided it.

// count increments the counter name, tagged with reason when it is set.
func count(ctx workflow.Context, name, reason string) {
	h := workflow.GetMetricsHandler(ctx)
	if reason != "" {
		h = h.WithTags(map[string]string{api.MetricTagReason: reason})
	}
	h.Counter(name).Inc(1)
}

// rejectReasonIngestFailed tags a result whose parent ingest failed.
const rejectReasonIngestFailed = api.MetricReasonIngestFailed

// countRejected counts a result the validator refused, by the
// application error's type (the fence check's reason, or
// invalid_argument).
func countRejected(ctx workflow.Context, err error) {
	reason := "unknown"
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Type() != "" {
		reason = ae.Type()
	}
	count(ctx, api.MetricResultsRejected, reason)
}

// attemptAttrs are the log attributes of the current (or last) lease's
// attempt: task, worker, attempt and fence, which every log line about an
// attempt carries.
func (t *taskWorkflow) attemptAttrs() []any {
	cur := t.ledger.Current()
	if cur == nil {
		return []any{"task", t.env.TaskID}
	}
	return []any{"task", t.env.TaskID, "worker", cur.WorkerID, "attempt", cur.Attempt, "fence", cur.Fence}
}

type taskSA struct {
	state          api.TaskState
	worker         string
	attempt, fence int64
}

func (t *taskWorkflow) setState(ctx workflow.Context, s api.TaskState) {
	t.state = s
	t.publish(ctx)
}

// publish keeps the search attributes current (written only on change).
func (t *taskWorkflow) publish(ctx workflow.Context) {
	now := taskSA{state: t.state}
	if cur := t.ledger.Current(); cur != nil {
		now.worker, now.attempt, now.fence = cur.WorkerID, cur.Attempt, cur.Fence
	}
	t.showDetails(ctx)
	if now == t.published {
		return
	}
	t.published = now
	updates := []temporal.SearchAttributeUpdate{
		api.SAKind.ValueSet(api.KindTask),
		api.SARunID.ValueSet(t.env.RunID),
		api.SATaskState.ValueSet(string(now.state)),
		api.SAAttempt.ValueSet(now.attempt),
		api.SAFence.ValueSet(now.fence),
	}
	if now.worker != "" {
		updates = append(updates, api.SAWorkerID.ValueSet(now.worker))
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

func (t *taskWorkflow) view() api.TaskView {
	v := api.TaskView{
		TaskID: t.env.TaskID, RunID: t.env.RunID, State: t.state, EnvelopeDigest: t.digest,
		Leases: append([]lease.Lease{}, t.ledger.Leases...), Directives: append([]lease.RetryDirective{}, t.carry.Directives...),
		Options: t.opts, Stats: t.carry.Stats, Result: t.result, Waiting: t.waiting, AttemptDir: t.attemptDir, CancelReason: t.carry.CancelReason, Phase: string(t.phase),
	}
	if cur := t.ledger.Current(); cur != nil {
		c := *cur
		v.Lease = &c
	}
	v.LeaseActivity = t.lease.activityID()
	return v
}

// errorMessage unwraps activity errors to the application message.
func errorMessage(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		switch timeoutErr.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE:
			return "the agent did not pick up the launch in time (is it running?)"
		}
		return "timed out: " + timeoutErr.TimeoutType().String()
	}
	return err.Error()
}
