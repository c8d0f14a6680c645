package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

// verifierKey keys the control plane's identity.Verifier in a validator's
// context.
type verifierKey struct{}

// Interceptor hands v to every update validator of wdc's workflows and to
// the workflows themselves, where the identity check (authenticateWorker,
// authenticateAttempt, verifySignal) reads it. The control plane installs
// it on its workers; without it, identity is off. Validators do not run on
// replay and a signal's verdict is recorded (verifySignal), so v never
// decides a replay.
func Interceptor(v *identity.Verifier) interceptor.WorkerInterceptor {
	return &identityInterceptor{v: v}
}

type identityInterceptor struct {
	interceptor.WorkerInterceptorBase
	v *identity.Verifier
}

func (i *identityInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &identityInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, v: i.v}
}

type identityInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	v *identity.Verifier
}

func (i *identityInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return i.Next.ExecuteWorkflow(workflow.WithValue(ctx, verifierKey{}, i.v), in)
}

func (i *identityInbound) ValidateUpdate(ctx workflow.Context, in *interceptor.UpdateInput) error {
	return i.Next.ValidateUpdate(workflow.WithValue(ctx, verifierKey{}, i.v), in)
}

// continued reports whether this run was started by continue-as-new:
// only then is a carried state in the input the workflow's own. A client
// that starts a workflow with a state of its choosing (a registered
// worker, a task's lease, a run's evidence) would otherwise skip every
// validator. The server also links a retry's or a cron run's execution to
// the one before, with the client's input: startedAsWdcStartsIt refuses
// those first.
func continued(ctx workflow.Context) bool {
	return workflow.GetInfo(ctx).ContinuedExecutionRunID != ""
}

// startedAsWdcStartsIt refuses a workflow started with a retry policy or a
// cron schedule, or as a retry: wdc starts its workflows with neither, and
// a retry's or cron run's input (the starting client's) would pass for a
// carried state. It returns nil or a non-retryable application error of
// type lease.RejectInvalidInput; the workflow then does nothing.
func startedAsWdcStartsIt(ctx workflow.Context) error {
	info := workflow.GetInfo(ctx)
	var why string
	switch {
	case info.CronSchedule != "":
		why = fmt.Sprintf("a cron schedule (%q)", info.CronSchedule)
	case info.RetryPolicy != nil:
		why = "a retry policy"
	case info.Attempt > 1:
		why = fmt.Sprintf("retry attempt %d", info.Attempt)
	default:
		return nil
	}
	msg := fmt.Sprintf("%s %s was started with %s; wdc starts its workflows with none, so this one runs nothing", info.WorkflowType.Name, info.WorkflowExecution.ID, why)
	workflow.GetLogger(ctx).Warn("workflow refused", "detail", msg)
	return temporal.NewNonRetryableApplicationError(msg, string(lease.RejectInvalidInput), nil)
}

// verifierOf is the control plane's verifier in ctx (nil: identity off,
// as for a nil ctx, which only unit tests of a validator pass).
func verifierOf(ctx workflow.Context) *identity.Verifier {
	if ctx == nil {
		return nil
	}
	v, _ := ctx.Value(verifierKey{}).(*identity.Verifier)
	return v
}

// authenticateWorker is the identity check of a message fleet worker id
// signs itself (register): identity.Verifier.Worker at workflow time, and
// a signing time after notBefore (the last one accepted). It returns nil
// or an application error whose type is the reason.
func authenticateWorker(ctx workflow.Context, id, kind string, message any, p *identity.Proof, notBefore time.Time) error {
	verdict, rej := verifierOf(ctx).Worker(workflow.Now(ctx), id, kind, message, p)
	if rej == nil && verdict.Signed && !p.SignedAt.After(notBefore) {
		rej = &lease.Rejection{Reason: lease.RejectReplayed, Message: fmt.Sprintf("%s signed at %s is not newer than the last one accepted (%s)", kind, p.SignedAt.Format(time.RFC3339Nano), notBefore.Format(time.RFC3339Nano))}
	}
	return identityVerdict(ctx, kind, verdict, rej)
}

// authenticateSubmitter is the identity check of a submitter's command to
// a run or a task (commit, close, cancel): identity.Verifier.Submitter at
// workflow time. It returns nil or an application error whose type is the
// reason.
func authenticateSubmitter(ctx workflow.Context, kind string, message any, p *identity.Proof) error {
	if !verifierOf(ctx).Enabled() {
		return nil
	}
	verdict, rej := verifierOf(ctx).Submitter(workflow.Now(ctx), kind, message, p)
	return identityVerdict(ctx, kind, verdict, rej)
}

// authenticateAuthority is the run's check of a task's authority before
// it admits the task: identity.Verifier.Authority over the task's
// api.TaskAuthority, so the run never starts a task that would refuse
// itself (authorizeStart). It returns nil or an application error whose
// type is the reason.
func authenticateAuthority(ctx workflow.Context, in api.AddTaskInput) error {
	if !verifierOf(ctx).Enabled() {
		return nil
	}
	verdict, rej := verifierOf(ctx).Authority(workflow.Now(ctx), api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, in.EnvelopeDigest), in.Authority)
	return identityVerdict(ctx, api.TaskAuthorityKind, verdict, rej)
}

// signerOf is the SPIFFE ID a proof names ("" for none): what a handler
// records of a message its validator verified.
func signerOf(p *identity.Proof) string {
	id, err := p.SignerID()
	if err != nil {
		return ""
	}
	return id.String()
}

