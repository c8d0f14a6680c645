package cmd

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers/ray"
	"github.com/wdc-runtime/wdc/worker"
)

// launcherRay is `wdc agent --launcher ray`: a Ray cluster as one fleet
// worker, its attempts submitted as Ray jobs.
const launcherRay = "ray"

// rayAgentFlags are the agent's Ray flags (with --launcher ray only).
type rayAgentFlags struct {
	address        string
	pendingTimeout time.Duration
	pollInterval   time.Duration
	requestTimeout time.Duration
	python         string
}

func (f *rayAgentFlags) bind(fs *pflag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.address, "ray-address", getenv("WDC_RAY_ADDRESS"), "with --launcher ray: the Ray dashboard, http://HEAD:8265 (env WDC_RAY_ADDRESS; required)")
	fs.DurationVar(&f.pendingTimeout, "ray-pending-timeout", 5*time.Minute, "with --launcher ray: a job still PENDING after this long (no node has its resources) is stopped and its attempt retried as launch_failed")
	fs.DurationVar(&f.pollInterval, "ray-poll-interval", 2*time.Second, "with --launcher ray: how often each job's status is read")
	fs.DurationVar(&f.requestTimeout, "ray-request-timeout", 10*time.Second, "with --launcher ray: bound of each request to the dashboard (requests other than submit are retried twice when they get no answer)")
	fs.StringVar(&f.python, "ray-python", "python3", "with --launcher ray: the Python on the Ray nodes that runs the placement-group driver (for tasks with ray.placement_group)")
}

// validate refuses Ray flags without --launcher ray and a missing
// --ray-address with it.
func (f *rayAgentFlags) validate(c *cobra.Command, launcher string) error {
	if launcher != launcherRay {
		for _, name := range []string{"ray-address", "ray-pending-timeout", "ray-poll-interval", "ray-request-timeout", "ray-python"} {
			if c.Flags().Changed(name) {
				return usagef("--%s goes with --launcher %s", name, launcherRay)
			}
		}
		return nil
	}
	if c.Flags().Changed("spool-dir") {
		return usagef("--spool-dir goes with --launcher external, not %s", launcherRay)
	}
	if f.address == "" {
		return usagef("--ray-address: required with --launcher ray (the dashboard, http://HEAD:8265; or set WDC_RAY_ADDRESS)")
	}
	for name, d := range map[string]time.Duration{"ray-pending-timeout": f.pendingTimeout, "ray-poll-interval": f.pollInterval, "ray-request-timeout": f.requestTimeout} {
		if d <= 0 {
			return usagef("--%s %s: must be positive", name, d)
		}
	}
	if _, err := ray.NewClient(ray.ClientOptions{Address: f.address}); err != nil {
		return usagef("--ray-address: %v", err)
	}
	return nil
}

// A restarted Ray agent adopts the jobs still running.
var _ worker.Adopter = (*ray.Launcher)(nil)

// rayAgent connects to the dashboard, reads its Ray version once (which
// fixes the submit fields for the agent's life) and returns the launcher
// (whose jobs sign with keys signer delegates, when set),
// the liveness check the worker heartbeats depend on, and a line saying
// where attempts run. Errors: a dashboard that does not answer, or a Ray
// version older than ray.MinRayVersion.
func (a *app) rayAgent(ctx context.Context, f rayAgentFlags, workerID, execBin, blobURL string, tc client.Client, store *blobstore.Store, log *slog.Logger,
	signer *identity.Signer) (worker.AgentLauncher, func(context.Context) error, string, error) {
	rc, err := ray.NewClient(ray.ClientOptions{Address: f.address, Timeout: f.requestTimeout})
	if err != nil {
		return nil, nil, "", usagef("--ray-address: %v", err)
	}
	vctx, cancel := context.WithTimeout(ctx, a.global.controlPlaneTimeout)
	v, err := rc.Version(vctx)
	cancel()
	if err != nil {
		return nil, nil, "", fmt.Errorf("ray dashboard %s does not answer GET /api/version (is --ray-address the dashboard, port 8265 by default?): %w", rc.Address(), err)
	}
	fields, err := ray.FieldsFor(v.RayVersion)
	if err != nil {
		return nil, nil, "", fmt.Errorf("ray dashboard %s: %w", rc.Address(), err)
	}
	l, err := ray.New(ray.Options{WorkerID: workerID, Client: rc, Fields: fields, Blobs: store,
		Control: &executor.TemporalControl{Client: tc}, Target: a.execTarget(execBin, blobURL), Python: f.python,
		PendingTimeout: f.pendingTimeout, PollInterval: f.pollInterval, Logger: log, Signer: signer})
	if err != nil {
		return nil, nil, "", err
	}
	alive := func(ctx context.Context) error {
		_, err := rc.Version(ctx)
		return err
	}
	where := fmt.Sprintf("submitting attempts as jobs to Ray %s at %s", v.RayVersion, rc.Address())
	return l, alive, where, nil
}
