package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/lease"
)

// A standalone executor takes only a claim: the lease and heartbeat
// interval come from the lease query, the envelope from the blob store,
// and a claim that is not current or cannot be checked gives nothing.
func TestClaimedAttemptAsksTheControlPlaneAndTheStore(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, "true", map[string]string{"in.txt": "x"})
	f.ctl.options = api.TaskOptions{LeaseTTL: 3 * time.Second, HeartbeatInterval: time.Second}
	claim := claimOf(f.lease)

	_, err := ClaimedAttempt(ctx, f.ctl, f.blobs, claim)
	require.True(t, errors.Is(err, blobstore.ErrNotFound), "the envelope is not stored yet: %v", err)
	assert.False(t, NotCurrent(err))

	_, err = f.blobs.PutEnvelope(ctx, f.env)
	require.NoError(t, err)
	a, err := ClaimedAttempt(ctx, f.ctl, f.blobs, claim)
	require.NoError(t, err)
	assert.Equal(t, claim, a.Claim())
	assert.Equal(t, f.env, a.Envelope)
	assert.Equal(t, time.Second, a.HeartbeatInterval)
	assert.Equal(t, f.lease.TTL, a.Lease.TTL)

	// The task moved on to fence 2: the old claim is stale, and is not
	// turned into the new lease's attempt.
	f.ctl.setLease(func(l *lease.Lease) { l.Attempt, l.Fence = 2, 2 })
	_, err = ClaimedAttempt(ctx, f.ctl, f.blobs, claim)
	var rej *Rejected
	require.True(t, errors.As(err, &rej), "%v", err)
	assert.Equal(t, string(lease.RejectStaleFence), rej.Reason)
	assert.True(t, NotCurrent(err))

	// Another worker's claim on the current lease is refused too.
	other := claimOf(*f.ctl.lease)
	other.WorkerID = "w-b"
	_, err = ClaimedAttempt(ctx, f.ctl, f.blobs, other)
	require.True(t, errors.As(err, &rej), "%v", err)
	assert.Equal(t, string(lease.RejectWrongWorker), rej.Reason)

	// No answer: unknown, which is not the same as not current.
	f.ctl.set(func(c *fakeControl) { c.queryErr = errors.New("connection refused") })
	_, err = ClaimedAttempt(ctx, f.ctl, f.blobs, claimOf(*f.ctl.lease))
	assert.True(t, errors.Is(err, ErrLeaseUnverified), "%v", err)
	assert.False(t, NotCurrent(err))
	assert.True(t, NotCurrent(ErrTaskGone))
}
