package testsuite

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	kubetest "github.com/wdc-runtime/wdc/internal/testenv/kube"
	s3test "github.com/wdc-runtime/wdc/internal/testenv/s3"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/launchers/k8s"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
)

// nsK8s is the Temporal namespace of the Kubernetes launcher tests: their
// own control plane and bucket, apart from the suite's.
const nsK8s = "wdc-k8s"

// k8sEnv is the shared state of the Kubernetes launcher tests: a real
// kube-apiserver, etcd and kube-controller-manager (internal/testenv/kube),
// the test kubelet, a `wdc control-plane` and a `wdc agent --launcher k8s`
// process that reaches the cluster as the RBAC manifest's service
// account, with only the S3 bucket between them and the pods.
type k8sEnv struct {
	s       *s3Setup
	cluster *kubetest.Cluster
	kubelet *kubetest.Kubelet
	ns      string
	admin   kubernetes.Interface
	blobs   *blobstore.Store
	secret  map[string]string // the executor Secret's values
	// launcher is the RBAC manifest's service account's client config,
	// kubeconfig the file that holds it.
	launcher   *rest.Config
	kubeconfig string
	// spawned counts the agents started per worker ID.
	spawned map[string]int
	// iss enrolls the agents: the control plane requires signed
	// registrations and results, so every pod signs with its attempt's key.
	iss *identity.Issuer
}

// k8sWorker is the agent's worker ID.
const k8sWorker = "k8s-pool"

// unboundPrefix: the test kubelet never binds pods of tasks named so.
const unboundPrefix = "k8s-unbound"

func startK8sEnv(t *testing.T) *k8sEnv {
	t.Helper()
	ctx := context.Background()
	e := &k8sEnv{ns: "wdc-jobs", spawned: map[string]int{}}
	e.s = newS3Setup(t, nsK8s)
	var err error
	e.iss, err = identity.NewIssuer(spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	require.NoError(t, err)
	bundle, err := e.iss.Bundle().Marshal()
	require.NoError(t, err)
	bundlePath := filepath.Join(t.TempDir(), "bundle.pem")
	require.NoError(t, os.WriteFile(bundlePath, bundle, 0o644))
	e.s.startControlPlane(t, "--trust-bundle", bundlePath)
	subID, err := identity.SubmitterID(e.iss.TrustDomain(), "k8s-test")
	require.NoError(t, err)
	sub, err := e.iss.Issue(subID, time.Hour)
	require.NoError(t, err)
	e.s.wc.Signer, err = identity.NewSigner(sub)
	require.NoError(t, err)
	e.blobs, err = blobstore.Open(ctx, e.s.url)
	require.NoError(t, err)
	t.Cleanup(func() { e.blobs.Close() })

	began := time.Now()
	e.cluster, err = kubetest.Start(ctx, filepath.Join(t.TempDir(), "kube"))
	require.NoError(t, err, "the Kubernetes control plane (a missing binary is a failure: build it with tools/k8s/build.sh)")
	t.Logf("kube-apiserver, etcd and kube-controller-manager ready in %s", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.cluster.Logs())
		}
		e.cluster.Stop()
	})
	e.admin = e.cluster.Client
	_, err = e.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The executor's credentials: the bucket's, and the switch that makes
	// this test binary wdc. They reach `wdc exec` through the Secret only.
	srv, err := s3test.Start()
	require.NoError(t, err)
	e.secret = map[string]string{envRunCLI: "1"}
	for k, v := range srv.Env() {
		e.secret[k] = v
	}
	_, err = e.admin.CoreV1().Secrets(e.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "wdc-executor"}, StringData: e.secret}, metav1.CreateOptions{})
	require.NoError(t, err)

	e.kubeconfig = e.launcherKubeconfig(t)
	e.kubelet, err = kubetest.StartKubelet(e.admin, kubetest.KubeletOptions{Namespace: e.ns, Dir: filepath.Join(t.TempDir(), "pods"),
		Bind: func(p *corev1.Pod) bool {
			return !strings.HasPrefix(p.Annotations[k8s.AnnotationPrefix+"task"], unboundPrefix)
		}})
	require.NoError(t, err)
	t.Cleanup(e.kubelet.Stop)

	e.spawnAgent(t, k8sWorker, e.kubeconfig, "k8s")
	return e
}

// spawnAgent runs `wdc agent --launcher k8s` as worker id, labelled
// suite-test=label, and waits until it is ACTIVE.
func (e *k8sEnv) spawnAgent(t *testing.T, id, kubeconfig, label string, extra ...string) *exec.Cmd {
	t.Helper()
	e.spawned[id]++ // a restarted agent gets a data directory of its own
	svid, err := e.iss.IssueWorker(id, time.Hour)
	require.NoError(t, err)
	svidDir := filepath.Join(t.TempDir(), "svid-"+id)
	require.NoError(t, identity.WriteSVID(svidDir, svid, e.iss.Bundle()))
	args := append([]string{"agent", "--worker-id", id, "--launcher", "k8s", "--kubeconfig", kubeconfig, "--svid-dir", svidDir,
		"--k8s-apply", "--k8s-image", "wdc:test", "--exec-binary", os.Args[0], "--k8s-executor-secret", "wdc-executor",
		"--k8s-pending-bound", "4s", "--blob-url", e.s.url, "--data-dir", e.s.dir(t, id+"-"+strconv.Itoa(e.spawned[id])),
		"--label", "suite-test=" + label, "--cpu", "4", "--memory", "4Gi",
		// Allowed so that the preflight, not the allowlist, refuses it.
		"--k8s-allowed-priority-classes", "no-such-class"}, extra...)
	agent, _ := e.s.spawn(t, id, args...)
	waitFor(t, 30*time.Second, id+" ACTIVE", func() bool {
		v, err := e.s.wc.Worker(context.Background(), id)
		return err == nil && v.State == fleet.Active
	})
	return agent
}

