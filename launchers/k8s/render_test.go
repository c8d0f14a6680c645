package k8s

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	kubetest "github.com/wdc-runtime/wdc/internal/testenv/kube"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var renderTime = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

func testAttempt(t *testing.T, mutate func(*envelope.Envelope)) launchers.Attempt {
	t.Helper()
	env := envelope.Envelope{TaskID: "checksum-1", RunID: "run-7", WorldID: "suite", Command: []string{"sh", "-c", "echo $GREETING"},
		Env: map[string]string{"GREETING": "hello"}, Launcher: envelope.LauncherK8s,
		Resources: resource.List{CPUMillis: 500, MemoryBytes: 256 << 20}}
	if mutate != nil {
		mutate(&env)
	}
	env.Normalize()
	require.NoError(t, env.Validate(true))
	d, err := env.Digest()
	require.NoError(t, err)
	return launchers.Attempt{Envelope: env, Lease: lease.Lease{TaskID: env.TaskID, WorkerID: "k8s-pool", Attempt: 2, Fence: 3,
		EnvelopeDigest: d, State: lease.Active, TTL: 10 * time.Second}}
}

func testSpec() Spec {
	return Spec{Namespace: "wdc-jobs", Image: "registry.example/wdc:1.0", ExecutorSecret: "wdc-executor",
		Target: external.Target{Binary: "/usr/local/bin/wdc", Address: "temporal.wdc:7233", Namespace: "default", BlobURL: "s3://wdc?region=eu-1"}}
}

// golden compares got's YAML with testdata/name (rewritten with -update).
func golden(t *testing.T, name string, objs ...any) {
	t.Helper()
	var parts []string
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		require.NoError(t, err)
		parts = append(parts, string(b))
	}
	got := strings.Join(parts, "---\n")
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create it")
	assert.Equal(t, string(want), got)
}

func TestRenderMatchesGolden(t *testing.T) {
	job, l, err := Render(testSpec(), testAttempt(t, nil), renderTime)
	require.NoError(t, err)
	golden(t, "basic.yaml", job, l)

	full := testAttempt(t, func(e *envelope.Envelope) {
		e.TaskID = "Checksum_Of.A-Very-Long-Task-ID-That-Is-No-DNS-Label-And-Long-1"
		e.Resources.GPUs = 1
		e.K8s = &envelope.K8s{Image: "registry.example/gpu:2", ActiveDeadlineSeconds: 600, TTLSecondsAfterFinished: ptr.To[int64](0),
			RuntimeClassName: "gvisor", PriorityClassName: "batch-low", NodeSelector: map[string]string{"pool": "gpu"},
			Tolerations: []envelope.Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}}}
	})
	s := testSpec()
	s.TaskPVC = "wdc-tasks"
	s.TTLSecondsAfterFinished = ptr.To[int64](3600)
	s.Allow = Allowlist{Images: []string{"registry.example/*"}, Tolerations: []string{"gpu"}, PriorityClasses: []string{"batch-*"}, RuntimeClasses: []string{"gvisor"}}
	job, l, err = Render(s, full, renderTime)
	require.NoError(t, err)
	golden(t, "full.yaml", job, l)
}

func TestRenderSetsWdcOwnedRetriesAndThePodFailurePolicy(t *testing.T) {
	job, l, err := Render(testSpec(), testAttempt(t, nil), renderTime)
	require.NoError(t, err)
	assert.Equal(t, int32(0), *job.Spec.BackoffLimit)
	assert.Equal(t, corev1.RestartPolicyNever, job.Spec.Template.Spec.RestartPolicy)
	rules := job.Spec.PodFailurePolicy.Rules
	require.Len(t, rules, 2)
	assert.Equal(t, corev1.DisruptionTarget, rules[0].OnPodConditions[0].Type)
	assert.Equal(t, "wdc-checksum-1-a2-f3", job.Name)
	assert.Equal(t, job.Name, l.Name)
	assert.Equal(t, "k8s-pool/2/3", *l.Spec.HolderIdentity)
	assert.Equal(t, int32(10), *l.Spec.LeaseDurationSeconds)
	assert.Equal(t, []string{"/usr/local/bin/wdc", "exec", "--task-id", "checksum-1", "--attempt", "2", "--fence", "3", "--worker-id", "k8s-pool",
		"--envelope-digest", l.Annotations[AnnotationDigest], "--address", "temporal.wdc:7233", "--namespace", "default", "--blob-url", "s3://wdc?region=eu-1"},
		job.Spec.Template.Spec.Containers[0].Command)
}

