// Package workflows holds wdc's three workflows — WdcWorker (one per fleet
// worker: the durable registry entry), WdcTask (one per logical task: the
// lease loop) and WdcRun (one per run: the parent that owns evidence) — each
// a small state machine over one state struct that continue-as-new carries
// forward (docs/architecture.md, "Conventions").
//
// Workflow code is deterministic: no time.Now, rand, native goroutines or
// map iteration; time comes from workflow.Now and every rule (fence check,
// eligibility, liveness, backoff) from the pure packages lease and
// fleet. Messages and names are in package api.
package workflows
