package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const digest = "sha256:aaaa"

func TestGrantIncrementsAttemptAndFenceKeepsDigest(t *testing.T) {
	l := NewLedger("t1", digest)
	first, err := l.Grant("w-a", 30*time.Second, t0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), first.Attempt)
	assert.Equal(t, int64(1), first.Fence)
	assert.Equal(t, t0.Add(30*time.Second), first.ExpiresAt)

	_, err = l.Grant("w-b", 30*time.Second, t0)
	require.ErrorIs(t, err, ErrLeaseActive, "at most one ACTIVE lease per task")

	d, err := l.Expire(t0.Add(30 * time.Second))
	require.NoError(t, err)
	assert.Equal(t, RetryDirective{Reason: ReasonLeaseExpired, NextAttempt: 2, NextFence: 2, EnvelopeDigest: digest, PreviousWorker: "w-a", Detail: d.Detail}, d)

	second, err := l.Grant("w-b", 30*time.Second, t0.Add(31*time.Second))
	require.NoError(t, err)
	assert.Equal(t, int64(2), second.Attempt)
	assert.Equal(t, int64(2), second.Fence)
	assert.Equal(t, first.EnvelopeDigest, second.EnvelopeDigest, "retry keeps the digest")
	assert.Equal(t, Expired, l.Leases[0].State)
}

func TestGrantRejectsBadArguments(t *testing.T) {
	l := NewLedger("t1", digest)
	_, err := l.Grant("", time.Second, t0)
	assert.ErrorContains(t, err, "worker ID is empty")
	_, err = l.Grant("w", 0, t0)
	assert.ErrorContains(t, err, "TTL must be positive")
	assert.Equal(t, int64(0), l.Fence, "a refused grant changes nothing")
}

func TestRenewExtendsOnlyForCurrentFenceAndNewSeq(t *testing.T) {
	l := NewLedger("t1", digest)
	ls, _ := l.Grant("w-a", 30*time.Second, t0)
	c := ClaimOf(ls)
	require.Nil(t, l.Renew(c, 1, t0.Add(10*time.Second)))
	assert.Equal(t, t0.Add(40*time.Second), l.Current().ExpiresAt)
	require.Nil(t, l.Renew(c, 1, t0.Add(20*time.Second)), "duplicate seq is accepted")
	assert.Equal(t, t0.Add(40*time.Second), l.Current().ExpiresAt, "but does not extend")

	stale := c
	stale.Fence = 0
	rej := l.Renew(stale, 2, t0.Add(25*time.Second))
	require.NotNil(t, rej)
	assert.Equal(t, RejectStaleFence, rej.Reason)
	assert.Equal(t, t0.Add(40*time.Second), l.Current().ExpiresAt)
}

func TestExpireBeforeDeadlineIsRefused(t *testing.T) {
	l := NewLedger("t1", digest)
	_, _ = l.Grant("w-a", 30*time.Second, t0)
	_, err := l.Expire(t0.Add(29 * time.Second))
	require.ErrorIs(t, err, ErrNotExpired)
	assert.Equal(t, Active, l.Current().State)
}

func TestRevokeAndCancel(t *testing.T) {
	l := NewLedger("t1", digest)
	_, _ = l.Grant("w-a", 30*time.Second, t0)
	_, err := l.Revoke("bogus", "", t0)
	require.ErrorContains(t, err, "not a retry reason")
	d, err := l.Revoke(ReasonWorkerLost, "worker w-a is STALE", t0.Add(time.Second))
	require.NoError(t, err)
	assert.Equal(t, ReasonWorkerLost, d.Reason)
	assert.Equal(t, Revoked, l.Current().State)
	_, err = l.Revoke(ReasonWorkerLost, "", t0)
	require.ErrorIs(t, err, ErrNoActiveLease)
	_, _ = l.Grant("w-b", 30*time.Second, t0.Add(2*time.Second))
	assert.True(t, l.Cancel(t0.Add(3*time.Second)))
	assert.Equal(t, "cancelled", l.Current().EndReason)
	assert.False(t, l.Cancel(t0.Add(4*time.Second)))
}

func TestAcceptThenComplete(t *testing.T) {
	l := NewLedger("t1", digest)
	ls, _ := l.Grant("w-a", 30*time.Second, t0)
	require.ErrorContains(t, l.Complete(t0), "no accepted result")
	require.Nil(t, l.Accept(ClaimOf(ls)))
	rej := l.Accept(ClaimOf(ls))
	require.NotNil(t, rej, "a second result for the same lease is refused")
	assert.Equal(t, RejectLeaseNotActive, rej.Reason)
	_, err := l.Expire(t0.Add(time.Hour))
	require.ErrorIs(t, err, ErrResultPending, "a pending result is decided before the lease can expire")

	l2 := NewLedger("t2", digest)
	ls2, _ := l2.Grant("w-a", 30*time.Second, t0)
	require.Nil(t, l2.Accept(ClaimOf(ls2)))
	require.NoError(t, l2.Complete(t0.Add(time.Second)))
	assert.Equal(t, Completed, l2.Current().State)
	assert.False(t, l2.Current().ResultPending)
}