// The task's environment travels in the sealed envelope only: the Job
// carries none of it, and the executor container's own settings come
// from a Secret reference (the executor never passes its environment on).
func TestRenderPutsNoTaskEnvOnTheContainer(t *testing.T) {
	job, _, err := Render(testSpec(), testAttempt(t, func(e *envelope.Envelope) { e.Env = map[string]string{"TOKEN": "s3cr3t-value"} }), renderTime)
	require.NoError(t, err)
	c := job.Spec.Template.Spec.Containers[0]
	assert.Empty(t, c.Env)
	require.Len(t, c.EnvFrom, 1)
	assert.Equal(t, "wdc-executor", c.EnvFrom[0].SecretRef.Name)
	b, err := yaml.Marshal(job)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "s3cr3t-value")
	assert.NotContains(t, string(b), "TOKEN")
	assert.False(t, *job.Spec.Template.Spec.AutomountServiceAccountToken, "no API token for the task")
	assert.False(t, *job.Spec.Template.Spec.EnableServiceLinks, "no service variables")
}

// The task PVC is mounted at the task's own subdirectory, never its root,
// and two tasks never share one.
func TestRenderMountsTheTaskPVCAtTheTasksSubPathOnly(t *testing.T) {
	s := testSpec()
	s.TaskPVC = "wdc-tasks"
	var subPaths []string
	for _, id := range []string{"task-a", "task-b"} {
		job, _, err := Render(s, testAttempt(t, func(e *envelope.Envelope) { e.TaskID = id }), renderTime)
		require.NoError(t, err)
		pod := job.Spec.Template.Spec
		require.Len(t, pod.Volumes, 1)
		assert.Equal(t, "wdc-tasks", pod.Volumes[0].PersistentVolumeClaim.ClaimName)
		mounts := pod.Containers[0].VolumeMounts
		require.Len(t, mounts, 1)
		assert.Equal(t, id, mounts[0].SubPath)
		assert.Equal(t, TaskMountPath, mounts[0].MountPath)
		assert.Equal(t, []string{"--work-dir", TaskMountPath}, pod.Containers[0].Command[len(pod.Containers[0].Command)-2:])
		subPaths = append(subPaths, mounts[0].SubPath)
	}
	assert.NotEqual(t, subPaths[0], subPaths[1])

	job, _, err := Render(testSpec(), testAttempt(t, nil), renderTime)
	require.NoError(t, err)
	assert.Empty(t, job.Spec.Template.Spec.Volumes, "no PVC configured, none mounted")
}

func TestRenderRefusals(t *testing.T) {
	s := testSpec()
	s.Image = ""
	_, _, err := Render(s, testAttempt(t, nil), renderTime)
	assert.ErrorContains(t, err, "no container image")
	s = testSpec()
	s.Namespace = ""
	_, _, err = Render(s, testAttempt(t, nil), renderTime)
	assert.ErrorContains(t, err, "namespace is required")
}

func TestJobNamesAreValidAndUnique(t *testing.T) {
	seen := map[string]lease.Claim{}
	for _, task := range []string{"a", "checksum-1", "UPPER", "UPPER-", "upper", "x.y", strings.Repeat("t", 200), strings.Repeat("t", 201), "-lead", "_"} {
		for _, n := range []int64{1, 12, 1 << 40} {
			c := lease.Claim{TaskID: task, Attempt: n, Fence: n + 1}
			name := JobName(c)
			assert.Empty(t, validation.IsDNS1123Label(name), "%q from %q", name, task)
			if prev, dup := seen[name]; dup {
				t.Errorf("%q names both %v and %v", name, prev, c)
			}
			seen[name] = c
		}
	}
}

