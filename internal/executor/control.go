package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

// Control is what the executor needs from the control plane.
type Control interface {
	// Heartbeat renews the lease (signal lease-heartbeat).
	Heartbeat(ctx context.Context, hb api.LeaseHeartbeatSignal) error
	// HeartbeatByID heartbeats the task's lease activity for hb's fence
	// (api.LeaseActivityID) by ID, which the server answers alone.
	// Errors: ErrNoLeaseActivity when the task holds no started one (send
	// Heartbeat instead); ErrLeaseEnded when the task cancelled it (the
	// lease ended); otherwise Temporal was not reached.
	HeartbeatByID(ctx context.Context, hb api.LeaseHeartbeatSignal) error
	// Lease returns the task's lease view (query lease).
	Lease(ctx context.Context, taskID string) (api.TaskView, error)
	// SubmitResult hands the result to the task (update submit-result) and
	// waits for parent ingest. onAccepted, if not nil, is called once the
	// task accepted the result for ingest (from then on its lease cannot
	// expire). A refusal is a *Rejected.
	SubmitResult(ctx context.Context, in api.SubmitResultInput, onAccepted func()) (api.SubmitResultResult, error)
	// ReportFailure reports an attempt that ended without a result.
	ReportFailure(ctx context.Context, f api.AttemptFailedSignal) error
}

// Rejected is a refused message: Reason is a lease.RejectReason string
// (stale_fence, wrong_worker, ...) or an api.ErrType* string.
type Rejected struct {
	Reason  string
	Message string
}

func (r *Rejected) Error() string { return r.Reason + ": " + r.Message }

// ErrTaskGone: the task workflow no longer exists or has ended; the
// attempt's lease is certainly not current.
var ErrTaskGone = errors.New("task workflow has ended or does not exist")

// ErrNoLeaseActivity: a heartbeat by ID found no started lease activity
// for its fence (the task has not scheduled one yet, the control plane has
// not started it, it timed out, or the task predates lease activities or
// has ended); the lease-heartbeat signal is the way then.
var ErrNoLeaseActivity = errors.New("the task holds no started lease activity for this fence")

// ErrLeaseEnded: the task cancelled the lease activity a heartbeat by ID
// went to, because it ended that lease; the attempt no longer holds it.
var ErrLeaseEnded = errors.New("the task ended the lease (its lease activity was cancelled)")

// ErrLeaseUnverified: the lease query that should confirm an attempt's
// lease failed (Temporal or the control plane did not answer), so whether
// the lease is current is unknown.
var ErrLeaseUnverified = errors.New("could not verify the lease")

// CheckLease asks whether claim holds the task's current ACTIVE lease, with
// one lease query judged by lease.Check. Errors: a *Rejected whose Reason
// is lease.Check's (stale_fence, lease_not_active, ...) when it does not;
// ErrTaskGone (wrapped) when the task has ended; ErrLeaseUnverified
// (wrapped) when the query failed, e.g. on ctx's deadline.
func CheckLease(ctx context.Context, c Control, claim lease.Claim) error {
	_, err := currentLease(ctx, c, claim)
	return err
}

// currentLease is CheckLease that also returns the task's view.
func currentLease(ctx context.Context, c Control, claim lease.Claim) (api.TaskView, error) {
	view, err := c.Lease(ctx, claim.TaskID)
	switch {
	case errors.Is(err, ErrTaskGone):
		return view, err
	case err != nil:
		return view, fmt.Errorf("%w: lease query: %w", ErrLeaseUnverified, err)
	}
	if rej := lease.Check(view.Lease, claim); rej != nil {
		return view, &Rejected{Reason: string(rej.Reason), Message: rej.Message}
	}
	return view, nil
}

// LeaseCheck returns the BeforeExec every launcher gives Start: first
// (when not nil; e.g. the launch deadline, launchers.CheckDeadline), then
// CheckLease of claim with ctx, so that an attempt whose lease is no
// longer current (or cannot be verified) starts nothing. Its errors are
// first's or CheckLease's, wrapped with the claim.
func LeaseCheck(ctx context.Context, c Control, claim lease.Claim, first func() error) func() error {
	return StartCheck(claim, first, func() error { return CheckLease(ctx, c, claim) })
}

// StartCheck is LeaseCheck with the lease's check given: first (when not
// nil), then current, which says whether claim's lease is still current
// (nil) or not (an error: *Rejected, ErrTaskGone, ErrLeaseUnverified).
// Its errors are first's, or current's wrapped with the claim.
func StartCheck(claim lease.Claim, first, current func() error) func() error {
	return func() error {
		if first != nil {
			if err := first(); err != nil {
				return err
			}
		}
		if err := current(); err != nil {
			return fmt.Errorf("attempt %s not started: %w", claim, err)
		}
		return nil
	}
}

// NotCurrent reports whether err says that an attempt's claim does not
// hold its task's current lease: a *Rejected (stale_fence,
// lease_not_active, ...) or ErrTaskGone. ErrLeaseUnverified is not: then
// nobody knows.
func NotCurrent(err error) bool {
	var rej *Rejected
	return errors.As(err, &rej) || errors.Is(err, ErrTaskGone)
}