// launcherKubeconfig applies deploy/k8s/launcher/rbac.yaml to the test
// namespace and returns a kubeconfig for its service account (a token
// from the TokenRequest API): the agent has exactly the manifest's rights.
func (e *k8sEnv) launcherKubeconfig(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	_, self, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "deploy", "k8s", "launcher", "rbac.yaml"))
	require.NoError(t, err)
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var meta metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal([]byte(doc), &meta))
		switch meta.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &o))
			o.Namespace = e.ns
			_, err = e.admin.CoreV1().ServiceAccounts(e.ns).Create(ctx, &o, metav1.CreateOptions{})
		case "Role":
			var o rbacv1.Role
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &o))
			o.Namespace = e.ns
			_, err = e.admin.RbacV1().Roles(e.ns).Create(ctx, &o, metav1.CreateOptions{})
		case "RoleBinding":
			var o rbacv1.RoleBinding
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &o))
			o.Namespace, o.Subjects[0].Namespace = e.ns, e.ns
			_, err = e.admin.RbacV1().RoleBindings(e.ns).Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRole":
			var o rbacv1.ClusterRole
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &o))
			_, err = e.admin.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &o))
			o.Subjects[0].Namespace = e.ns
			_, err = e.admin.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		default:
			t.Fatalf("launcher/rbac.yaml: unexpected kind %q", meta.Kind)
		}
		require.NoError(t, err, meta.Kind)
	}
	tok, err := e.admin.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, "wdc-launcher",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "launcher.kubeconfig")
	cfg := rest.CopyConfig(e.cluster.Config)
	cfg.BearerToken = tok.Status.Token
	require.NoError(t, kubetest.WriteKubeconfig(path, cfg, e.ns))
	e.launcher = cfg
	return path
}

// envelope is a k8s task for the agent's worker.
func (e *k8sEnv) envelope(t *testing.T, taskID, script string) envelope.Envelope {
	return e.envelopeFor(t, "k8s", taskID, script)
}

// envelopeFor is a k8s task for the worker labelled suite-test=label.
func (e *k8sEnv) envelopeFor(t *testing.T, label, taskID, script string) envelope.Envelope {
	t.Helper()
	env := envelope.Envelope{
		TaskID: taskID, RunID: "run-" + taskID, WorldID: "suite", Launcher: envelope.LauncherK8s,
		Command:   []string{"/bin/sh", "-c", script},
		Env:       map[string]string{"PATH": "/usr/bin:/bin"},
		Resources: resource.List{CPUMillis: 100, MemoryBytes: 64 << 20},
		Selector:  map[string]string{"suite-test": label},
	}
	env.Normalize()
	require.NoError(t, env.Validate(true))
	return env
}

func (e *k8sEnv) submit(t *testing.T, env envelope.Envelope, opts api.TaskOptions) {
	t.Helper()
	if opts.SelectInterval == 0 {
		opts.SelectInterval = 200 * time.Millisecond
	}
	_, err := e.s.wc.SubmitTask(context.Background(), env, opts)
	require.NoError(t, err)
}

func (e *k8sEnv) outcome(t *testing.T, taskID string) (api.TaskOutcome, api.TaskView) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := e.s.wc.WaitTask(ctx, taskID)
	require.NoError(t, err)
	view, err := e.s.wc.Task(ctx, taskID)
	require.NoError(t, err)
	return out, view
}

func (e *k8sEnv) artifact(t *testing.T, res *api.TaskResult, name string) string {
	t.Helper()
	return readArtifactFrom(t, e.blobs, res, name)
}

// pod waits for the one pod of the task's attempt n and returns it.
func (e *k8sEnv) pod(t *testing.T, taskID string, n int64, running bool) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	sel := labels.SelectorFromSet(labels.Set{k8s.LabelTask: k8s.LabelValue(taskID), k8s.LabelAttempt: itoa(n)}).String()
	waitFor(t, 60*time.Second, "the pod of "+taskID+" attempt "+itoa(n), func() bool {
		pods, err := e.admin.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
		if err != nil || len(pods.Items) != 1 {
			return false
		}
		pod = pods.Items[0]
		return !running || e.kubelet.Running(pod.Name)
	})
	return pod
}

func (e *k8sEnv) jobs(t *testing.T, taskID string) []batchv1.Job {
	t.Helper()
	list, err := e.admin.BatchV1().Jobs(e.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{k8s.LabelTask: k8s.LabelValue(taskID)}).String()})
	require.NoError(t, err)
	return list.Items
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// schedulingPriorityClass is a PriorityClass the dry run names.
var schedulingPriorityClass = schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "wdc-batch"}, Value: 100}