// Every label value the launcher writes passes apimachinery's own check,
// is stable, and is the value itself when that is valid.
func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"", "a", "task-1", "-x-", "a/b", strings.Repeat("z", 64), strings.Repeat("z", 63), "ü", "..", "a..b", "x_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := LabelValue(s)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Fatalf("LabelValue(%q) = %q: %v", s, v, errs)
		}
		if v != LabelValue(s) {
			t.Fatalf("not stable")
		}
		if len(validation.IsValidLabelValue(s)) == 0 && v != s {
			t.Fatalf("a valid value %q was changed to %q", s, v)
		}
		if v != s && !strings.HasSuffix(v, shortHash(s)) {
			t.Fatalf("a changed value %q carries no hash of %q", v, s)
		}
	})
}

// Without the opt-in nothing is written: Submit refuses with a message
// that says how to opt in, and the only requests are the informers'
// lists and watches.
func TestWritesAreRefusedWithoutOptIn(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	blobs, err := blobstore.OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	l, err := New(ctx, Options{WorkerID: "k8s-pool", Client: client, Spec: testSpec(), Blobs: blobs, Reporter: &kubetest.Reports{}})
	require.NoError(t, err)
	defer l.Shutdown(ctx, "test")
	a := testAttempt(t, nil)
	_, err = l.Submit(ctx, a)
	require.True(t, errors.Is(err, ErrWritesDisabled), "%v", err)
	assert.ErrorContains(t, err, "--k8s-apply")
	require.NoError(t, l.Cancel(ctx, a.Claim(), "test"))
	for _, act := range client.Actions() {
		assert.Contains(t, []string{"list", "watch"}, act.GetVerb(), "%s %s", act.GetVerb(), act.GetResource())
	}
	_, err = blobs.Envelope(ctx, a.Lease.EnvelopeDigest)
	assert.Error(t, err, "not even the envelope was stored")
}

func TestNewRefusesMissingFields(t *testing.T) {
	ctx := context.Background()
	blobs, err := blobstore.OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	ok := Options{WorkerID: "w", Client: fake.NewClientset(), Spec: testSpec(), Blobs: blobs, Reporter: &kubetest.Reports{}}
	for _, c := range []struct {
		want   string
		mutate func(*Options)
	}{
		{"worker ID is required", func(o *Options) { o.WorkerID = "" }},
		{"client is required", func(o *Options) { o.Client = nil }},
		{"namespace is required", func(o *Options) { o.Spec.Namespace = "" }},
		{"blob store is required", func(o *Options) { o.Blobs = nil }},
		{"reporter is required", func(o *Options) { o.Reporter = nil }},
	} {
		o := ok
		c.mutate(&o)
		_, err := New(ctx, o)
		assert.ErrorContains(t, err, c.want)
	}
}

func TestQuotaCapacityTakesTheSmallestHardLimit(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	_, found, err := QuotaCapacity(ctx, client, "ns")
	require.NoError(t, err)
	assert.False(t, found, "no quota")
	for name, hard := range map[string]corev1.ResourceList{
		"a": {"requests.cpu": apiresource.MustParse("8"), "requests.memory": apiresource.MustParse("16Gi")},
		"b": {"cpu": apiresource.MustParse("2500m"), "pods": apiresource.MustParse("10")},
		"c": {"requests.nvidia.com/gpu": apiresource.MustParse("2")},
	} {
		_, err := client.CoreV1().ResourceQuotas("ns").Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.ResourceQuotaSpec{Hard: hard}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	got, found, err := QuotaCapacity(ctx, client, "ns")
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, resource.List{CPUMillis: 2500, MemoryBytes: 16 << 30, GPUs: 2}, got)
}

