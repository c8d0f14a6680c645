package executor

import (
	"fmt"

	"github.com/wdc-runtime/wdc/internal/lease"
)

func fmtSscan(s string, v *int) (int, error) { return fmt.Sscan(s, v) }

// claimOf is the claim the holder of l makes.
func claimOf(l lease.Lease) lease.Claim { return lease.ClaimOf(l) }
