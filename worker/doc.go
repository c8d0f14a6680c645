// Package worker wires Temporal workers: the control plane (task queues
// wdc-control and wdc-control-runs: every workflow and the Control
// activities, as one Worker Deployment Version; see ControlPlaneOptions)
// and the agent of one fleet worker (registration, worker heartbeats, and
// a Temporal worker on wdc-agent/<worker-id> that runs Local attempts).
package worker
