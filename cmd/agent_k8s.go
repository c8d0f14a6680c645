package cmd

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/executor"
	"github.com/wdc-runtime/wdc/launchers/k8s"
	"github.com/wdc-runtime/wdc/worker"
)

// launcherK8s is `wdc agent --launcher k8s`.
const launcherK8s = "k8s"

// k8sFlags are the Kubernetes launcher's flags (agent and render-launch).
type k8sFlags struct {
	kubeconfig     string
	namespace      string
	image          string
	apply          bool
	secret         string
	configMap      string
	serviceAccount string
	taskPVC        string
	ttl            int64
	pendingBound   time.Duration
	allow          k8s.Allowlist
}

// k8sFlagNames are the flags that go with --launcher k8s only.
var k8sFlagNames = []string{"kubeconfig", "k8s-namespace", "k8s-image", "k8s-apply", "k8s-executor-secret", "k8s-executor-configmap",
	"k8s-service-account", "k8s-task-pvc", "k8s-ttl-after-finished", "k8s-pending-bound",
	k8s.FlagAllowedImages, k8s.FlagAllowedTolerations, k8s.FlagAllowedPriorityClasses, k8s.FlagAllowedRuntimeClasses}

func (k *k8sFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&k.kubeconfig, "kubeconfig", "", "with --launcher k8s: kubeconfig file (default $KUBECONFIG, then ~/.kube/config, then the in-cluster service account)")
	f.StringVar(&k.namespace, "k8s-namespace", "", "with --launcher k8s: namespace of the Jobs and Leases (default: the kubeconfig context's, or the pod's own in-cluster)")
	f.StringVar(&k.image, "k8s-image", "", "with --launcher k8s: container image that runs 'wdc exec' when the envelope's k8s.image is empty; it must hold --exec-binary")
	f.BoolVar(&k.apply, "k8s-apply", false, "with --launcher k8s: allow creating and deleting Jobs and Leases (off: launches are refused, the cluster is only read)")
	f.StringVar(&k.secret, "k8s-executor-secret", "", "with --launcher k8s: Secret given to the executor container as envFrom (AWS_*, TEMPORAL_API_KEY); never reaches the task")
	f.StringVar(&k.configMap, "k8s-executor-configmap", "", "with --launcher k8s: ConfigMap given to the executor container as envFrom")
	f.StringVar(&k.serviceAccount, "k8s-service-account", "", "with --launcher k8s: the pods' service account (its token is not mounted)")
	f.StringVar(&k.taskPVC, "k8s-task-pvc", "", "with --launcher k8s: PersistentVolumeClaim for task directories, mounted with subPath <task-id>")
	f.Int64Var(&k.ttl, "k8s-ttl-after-finished", 3600, "with --launcher k8s: seconds a finished Job (and its pod and Lease) is kept when the envelope says nothing (-1: until deleted by hand; a Job whose lease ends is deleted at once either way)")
	f.DurationVar(&k.pendingBound, "k8s-pending-bound", k8s.DefaultPendingBound, "with --launcher k8s: how long a pod may stay unscheduled or in image-pull back-off before its attempt ends launch_failed")
	// The allowlists: Go path.Match globs ("*" stops at "/"; "*" alone
	// matches anything), repeatable or comma-separated, empty by default.
	f.StringSliceVar(&k.allow.Images, k8s.FlagAllowedImages, nil, "with --launcher k8s: images the envelope's k8s.image may name, as path.Match globs ('*' stops at '/'), "+
		"e.g. 'registry.example.com/sim/*', 'ghcr.io/org/solver:*'; repeatable or comma-separated. The executor container gets --k8s-executor-secret, "+
		"so any other image is refused (launch_failed); none given: only --k8s-image")
	f.StringSliceVar(&k.allow.Tolerations, k8s.FlagAllowedTolerations, nil, "with --launcher k8s: tolerations the envelope may set, as KEY[=VALUE][:EFFECT] globs: "+
		"'dedicated=wdc:NoSchedule' (operator Equal), 'gpu' (that key with any value, or operator Exists), 'pool/*:NoExecute'; "+
		"only '*' allows every toleration, including an empty key with operator Exists; none given: no toleration")
	f.StringSliceVar(&k.allow.PriorityClasses, k8s.FlagAllowedPriorityClasses, nil, "with --launcher k8s: PriorityClass names (or path.Match globs) the envelope's k8s.priority_class_name may give; none given: the envelope may name none")
	f.StringSliceVar(&k.allow.RuntimeClasses, k8s.FlagAllowedRuntimeClasses, nil, "with --launcher k8s: RuntimeClass names (or path.Match globs) the envelope's k8s.runtime_class_name may give; none given: the envelope may name none")
}

