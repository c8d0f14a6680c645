package worker

import (
	"context"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/lease"
)

// Adopter is an AgentLauncher whose attempts outlive the agent's process
// (Kubernetes Jobs, Ray jobs). A restarted agent claims them in its
// registration (fleet.Registration.Adopt) instead of their leases being
// revoked as worker_lost; the Local launcher is none (its commands die with
// the agent).
type Adopter interface {
	// Adoptable lists this worker's attempts still running in the cluster
	// whose lease is current or cannot be verified; those whose lease is
	// no longer current it stops and leaves out. Errors: the cluster
	// could not be read (the registration then fails).
	Adoptable(ctx context.Context) ([]lease.Claim, error)
	// Adopt follows the adopted attempts again (their end, CancelAttempt)
	// and stops the refused ones, whose reservations the registry did not
	// hold.
	Adopt(ctx context.Context, adopted, refused []lease.Claim)
}

// adoptions is claims as the registration names them.
func adoptions(claims []lease.Claim) []fleet.Adoption {
	out := make([]fleet.Adoption, 0, len(claims))
	for _, c := range claims {
		out = append(out, fleet.Adoption{TaskID: c.TaskID, Attempt: c.Attempt, Fence: c.Fence})
	}
	return out
}

// splitAdopted splits claims into those the registry kept (by task and
// fence) and the rest.
func splitAdopted(claims []lease.Claim, kept []api.ReservationRef) (adopted, refused []lease.Claim) {
	held := make(map[api.ReservationRef]bool, len(kept))
	for _, r := range kept {
		held[r] = true
	}
	for _, c := range claims {
		if held[api.ReservationRef{TaskID: c.TaskID, Fence: c.Fence}] {
			adopted = append(adopted, c)
		} else {
			refused = append(refused, c)
		}
	}
	return adopted, refused
}
