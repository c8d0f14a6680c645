// Package demo runs wdc's reference retry scenario on real parts: a
// Temporal server, the control plane, two fleet workers' agents and a real
// command over a real input file. Attempt 1 stalls before
// ingest until its lease expires, attempt 2 runs on the other worker and is
// accepted, then attempt 1 wakes up, submits its result and is refused by
// the fence. `wdc demo worker-leases` prints the observed values.
package demo