func TestKubernetesLauncher(t *testing.T) {
	e := startK8sEnv(t)

	// The whole path: the agent creates the Job and its Lease, the real
	// Job controller makes the pod, the test kubelet runs its `wdc exec`,
	// which runs the task and submits its result through the bucket. The
	// task's environment holds nothing of the executor's Secret.
	t.Run("a Job runs to an accepted result", func(t *testing.T) {
		env := e.envelope(t, "k8s-ok", `env | sort > outputs/env.txt; echo ok > outputs/done.txt`)
		e.submit(t, env, api.TaskOptions{LeaseTTL: 10 * time.Second})
		pod := e.pod(t, env.TaskID, 1, false)
		leaseObj, err := e.admin.CoordinationV1().Leases(e.ns).Get(context.Background(), pod.Labels[k8s.LabelLease], metav1.GetOptions{})
		require.NoError(t, err, "the attempt's Lease exists while it runs")
		assert.Equal(t, k8sWorker+"/1/1", *leaseObj.Spec.HolderIdentity)
		assert.Equal(t, int32(10), *leaseObj.Spec.LeaseDurationSeconds)
		require.Len(t, leaseObj.OwnerReferences, 1)
		assert.Equal(t, "Job", leaseObj.OwnerReferences[0].Kind)
		// The attempt's key: in a Secret the Job owns, delegated to this
		// attempt alone, given to the pod by reference only.
		claim := waitLaunched(t, e.s.wc, env.TaskID, 1)
		keySecret, err := e.admin.CoreV1().Secrets(e.ns).Get(context.Background(), k8s.KeySecretName(claim), metav1.GetOptions{})
		require.NoError(t, err)
		require.Len(t, keySecret.OwnerReferences, 1)
		assert.Equal(t, "Job", keySecret.OwnerReferences[0].Kind)
		assert.Equal(t, pod.Labels[k8s.LabelLease], keySecret.OwnerReferences[0].Name)
		assert.True(t, *keySecret.Immutable)
		_, err = external.ParseAttemptKey(keySecret.Data[k8s.KeySecretKey], claim, "the key Secret")
		require.NoError(t, err)
		other := claim
		other.Fence++
		_, err = external.ParseAttemptKey(keySecret.Data[k8s.KeySecretKey], other, "the key Secret")
		require.Error(t, err, "delegated to this attempt only")
		var keyVar *corev1.EnvVar
		for i, v := range pod.Spec.Containers[0].Env {
			if v.Name == external.EnvAttemptKeyData {
				keyVar = &pod.Spec.Containers[0].Env[i]
			}
		}
		require.NotNil(t, keyVar, "the pod takes its key from the Secret")
		assert.Empty(t, keyVar.Value, "the key is not in the pod's spec")
		assert.Equal(t, keySecret.Name, keyVar.ValueFrom.SecretKeyRef.Name)

		out, view := e.outcome(t, env.TaskID)
		require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
		require.Len(t, view.Leases, 1, "no retry")
		assert.Equal(t, k8sWorker, view.Result.WorkerID)
		assert.True(t, strings.HasPrefix(view.AttemptDir, "k8s:"+e.ns+"/jobs/wdc-k8s-ok-a1-f1"), view.AttemptDir)
		assert.Equal(t, "ok\n", e.artifact(t, view.Result, "done.txt"))
		envTxt := e.artifact(t, view.Result, "env.txt")
		for k, v := range e.secret {
			assert.NotContains(t, envTxt, k, "the executor's Secret reached the task")
			if len(v) > 8 {
				assert.NotContains(t, envTxt, v)
			}
		}
		assert.NotContains(t, envTxt, external.EnvAttemptKeyData, "the attempt's key reached the task")
		assert.Contains(t, envTxt, "WDC_TASK_ID=k8s-ok\n")
		assert.Contains(t, envTxt, "PATH=/usr/bin:/bin\n")
		// The process submits its result before it exits.
		waitFor(t, 10*time.Second, "the pod's process ran and ended", func() bool { return e.kubelet.Exited(pod.Name) })
		waitFor(t, 30*time.Second, "the Job Complete", func() bool {
			jobs := e.jobs(t, env.TaskID)
			return len(jobs) == 1 && jobCondition(jobs[0], batchv1.JobComplete)
		})
	})

	// A hostile command in the pod hunts for its executor's credentials
	// (the executor Secret's, the attempt's key) through /proc: the
	// container holds no capability, so the non-dumpable `wdc exec` is out
	// of its reach although both run as root, and so is the pod's parent.
	t.Run("a hostile command in the pod finds no credential", func(t *testing.T) {
		env := e.envelope(t, "k8s-hostile", hostileScript)
		e.submit(t, env, api.TaskOptions{LeaseTTL: 20 * time.Second})
		out, view := e.outcome(t, env.TaskID)
		require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
		assert.Equal(t, "0", strings.TrimSpace(e.artifact(t, view.Result, "uid.txt")), "root in the container, as an image's default user")
		tries := e.artifact(t, view.Result, "tries.txt")
		for _, what := range []string{"environ", "mem", "fd", "parent-environ"} {
			assert.Contains(t, tries, what+":", "the hunt ran")
			assert.NotContains(t, tries, what+":0\n", "the command could read /proc/<executor>/%s: %s", what, tries)
		}
		found := e.artifact(t, view.Result, "found.txt")
		for k, v := range e.secret {
			assert.NotContains(t, found, k)
			if len(v) > 8 {
				assert.NotContains(t, found, v, "the command found the executor Secret's %s", k)
			}
		}
		assert.NotContains(t, found, external.EnvAttemptKeyData)
		assert.NotContains(t, found, `"delegation"`, "the command found the attempt's key")
	})

	// The program's own non-zero exit is its result: accepted, no retry.
	t.Run("the program's own exit does not retry", func(t *testing.T) {
		env := e.envelope(t, "k8s-exit", `echo failing > outputs/why.txt; exit 3`)
		e.submit(t, env, api.TaskOptions{LeaseTTL: 10 * time.Second, MaxAttempts: 3})
		out, view := e.outcome(t, env.TaskID)
		require.Equal(t, api.TaskCompleted, out.State)
		require.Len(t, view.Leases, 1, "no retry")
		assert.Equal(t, 3, view.Result.ExitCode)
		assert.Empty(t, view.Directives)
	})

	// An evicted pod (the kubelet kills it and sets DisruptionTarget, then
	// Failed): the Job fails by the pod failure policy's disruption rule,
	// the launcher reports infra_killed, and attempt 2 (fence 2) runs in a
	// new Job at once, without the task's backoff.
	t.Run("an evicted pod retries on a new attempt and fence", func(t *testing.T) {
		env := e.envelope(t, "k8s-evict", `if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 120; fi; echo "attempt $WDC_ATTEMPT" > outputs/done.txt`)
		// A backoff of 30 s would show: a disruption waits none.
		e.submit(t, env, api.TaskOptions{LeaseTTL: 60 * time.Second, MaxAttempts: 3, Backoff: lease.Backoff{Initial: 30 * time.Second, Max: time.Minute}})
		pod := e.pod(t, env.TaskID, 1, true)
		require.NoError(t, e.kubelet.Evict(context.Background(), pod.Name))
		out, view := e.outcome(t, env.TaskID)
		require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
		require.Len(t, view.Leases, 2)
		require.Len(t, view.Directives, 1)
		assert.Equal(t, lease.ReasonInfraKilled, view.Directives[0].Reason, "a disruption is not the task's fault: %s", view.Directives[0].Detail)
		assert.Contains(t, view.Directives[0].Detail, "DisruptionTarget")
		assert.Equal(t, [2]int64{2, 2}, [2]int64{view.Leases[1].Attempt, view.Leases[1].Fence})
		assert.Less(t, view.Leases[1].GrantedAt.Sub(view.Leases[0].EndedAt), 10*time.Second,
			"retried at once: no 30 s backoff, no wait for the 60 s lease TTL")
		assert.Equal(t, "attempt 2\n", e.artifact(t, view.Result, "done.txt"))
		waitFor(t, 30*time.Second, "attempt 1's Job deleted when its lease ended", func() bool {
			_, err := e.admin.BatchV1().Jobs(e.ns).Get(context.Background(), "wdc-k8s-evict-a1-f1", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	})

	// Fence loss: attempt 1's process is frozen, so its heartbeats stop
	// and its lease expires. The launcher deletes its Job and Lease (the
	// garbage collector then removes the pod, whose process the kubelet
	// kills); attempt 2 completes; the stale command, run again, is
	// refused as not current.
	t.Run("fence loss deletes the Job and the stale result is refused", func(t *testing.T) {
		env := e.envelope(t, "k8s-freeze", `if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 120; fi; echo ok > outputs/done.txt`)
		e.submit(t, env, api.TaskOptions{LeaseTTL: 3 * time.Second, MaxAttempts: 3, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
		pod := e.pod(t, env.TaskID, 1, true)
		staleArgv := pod.Spec.Containers[0].Command
		require.NoError(t, e.kubelet.Freeze(pod.Name))
		out, view := e.outcome(t, env.TaskID)
		require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
		require.GreaterOrEqual(t, len(view.Directives), 1)
		assert.Equal(t, lease.ReasonLeaseExpired, view.Directives[0].Reason)
		ctx := context.Background()
		waitFor(t, 30*time.Second, "attempt 1's Job, Lease, key Secret and pod deleted", func() bool {
			_, jerr := e.admin.BatchV1().Jobs(e.ns).Get(ctx, "wdc-k8s-freeze-a1-f1", metav1.GetOptions{})
			_, lerr := e.admin.CoordinationV1().Leases(e.ns).Get(ctx, "wdc-k8s-freeze-a1-f1", metav1.GetOptions{})
			_, serr := e.admin.CoreV1().Secrets(e.ns).Get(ctx, "wdc-k8s-freeze-a1-f1-key", metav1.GetOptions{})
			_, perr := e.admin.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(jerr) && apierrors.IsNotFound(lerr) && apierrors.IsNotFound(serr) && apierrors.IsNotFound(perr)
		})
		assert.True(t, e.kubelet.Exited(pod.Name), "the frozen process was killed with its pod")

		stale := exec.Command(staleArgv[0], staleArgv[1:]...)
		for k, v := range e.secret {
			stale.Env = append(stale.Env, k+"="+v)
		}
		stale.Dir = t.TempDir()
		outb, err := stale.CombinedOutput()
		var exit *exec.ExitError
		require.True(t, errors.As(err, &exit), "%v: %s", err, outb)
		assert.Equal(t, cmd.ExitNotCurrent, exit.ExitCode(), "%s", outb)
	})

	// A PriorityClass that does not exist: the API server would accept
	// the Job and its pod would never start; the launcher refuses before
	// creating anything, naming it, and the task sees launch_failed.
	t.Run("a missing PriorityClass is launch_failed before any Job", func(t *testing.T) {
		env := e.envelope(t, "k8s-noclass", `true`)
		env.K8s = &envelope.K8s{PriorityClassName: "no-such-class"}
		require.NoError(t, env.Validate(true))
		e.submit(t, env, api.TaskOptions{LeaseTTL: 10 * time.Second, MaxAttempts: 1})
		out, view := e.outcome(t, env.TaskID)
		require.Equal(t, api.TaskRetriesExhausted, out.State, "%+v", view)
		require.Len(t, view.Directives, 1)
		assert.Equal(t, lease.ReasonLaunchFailed, view.Directives[0].Reason)
		assert.Contains(t, view.Directives[0].Detail, `priorityClassName "no-such-class": no such PriorityClass`)
		assert.Empty(t, e.jobs(t, env.TaskID), "no Job was created")
	})

	// The executor container gets the executor Secret, so its image is
	// the agent's choice: an envelope image or toleration off the agent's
	// allowlists (none given: --k8s-image only, no toleration) is refused
	// before anything is created, naming the field, as launch_failed.
	t.Run("an image or toleration off the allowlists is launch_failed before any Job", func(t *testing.T) {
		ctx := context.Background()
		secretNames := func() []string {
			list, err := e.admin.CoreV1().Secrets(e.ns).List(ctx, metav1.ListOptions{})
			require.NoError(t, err)
			var names []string
			for _, s := range list.Items {
				names = append(names, s.Name)
			}
			return names
		}
		secretsBefore := secretNames()
		refused := []struct {
			taskID string
			k8s    envelope.K8s
			want   string
		}{
			{"k8s-evil-image", envelope.K8s{Image: "evil/img:1"}, `k8s.image "evil/img:1" is not on the agent's --k8s-allowed-images`},
			{"k8s-evil-toleration", envelope.K8s{Tolerations: []envelope.Toleration{{Operator: "Exists"}}},
				`k8s.tolerations[0] "" is not on the agent's --k8s-allowed-tolerations (an empty key with operator Exists tolerates every taint`},
		}
		for _, c := range refused {
			env := e.envelope(t, c.taskID, `env > outputs/env.txt`)
			env.K8s = &c.k8s
			require.NoError(t, env.Validate(true))
			e.submit(t, env, api.TaskOptions{LeaseTTL: 10 * time.Second, MaxAttempts: 1})
		}
		for _, c := range refused {
			out, view := e.outcome(t, c.taskID)
			require.Equal(t, api.TaskRetriesExhausted, out.State, "%+v", view)
			require.Len(t, view.Directives, 1)
			assert.Equal(t, lease.ReasonLaunchFailed, view.Directives[0].Reason)
			assert.Contains(t, view.Directives[0].Detail, c.want)
			assert.Empty(t, e.jobs(t, c.taskID), "no Job was created")
			leases, err := e.admin.CoordinationV1().Leases(e.ns).List(ctx, metav1.ListOptions{
				LabelSelector: labels.SelectorFromSet(labels.Set{k8s.LabelTask: k8s.LabelValue(c.taskID)}).String()})
			require.NoError(t, err)
			assert.Empty(t, leases.Items, "no Lease was created")
		}
		assert.Equal(t, secretsBefore, secretNames(), "no Secret was created")
	})

	// A pod nobody schedules stays Pending: after the launcher's bound
	// (--k8s-pending-bound 4s) the attempt ends launch_failed with the
	// pod's reason, and its Job is deleted.
	t.Run("a pod stuck Pending is launch_failed after the bound", func(t *testing.T) {
		env := e.envelope(t, unboundPrefix+"-1", `true`)
		e.submit(t, env, api.TaskOptions{LeaseTTL: 60 * time.Second, MaxAttempts: 1})
		pod := e.pod(t, env.TaskID, 1, false)
		assert.Empty(t, pod.Spec.NodeName)
		out, view := e.outcome(t, env.TaskID)
		require.Equal(t, api.TaskRetriesExhausted, out.State, "%+v", view)
		require.Len(t, view.Directives, 1)
		assert.Equal(t, lease.ReasonLaunchFailed, view.Directives[0].Reason)
		assert.Contains(t, view.Directives[0].Detail, "is not scheduled")
		assert.Contains(t, view.Directives[0].Detail, "4s")
		waitFor(t, 30*time.Second, "its Job deleted", func() bool { return len(e.jobs(t, env.TaskID)) == 0 })
	})

	// The rendered objects, with every optional field set, pass the real
	// server's validation (a server-side dry run), and the launcher's Lease
	// renewal handles a 409: the server refuses an update from a stale
	// resourceVersion, the launcher reads the Lease again and renews that
	// version, keeping what another writer changed; a Lease held by
	// someone else is left alone.
	t.Run("rendered objects are accepted and a stale Lease renewal is handled", func(t *testing.T) {
		ctx := context.Background()
		_, err := e.admin.SchedulingV1().PriorityClasses().Create(ctx, &schedulingPriorityClass, metav1.CreateOptions{})
		require.NoError(t, err)
		env := e.envelope(t, unboundPrefix+"-renew", `true`)
		env.K8s = &envelope.K8s{Image: "registry.example/wdc:1", ActiveDeadlineSeconds: 600, TTLSecondsAfterFinished: ptr.To[int64](60),
			PriorityClassName: schedulingPriorityClass.Name, NodeSelector: map[string]string{"pool": "cpu"},
			Tolerations: []envelope.Toleration{{Key: "dedicated", Operator: "Equal", Value: "wdc", Effect: "NoExecute", TolerationSeconds: ptr.To[int64](30)}}}
		env.Resources.GPUs = 1
		require.NoError(t, env.Validate(true))
		d, err := env.Digest()
		require.NoError(t, err)
		a := launchers.Attempt{Envelope: env, Lease: lease.Lease{TaskID: env.TaskID, WorkerID: "k8s-direct", Attempt: 1, Fence: 1,
			EnvelopeDigest: d, State: lease.Active, TTL: time.Hour}}
		spec := k8s.Spec{Namespace: e.ns, Image: "wdc:test", ExecutorSecret: "wdc-executor", TaskPVC: "tasks",
			Target: external.Target{Binary: os.Args[0], Address: suite.srv.FrontendHostPort(), Namespace: nsK8s, BlobURL: e.s.url},
			Allow:  k8s.Allowlist{Images: []string{"registry.example/*"}, Tolerations: []string{"dedicated=wdc:NoExecute"}, PriorityClasses: []string{schedulingPriorityClass.Name}}}
		job, l, err := k8s.Render(spec, a, time.Now())
		require.NoError(t, err)
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		_, err = e.admin.BatchV1().Jobs(e.ns).Create(ctx, job, dry)
		require.NoError(t, err, "the rendered Job")
		_, err = e.admin.CoordinationV1().Leases(e.ns).Create(ctx, l, dry)
		require.NoError(t, err, "the rendered Lease")
		keyed := spec
		keyed.AttemptKeys = true
		keyedJob, _, err := k8s.Render(keyed, a, time.Now())
		require.NoError(t, err)
		_, err = e.admin.BatchV1().Jobs(e.ns).Create(ctx, keyedJob, dry)
		require.NoError(t, err, "the rendered Job that takes its key from a Secret")
		svid, err := e.iss.IssueWorker("k8s-direct", time.Hour)
		require.NoError(t, err)
		signer, err := identity.NewSigner(svid)
		require.NoError(t, err)
		key, err := external.AttemptKey(signer, a.Claim())
		require.NoError(t, err)
		keyedJob.UID = "5f0c6c3e-0000-4000-8000-000000000001"
		keySecret, err := k8s.RenderKeySecret(keyed, a, key, keyedJob)
		require.NoError(t, err)
		_, err = e.admin.CoreV1().Secrets(e.ns).Create(ctx, keySecret, dry)
		require.NoError(t, err, "the rendered key Secret")

		reports := &kubetest.Reports{}
		spec.TaskPVC = ""
		launcher, err := k8s.New(ctx, k8s.Options{WorkerID: "k8s-direct", Client: e.admin, Spec: spec, Apply: true, Blobs: e.blobs, Reporter: reports, PendingBound: time.Hour})
		require.NoError(t, err)
		defer launcher.Shutdown(ctx, "test")
		sub, err := launcher.Submit(ctx, a)
		require.NoError(t, err)
		again, err := launcher.Submit(ctx, a)
		require.NoError(t, err, "a resubmission reads the existing Job")
		assert.Equal(t, sub, again)
		name := k8s.JobName(a.Claim())
		leases := e.admin.CoordinationV1().Leases(e.ns)
		before, err := leases.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		require.NoError(t, launcher.RenewLease(ctx, a.Claim()))

		// Another writer changes the Lease: the launcher's copy is stale,
		// and the server says so to a plain update.
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		stale := cur.DeepCopy()
		cur.Annotations["touched-by"] = "someone"
		_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
		require.NoError(t, err)
		_, err = leases.Update(ctx, stale, metav1.UpdateOptions{})
		require.True(t, apierrors.IsConflict(err), "the server refuses a stale resourceVersion with 409: %v", err)
		require.NoError(t, launcher.RenewLease(ctx, a.Claim()), "the launcher re-reads after its 409 and renews")
		after, err := leases.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "someone", after.Annotations["touched-by"], "the other writer's change was kept")
		assert.True(t, after.Spec.RenewTime.After(before.Spec.RenewTime.Time), "renewed")

		after.Spec.HolderIdentity = ptr.To("someone-else")
		_, err = leases.Update(ctx, after, metav1.UpdateOptions{})
		require.NoError(t, err)
		err = launcher.RenewLease(ctx, a.Claim())
		assert.True(t, errors.Is(err, k8s.ErrLeaseTaken), "%v", err)
		held, err := leases.Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "someone-else", *held.Spec.HolderIdentity, "never overwritten")

		require.NoError(t, launcher.Cancel(ctx, a.Claim(), "test"))
		waitFor(t, 30*time.Second, "the Job and its Lease deleted", func() bool {
			_, jerr := e.admin.BatchV1().Jobs(e.ns).Get(ctx, name, metav1.GetOptions{})
			_, lerr := leases.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(jerr) && apierrors.IsNotFound(lerr)
		})
		assert.Empty(t, reports.Got(), "nothing was reported for a cancelled attempt")
	})

	t.Run("a restarted agent adopts the Jobs still running", e.testAdoptAfterRestart)
	t.Run("a launch target is a fleet worker like any other", e.testWorkerLikeAnyOther)
	t.Run("the kustomize base passes a server-side dry run", e.testBaseDryRun)
}

// A Kubernetes launch target is a fleet worker like any other: several
// attempts run on it at once, and when its API server stops answering
// its heartbeats stop and it goes STALE (its leases would be revoked as
// worker_lost), then ACTIVE again once the server answers.
func (e *k8sEnv) testWorkerLikeAnyOther(t *testing.T) {
	proxy := startTCPProxy(t, strings.TrimPrefix(e.cluster.Config.Host, "https://"))
	cfg := rest.CopyConfig(e.launcher)
	cfg.Host = "https://" + proxy.Addr()
	kubeconfig := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	require.NoError(t, kubetest.WriteKubeconfig(kubeconfig, cfg, e.ns))
	e.spawnAgent(t, "k8s-proxied", kubeconfig, "k8s-proxied", "--stale-after", "3s", "--offline-after", "60s")

	var ids []string
	for i := range 3 {
		env := e.envelopeFor(t, "k8s-proxied", "k8s-many-"+itoa(int64(i)), `while [ ! -e "$RELEASE" ]; do sleep 0.1; done; echo done > outputs/done.txt`)
		release := filepath.Join(t.TempDir(), "release")
		env.Env["RELEASE"] = release
		e.submit(t, env, api.TaskOptions{LeaseTTL: 20 * time.Second})
		ids = append(ids, release)
		defer os.WriteFile(release, nil, 0o644)
	}
	for i := range 3 {
		e.pod(t, "k8s-many-"+itoa(int64(i)), 1, true)
	}
	for i := range 3 {
		assert.True(t, e.kubelet.Running(e.pod(t, "k8s-many-"+itoa(int64(i)), 1, true).Name), "all three run at once")
	}
	for _, release := range ids {
		require.NoError(t, os.WriteFile(release, nil, 0o644))
	}
	for i := range 3 {
		out, view := e.outcome(t, "k8s-many-"+itoa(int64(i)))
		require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
		assert.Equal(t, "k8s-proxied", view.Result.WorkerID)
	}

	proxy.Cut()
	waitFor(t, 30*time.Second, "k8s-proxied STALE without its API server", func() bool {
		v, err := e.s.wc.Worker(context.Background(), "k8s-proxied")
		return err == nil && v.State == fleet.Stale
	})
	proxy.Heal()
	waitFor(t, 30*time.Second, "k8s-proxied ACTIVE again", func() bool {
		v, err := e.s.wc.Worker(context.Background(), "k8s-proxied")
		return err == nil && v.State == fleet.Active
	})
}

// A Kubernetes agent killed (SIGKILL) while its Jobs run, and started
// again: its new incarnation adopts the Jobs still running, so their
// attempts keep their leases and complete on attempt 1; the adopted Jobs
// are followed again (their Leases renewed, a cancel deletes the Job).
// A Job deleted while no agent ran is not adopted: its reservation is
// lost on the re-registration and its task retries on attempt 2.
func (e *k8sEnv) testAdoptAfterRestart(t *testing.T) {
	const id = "k8s-restart"
	ctx := context.Background()
	extra := []string{"--stale-after", "20s", "--offline-after", "60s"}
	first := e.spawnAgent(t, id, e.kubeconfig, id, extra...)
	v, err := e.s.wc.Worker(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), v.Incarnation)

	release := filepath.Join(t.TempDir(), "release")
	defer os.WriteFile(release, nil, 0o644)
	wait := `while [ ! -e "$RELEASE" ]; do sleep 0.1; done; echo "attempt $WDC_ATTEMPT" > outputs/done.txt`
	kept, gone, cancelled := []string{"k8s-adopt-1", "k8s-adopt-2"}, "k8s-adopt-gone", "k8s-adopt-cancel"
	for _, task := range append(append([]string{}, kept...), gone, cancelled) {
		env := e.envelopeFor(t, id, task, wait)
		env.Env["RELEASE"] = release
		e.submit(t, env, api.TaskOptions{LeaseTTL: 6 * time.Second, MaxAttempts: 3, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	}
	pods := map[string]corev1.Pod{}
	for _, task := range append(append([]string{}, kept...), gone, cancelled) {
		pods[task] = e.pod(t, task, 1, true)
	}

	// The agent dies; the Jobs run on. One of them is deleted meanwhile
	// (its pod and process go with it).
	require.NoError(t, first.Process.Kill())
	_, _ = first.Process.Wait()
	killedAt := time.Now()
	require.NoError(t, e.admin.BatchV1().Jobs(e.ns).Delete(ctx, "wdc-"+gone+"-a1-f1", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}))
	waitFor(t, 30*time.Second, "the deleted Job's process killed", func() bool { return e.kubelet.Exited(pods[gone].Name) })

	e.spawnAgent(t, id, e.kubeconfig, id, extra...)
	waitFor(t, 30*time.Second, id+" registered again", func() bool {
		v, err = e.s.wc.Worker(ctx, id)
		return err == nil && v.Incarnation == 2 && v.State == fleet.Active
	})
	held := map[string]int64{}
	for _, r := range v.Reservations {
		held[r.TaskID] = r.Fence
	}
	assert.Equal(t, int64(1), held[kept[0]], "adopted: %+v", v.Reservations)
	assert.Equal(t, int64(1), held[kept[1]], "adopted: %+v", v.Reservations)
	for _, task := range kept {
		lv, err := e.s.wc.Task(ctx, task)
		require.NoError(t, err)
		require.Len(t, lv.Leases, 1, "%s: no retry", task)
		assert.Equal(t, lease.Active, lv.Leases[0].State, "%s keeps its lease", task)
	}

	// Followed again: the Lease is renewed by the new agent (every
	// TTL/3), and a cancel reaches the adopted Job.
	waitFor(t, 20*time.Second, "an adopted Job's Lease renewed after the restart", func() bool {
		lz, err := e.admin.CoordinationV1().Leases(e.ns).Get(ctx, "wdc-"+kept[0]+"-a1-f1", metav1.GetOptions{})
		return err == nil && lz.Spec.RenewTime != nil && lz.Spec.RenewTime.After(killedAt)
	})
	_, err = e.s.wc.CancelTask(ctx, cancelled, "test")
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the cancelled task's adopted Job deleted", func() bool { return len(e.jobs(t, cancelled)) == 0 })

	require.NoError(t, os.WriteFile(release, nil, 0o644))
	for _, task := range kept {
		out, view := e.outcome(t, task)
		require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
		require.Len(t, view.Leases, 1, "%s: completed on attempt 1, no retry", task)
		assert.Empty(t, view.Directives)
		assert.Equal(t, id, view.Result.WorkerID)
		assert.Equal(t, "attempt 1\n", e.artifact(t, view.Result, "done.txt"))
	}
	out, view := e.outcome(t, gone)
	require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
	require.GreaterOrEqual(t, len(view.Directives), 1)
	assert.Contains(t, []lease.RetryReason{lease.ReasonWorkerLost, lease.ReasonLeaseExpired}, view.Directives[0].Reason, view.Directives[0].Detail)
	// Retried: on attempt 2, or 3 when attempt 2 was granted while no
	// agent ran and the re-registration found no Job of it either.
	assert.Greater(t, view.Result.Fence, int64(1))
	assert.NotEqual(t, "attempt 1\n", e.artifact(t, view.Result, "done.txt"))
}

func jobCondition(j batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// testBaseDryRun renders deploy/k8s/base (tools/k8scheck, the kustomize
// library in a module of its own) and sends every object to the real API
// server as a server-side apply with dryRun=All and strict field
// validation: the server's defaulting, validation and admission accept
// the manifests, and nothing but the namespace is created. The same path
// refuses a misspelt field, so the check can fail.
func (e *k8sEnv) testBaseDryRun(t *testing.T) {
	ctx := context.Background()
	_, self, _, _ := runtime.Caller(0)
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	render := exec.Command(goBin, "run", ".", filepath.Join("..", "..", "deploy", "k8s", "base"))
	render.Dir = filepath.Join(filepath.Dir(self), "..", "tools", "k8scheck")
	var stderr strings.Builder
	render.Stderr = &stderr
	out, err := render.Output()
	require.NoError(t, err, "render the base: %s", stderr.String())

	dyn, err := dynamic.NewForConfig(e.cluster.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(e.admin.Discovery()))
	apply := func(o *unstructured.Unstructured, dryRun bool) error {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return err
		}
		body, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: "wdc-base-check", FieldValidation: "Strict", Force: ptr.To(true)}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		_, err = r.Patch(ctx, o.GetName(), types.ApplyPatchType, body, opts)
		return err
	}

	var objects []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(out)), 4096)
	for {
		o := &unstructured.Unstructured{}
		err := dec.Decode(&o.Object)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if len(o.Object) > 0 {
			objects = append(objects, o)
		}
	}
	kinds := map[string]int{}
	for _, o := range objects {
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"Namespace", "ConfigMap", "Secret", "ServiceAccount", "Deployment", "DaemonSet", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} {
		assert.Positive(t, kinds[k], "the base holds a %s", k)
	}
	// The namespace for real: namespaced objects are judged in it.
	for _, o := range objects {
		if o.GetKind() == "Namespace" {
			require.NoError(t, apply(o, false), "namespace %s", o.GetName())
		}
	}
	for _, o := range objects {
		if o.GetKind() != "Namespace" {
			assert.NoError(t, apply(o, true), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}
	_, err = e.admin.AppsV1().Deployments("wdc").Get(ctx, "wdc-control-plane", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a dry run creates nothing: %v", err)

	for _, o := range objects {
		if o.GetKind() == "Deployment" {
			bad := o.DeepCopy()
			require.NoError(t, unstructured.SetNestedField(bad.Object, int64(2), "spec", "replicaz"))
			err := apply(bad, true)
			require.Error(t, err, "a misspelt field is refused")
			assert.Contains(t, err.Error(), "replicaz")
			break
		}
	}
}
