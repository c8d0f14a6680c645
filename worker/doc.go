// Package worker wires Temporal workers: the control plane (task queues
// wdc-control, wdc-control-runs and wdc-control-registry: every workflow
// and the Control activities, as one Worker Deployment Version; see
// ControlPlaneOptions)
// and the agent of one fleet worker (registration, worker heartbeats, and
// a Temporal worker on wdc-agent/<worker-id> that runs Local attempts).
package worker
