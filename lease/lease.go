package lease

import (
	"errors"
	"fmt"
	"time"
)

// State is a lease's state (docs/architecture.md, "The lease loop").
type State string

const (
	// Active: the holder may heartbeat and submit a result.
	Active State = "ACTIVE"
	// Completed: a result from this lease was accepted and ingested.
	Completed State = "COMPLETED"
	// Expired: no current-fence heartbeat arrived within the TTL.
	Expired State = "EXPIRED"
	// Revoked: the control plane took the lease back (worker lost, launch
	// failed, infrastructure kill, task cancelled).
	Revoked State = "REVOKED"
)

// Lease binds one attempt of one task to one worker under one fencing token.
type Lease struct {
	// TaskID is the logical task the lease is for.
	TaskID string `json:"task_id"`
	// EnvelopeDigest is the "sha256:<hex>" digest of the task's envelope; the
	// same on every attempt (invariant 3).
	EnvelopeDigest string `json:"envelope_digest"`
	// WorkerID is the fleet worker holding the lease.
	WorkerID string `json:"worker_id"`
	// Attempt counts grants for the task, from 1.
	Attempt int64 `json:"attempt"`
	// Fence is the fencing token: strictly increasing on every grant, from 1.
	Fence int64 `json:"fence"`
	// State is the lease state.
	State State `json:"state"`
	// TTL is how long the lease lives without a current-fence heartbeat
	// (nanoseconds in JSON).
	TTL time.Duration `json:"ttl"`
	// GrantedAt, RenewedAt and ExpiresAt are workflow times. ExpiresAt is
	// RenewedAt + TTL while ACTIVE.
	GrantedAt time.Time `json:"granted_at"`
	RenewedAt time.Time `json:"renewed_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// EndedAt is when the lease left ACTIVE; zero while ACTIVE.
	EndedAt time.Time `json:"ended_at,omitzero"`
	// EndReason is why a lease left ACTIVE: a RetryReason, "cancelled" or
	// "result_accepted".
	EndReason string `json:"end_reason,omitempty"`
	// HeartbeatSeq is the highest heartbeat sequence number accepted.
	HeartbeatSeq int64 `json:"heartbeat_seq"`
	// ResultPending is true while an accepted result is being ingested; a
	// second result for the lease is then rejected (lease_not_active).
	ResultPending bool `json:"result_pending,omitempty"`
	// IdentityIssuedAt is when the certificate the worker registered with
	// was issued, at the grant (zero with identity off): the attempt's
	// messages must be delegated under one issued no earlier.
	IdentityIssuedAt time.Time `json:"identity_issued_at,omitzero"`
	// Incarnation is the worker's incarnation the lease's reservation was
	// made under (0: not known): a loss of an earlier incarnation's
	// reservation is not this lease's.
	Incarnation int64 `json:"incarnation,omitempty"`
}

// RetryReason is why an attempt ended without a result. None of them is a
// task failure (invariant 1).
type RetryReason string

const (
	// ReasonLeaseExpired: no current-fence heartbeat within the lease TTL.
	ReasonLeaseExpired RetryReason = "lease_expired"
	// ReasonWorkerLost: the worker holding the lease went STALE or OFFLINE,
	// or re-registered (its running attempts died with it).
	ReasonWorkerLost RetryReason = "worker_lost"
	// ReasonLaunchFailed: the launcher could not start the attempt.
	ReasonLaunchFailed RetryReason = "launch_failed"
	// ReasonInfraKilled: the attempt was stopped from outside without
	// producing a result (an agent stopping, an eviction, a preemption, a
	// SIGKILL or SIGTERM the program did not send); retried at once.
	ReasonInfraKilled RetryReason = "infra_killed"
	// ReasonOOMKilled: the kernel's OOM killer killed the command in the
	// attempt's memory cgroup (its memory_bytes limit, where enforced);
	// retried with backoff, as the program may need more memory.
	ReasonOOMKilled RetryReason = "oom_killed"
)

// Valid reports whether r is one of the five retry reasons.
func (r RetryReason) Valid() bool {
	switch r {
	case ReasonLeaseExpired, ReasonWorkerLost, ReasonLaunchFailed, ReasonInfraKilled, ReasonOOMKilled:
		return true
	}
	return false
}

// RetryDirective is what expiry, loss and launch failure produce instead of
// a failed task: retry the same envelope on a new attempt under a new fence.
type RetryDirective struct {
	Reason RetryReason `json:"reason"`
	// NextAttempt and NextFence are what the next grant will use.
	NextAttempt int64 `json:"next_attempt"`
	NextFence   int64 `json:"next_fence"`
	// EnvelopeDigest is unchanged from the ended lease (invariant 3).
	EnvelopeDigest string `json:"envelope_digest"`
	// PreviousWorker held the ended lease; selection prefers another worker.
	PreviousWorker string `json:"previous_worker"`
	// Detail is a human-readable cause, e.g. "no heartbeat for 30s".
	Detail string `json:"detail,omitempty"`
	// LockDelayUntil, when set, is the earliest the next attempt may be
	// granted: the ended attempt's command may run until then (its
	// executor's self-fencing deadline is at most a TTL away).
	LockDelayUntil time.Time `json:"lock_delay_until,omitzero"`
}

// Ledger is one task's lease record: the counters that only grow and every
// lease granted so far. The WdcTask workflow keeps one and carries it across
// continue-as-new, so attempt and fence never repeat (invariant 3).
type Ledger struct {
	TaskID         string `json:"task_id"`
	EnvelopeDigest string `json:"envelope_digest"`
	// Attempt and Fence are the highest values granted; 0 before the first
	// grant.
	Attempt int64 `json:"attempt"`
	Fence   int64 `json:"fence"`
	// Leases holds every lease granted, oldest first; the last one is the
	// current lease.
	Leases []Lease `json:"leases"`
}

// Errors returned by Ledger transitions. They mean the caller broke the
// protocol (a bug), not that an attempt misbehaved; attempts get a Rejection.
var (
	// ErrLeaseActive: Grant while a lease is ACTIVE (at most one ACTIVE lease
	// per task, invariant 5).
	ErrLeaseActive = errors.New("task already has an ACTIVE lease")
	// ErrNoActiveLease: Expire, Revoke or Complete without an ACTIVE lease.
	ErrNoActiveLease = errors.New("task has no ACTIVE lease")
	// ErrNotExpired: Expire before the lease's ExpiresAt.
	ErrNotExpired = errors.New("lease has not expired")
	// ErrResultPending: Expire or Revoke while a result accepted for the
	// lease is being ingested. The ingest decides first: on success the
	// lease completes, on failure the result is abandoned and the lease can
	// end as usual.
	ErrResultPending = errors.New("a result for the lease is being ingested")
)

// NewLedger starts a ledger for a task whose envelope has the given digest.
func NewLedger(taskID, envelopeDigest string) Ledger {
	return Ledger{TaskID: taskID, EnvelopeDigest: envelopeDigest}
}

// Current returns the latest lease, or nil before the first grant. The
// pointer aliases the ledger; do not keep it across transitions.
func (l *Ledger) Current() *Lease {
	if len(l.Leases) == 0 {
		return nil
	}
	return &l.Leases[len(l.Leases)-1]
}

// RaiseFence makes the next grant's fence at least floor+1 (invariant 8):
// a fence that an earlier run of the task granted and this ledger does not
// remember (an operator's reset replays an older ledger) is never granted
// again. A floor at or below Fence changes nothing.
func (l *Ledger) RaiseFence(floor int64) {
	l.Fence = max(l.Fence, floor)
}

// Grant issues a new ACTIVE lease to worker: attempt+1, fence+1, the
// ledger's envelope digest, expiring at now+ttl.
//
// Errors: ErrLeaseActive when the current lease is still ACTIVE; an error
// when ttl ≤ 0 or worker is empty.
func (l *Ledger) Grant(worker string, ttl time.Duration, now time.Time) (Lease, error) {
	if cur := l.Current(); cur != nil && cur.State == Active {
		return Lease{}, fmt.Errorf("grant to %s: %w (attempt %d, fence %d)", worker, ErrLeaseActive, cur.Attempt, cur.Fence)
	}
	if worker == "" {
		return Lease{}, errors.New("grant: worker ID is empty")
	}
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("grant: lease TTL must be positive, got %s", ttl)
	}
	l.Attempt++
	l.Fence++
	ls := Lease{
		TaskID:         l.TaskID,
		EnvelopeDigest: l.EnvelopeDigest,
		WorkerID:       worker,
		Attempt:        l.Attempt,
		Fence:          l.Fence,
		State:          Active,
		TTL:            ttl,
		GrantedAt:      now,
		RenewedAt:      now,
		ExpiresAt:      now.Add(ttl),
	}
	l.Leases = append(l.Leases, ls)
	return ls, nil
}

// Renew applies a heartbeat: after Check accepts it, the lease's RenewedAt
// becomes now and ExpiresAt now+TTL. A heartbeat whose Seq is not above the
// last accepted one is a duplicate: accepted, but it does not extend the
// lease. The returned Rejection is nil when the heartbeat was accepted.
func (l *Ledger) Renew(hb Claim, seq int64, now time.Time) *Rejection {
	cur := l.Current()
	if rej := Check(cur, hb); rej != nil {
		return rej
	}
	if seq <= cur.HeartbeatSeq {
		return nil
	}
	cur.HeartbeatSeq = seq
	cur.RenewedAt = now
	cur.ExpiresAt = now.Add(cur.TTL)
	return nil
}

// Heard records that Temporal saw a heartbeat of the ACTIVE lease of fence
// at time at: heartbeats by ID reach the lease's lease activity, not the
// ledger, so the ledger learns of them from how that activity ends (a
// heartbeat timeout at now means the last one was at now − TTL). RenewedAt
// moves to at and ExpiresAt to at+TTL when that is later than what
// heartbeat signals left; Heard never shortens a lease. It reports whether
// the lease was extended; nothing changes for another fence or a lease
// that is not ACTIVE.
func (l *Ledger) Heard(fence int64, at time.Time) bool {
	cur := l.Current()
	if cur == nil || cur.State != Active || cur.Fence != fence || !at.After(cur.RenewedAt) {
		return false
	}
	cur.RenewedAt = at
	cur.ExpiresAt = at.Add(cur.TTL)
	return true
}

// Expire ends the ACTIVE lease as EXPIRED when now ≥ ExpiresAt and returns
// the retry directive (reason lease_expired).
//
// Errors: ErrNoActiveLease; ErrResultPending while a result is being
// ingested; ErrNotExpired when the lease is still live (re-arm the timer
// for ExpiresAt−now instead).
func (l *Ledger) Expire(now time.Time) (RetryDirective, error) {
	cur := l.Current()
	if cur == nil || cur.State != Active {
		return RetryDirective{}, ErrNoActiveLease
	}
	if cur.ResultPending {
		return RetryDirective{}, ErrResultPending
	}
	if now.Before(cur.ExpiresAt) {
		return RetryDirective{}, fmt.Errorf("%w: expires in %s", ErrNotExpired, cur.ExpiresAt.Sub(now))
	}
	detail := fmt.Sprintf("no heartbeat for fence %d since %s (TTL %s)", cur.Fence, cur.RenewedAt.UTC().Format(time.RFC3339), cur.TTL)
	return l.end(Expired, ReasonLeaseExpired, detail, now), nil
}

// Revoke ends the ACTIVE lease as REVOKED for reason and returns the retry
// directive. Errors: ErrNoActiveLease; ErrResultPending while a result
// accepted for the lease is being ingested (a lease whose result is pending
// is neither revoked nor expired until the ingest is decided); an error for
// a reason that is not a RetryReason.
func (l *Ledger) Revoke(reason RetryReason, detail string, now time.Time) (RetryDirective, error) {
	cur := l.Current()
	if cur == nil || cur.State != Active {
		return RetryDirective{}, ErrNoActiveLease
	}
	if cur.ResultPending {
		return RetryDirective{}, ErrResultPending
	}
	if !reason.Valid() {
		return RetryDirective{}, fmt.Errorf("revoke: %q is not a retry reason", reason)
	}
	return l.end(Revoked, reason, detail, now), nil
}

// Cancel ends the ACTIVE lease (if any) as REVOKED with end reason
// "cancelled"; the task is not retried. It reports whether a lease ended.
func (l *Ledger) Cancel(now time.Time) bool {
	cur := l.Current()
	if cur == nil || cur.State != Active {
		return false
	}
	cur.State = Revoked
	cur.EndReason = "cancelled"
	cur.EndedAt = now
	cur.ResultPending = false
	return true
}

// Accept marks the ACTIVE lease as holding a result being ingested, after
// Check accepts the claim. While pending, the lease does not expire and
// other results are rejected.
func (l *Ledger) Accept(c Claim) *Rejection {
	cur := l.Current()
	if rej := Check(cur, c); rej != nil {
		return rej
	}
	cur.ResultPending = true
	return nil
}

// MarkResultPending is Accept's transition without the fence check, for
// code that runs after a validator already judged the claim with Check
// (the submit-result update handler). It only re-confirms the transition's
// precondition — the current lease has this fence, is ACTIVE and holds no
// pending result — so a later, stricter Check does not change what replayed
// histories did. Errors: ErrNoActiveLease when the precondition fails.
func (l *Ledger) MarkResultPending(fence int64) error {
	cur := l.Current()
	if cur == nil || cur.State != Active || cur.Fence != fence || cur.ResultPending {
		return fmt.Errorf("%w for fence %d", ErrNoActiveLease, fence)
	}
	cur.ResultPending = true
	return nil
}

// AbandonResult clears a pending result that could not be ingested; the
// lease stays ACTIVE and expires unless heartbeats continue.
func (l *Ledger) AbandonResult(now time.Time) {
	if cur := l.Current(); cur != nil && cur.State == Active {
		cur.ResultPending = false
		cur.RenewedAt = now
		cur.ExpiresAt = now.Add(cur.TTL)
	}
}

// Complete ends the ACTIVE lease whose result was ingested as COMPLETED.
// Errors: ErrNoActiveLease; an error when no result is pending.
func (l *Ledger) Complete(now time.Time) error {
	cur := l.Current()
	if cur == nil || cur.State != Active {
		return ErrNoActiveLease
	}
	if !cur.ResultPending {
		return errors.New("complete: no accepted result is pending")
	}
	cur.State = Completed
	cur.EndReason = "result_accepted"
	cur.EndedAt = now
	cur.ResultPending = false
	return nil
}

func (l *Ledger) end(state State, reason RetryReason, detail string, now time.Time) RetryDirective {
	cur := l.Current()
	cur.State = state
	cur.EndReason = string(reason)
	cur.EndedAt = now
	cur.ResultPending = false
	return RetryDirective{
		Reason:         reason,
		NextAttempt:    l.Attempt + 1,
		NextFence:      l.Fence + 1,
		EnvelopeDigest: l.EnvelopeDigest,
		PreviousWorker: cur.WorkerID,
		Detail:         detail,
	}
}
