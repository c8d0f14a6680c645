package cmd

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wdc-runtime/wdc/launchers/ray"
)

// rayRenderFlags are render-launch's Ray flags.
type rayRenderFlags struct {
	rayVersion string
}

func (f *rayRenderFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.rayVersion, "ray-version", "", "with --launcher ray: the cluster's Ray version, which decides the entrypoint_* fields sent (default: every field, as for Ray 2.8 and later)")
}

// validate refuses the Ray flags without --launcher ray.
func (f *rayRenderFlags) validate(c *cobra.Command, launcher string) error {
	if launcher != launcherRay && c.Flags().Changed("ray-version") {
		return usagef("--ray-version goes with --launcher %s", launcherRay)
	}
	return nil
}

// renderRayLaunch prints the exact body the Ray launcher would POST to
// /api/jobs/ for the envelope's attempt on workerID: the same bytes, one
// line of JSON (pipe it to jq to read it). Nothing is contacted.
func (a *app) renderRayLaunch(f rayRenderFlags, path, workerID string, attempt, fence int64, execBin, dataDir, blobURL string) error {
	fields := ray.LatestFields
	if f.rayVersion != "" {
		var err error
		if fields, err = ray.FieldsFor(f.rayVersion); err != nil {
			return usagef("--ray-version: %v", err)
		}
	}
	env, claim, err := renderClaim(path, launcherRay, workerID, attempt, fence)
	if err != nil {
		return err
	}
	u, err := a.storeURL(dataDir, blobURL)
	if err != nil {
		return err
	}
	req, dropped := ray.Request(ray.RequestOptions{Target: a.execTarget(execBin, u), Fields: fields}, claim, env)
	body, err := ray.Body(req)
	if err != nil {
		return err
	}
	if len(dropped) > 0 {
		fmt.Fprintf(a.deps.Stderr, "wdc: Ray %s does not know %v: not sent\n", fields.RayVersion, dropped)
	}
	_, err = fmt.Fprintf(a.deps.Stdout, "%s\n", body)
	return err
}
