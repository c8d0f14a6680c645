// Package launchers defines the one small interface every launcher kind
// implements — submit an attempt, ask its status, cancel it — and the
// attempt it launches. One package per kind: local/ (the agent's process
// group execution), external/ (hand the launch off as a `wdc exec`
// command for another system to run), ray/ (jobs on a Ray cluster
// through its dashboard's Jobs REST API), k8s/ (a Kubernetes Job and
// Lease per attempt, whose pod runs `wdc exec`).
package launchers
