package cmd

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/yaml"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/k8s"
	"github.com/wdc-runtime/wdc/lease"
)

// k8sRenderFlagNames are the k8s flags render-launch takes (what shapes
// the Job; nothing that connects).
var k8sRenderFlagNames = []string{"k8s-namespace", "k8s-image", "k8s-executor-secret", "k8s-executor-configmap",
	"k8s-service-account", "k8s-task-pvc", "k8s-ttl-after-finished",
	k8s.FlagAllowedImages, k8s.FlagAllowedTolerations, k8s.FlagAllowedPriorityClasses, k8s.FlagAllowedRuntimeClasses}

// bindRender binds k8sRenderFlagNames.
func (k *k8sFlags) bindRender(f *pflag.FlagSet) {
	all := pflag.NewFlagSet("k8s", pflag.ContinueOnError)
	k.bind(all)
	for _, name := range k8sRenderFlagNames {
		fl := all.Lookup(name)
		fl.Usage = "with --launcher k8s" + fl.Usage[len("with --launcher k8s"):]
		f.AddFlag(fl)
	}
}

// renderedK8s is `render-launch --launcher k8s -o json`.
type renderedK8s struct {
	Job   *batchv1.Job          `json:"job"`
	Lease *coordinationv1.Lease `json:"lease"`
}

// renderK8sLaunch prints the Job and Lease the k8s launcher would send
// for the envelope in path, as YAML documents (or JSON with -o json). No
// server is contacted. The Lease's owner reference to the Job is added at
// launch (it needs the Job's UID), and its times are the launch's.
func (a *app) renderK8sLaunch(c *cobra.Command, path, workerID string, attempt, fence int64, execBin, dataDir, blobURL string, k *k8sFlags) error {
	if c.Flags().Changed("work-dir") {
		return usagef("--work-dir: not with --launcher k8s (the pod's work directory is its own)")
	}
	if err := k.check(c, launcherK8s); err != nil {
		return err
	}
	env, claim, err := renderClaim(path, launcherK8s, workerID, attempt, fence)
	if err != nil {
		return err
	}
	if k.image == "" && (env.K8s == nil || env.K8s.Image == "") {
		return usagef("--k8s-image: give the executor's container image (or the envelope's k8s.image); it must hold --exec-binary")
	}
	ns := k.namespace
	if ns == "" {
		ns = "default"
	}
	spec, err := k.spec(ns, func() (string, error) { return a.storeURL(dataDir, blobURL) }, a, execBin)
	if err != nil {
		return err
	}
	att := launchers.Attempt{Envelope: env, Lease: lease.Lease{TaskID: claim.TaskID, WorkerID: claim.WorkerID, Attempt: claim.Attempt, Fence: claim.Fence,
		EnvelopeDigest: claim.EnvelopeDigest, State: lease.Active, TTL: api.DefaultLeaseTTL}}
	job, l, err := k8s.Render(spec, att, time.Now())
	var refused *k8s.NotAllowedError
	if errors.As(err, &refused) {
		return usageError{err} // the agent would refuse the launch too
	}
	if err != nil {
		return err
	}
	return a.emit(renderedK8s{Job: job, Lease: l}, func(w io.Writer) error {
		for i, o := range []any{job, l} {
			b, err := yaml.Marshal(o)
			if err != nil {
				return err
			}
			if i > 0 {
				fmt.Fprintln(w, "---")
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
}