// The informer's judgements, on a fake clientset (the real server's
// unscheduled-pod path is in testsuite): a pod in image-pull back-off
// past the bound ends the attempt launch_failed with the pod's reason and
// its Job is deleted; a Job failed by its deadline ends it infra_killed.
func TestInformerEndsStuckAndTimedOutAttempts(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	blobs, err := blobstore.OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	// The fake sets no UID; the API server always does.
	client.PrependReactor("create", "jobs", func(action k8stesting.Action) (bool, runtime.Object, error) {
		job := action.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
		job.UID = types.UID("uid-" + job.Name)
		return false, nil, nil
	})
	rep := &kubetest.Reports{}
	l, err := New(ctx, Options{WorkerID: "k8s-pool", Client: client, Spec: testSpec(), Apply: true, Blobs: blobs, Reporter: rep, PendingBound: time.Second})
	require.NoError(t, err)
	defer l.Shutdown(ctx, "test")

	a := testAttempt(t, nil)
	_, err = l.Submit(ctx, a)
	require.NoError(t, err)
	job, err := client.BatchV1().Jobs("wdc-jobs").Get(ctx, JobName(a.Claim()), metav1.GetOptions{})
	require.NoError(t, err)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-x", Namespace: "wdc-jobs", Labels: job.Spec.Template.Labels,
		Annotations: job.Spec.Template.Annotations, CreationTimestamp: metav1.NewTime(time.Now())},
		Spec: corev1.PodSpec{NodeName: "node-1"},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: ContainerName,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "no such image"}}}}}}
	_, err = client.CoreV1().Pods("wdc-jobs").Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(rep.Got()) == 1 }, 10*time.Second, 20*time.Millisecond, "reported once the bound passed")
	got := rep.Got()[0]
	assert.Equal(t, lease.ReasonLaunchFailed, got.Reason)
	assert.Contains(t, got.Detail, "ImagePullBackOff: no such image")
	assert.Equal(t, a.Claim(), got.Claim)
	require.Eventually(t, func() bool {
		_, err := client.BatchV1().Jobs("wdc-jobs").Get(ctx, job.Name, metav1.GetOptions{})
		return err != nil
	}, 10*time.Second, 20*time.Millisecond, "the Job is deleted")

	b := testAttempt(t, func(e *envelope.Envelope) { e.TaskID = "deadline-1" })
	_, err = l.Submit(ctx, b)
	require.NoError(t, err)
	job, err = client.BatchV1().Jobs("wdc-jobs").Get(ctx, JobName(b.Claim()), metav1.GetOptions{})
	require.NoError(t, err)
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonDeadlineExceeded, Message: "Job was active longer than specified deadline"}}
	_, err = client.BatchV1().Jobs("wdc-jobs").UpdateStatus(ctx, job, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(rep.Got()) == 2 }, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, lease.ReasonInfraKilled, rep.Got()[1].Reason)
	assert.Contains(t, rep.Got()[1].Detail, "longer than specified deadline")
	st, err := l.Status(ctx, b.Claim())
	require.NoError(t, err)
	assert.Equal(t, launchers.PhaseFinished, st.Phase)
	assert.Equal(t, 0, l.Running())
}

// Every class and claim a Job names must exist before anything is
// created; each missing one is named.
func TestPreflightNamesWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	s := testSpec()
	s.TaskPVC = "tasks"
	s.Allow = Allowlist{PriorityClasses: []string{"batch-low"}, RuntimeClasses: []string{"gvisor"}}
	job, _, err := Render(s, testAttempt(t, func(e *envelope.Envelope) {
		e.K8s = &envelope.K8s{RuntimeClassName: "gvisor", PriorityClassName: "batch-low"}
	}), renderTime)
	require.NoError(t, err)
	client := fake.NewClientset()
	blobs, err := blobstore.OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	l, err := New(ctx, Options{WorkerID: "k8s-pool", Client: client, Spec: s, Apply: true, Blobs: blobs, Reporter: &kubetest.Reports{}})
	require.NoError(t, err)
	defer l.Shutdown(ctx, "test")

	assert.ErrorContains(t, l.Preflight(ctx, job), `runtimeClassName "gvisor": no such RuntimeClass`)
	_, err = client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.ErrorContains(t, l.Preflight(ctx, job), `priorityClassName "batch-low": no such PriorityClass`)
	_, err = client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "batch-low"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.ErrorContains(t, l.Preflight(ctx, job), `persistentVolumeClaim "tasks": no such PersistentVolumeClaim in namespace wdc-jobs`)
	_, err = client.CoreV1().PersistentVolumeClaims("wdc-jobs").Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "tasks"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.NoError(t, l.Preflight(ctx, job))
}

