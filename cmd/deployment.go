package cmd

import (
	"strings"

	"github.com/spf13/pflag"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/wdc-runtime/wdc/worker"
)

// deploymentFlags name the Worker Deployment Version a control plane
// serves.
type deploymentFlags struct {
	name    string
	buildID string
}

func (d *deploymentFlags) bind(f *pflag.FlagSet, getenv func(string) string) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	f.StringVar(&d.name, "deployment-name", env("WDC_DEPLOYMENT_NAME", worker.DefaultDeploymentName),
		"the Temporal Worker Deployment this control plane joins; every control plane of one wdc installation (namespace) names the same one (env WDC_DEPLOYMENT_NAME)")
	f.StringVar(&d.buildID, "build-id", env("WDC_BUILD_ID", ""),
		"this control plane's version within the deployment: control planes with the same build ID share work, and a task runs to its end on the build ID it started on, so give every release its own (env WDC_BUILD_ID; default: the binary's version as 'wdc version' prints it, \"dev\" for a build that records none)")
}

// version validates the flags into a deployment version; a bad one is a
// usage error naming its flag.
func (d *deploymentFlags) version() (sdkworker.WorkerDeploymentVersion, error) {
	v := sdkworker.WorkerDeploymentVersion{DeploymentName: d.name, BuildID: d.buildID}
	if v.BuildID == "" {
		v.BuildID = worker.DefaultBuildID()
	}
	if err := worker.ValidateDeploymentName(v.DeploymentName); err != nil {
		return v, usagef("--deployment-name: %v", err)
	}
	if err := worker.ValidateBuildID(v.BuildID); err != nil {
		return v, usagef("--build-id: %v", err)
	}
	return v, nil
}

// temporalFlags are the temporal CLI flags that reach the server and
// namespace this command uses, for a command it prints; defaults are left
// out.
func (a *app) temporalFlags() string {
	var flags []string
	if a.global.address != defaultAddress {
		flags = append(flags, "--address "+a.global.address)
	}
	if a.global.namespace != "default" {
		flags = append(flags, "--namespace "+a.global.namespace)
	}
	return strings.Join(flags, " ")
}
