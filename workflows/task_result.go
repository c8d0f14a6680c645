package workflows

import (
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// submission is one accepted submit-result update waiting for its answer:
// its own claim's outcome, whatever happens to the lease meanwhile.
type submission struct {
	in     api.SubmitResultInput
	done   bool
	result *api.TaskResult
	err    error
}

// validateSubmitResult is the submit-result validator: the identity check
// (the attempt's delegated key signed it), the shared fence check, then
// the result's shape (api.SubmitResultInput.Validate). A rejection writes
// no history.
func (t *taskWorkflow) validateSubmitResult(ctx workflow.Context, in api.SubmitResultInput) error {
	unsigned := in
	unsigned.Proof = nil
	if err := authenticateAttempt(ctx, api.UpdateSubmitResult, in.Claim, t.ledger.Current(), unsigned, in.Proof); err != nil {
		return err
	}
	if rej := lease.Check(t.ledger.Current(), in.Claim); rej != nil {
		return temporal.NewApplicationError(rej.Message, string(rej.Reason), rej)
	}
	if t.carry.Cancelled {
		return temporal.NewApplicationError(fmt.Sprintf("task %s is being cancelled", t.env.TaskID), string(lease.RejectLeaseNotActive))
	}
	if err := in.Validate(); err != nil {
		return temporal.NewApplicationError(err.Error(), api.ErrTypeInvalidArgument)
	}
	return nil
}

// submitResult takes a result that passed the validator (the fence check)
// for ingest and waits for the ingest to decide it. It answers with this
// submission's own outcome: the result as the parent received it, or the
// ingest error (the lease then stays ACTIVE and will expire unless the
// attempt heartbeats). It does not re-run the fence check: that is the
// validator's, and replay must not depend on it.
func (t *taskWorkflow) submitResult(ctx workflow.Context, in api.SubmitResultInput) (api.SubmitResultResult, error) {
	if err := t.ledger.MarkResultPending(in.Fence); err != nil {
		return api.SubmitResultResult{}, temporal.NewApplicationError(err.Error(), string(lease.RejectLeaseNotActive))
	}
	sub := &submission{in: in}
	t.sub = sub
	t.wake.SendAsync(true)
	// Wait on a context that cancelling the workflow does not reach: the
	// ingest goes on after a cancel request, and the submission must get
	// its outcome, not "canceled".
	wctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.Await(wctx, func() bool { return sub.done }); err != nil {
		return api.SubmitResultResult{}, err
	}
	if sub.err != nil {
		return api.SubmitResultResult{}, sub.err
	}
	return api.SubmitResultResult{Accepted: true, Result: *sub.result}, nil
}

// LocalIngestMaxBytes is the most a result's artifacts and logs may hold
// together to be ingested in the workflow task that accepted the result
// (a local activity: a marker in the history, no workflow task of its
// own). Larger results are ingested by an activity that heartbeats.
const LocalIngestMaxBytes = 8 << 20

// ingest is the Ingesting phase: parent ingest of the pending submission.
// The ingest promotes the result and releases the holder's reservation;
// a local one also reports it to the run (the task closes in this
// workflow task if it keeps the result), any other reports nothing, and
// finish reports once the task kept the result. The lease
// watch is left to the workflow's end (a result pending is never
// expired). On success the lease completes; on failure the result is
// abandoned and the lease stays ACTIVE. Either way the submission gets
// its answer.
func (t *taskWorkflow) ingest(ctx workflow.Context) {
	sub := t.sub
	in := sub.in
	var size int64
	for _, a := range slices.Concat(in.Artifacts, in.Logs) {
		size += a.SizeBytes
	}
	input := api.IngestInput{Claim: in.Claim, Artifacts: in.Artifacts, Logs: in.Logs}
	var ingested api.IngestResult
	var err error
	t.state = api.TaskIngesting
	if size <= LocalIngestMaxBytes {
		// Kept, the result ends the task in this workflow task: the
		// ingest reports it, and the run's check of a report (the task's
		// lease query) waits for this workflow task, so a report of a
		// result the task then abandons is refused there.
		kept := t.resultOf(in, api.IngestResult{Artifacts: in.Artifacts, Logs: in.Logs})
		input.Report = t.reportOf(api.TaskCompleted, &kept)
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
			Summary:             ingestSummary(in),
		})
		err = workflow.ExecuteLocalActivity(lctx, controlActs.Ingest, input).Get(ctx, &ingested)
	} else {
		t.publish(ctx)
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue:           api.ControlTaskQueue,
			StartToCloseTimeout: 10 * time.Minute,
			HeartbeatTimeout:    time.Minute,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
			Summary:             ingestSummary(in),
		})
		err = workflow.ExecuteActivity(actx, controlActs.Ingest, input).Get(ctx, &ingested)
	}
	// Only a report the task asked for counts: anyone may complete an
	// activity by its ID, with any answer.
	ingested.Reported = ingested.Reported && input.Report != nil
	t.ingested(ctx, sub, ingested, err)
}

