package launchers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/lease"
)

// Attempt is one attempt to launch: the envelope, the lease it runs under
// and how often its executor must heartbeat.
type Attempt struct {
	Envelope envelope.Envelope
	Lease    lease.Lease
	// HeartbeatInterval is the executor's lease heartbeat period (TTL/3 by
	// default).
	HeartbeatInterval time.Duration
	// StillCurrent, when set, is how a launcher that starts the command
	// itself (Local) judges right before the start whether the lease is
	// still current, in place of a lease query: nil when it is, a
	// *executor.Rejected when the lease ended, another error when it
	// cannot tell (which refuses the start as well). The agent sets it
	// from the launch activity (activities.Agent.LaunchAttempt).
	StillCurrent func(context.Context) error
}

// Claim is the claim the attempt's executor makes on every message.
func (a Attempt) Claim() lease.Claim { return lease.ClaimOf(a.Lease) }

// Submission says where a submitted attempt runs.
type Submission struct {
	// TaskDir is the attempt's task directory (Local), or where the
	// launch was handed off to (external: its spool file).
	TaskDir string
	// PID is the command's process group ID (Local), 0 when not known.
	PID int
}

// Phase is an attempt's phase as its launcher sees it.
type Phase string

const (
	PhaseRunning  Phase = "RUNNING"
	PhaseFinished Phase = "FINISHED"
	PhaseUnknown  Phase = "UNKNOWN"
)

// Status is an attempt's status.
type Status struct {
	Phase Phase
	// Detail is a human-readable note, e.g. "exited 0, result accepted".
	Detail string
}

// ErrLaunchExpired: the launch was cancelled or is past its deadline (the
// control plane has given up on it and may have revoked the lease), so the
// attempt must not start.
var ErrLaunchExpired = errors.New("launch expired")

// CheckDeadline returns ErrLaunchExpired (wrapped, with the cause) when ctx
// is done or its deadline has passed by this machine's clock: Expired with
// ctx's own deadline and the current time.
func CheckDeadline(ctx context.Context) error {
	dl, _ := ctx.Deadline()
	return Expired(ctx, dl, time.Now())
}

// Expired is the one launch-deadline rule: ErrLaunchExpired (wrapped, with
// the cause) when ctx is done or now is at or past deadline (zero: none).
// The deadline is compared with now directly, not only through ctx.Err():
// a process that was frozen (SIGSTOP, a VM pause) resumes before ctx's
// timer has fired.
func Expired(ctx context.Context, deadline, now time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrLaunchExpired, err)
	}
	if !deadline.IsZero() && !now.Before(deadline) {
		return fmt.Errorf("%w: its deadline passed %s ago", ErrLaunchExpired, now.Sub(deadline).Round(time.Millisecond))
	}
	return nil
}

// Accept is what every launcher checks before it starts an attempt: that
// the attempt is workerID's, and that ctx is not done or past its deadline
// (CheckDeadline). It returns the attempt's claim. Errors: an attempt for
// another worker; ErrLaunchExpired (wrapped).
func Accept(ctx context.Context, workerID string, a Attempt) (lease.Claim, error) {
	claim := a.Claim()
	if claim.WorkerID != workerID {
		return claim, fmt.Errorf("attempt is for worker %q, this is %q", claim.WorkerID, workerID)
	}
	return claim, CheckDeadline(ctx)
}

// StoreEnvelope puts the attempt's sealed envelope into the blob store
// (content-addressed: a no-op when it is there already), where a `wdc
// exec` run elsewhere reads it by digest. Errors: the store's; a digest
// that is not the lease's.
func StoreEnvelope(ctx context.Context, store *blobstore.Store, a Attempt) error {
	digest, err := store.PutEnvelope(ctx, a.Envelope)
	if err != nil {
		return err
	}
	if digest != a.Lease.EnvelopeDigest {
		return fmt.Errorf("envelope digest %s does not match the lease's %s", digest, a.Lease.EnvelopeDigest)
	}
	return nil
}

// ErrUnknownAttempt: the launcher has no record of the attempt.
var ErrUnknownAttempt = errors.New("unknown attempt")

// Launcher starts, inspects and stops attempts of one kind.
type Launcher interface {
	// Submit starts the attempt and returns once it runs (the executor owns
	// it from there: heartbeats, self-fencing, result submission). It must
	// not start an attempt once ctx is done or past its deadline
	// (CheckDeadline) or when its lease is not current. Errors mean the
	// attempt did not start (a launch_failed retry).
	Submit(ctx context.Context, a Attempt) (Submission, error)
	// Status reports the attempt's phase; ErrUnknownAttempt when the
	// launcher never saw it (e.g. after an agent restart).
	Status(ctx context.Context, c lease.Claim) (Status, error)
	// Cancel stops the attempt (kills its process group). Cancelling an
	// attempt that is unknown or finished is not an error.
	Cancel(ctx context.Context, c lease.Claim, reason string) error
}
