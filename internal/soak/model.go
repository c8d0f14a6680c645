package soak

import (
	"fmt"

	"github.com/anishathalye/porcupine"

	"github.com/wdc-runtime/wdc/lease"
)

// leaseState is the register the lease model holds for one task: the
// current fence (0 before the first grant) and whether its lease is held.
type leaseState struct {
	Fence int64
	Held  bool
}

// leaseInput is one operation as the model sees it; the output is the
// operation's OK (always true for grants, expiries and revocations).
type leaseInput struct {
	Kind   OpKind
	Fence  int64
	Reason string
}

// refusalClaim is what a refusal's reason asserts about the refused fence.
type refusalClaim int

const (
	// claimNothing: the reason is not about the lease (e.g. an
	// "unauthenticated" or "artifact_mismatch" refusal); legal in any state.
	claimNothing refusalClaim = iota
	// claimNotCurrent: the fence is not the current one (stale_fence).
	claimNotCurrent
	// claimCurrent: the fence passed the fence check (lease.Check tests the
	// fence before attempt, worker and digest).
	claimCurrent
	// claimCurrentOrNone: lease_not_active — no lease granted yet, or the
	// fence is current and its lease is not (or no longer) ACTIVE.
	claimCurrentOrNone
)

// claimOf classifies a refusal reason by the order of lease.Check
// (docs/architecture.md, invariant 7): task, fence, attempt, worker, digest,
// lease state.
func claimOf(reason string) refusalClaim {
	switch lease.RejectReason(reason) {
	case lease.RejectStaleFence:
		return claimNotCurrent
	case lease.RejectWrongAttempt, lease.RejectWrongWorker, lease.RejectDigestMismatch:
		return claimCurrent
	case lease.RejectLeaseNotActive:
		return claimCurrentOrNone
	}
	return claimNothing
}

// stepLease is the sequential specification of one task's lease: whether
// op (with outcome ok) is legal in s, and the state after it.
func stepLease(s leaseState, in leaseInput, ok bool) (bool, leaseState) {
	switch in.Kind {
	case OpGrant:
		// A grant ends whatever lease came before it.
		return in.Fence > s.Fence, leaseState{Fence: in.Fence, Held: true}
	case OpExpire, OpRevoke:
		return s.Held && in.Fence == s.Fence, leaseState{Fence: s.Fence}
	case OpHeartbeat, OpSubmit:
		if ok {
			next := s
			if in.Kind == OpSubmit {
				// An accepted result ends the lease: a second result or a
				// heartbeat after it is refused (lease_not_active).
				next.Held = false
			}
			return s.Held && in.Fence == s.Fence, next
		}
		switch claimOf(in.Reason) {
		case claimNotCurrent:
			return in.Fence != s.Fence, s
		case claimCurrent:
			return s.Fence != 0 && in.Fence == s.Fence, s
		case claimCurrentOrNone:
			return s.Fence == 0 || in.Fence == s.Fence, s
		}
		return true, s
	}
	return false, s
}

// leaseModel is the porcupine model of one task's lease (one model per
// task, so no partition).
var leaseModel = porcupine.Model{
	Init: func() any { return leaseState{} },
	Step: func(state, input, output any) (bool, any) {
		return stepLease(state.(leaseState), input.(leaseInput), output.(bool))
	},
	DescribeOperation: func(input, output any) string {
		in := input.(leaseInput)
		switch {
		case in.Kind == OpGrant || in.Kind == OpExpire || in.Kind == OpRevoke:
			return fmt.Sprintf("%s(%d)", in.Kind, in.Fence)
		case output.(bool):
			return fmt.Sprintf("%s(%d) -> ok", in.Kind, in.Fence)
		}
		return fmt.Sprintf("%s(%d) -> refused %s", in.Kind, in.Fence, in.Reason)
	},
	DescribeState: func(state any) string {
		s := state.(leaseState)
		if s.Held {
			return fmt.Sprintf("fence %d held", s.Fence)
		}
		return fmt.Sprintf("fence %d ended", s.Fence)
	},
	DescribeOperationMetadata: func(info any) string {
		if info == nil {
			return ""
		}
		return info.(string)
	},
}

// porcupineOps converts one task's well-formed ops to porcupine operations,
// one client per worker (the control plane's grants and ends on client 0).
func porcupineOps(ops []Op) []porcupine.Operation {
	clients := map[string]int{"": 0}
	out := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		who := op.Worker
		if op.Kind == OpGrant || op.Kind == OpExpire || op.Kind == OpRevoke {
			who = ""
		}
		id, seen := clients[who]
		if !seen {
			id = len(clients)
			clients[who] = id
		}
		ok := op.OK || !(op.Kind == OpHeartbeat || op.Kind == OpSubmit)
		out = append(out, porcupine.Operation{
			ClientId: id,
			Input:    leaseInput{Kind: op.Kind, Fence: op.Fence, Reason: op.Reason},
			Call:     op.Call.UnixNano(),
			Output:   ok,
			Return:   op.Return.UnixNano(),
			Metadata: fmt.Sprintf("attempt %d on %q, %s", op.Attempt, op.Worker, op.Reason),
		})
	}
	return out
}
