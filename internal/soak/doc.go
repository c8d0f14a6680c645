// Package soak is an independent, Jepsen-style checker of a recorded soak
// history: a harness runs a fleet under a fault-injecting nemesis, records a
// History (lease operations with their real-time intervals, the executors'
// command logs, and the end state of tasks, runs, the artifact store and the
// workers), and Check decides whether it is legal against README "What wdc
// guarantees" — not against wdc's code.
//
// Check verifies, per task: that the lease, seen as a register holding the
// current fence, is linearizable (porcupine); at most one accepted result,
// carrying the highest fence granted before it; fences that strictly grow
// and never repeat; commands that neither overlap nor outlive their lease
// by more than Options.OverlapWindow, and always stop; that the task ends
// COMPLETED (with a result) or RETRIES_EXHAUSTED (with a reason). Globally:
// no stale blob under sha256/, accepted artifacts only of accepted results
// and equal to Options.Expect, each run's evidence equal to its commits with
// a verified TCD chain, and every reservation and slot released.
//
// It does not check liveness beyond "every task ends" (how soon, or how
// placement chose workers), operations the recorder did not see, clock
// skew between the recorder and the executors (pass it as OverlapWindow),
// or ops with an unknown outcome (every op needs a Call and a Return).
// Refusal reasons other than lease.Check's are legal in any lease state.
package soak
