package workflows

import (
	"errors"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
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
const rejectReasonIngestFailed = "ingest_failed"

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