// TemporalControl is Control over a Temporal client.
type TemporalControl struct {
	Client client.Client
}

var _ Control = (*TemporalControl)(nil)

// Heartbeat signals the task. Errors: ErrTaskGone (wrapped) when the task
// has ended; other errors mean Temporal was not reached.
func (c *TemporalControl) Heartbeat(ctx context.Context, hb api.LeaseHeartbeatSignal) error {
	err := c.Client.SignalWorkflow(ctx, api.TaskWorkflowID(hb.TaskID), "", api.SignalLeaseHeartbeat, hb)
	return classify(err)
}

// HeartbeatByID records the heartbeat on the task's lease activity
// (wdcclient.Client.LeaseHeartbeat). Errors: ErrNoLeaseActivity (wrapped)
// when the task holds no started one for the fence; ErrLeaseEnded when the
// task cancelled it; other errors mean Temporal was not reached.
func (c *TemporalControl) HeartbeatByID(ctx context.Context, hb api.LeaseHeartbeatSignal) error {
	err := (&wdcclient.Client{C: c.Client}).LeaseHeartbeat(ctx, hb)
	switch {
	case errors.Is(err, wdcclient.ErrLeaseCancelled):
		return ErrLeaseEnded
	case errors.Is(err, wdcclient.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrNoLeaseActivity, err)
	}
	return err
}

// Lease queries the task's lease.
func (c *TemporalControl) Lease(ctx context.Context, taskID string) (api.TaskView, error) {
	var v api.TaskView
	resp, err := c.Client.QueryWorkflow(ctx, api.TaskWorkflowID(taskID), "", api.QueryLease)
	if err != nil {
		return v, classify(err)
	}
	return v, resp.Get(&v)
}

// SubmitResult sends the submit-result update with ID
// "<task>/<attempt>/<fence>", reports acceptance, and waits for its outcome.
func (c *TemporalControl) SubmitResult(ctx context.Context, in api.SubmitResultInput, onAccepted func()) (api.SubmitResultResult, error) {
	var out api.SubmitResultResult
	handle, err := c.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   api.TaskWorkflowID(in.TaskID),
		UpdateID:     api.SubmitResultUpdateID(in.Claim),
		UpdateName:   api.UpdateSubmitResult,
		Args:         []any{in},
		WaitForStage: client.WorkflowUpdateStageAccepted,
	})
	if err != nil {
		return out, classify(err)
	}
	if onAccepted != nil {
		onAccepted()
	}
	return out, classify(handle.Get(ctx, &out))
}

// ReportFailure signals attempt-failed.
func (c *TemporalControl) ReportFailure(ctx context.Context, f api.AttemptFailedSignal) error {
	return classify(c.Client.SignalWorkflow(ctx, api.TaskWorkflowID(f.TaskID), "", api.SignalAttemptFailed, f))
}

// classify maps Temporal errors: application errors become *Rejected,
// NotFound / already-completed become ErrTaskGone.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return &Rejected{Reason: appErr.Type(), Message: appErr.Message()}
	}
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return fmt.Errorf("%w: %v", ErrTaskGone, err)
	}
	return err
}

// Signed returns c that signs every result, failure report and lease
// heartbeat signal with key, the attempt's delegated key (c itself when
// key is nil). The signature covers the whole message (identity.Content);
// a heartbeat by ID goes to Temporal unsigned.
func Signed(c Control, key identity.AttemptSigner) Control {
	if key == nil {
		return c
	}
	return signingControl{Control: c, key: key}
}

type signingControl struct {
	Control
	key identity.AttemptSigner
}

func (s signingControl) SubmitResult(ctx context.Context, in api.SubmitResultInput, onAccepted func()) (api.SubmitResultResult, error) {
	in.Proof = nil
	p, err := s.key.Sign(api.UpdateSubmitResult, in, time.Now())
	if err != nil {
		return api.SubmitResultResult{}, err
	}
	in.Proof = p
	return s.Control.SubmitResult(ctx, in, onAccepted)
}

func (s signingControl) Heartbeat(ctx context.Context, hb api.LeaseHeartbeatSignal) error {
	hb.Proof = nil
	p, err := s.key.Sign(api.SignalLeaseHeartbeat, hb, time.Now())
	if err != nil {
		return err
	}
	hb.Proof = p
	return s.Control.Heartbeat(ctx, hb)
}

func (s signingControl) ReportFailure(ctx context.Context, f api.AttemptFailedSignal) error {
	f, err := SignReport(s.key, f)
	if err != nil {
		return err
	}
	return s.Control.ReportFailure(ctx, f)
}

// SignReport returns f with the attempt's key's proof over all of f but
// its proof: how every executor and launcher signs an attempt-failed
// report.
func SignReport(key identity.AttemptSigner, f api.AttemptFailedSignal) (api.AttemptFailedSignal, error) {
	f.Proof = nil
	p, err := key.Sign(api.SignalAttemptFailed, f, time.Now())
	if err != nil {
		return f, err
	}
	f.Proof = p
	return f, nil
}
