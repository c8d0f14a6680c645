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

// verifyTaskStart is the change ID of the task's own check of its input
// at start (version 1: authorizeStart). WdcTask is pinned to its build;
// the ID keeps the histories recorded before it replaying, and retires
// with the other WdcTask change IDs (docs/upgrading.md).
const verifyTaskStart = "verify-task-start"

// authorizeStart is the task's judgement of the input it was started with,
// whoever started it (a run's StartTasks, or any namespace client): the
// workflow ID is the envelope's task's, the envelope is valid (sealed) and
// digests to EnvelopeDigest, its options are valid, and the submitter
// signed the task's api.TaskAuthority no more than MaxAuthorityAge before
// the task started (identity.Verifier.Authority; accepted unsigned only
// with identity off or optional). The verdict is recorded once
// (recordVerdict). It returns nil, or a non-retryable application error
// whose type is the reason: the task then runs nothing.
func authorizeStart(ctx workflow.Context, in api.TaskInput) error {
	if workflow.GetVersion(ctx, verifyTaskStart, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nil
	}
	wfID, started := workflow.GetInfo(ctx).WorkflowExecution.ID, workflow.GetInfo(ctx).WorkflowStartTime
	rej := recordVerdict(ctx, api.TaskAuthorityKind, "workflow", wfID, func(v *identity.Verifier, now time.Time) (identity.Verdict, *lease.Rejection) {
		if rej := checkTaskInput(wfID, in); rej != nil {
			return identity.Verdict{}, rej
		}
		if p := in.Authority; v.Enabled() && p != nil && p.SignedAt.Before(started.Add(-MaxAuthorityAge)) {
			return identity.Verdict{}, &lease.Rejection{Reason: lease.RejectReplayed, Message: fmt.Sprintf("the authority is signed at %s, more than %s before the task started (%s): submit it again",
				p.SignedAt.UTC().Format(time.RFC3339), MaxAuthorityAge, started.UTC().Format(time.RFC3339))}
		}
		return v.Authority(now, api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, in.EnvelopeDigest), in.Authority)
	})
	if rej == nil {
		return nil
	}
	return temporal.NewNonRetryableApplicationError("task not started: "+rej.Message, string(rej.Reason), nil)
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