// check refuses k8s flags without --launcher k8s, and bad values.
func (k *k8sFlags) check(c *cobra.Command, launcher string) error {
	if launcher != launcherK8s {
		for _, name := range k8sFlagNames {
			if c.Flags().Changed(name) {
				return usagef("--%s goes with --launcher %s", name, launcherK8s)
			}
		}
		return nil
	}
	if k.ttl < -1 || k.ttl > envelope.MaxK8sSeconds {
		return usagef("--k8s-ttl-after-finished %d: want -1 (keep) or 0 to %d seconds", k.ttl, envelope.MaxK8sSeconds)
	}
	if k.pendingBound <= 0 {
		return usagef("--k8s-pending-bound %s: must be positive", k.pendingBound)
	}
	if err := k.allow.Validate(); err != nil {
		return usageError{err}
	}
	// Object names as the API server checks them: a namespace is a
	// DNS-1123 label, the others DNS-1123 subdomains.
	if k.namespace != "" {
		if errs := validation.IsDNS1123Label(k.namespace); len(errs) > 0 {
			return usagef("--k8s-namespace %q: %s", k.namespace, strings.Join(errs, "; "))
		}
	}
	for _, f := range []struct{ name, value string }{
		{"k8s-executor-secret", k.secret}, {"k8s-executor-configmap", k.configMap},
		{"k8s-service-account", k.serviceAccount}, {"k8s-task-pvc", k.taskPVC},
	} {
		if f.value == "" {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(f.value); len(errs) > 0 {
			return usagef("--%s %q: %s", f.name, f.value, strings.Join(errs, "; "))
		}
	}
	return nil
}

// restConfig loads the cluster's client configuration as kubectl does
// (--kubeconfig, then $KUBECONFIG, then ~/.kube/config; in a pod with
// none of them, the in-cluster service account) and the namespace to use
// (--k8s-namespace, else the context's, else "default").
func (a *app) k8sRESTConfig(k *k8sFlags) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if v := a.deps.Getenv(clientcmd.RecommendedConfigPathEnvVar); v != "" {
		rules.Precedence = filepath.SplitList(v)
	}
	rules.ExplicitPath = k.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
	cfg, err := cc.ClientConfig()
	if err != nil {
		if k.kubeconfig != "" {
			return nil, "", fmt.Errorf("kubernetes client configuration (--kubeconfig %s): %w", k.kubeconfig, err)
		}
		return nil, "", fmt.Errorf("kubernetes client configuration: %w (give --kubeconfig or set KUBECONFIG)", err)
	}
	ns := k.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", fmt.Errorf("kubernetes namespace: %w (give --k8s-namespace)", err)
		}
	}
	cfg.UserAgent = "wdc-agent"
	return cfg, ns, nil
}

// k8sSpec is the Jobs' shared spec.
func (k *k8sFlags) spec(ns string, target func() (string, error), a *app, execBin string) (k8s.Spec, error) {
	u, err := target()
	if err != nil {
		return k8s.Spec{}, err
	}
	s := k8s.Spec{Namespace: ns, Image: k.image, Target: a.execTarget(execBin, u), ExecutorSecret: k.secret,
		ExecutorConfigMap: k.configMap, ServiceAccount: k.serviceAccount, TaskPVC: k.taskPVC, Allow: k.allow}
	if k.ttl >= 0 {
		ttl := k.ttl
		s.TTLSecondsAfterFinished = &ttl
	}
	return s, nil
}

// A restarted Kubernetes agent adopts the Jobs still running.
var _ worker.Adopter = (*k8s.Launcher)(nil)

// k8sAgentSetup builds the agent's Kubernetes launcher: it connects to
// the cluster, fills the worker's capacity from the namespace's
// ResourceQuota when --cpu/--memory/--gpus were not given, adds the
// launcher capability, gives each attempt a key delegated by signer (when
// set), and gates heartbeats on the API server's
// readiness. The launcher answers lease queries, so that a restarted
// agent adopts the Jobs still running (worker.Adopter).
func (a *app) k8sAgentSetup(ctx context.Context, c *cobra.Command, k *k8sFlags, reg *fleet.Registration, tc client.Client,
	store *blobstore.Store, storeURL func() (string, error), execBin string, signer *identity.Signer, opts *worker.AgentOptions) (string, error) {
	cfg, ns, err := a.k8sRESTConfig(k)
	if err != nil {
		return "", err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", fmt.Errorf("kubernetes client: %w", err)
	}
	spec, err := k.spec(ns, storeURL, a, execBin)
	if err != nil {
		return "", err
	}
	sctx, cancel := context.WithTimeout(ctx, a.global.controlPlaneTimeout)
	defer cancel()
	// An API server that cannot be reached is said at once, with its
	// cause, rather than after every later call has waited out sctx.
	if err := k8s.Ready(sctx, cs); err != nil {
		return "", fmt.Errorf("%w (is %s reachable with this kubeconfig?)", err, cfg.Host)
	}
	if !c.Flags().Changed("cpu") && !c.Flags().Changed("memory") && !c.Flags().Changed("gpus") {
		quota, found, err := k8s.QuotaCapacity(sctx, cs, ns)
		switch {
		case err != nil:
			fmt.Fprintf(a.deps.Stderr, "wdc: capacity: %v; using the flags' defaults\n", err)
		case found:
			reg.Capacity.CPUMillis, reg.Capacity.MemoryBytes, reg.Capacity.GPUs = quota.CPUMillis, quota.MemoryBytes, quota.GPUs
		}
	}
	declareLauncher(reg, envelope.LauncherK8s)
	l, err := k8s.New(sctx, k8s.Options{WorkerID: reg.WorkerID, Client: cs, Spec: spec, Apply: k.apply, Blobs: store,
		Reporter: &executor.TemporalControl{Client: tc}, Control: &executor.TemporalControl{Client: tc}, PendingBound: k.pendingBound, Logger: a.logger(), Signer: signer})
	if err != nil {
		return "", err
	}
	opts.Launcher, opts.Healthy = l, l.Healthy
	where := fmt.Sprintf("launching Jobs in namespace %s of %s", ns, cfg.Host)
	if !k.apply {
		where += " — cluster writes are OFF: launches will be refused (add --k8s-apply)"
	}
	return where, nil
}
