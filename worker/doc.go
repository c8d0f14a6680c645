// Package worker wires Temporal workers: the control plane (task queue
// wdc-control: every workflow and the Control activities) and the agent of
// one fleet worker (registration, worker heartbeats, and a Temporal worker
// on wdc-agent/<worker-id> that runs Local attempts).
package worker
