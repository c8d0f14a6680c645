package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

// admitInput is the input a task's run may act on: nothing from a workflow
// started with a retry policy or cron schedule (startedAsWdcStartsIt); a
// carry only from continue-as-new; and a first run's input only once
// authorizeStart accepted it. Errors: the refusal, non-retryable.
func admitInput(ctx workflow.Context, in api.TaskInput) (api.TaskInput, error) {
	if err := startedAsWdcStartsIt(ctx); err != nil {
		return in, err
	}
	if in.Carry != nil && !continued(ctx) {
		workflow.GetLogger(ctx).Warn("carry ignored: only continue-as-new carries a task's state", "task", in.Envelope.TaskID)
		in.Carry = nil
	}
	if in.Carry == nil {
		return in, authorizeStart(ctx, in)
	}
	return in, nil
}

// authorizeStart is the task's judgement of the input it was started with,
// whoever started it (a run's StartTasks, or any namespace client): the
// workflow ID is the envelope's task's, the envelope is valid (sealed) and
// digests to EnvelopeDigest, its options are valid, and the submitter
// signed the task's api.TaskAuthority no more than MaxAuthorityAge before
// the task started (identity.Verifier.Authority; accepted unsigned only
// with identity off or optional). Like an update's validator it judges
// once, when the first workflow task is new, never on replay: it issues
// no command, so histories recorded before it replay, and a later change
// of the control plane's trust bundle or revocations cannot change what a
// replay does. It returns nil, or a non-retryable application error whose
// type is the reason: the task then runs nothing.
func authorizeStart(ctx workflow.Context, in api.TaskInput) error {
	if workflow.IsReplaying(ctx) {
		return nil
	}
	info := workflow.GetInfo(ctx)
	v := verifierOf(ctx)
	verdict, rej := judgeStart(v, workflow.Now(ctx), info.WorkflowExecution.ID, info.WorkflowStartTime, in)
	if rej != nil {
		workflow.GetLogger(ctx).Warn("task refused its input", "workflow", info.WorkflowExecution.ID, "reason", rej.Reason, "detail", rej.Message)
		count(ctx, api.MetricResultsRejected, string(rej.Reason))
		return temporal.NewNonRetryableApplicationError("task not started: "+rej.Message, string(rej.Reason), nil)
	}
	_ = identityVerdict(ctx, api.TaskAuthorityKind, verdict, nil) // counts an unsigned one in optional mode
	return nil
}

// judgeStart is authorizeStart's verdict on in, started as workflow wfID
// at started, by v at now.
func judgeStart(v *identity.Verifier, now time.Time, wfID string, started time.Time, in api.TaskInput) (identity.Verdict, *lease.Rejection) {
	if rej := checkTaskInput(wfID, in); rej != nil {
		return identity.Verdict{}, rej
	}
	if p := in.Authority; v.Enabled() && p != nil && p.SignedAt.Before(started.Add(-MaxAuthorityAge)) {
		return identity.Verdict{}, &lease.Rejection{Reason: lease.RejectReplayed, Message: fmt.Sprintf("the authority is signed at %s, more than %s before the task started (%s): submit it again",
			p.SignedAt.UTC().Format(time.RFC3339), MaxAuthorityAge, started.UTC().Format(time.RFC3339))}
	}
	return v.Authority(now, api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, in.EnvelopeDigest), in.Authority)
}

// MaxAuthorityAge is how long before a task's start (its first run's, which
// a reset keeps) its submitter may have signed its authority: a
// submission starts its tasks at once, retrying through outages for
// minutes. It bounds how long a copied authority, or one backdated with a
// submitter key that has since expired, can start work.
const MaxAuthorityAge = time.Hour

// checkTaskInput is what a task's input must be, signed or not: started
// under its own task's workflow ID, with a valid sealed envelope whose
// digest it names.
func checkTaskInput(wfID string, in api.TaskInput) *lease.Rejection {
	bad := func(format string, args ...any) *lease.Rejection {
		return &lease.Rejection{Reason: lease.RejectInvalidInput, Message: fmt.Sprintf(format, args...)}
	}
	if err := in.Envelope.Validate(true); err != nil {
		return bad("the envelope is invalid: %v", err)
	}
	if want := api.TaskWorkflowID(in.Envelope.TaskID); wfID != want {
		return bad("workflow ID %q is not task %s's (%s)", wfID, in.Envelope.TaskID, want)
	}
	if err := in.Options.WithDefaults().Validate(); err != nil {
		return bad("options.%v", err)
	}
	digest, err := in.Envelope.Digest()
	if err != nil || digest != in.EnvelopeDigest {
		return bad("envelope_digest %s does not match the envelope (%s)", in.EnvelopeDigest, digest)
	}
	return nil
}