// testSigner is worker k8s-pool's signer, issued by a new root.
func testSigner(t *testing.T) *identity.Signer {
	t.Helper()
	iss, err := identity.NewIssuer(spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	require.NoError(t, err)
	svid, err := iss.IssueWorker("k8s-pool", time.Hour)
	require.NoError(t, err)
	s, err := identity.NewSigner(svid)
	require.NoError(t, err)
	return s
}

// signedLauncher is a launcher with writes on and worker k8s-pool's
// signer, on client; it is shut down with the test.
func signedLauncher(t *testing.T, client *fake.Clientset) *Launcher {
	t.Helper()
	ctx := context.Background()
	blobs, err := blobstore.OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	l, err := New(ctx, Options{WorkerID: "k8s-pool", Client: client, Spec: testSpec(), Apply: true, Blobs: blobs,
		Reporter: &kubetest.Reports{}, Signer: testSigner(t)})
	require.NoError(t, err)
	t.Cleanup(func() { l.Shutdown(ctx, "test") })
	return l
}

func TestSubmitHandsTheAttemptItsKeyThroughASecretTheJobOwns(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	l := signedLauncher(t, client)
	a := testAttempt(t, nil)
	_, err := l.Submit(ctx, a)
	require.NoError(t, err)

	job, err := client.BatchV1().Jobs("wdc-jobs").Get(ctx, JobName(a.Claim()), metav1.GetOptions{})
	require.NoError(t, err)
	secret, err := client.CoreV1().Secrets("wdc-jobs").Get(ctx, KeySecretName(a.Claim()), metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, secret.OwnerReferences, 1)
	assert.Equal(t, metav1.OwnerReference{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID}, secret.OwnerReferences[0])
	assert.True(t, *secret.Immutable)
	key, err := external.ParseAttemptKey(secret.Data[KeySecretKey], a.Claim(), "secret")
	require.NoError(t, err)
	assert.Equal(t, a.Claim(), key.Delegation.Claim)

	c := job.Spec.Template.Spec.Containers[0]
	require.Len(t, c.Env, 1)
	assert.Equal(t, corev1.EnvVar{Name: external.EnvAttemptKeyData, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret.Name}, Key: KeySecretKey}}}, c.Env[0])

	// A retried launch keeps the Job and the Secret it made, and leaves a
	// running Job alone when the Secret cannot be made this time.
	_, err = l.Submit(ctx, a)
	require.NoError(t, err)
	require.NoError(t, client.CoreV1().Secrets("wdc-jobs").Delete(ctx, secret.Name, metav1.DeleteOptions{}))
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	_, err = l.Submit(ctx, a)
	require.ErrorContains(t, err, "request timed out")
	again, err := client.BatchV1().Jobs("wdc-jobs").Get(ctx, job.Name, metav1.GetOptions{})
	require.NoError(t, err, "the earlier launch's Job still runs")
	assert.Equal(t, job.UID, again.UID)
}

func TestSubmitDeletesTheJobWhenItsKeySecretFails(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("secrets is forbidden")
	})
	l := signedLauncher(t, client)
	a := testAttempt(t, nil)
	_, err := l.Submit(ctx, a)
	require.ErrorContains(t, err, "create secret wdc-jobs/"+KeySecretName(a.Claim())+" (the attempt's key): secrets is forbidden")
	jobs, err := client.BatchV1().Jobs("wdc-jobs").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, jobs.Items, "no Job waits for a Secret that never comes")
}

func TestRenderWithoutAttemptKeysNamesNoSecret(t *testing.T) {
	job, _, err := Render(testSpec(), testAttempt(t, nil), renderTime)
	require.NoError(t, err)
	for _, v := range job.Spec.Template.Spec.Containers[0].Env {
		assert.NotEqual(t, external.EnvAttemptKeyData, v.Name)
	}
}
