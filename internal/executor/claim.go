package executor

import (
	"context"
	"fmt"

	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// ClaimedAttempt turns a claim handed to a standalone executor (`wdc
// exec`, run by an external launcher) into the attempt to run, asking the
// control plane rather than trusting the caller: one lease query, judged
// by lease.Check, must say the claim holds its task's current ACTIVE
// lease; that lease gives the TTL and grant time, and the task's options
// the heartbeat interval. The sealed envelope is read from blobs under the
// claim's envelope digest (blobstore.Store.Envelope: re-hashed and decoded
// strictly), so it is the envelope the lease names.
//
// Errors: a *Rejected or ErrTaskGone (wrapped) when the claim is not
// current (NotCurrent: start nothing); ErrLeaseUnverified (wrapped) when
// the query failed; blobstore.ErrNotFound or ErrDigestMismatch (wrapped)
// when the envelope is missing from the store or is not the one named;
// a decoding error naming the field at fault.
func ClaimedAttempt(ctx context.Context, c Control, blobs *blobstore.Store, claim lease.Claim) (launchers.Attempt, error) {
	view, err := currentLease(ctx, c, claim)
	if err != nil {
		return launchers.Attempt{}, fmt.Errorf("attempt %s: %w", claim, err)
	}
	env, err := blobs.Envelope(ctx, claim.EnvelopeDigest)
	if err != nil {
		return launchers.Attempt{}, fmt.Errorf("attempt %s: %w", claim, err)
	}
	// lease.Check passed, so view.Lease is the claim's lease: the
	// attempt's own claim (lease.ClaimOf) is the one asked for.
	return launchers.Attempt{Envelope: env, Lease: *view.Lease, HeartbeatInterval: view.Options.HeartbeatInterval}, nil
}
