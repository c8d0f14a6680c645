package executor

import (
	"github.com/wdc-runtime/wdc/lease"
)

// claimOf is the claim the holder of l makes.
func claimOf(l lease.Lease) lease.Claim { return lease.ClaimOf(l) }