func TestAbandonResultKeepsLeaseActive(t *testing.T) {
	l := NewLedger("t1", digest)
	ls, _ := l.Grant("w-a", 30*time.Second, t0)
	require.Nil(t, l.Accept(ClaimOf(ls)))
	l.AbandonResult(t0.Add(5 * time.Second))
	assert.Equal(t, Active, l.Current().State)
	assert.False(t, l.Current().ResultPending)
	assert.Equal(t, t0.Add(35*time.Second), l.Current().ExpiresAt)
}

func TestCheck(t *testing.T) {
	l := NewLedger("t1", digest)
	_, _ = l.Grant("w-a", time.Second, t0)
	_, _ = l.Expire(t0.Add(time.Second))
	cur, _ := l.Grant("w-b", time.Second, t0.Add(2*time.Second))
	good := ClaimOf(cur)
	with := func(f func(*Claim)) Claim { c := good; f(&c); return c }
	completed := cur
	completed.State = Completed
	pending := cur
	pending.ResultPending = true

	tests := []struct {
		name  string
		lease *Lease
		claim Claim
		want  RejectReason
	}{
		{"current holder accepted", &cur, good, ""},
		{"no lease yet", nil, good, RejectLeaseNotActive},
		{"other task", &cur, with(func(c *Claim) { c.TaskID = "t9" }), RejectWrongTask},
		{"stale fence from attempt 1", &cur, with(func(c *Claim) { c.Fence, c.Attempt, c.WorkerID = 1, 1, "w-a" }), RejectStaleFence},
		{"future fence", &cur, with(func(c *Claim) { c.Fence = 9 }), RejectStaleFence},
		{"stale fence even after completion", &completed, with(func(c *Claim) { c.Fence, c.Attempt = 1, 1 }), RejectStaleFence},
		{"wrong attempt", &cur, with(func(c *Claim) { c.Attempt = 7 }), RejectWrongAttempt},
		{"wrong worker", &cur, with(func(c *Claim) { c.WorkerID = "w-evil" }), RejectWrongWorker},
		{"digest mismatch", &cur, with(func(c *Claim) { c.EnvelopeDigest = "sha256:bbbb" }), RejectDigestMismatch},
		{"completed lease", &completed, good, RejectLeaseNotActive},
		{"result pending", &pending, good, RejectLeaseNotActive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rej := Check(tc.lease, tc.claim)
			if tc.want == "" {
				assert.Nil(t, rej)
				return
			}
			require.NotNil(t, rej)
			assert.Equal(t, tc.want, rej.Reason)
			assert.NotEmpty(t, rej.Message)
			var asErr error = rej
			assert.True(t, errors.As(asErr, &rej))
		})
	}
}

func TestAttemptAndFenceStrictlyIncrease(t *testing.T) {
	l := NewLedger("t1", digest)
	now := t0
	var last int64
	for i := 0; i < 20; i++ {
		ls, err := l.Grant("w", time.Second, now)
		require.NoError(t, err)
		require.Greater(t, ls.Fence, last)
		require.Equal(t, ls.Fence, ls.Attempt)
		last = ls.Fence
		now = now.Add(2 * time.Second)
		switch i % 3 {
		case 0:
			_, err = l.Expire(now)
		case 1:
			_, err = l.Revoke(ReasonInfraKilled, "", now)
		case 2:
			require.Nil(t, l.Accept(ClaimOf(ls)))
			l.AbandonResult(now)
			_, err = l.Revoke(ReasonLaunchFailed, "", now)
		}
		require.NoError(t, err)
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2, Jitter: 0}
	for n, want := range map[int64]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		got, err := b.Delay(n, "t1")
		require.NoError(t, err)
		assert.Equal(t, want, got, "retry %d", n)
	}
	_, err := b.Delay(0, "t1")
	assert.ErrorIs(t, err, ErrBadRetry)

	j := Backoff{Initial: 10 * time.Second, Max: 10 * time.Second, Multiplier: 1, Jitter: 0.5}
	d1, _ := j.Delay(1, "task-a")
	d1again, _ := j.Delay(1, "task-a")
	d2, _ := j.Delay(1, "task-b")
	assert.Equal(t, d1, d1again, "deterministic for replay")
	assert.NotEqual(t, d1, d2, "different tasks spread out")
	for _, d := range []time.Duration{d1, d2} {
		assert.GreaterOrEqual(t, d, 5*time.Second)
		assert.LessOrEqual(t, d, 10*time.Second)
	}
}

