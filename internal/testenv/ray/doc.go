// Package raytest is an in-process emulator of a Ray cluster's dashboard
// Jobs REST API, for tests only: the Ray launcher's contract tests and
// the system tests run against it, since no Ray cluster can be installed
// where wdc is built.
//
// It follows what Ray's dashboard job module does, not what would be
// convenient:
//
//   - POST /api/jobs/ (with the trailing slash; without it the route does
//     not exist: 404) submits; GET /api/jobs/ lists; GET, DELETE
//     /api/jobs/{id}; POST /api/jobs/{id}/stop; GET /api/jobs/{id}/logs;
//     GET /api/version.
//   - A submit body key the emulated Ray version does not know is HTTP 400;
//     null-valued keys are dropped first. A duplicate submission_id is HTTP
//     500 "Job with submission_id X already exists". An unknown ID is 404
//     with the plain text "Job X does not exist".
//   - A job runs its entrypoint with /bin/sh -c as a local process in a
//     process group of its own, with the emulated node's environment
//     (Options.NodeEnv) plus RAY_ADDRESS, RAY_JOB_CONFIG_JSON_ENV_VAR and
//     PYTHONUNBUFFERED=1, overridden by runtime_env.env_vars (where ${VAR}
//     expands the node's value). Its stdout and stderr are the job's logs.
//   - PENDING, RUNNING, then SUCCEEDED (exit 0), FAILED or STOPPED; terminal
//     states never change. A job held PENDING (Options.HoldPending) fails
//     after Options.StartTimeout like RAY_JOB_START_TIMEOUT_SECONDS.
//   - Stop sends SIGTERM to the entrypoint's process group, then SIGKILL
//     after Options.StopWait (3 s, RAY_JOB_STOP_WAIT_TIME_S); it answers
//     {"stopped": false} for a terminal job. Delete of a job that is not
//     terminal is HTTP 500.
//
// Faults a test can inject: hold jobs PENDING, drop the HTTP response of a
// submit after the job was created, freeze a job's processes (SIGSTOP).
//
// Import it as raytest ("github.com/wdc-runtime/wdc/internal/testenv/ray");
// it is one of the test environments under internal/testenv, beside kube
// (kubetest) and s3 (s3test), and nothing outside tests imports it.
package raytest
