// Package k8s launches attempts as Kubernetes Jobs, with client-go.
//
// Each attempt is one batch/v1 Job whose single container runs `wdc exec`
// with the attempt's claim (the standalone executor: heartbeats,
// self-fencing, result submission through the artifact store), plus one
// coordination.k8s.io/v1 Lease that the launcher renews while the Job
// runs. The Job never retries by itself (backoffLimit 0, restartPolicy
// Never): a failed attempt is the task's to retry, on a new attempt with
// a new fence. Its podFailurePolicy separates disruptions (eviction,
// preemption, node loss: reported infra_killed) from the executor's own
// exit (its outcome is already reported).
//
// Cluster writes are off unless Options.Apply is set: without it Submit
// renders nothing to the cluster and fails with ErrWritesDisabled, which
// says how to opt in. Render builds the exact objects Submit sends.
//
// The envelope's k8s section may name an image, tolerations, a priority
// and a runtime class only as the agent's Allowlist allows (Spec.Allow;
// the executor container receives the executor Secret, so its image is
// the operator's choice): Render refuses anything else with a
// *NotAllowedError naming the field, and Submit creates nothing.
//
// Before creating anything Submit checks that a named RuntimeClass,
// PriorityClass and the task PVC exist (the API server accepts a Job that
// names a missing one, and its pod would never start). Informers on the
// worker's Jobs and pods end an attempt whose pod stays unscheduled or in
// image-pull back-off past Options.PendingBound (launch_failed) or is
// disrupted (infra_killed); Cancel deletes the Job (background
// propagation, precondition on its UID) and its Lease.
package k8s
