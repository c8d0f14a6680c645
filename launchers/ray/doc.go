// Package ray is the Ray launcher: a Ray cluster is one fleet worker
// (`wdc agent --launcher ray --ray-address http://HEAD:8265`), and each
// attempt placed on it runs as a job submitted through the dashboard's
// Jobs REST API (/api/jobs/) by a small net/http client of its own (no
// Ray library is needed or linked).
//
// A job's entrypoint is `wdc exec`, with the attempt's claim and the
// connection settings in runtime_env.env_vars; its submission_id,
// <task>-a<attempt>-f<fence>, is the submit's idempotency key. Ray starts
// the entrypoint with the node's own environment (what `ray start` ran
// with) plus those variables; `wdc exec` starts the task's command with
// the envelope's environment only, so nothing of the node's reaches the
// task. Credentials (AWS_* for an S3 store, TEMPORAL_API_KEY) are never
// put in a request: they are set on the Ray nodes, where `wdc exec` reads
// them as any process does.
//
// An envelope's ray.placement_group makes the entrypoint an embedded
// Python driver (driver/wdc_ray_driver.py) that creates the placement
// group, waits for it with a bound and runs `wdc exec` in bundle 0 as a
// Ray task. Only fields the cluster's Ray version knows are sent
// (FieldsFor): Ray refuses an unknown key with HTTP 400.
//
// The launcher watches each job: PENDING past a bound is stopped and
// reported launch_failed; FAILED or STOPPED without an accepted result is
// reported infra_killed, with the job's last log lines; SUCCEEDED without
// a result is launch_failed. When the lease ends (expiry, revocation,
// cancel, a lost fence) the job is stopped and deleted once terminal.
package ray
