// Package lease is wdc's lease and fencing-token core: granting a lease
// (attempt+1, fence+1, same envelope digest), renewing, expiring, revoking and
// completing it, the retry directive that expiry or loss produces instead of
// a failure, retry backoff, and Check — the ONE function that decides whether
// a message (heartbeat, result, release, cancel) from an attempt may act on a
// task (invariant 7 in docs/architecture.md, "Invariants").
//
// It is pure Go with no Temporal import, so the WdcTask workflow calls it and
// its rules are table-tested as plain functions. Nothing here reads the clock:
// callers pass "now" (workflow.Now inside workflows).
package lease