func TestBackoffValidate(t *testing.T) {
	cases := map[string]Backoff{
		"backoff.initial":    {Initial: -1},
		"backoff.max":        {Initial: 2 * time.Second, Max: time.Second, Multiplier: 2},
		"backoff.multiplier": {Initial: 1, Max: 2, Multiplier: 0.5},
		"backoff.jitter":     {Initial: 1, Max: 2, Multiplier: 1, Jitter: 2},
	}
	for field, b := range cases {
		assert.ErrorContains(t, b.Validate(), field)
	}
	assert.NoError(t, DefaultBackoff.Validate())
}

// A lease whose result is being ingested is neither revoked nor expired
// until the ingest is decided (fault: a launch timeout in the same
// workflow task as the result revoked the lease under the pending result).
func TestPendingResultBlocksRevokeAndExpire(t *testing.T) {
	l := NewLedger("t", digest)
	g, err := l.Grant("w-a", 30*time.Second, t0)
	require.NoError(t, err)
	require.Nil(t, l.Accept(ClaimOf(g)))

	_, err = l.Revoke(ReasonLaunchFailed, "launch timed out", t0.Add(time.Second))
	require.ErrorIs(t, err, ErrResultPending)
	_, err = l.Expire(t0.Add(time.Hour))
	require.ErrorIs(t, err, ErrResultPending)
	assert.Equal(t, Active, l.Current().State)

	l.AbandonResult(t0.Add(2 * time.Second))
	d, err := l.Revoke(ReasonLaunchFailed, "launch timed out", t0.Add(3*time.Second))
	require.NoError(t, err)
	assert.Equal(t, int64(2), d.NextFence)
}

func TestMarkResultPendingChecksOnlyTheTransition(t *testing.T) {
	l := NewLedger("t", digest)
	_, err := l.Grant("w-a", 30*time.Second, t0)
	require.NoError(t, err)
	require.ErrorIs(t, l.MarkResultPending(2), ErrNoActiveLease, "another fence")
	require.NoError(t, l.MarkResultPending(1))
	require.ErrorIs(t, l.MarkResultPending(1), ErrNoActiveLease, "already pending")
	assert.True(t, l.Current().ResultPending)
}

// What Temporal reports of heartbeats by ID extends the current fence's
// ACTIVE lease, never shortens it, and leaves Expire the judge: a lease
// whose lease activity timed out at now was last heard at now − TTL and
// expires then, unless a heartbeat signal renewed it later.
func TestHeardExtendsOnlyAndExpireStillDecides(t *testing.T) {
	l := NewLedger("t1", digest)
	_, err := l.Grant("w-a", 6*time.Second, t0)
	require.NoError(t, err)
	require.Nil(t, l.Renew(Claim{TaskID: "t1", WorkerID: "w-a", Attempt: 1, Fence: 1, EnvelopeDigest: digest}, 1, t0.Add(2*time.Second)))

	assert.False(t, l.Heard(2, t0.Add(20*time.Second)), "another fence")
	assert.False(t, l.Heard(1, t0.Add(time.Second)), "earlier than the last renewal")
	assert.Equal(t, t0.Add(8*time.Second), l.Current().ExpiresAt)

	// Heartbeats by ID until 24 s; the activity times out at 30 s.
	now := t0.Add(30 * time.Second)
	assert.True(t, l.Heard(1, now.Add(-6*time.Second)))
	assert.Equal(t, now, l.Current().ExpiresAt)
	d, err := l.Expire(now)
	require.NoError(t, err)
	assert.Equal(t, ReasonLeaseExpired, d.Reason)
	assert.False(t, l.Heard(1, now), "not ACTIVE any more")

	// A signal renewed the lease after the last heartbeat Temporal saw:
	// not expired.
	l = NewLedger("t1", digest)
	_, err = l.Grant("w-a", 6*time.Second, t0)
	require.NoError(t, err)
	require.Nil(t, l.Renew(Claim{TaskID: "t1", WorkerID: "w-a", Attempt: 1, Fence: 1, EnvelopeDigest: digest}, 1, t0.Add(5*time.Second)))
	assert.False(t, l.Heard(1, t0.Add(4*time.Second)))
	_, err = l.Expire(t0.Add(10 * time.Second))
	require.ErrorIs(t, err, ErrNotExpired)

	// A pending result is never expired, whatever Temporal says.
	require.NoError(t, l.MarkResultPending(1))
	l.Heard(1, t0.Add(20*time.Second))
	_, err = l.Expire(t0.Add(60 * time.Second))
	require.ErrorIs(t, err, ErrResultPending)
}

func TestRaiseFenceNeverLowersAndTheNextGrantIsAboveIt(t *testing.T) {
	l := NewLedger("t1", "sha256:x")
	l.RaiseFence(4)
	g, err := l.Grant("w", time.Second, time.Unix(0, 0))
	require.NoError(t, err)
	require.Equal(t, int64(5), g.Fence)
	require.Equal(t, int64(1), g.Attempt, "attempts count this ledger's grants")
	l.RaiseFence(2)
	require.Equal(t, int64(5), l.Fence, "a lower floor changes nothing")
}
