package ray

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
)

// DriverSource is the placement-group driver (driver/wdc_ray_driver.py),
// embedded in the binary.
//
//go:embed driver/wdc_ray_driver.py
var DriverSource string

// The driver's outcome that the launcher recognises in a job's log: its
// placement group was not placed within the bound (launch_failed, not
// infra_killed). It matches PLACEMENT_TIMEOUT_MARKER in the driver.
const placementTimeoutMarker = "wdc-ray-driver: placement group not placed"

// Environment variables of a placement-group job: the driver's source,
// its settings and the `wdc exec` argv it runs (runtime_env.env_vars).
const (
	EnvDriver    = "WDC_RAY_DRIVER"
	EnvPlacement = "WDC_RAY_PLACEMENT"
	EnvExecArgv  = "WDC_RAY_EXEC_ARGV"
)

// Metadata keys wdc sets on every job (strings, as Ray requires).
const (
	MetaTask     = "wdc_task"
	MetaLease    = "wdc_lease"
	MetaAttempt  = "wdc_attempt"
	MetaFence    = "wdc_fence"
	MetaWorld    = "wdc_world"
	MetaRun      = "wdc_run"
	MetaWorker   = "wdc_worker"
	MetaEnvelope = "wdc_envelope_digest"
)

// SubmissionID is the Ray submission_id of an attempt,
// <task>-a<attempt>-f<fence>: the idempotency key of its submit (Ray
// refuses a second job with the same ID).
func SubmissionID(c lease.Claim) string {
	return c.TaskID + "-a" + strconv.FormatInt(c.Attempt, 10) + "-f" + strconv.FormatInt(c.Fence, 10)
}

// RequestOptions are the launcher-wide settings that shape a request.
type RequestOptions struct {
	// Target is how the job's `wdc exec` reaches Temporal and the blob
	// store; only its non-secret settings are sent (as env_vars).
	Target external.Target
	// Fields is the target Ray version's field set.
	Fields Fields
	// Python runs the placement-group driver (default "python3").
	Python string
}

// Request is the submit body of attempt (claim c, envelope env) and the
// fields dropped because the target Ray version does not know them.
//
// The entrypoint is `<binary> exec` with the claim and connection in
// runtime_env.env_vars (external.Render's environment: no secret values;
// credentials are the Ray node's own, see the package doc). The
// executor it runs starts the task's command with the envelope's
// environment only, whatever the node's environment holds.
//
// Without a placement group, entrypoint_num_cpus, _num_gpus, _memory and
// _resources are the envelope's resources (cpu_millis/1000, gpus,
// memory_bytes, custom; slots are wdc's own and not sent). With one, the
// entrypoint is the embedded driver (its source travels in
// runtime_env.env_vars and runs as `python3 -c "$WDC_RAY_DRIVER"`, so no
// file is shared between jobs on a node), which reserves the bundles
// and runs `wdc exec` in bundle 0; the entrypoint itself then reserves
// nothing.
func Request(opts RequestOptions, c lease.Claim, env envelope.Envelope) (SubmitRequest, []string) {
	cmd := external.Render(opts.Target, c)
	vars := make(map[string]string, len(cmd.Env)+3)
	for _, kv := range cmd.Env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	req := SubmitRequest{
		SubmissionID: SubmissionID(c),
		RuntimeEnv:   &RuntimeEnv{EnvVars: vars},
		Metadata: map[string]string{
			MetaTask: c.TaskID, MetaLease: c.WorkerID + "/" + strconv.FormatInt(c.Attempt, 10) + "/" + strconv.FormatInt(c.Fence, 10),
			MetaAttempt: strconv.FormatInt(c.Attempt, 10), MetaFence: strconv.FormatInt(c.Fence, 10),
			MetaWorld: env.WorldID, MetaRun: env.RunID, MetaWorker: c.WorkerID, MetaEnvelope: c.EnvelopeDigest,
		},
	}
	execArgv := []string{cmd.Argv[0], "exec"}
	if pg := placementOf(env); pg != nil {
		python := opts.Python
		if python == "" {
			python = "python3"
		}
		timeout := pg.TimeoutSeconds
		if timeout == 0 {
			timeout = envelope.DefaultPlacementTimeoutSeconds
		}
		spec, _ := json.Marshal(map[string]any{"bundles": pg.Bundles, "strategy": pg.Strategy, "timeout_seconds": timeout, "name": req.SubmissionID})
		argv, _ := json.Marshal(execArgv)
		vars[EnvDriver], vars[EnvPlacement], vars[EnvExecArgv] = DriverSource, string(spec), string(argv)
		req.Entrypoint = fmt.Sprintf(`exec %s -c "$%s"`, external.ShellQuote([]string{python}), EnvDriver)
	} else {
		req.Entrypoint = external.ShellQuote(execArgv)
		r := env.Resources
		if r.CPUMillis > 0 {
			v := float64(r.CPUMillis) / 1000
			req.EntrypointNumCPUs = &v
		}
		if r.GPUs > 0 {
			v := float64(r.GPUs)
			req.EntrypointNumGPUs = &v
		}
		if r.MemoryBytes > 0 {
			v := r.MemoryBytes
			req.EntrypointMemory = &v
		}
		names := make([]string, 0, len(r.Custom))
		for name := range r.Custom {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if r.Custom[name] > 0 {
				if req.EntrypointResources == nil {
					req.EntrypointResources = map[string]float64{}
				}
				req.EntrypointResources[name] = float64(r.Custom[name])
			}
		}
	}
	dropped := opts.Fields.Apply(&req)
	return req, dropped
}

func placementOf(env envelope.Envelope) *envelope.PlacementGroup {
	if env.Ray == nil {
		return nil
	}
	return env.Ray.PlacementGroup
}