// authenticateAttempt is the identity check of an attempt's message
// (submit-result): identity.Verifier.Attempt at workflow time, beside the
// fence check, against the certificate the worker registered with when
// cur (the task's current lease) was granted. It returns nil or an
// application error whose type is the reason.
func authenticateAttempt(ctx workflow.Context, kind string, c lease.Claim, cur *lease.Lease, message any, p *identity.Proof) error {
	verdict, rej := verifierOf(ctx).Attempt(workflow.Now(ctx), kind, c, registeredWith(cur, c), message, p)
	return identityVerdict(ctx, kind, verdict, rej)
}

func identityVerdict(ctx workflow.Context, kind string, verdict identity.Verdict, rej *lease.Rejection) error {
	if rej != nil {
		workflow.GetLogger(ctx).Warn("message refused by the identity check", "kind", kind, "reason", rej.Reason, "detail", rej.Message)
		return temporal.NewApplicationError(rej.Message, string(rej.Reason), rej)
	}
	if !verdict.Signed && verifierOf(ctx) != nil && verifierOf(ctx).Mode == identity.ModeOptional {
		workflow.GetMetricsHandler(ctx).WithTags(map[string]string{api.MetricTagKind: kind}).Counter(api.MetricUnsignedAccepted).Inc(1)
	}
	return nil
}

// verifySignal is the identity check of an attempt's signal (which, unlike
// an update, cannot be refused before it is written): it runs
// identity.Verifier.Attempt once (recordVerdict). It returns nil, or the
// rejection, logged and counted, for the caller to ignore the signal.
func verifySignal(ctx workflow.Context, kind string, c lease.Claim, cur *lease.Lease, message any, p *identity.Proof) *lease.Rejection {
	return recordVerdict(ctx, kind, "claim", c.String(), func(v *identity.Verifier, now time.Time) (identity.Verdict, *lease.Rejection) {
		return v.Attempt(now, kind, c, registeredWith(cur, c), message, p)
	})
}

// verifyWorkerSignal is the identity check of a worker's own signal
// (worker-heartbeat), judged once (recordVerdict) as
// identity.Verifier.Worker, and refused when signed under a certificate
// issued before registeredWith (the one the incarnation registered with:
// revoked or rotated away) or when its seq is not above lastSeq
// (replayed). It returns nil or the rejection, logged and counted.
func verifyWorkerSignal(ctx workflow.Context, id, kind string, seq, lastSeq int64, registeredWith time.Time, message any, p *identity.Proof) *lease.Rejection {
	return recordVerdict(ctx, kind, "worker", id, func(v *identity.Verifier, now time.Time) (identity.Verdict, *lease.Rejection) {
		verdict, rej := workerVerdict(v, now, id, kind, registeredWith, message, p)
		if rej == nil && verdict.Signed && seq <= lastSeq {
			return identity.Verdict{}, &lease.Rejection{Reason: lease.RejectReplayed, Message: fmt.Sprintf("%s of worker %q has seq %d, not above the last one accepted (%d)", kind, id, seq, lastSeq)}
		}
		return verdict, rej
	})
}

// workerVerdict is identity.Verifier.Worker, also refusing a signature
// under a certificate issued before registeredWith (the one the worker's
// incarnation registered with: revoked or rotated away).
func workerVerdict(v *identity.Verifier, now time.Time, id, kind string, registeredWith time.Time, message any, p *identity.Proof) (identity.Verdict, *lease.Rejection) {
	verdict, rej := v.Worker(now, id, kind, message, p)
	if rej != nil || !verdict.Signed {
		return verdict, rej
	}
	if issued, err := p.IssuedAt(); err != nil || issued.Before(registeredWith) {
		return identity.Verdict{}, &lease.Rejection{Reason: lease.RejectUnauthenticated, Message: fmt.Sprintf("%s of worker %q is signed under a certificate issued at %s, before the one it registered with (%s): revoked or rotated away",
			kind, id, issued.UTC().Format(time.RFC3339), registeredWith.UTC().Format(time.RFC3339))}
	}
	return verdict, nil
}

// recordVerdict runs judge once with the control plane's verifier and
// records its verdict in a SideEffect marker, so replay reads the verdict
// and never depends on the control plane's identity settings. It returns
// nil, or the rejection, logged (naming what by key, value) and counted
// in wdc_results_rejected_total.
func recordVerdict(ctx workflow.Context, kind, key, value string, judge func(*identity.Verifier, time.Time) (identity.Verdict, *lease.Rejection)) *lease.Rejection {
	var rej lease.Rejection
	err := workflow.SideEffect(ctx, func(ctx workflow.Context) any {
		verdict, r := judge(verifierOf(ctx), workflow.Now(ctx))
		if r == nil {
			identityVerdict(ctx, kind, verdict, nil) // counts an unsigned one in optional mode
			return lease.Rejection{}
		}
		return *r
	}).Get(&rej)
	if err != nil {
		rej = lease.Rejection{Reason: lease.RejectUnauthenticated, Message: "the identity verdict could not be read: " + err.Error()}
	}
	if rej.Reason == "" {
		return nil
	}
	workflow.GetLogger(ctx).Warn("signal ignored by the identity check", "kind", kind, key, value, "reason", rej.Reason, "detail", rej.Message)
	count(ctx, api.MetricResultsRejected, string(rej.Reason))
	return &rej
}

// registeredWith is the issue time of the certificate c's worker
// registered with when cur was granted, when cur is c's lease (zero
// otherwise: the fence check refuses c then).
func registeredWith(cur *lease.Lease, c lease.Claim) time.Time {
	if cur == nil || cur.Fence != c.Fence || cur.WorkerID != c.WorkerID {
		return time.Time{}
	}
	return cur.IdentityIssuedAt
}
