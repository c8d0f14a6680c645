package lease

import "fmt"

// RejectReason names why a message from an attempt was refused. Callers
// match on these (the CLI prints them; the executor logs them).
type RejectReason string

const (
	// RejectStaleFence: the message's fence is not the task's current fence
	// (a late message from an older attempt, invariant 2).
	RejectStaleFence RejectReason = "stale_fence"
	// RejectWrongWorker: the sender is not the lease holder (invariant 6).
	RejectWrongWorker RejectReason = "wrong_worker"
	// RejectDigestMismatch: the message names another envelope digest.
	RejectDigestMismatch RejectReason = "digest_mismatch"
	// RejectLeaseNotActive: the fence is current but the lease is no longer
	// ACTIVE (expired, revoked, completed), no lease was granted yet, or a
	// result for it is already being ingested.
	RejectLeaseNotActive RejectReason = "lease_not_active"
	// RejectWrongAttempt: the fence is current but the attempt number is not
	// the lease's.
	RejectWrongAttempt RejectReason = "wrong_attempt"
	// RejectWrongTask: the message names another task.
	RejectWrongTask RejectReason = "wrong_task"

	// The identity check's reasons (package identity), judged beside the
	// fence check.

	// RejectUnauthenticated: the message carries no valid signature from
	// an identity the trust bundle vouches for (unsigned, a bad or expired
	// certificate, a signature that does not match the content).
	RejectUnauthenticated RejectReason = "unauthenticated"
	// RejectWrongIdentity: validly signed, but by someone who does not
	// speak for the message's worker or attempt.
	RejectWrongIdentity RejectReason = "wrong_identity"
	// RejectReplayed: a validly signed message sent again (not newer than
	// the last one accepted, or older than the replay window).
	RejectReplayed RejectReason = "replayed"
	// RejectInvalidInput: work whose own description is broken (an
	// envelope that does not validate or digest as named, a workflow ID
	// that is not its task's), refused where it would run.
	RejectInvalidInput RejectReason = "invalid_input"
)

// Claim is what every message from an attempt asserts about itself:
// heartbeats, results, releases and cancels all carry one.
type Claim struct {
	TaskID         string `json:"task_id"`
	WorkerID       string `json:"worker_id"`
	Attempt        int64  `json:"attempt"`
	Fence          int64  `json:"fence"`
	EnvelopeDigest string `json:"envelope_digest"`
}

// String renders a claim as "task/attempt/fence@worker".
func (c Claim) String() string {
	return fmt.Sprintf("%s/%d/%d@%s", c.TaskID, c.Attempt, c.Fence, c.WorkerID)
}

// ClaimOf returns the claim the holder of l makes.
func ClaimOf(l Lease) Claim {
	return Claim{TaskID: l.TaskID, WorkerID: l.WorkerID, Attempt: l.Attempt, Fence: l.Fence, EnvelopeDigest: l.EnvelopeDigest}
}

// Rejection is a refused claim. It is an error; Reason is stable for
// matching, Message explains it with the values involved.
type Rejection struct {
	Reason  RejectReason `json:"reason"`
	Message string       `json:"message"`
}

func (r *Rejection) Error() string { return string(r.Reason) + ": " + r.Message }

// Check is the fence check: the one and only place that decides whether a
// claim may act on a task whose current lease is current (nil before the
// first grant). It returns nil to accept, or a Rejection.
//
// The order matters and is part of the contract: the task, then the fence
// (so a late message from an older attempt is always stale_fence, even after
// the task completed), then attempt, worker and digest, and last the lease's
// state.
func Check(current *Lease, c Claim) *Rejection {
	reject := func(reason RejectReason, format string, args ...any) *Rejection {
		return &Rejection{Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	if current == nil {
		return reject(RejectLeaseNotActive, "task %s has no lease yet", c.TaskID)
	}
	switch {
	case c.TaskID != current.TaskID:
		return reject(RejectWrongTask, "message is for task %q, this is task %q", c.TaskID, current.TaskID)
	case c.Fence != current.Fence:
		return reject(RejectStaleFence, "fence %d is not the current fence %d (attempt %d on %s)", c.Fence, current.Fence, current.Attempt, current.WorkerID)
	case c.Attempt != current.Attempt:
		return reject(RejectWrongAttempt, "attempt %d does not hold fence %d (attempt %d does)", c.Attempt, current.Fence, current.Attempt)
	case c.WorkerID != current.WorkerID:
		return reject(RejectWrongWorker, "worker %q does not hold the lease (worker %q does)", c.WorkerID, current.WorkerID)
	case c.EnvelopeDigest != current.EnvelopeDigest:
		return reject(RejectDigestMismatch, "envelope digest %s is not the task's %s", c.EnvelopeDigest, current.EnvelopeDigest)
	case current.State != Active:
		return reject(RejectLeaseNotActive, "lease for fence %d is %s", current.Fence, current.State)
	case current.ResultPending:
		return reject(RejectLeaseNotActive, "a result for fence %d is already being ingested", current.Fence)
	}
	return nil
}