// resultOf is the accepted result of submission in with what the ingest
// stored.
func (t *taskWorkflow) resultOf(in api.SubmitResultInput, ingested api.IngestResult) api.TaskResult {
	return api.TaskResult{
		TaskID: in.TaskID, RunID: t.env.RunID, WorkerID: in.WorkerID,
		Attempt: in.Attempt, Fence: in.Fence, EnvelopeDigest: in.EnvelopeDigest,
		ExitCode: in.ExitCode, Signal: in.Signal, TimedOut: in.TimedOut, OutputError: in.OutputError, Artifacts: ingested.Artifacts, Logs: ingested.Logs,
		StartedAt: in.StartedAt, FinishedAt: in.FinishedAt,
	}
}

// ingested decides the submission from the ingest's outcome: on success
// (the ingest kept exactly the artifacts and logs the submission names)
// the lease completes and the result is the task's; on failure the result
// is abandoned and the lease stays ACTIVE. Either way the submission gets
// its answer.
func (t *taskWorkflow) ingested(ctx workflow.Context, sub *submission, ingested api.IngestResult, err error) {
	now := workflow.Now(ctx)
	t.sub = nil
	sub.done = true
	if err == nil && !(slices.Equal(ingested.Artifacts, sub.in.Artifacts) && slices.Equal(ingested.Logs, sub.in.Logs)) {
		// The ingest promotes exactly what the (signed) submission names;
		// any other answer did not come from it (anyone may complete an
		// activity by its ID).
		err = fmt.Errorf("the ingest answered with other artifacts than the result names")
	}
	if err == nil {
		err = t.ledger.Complete(now)
	}
	if err != nil {
		workflow.GetLogger(ctx).Warn("ingest failed", "task", t.env.TaskID, "worker", sub.in.WorkerID, "attempt", sub.in.Attempt, "fence", sub.in.Fence, "error", err)
		count(ctx, api.MetricResultsRejected, rejectReasonIngestFailed)
		t.ledger.AbandonResult(now)
		sub.err = temporal.NewApplicationError("ingest failed: "+errorMessage(err), api.ErrTypeArtifactMismatch)
		t.setState(ctx, api.TaskLeased)
		return
	}
	in := sub.in
	res := t.resultOf(in, ingested)
	t.result = &res
	t.reported = ingested.Reported
	sub.result = t.result
	workflow.GetLogger(ctx).Info("result accepted", "task", t.env.TaskID, "worker", in.WorkerID, "attempt", in.Attempt, "fence", in.Fence, "exit_code", in.ExitCode)
	count(ctx, api.MetricResultsAccepted, "")
}

func (t *taskWorkflow) cancel(ctx workflow.Context, in api.CancelTaskInput) (api.TaskView, error) {
	t.carry.Cancelled = true
	t.carry.CancelReason = in.Reason
	t.wake.SendAsync(true)
	return t.view(), nil
}
