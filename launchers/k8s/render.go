package k8s

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
)

// Names inside the pod.
const (
	// ContainerName is the one container of an attempt's pod.
	ContainerName = "wdc-exec"
	// TaskVolumeName and TaskMountPath: where the task PVC (Spec.TaskPVC)
	// is mounted, with subPath <task-id>; `wdc exec --work-dir` points
	// there.
	TaskVolumeName = "wdc-task"
	TaskMountPath  = "/wdc/work"
	// GPUResource is the extended resource an envelope's gpus request.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// KeySecretKey is the key of an attempt's Secret (KeySecretName) that
	// holds its delegated key, given to `wdc exec` as
	// external.EnvAttemptKeyData.
	KeySecretKey = "attempt-key"
)

// Spec is what every Job of one launcher shares: where it runs and how
// its `wdc exec` reaches the control plane.
type Spec struct {
	// Namespace receives the Jobs and Leases. Required.
	Namespace string
	// Image is the container image when the envelope names none; it must
	// hold the wdc binary (Target.Binary).
	Image string
	// Target is how `wdc exec` connects (argv only; no secret).
	Target external.Target
	// ExecutorSecret and ExecutorConfigMap, when set, are given to the
	// executor container as envFrom: the credentials `wdc exec` needs
	// (Target's SecretEnv: AWS_*, TEMPORAL_API_KEY). The task's command
	// never sees them: the executor runs it with the envelope's env only.
	ExecutorSecret    string
	ExecutorConfigMap string
	// ServiceAccount is the pod's service account ("" = the namespace's
	// default); its token is not mounted.
	ServiceAccount string
	// TaskPVC, when set, is a PersistentVolumeClaim mounted at
	// TaskMountPath with subPath <task-id>: each task sees its own
	// directory of the claim, never the claim's root.
	TaskPVC string
	// TTLSecondsAfterFinished is the Job's TTL when the envelope gives
	// none (nil: finished Jobs stay until deleted).
	TTLSecondsAfterFinished *int64
	// LeaseDuration is the Lease's duration when the attempt's lease has
	// no TTL (never in practice).
	LeaseDuration time.Duration
	// Allow is what the envelope's k8s section may set beyond Image
	// (zero: no other image, no toleration, priority or runtime class).
	Allow Allowlist
	// AttemptKeys says that each attempt's `wdc exec` signs with a key
	// delegated to that attempt alone, from the Secret KeySecretName
	// (RenderKeySecret), which Submit creates beside the Job.
	AttemptKeys bool
}

// Render builds claim a's Job and Lease exactly as Submit sends them,
// with now as the Lease's acquire and renew time. Submit adds one thing
// after the Job exists: the Lease's owner reference to the Job (it needs
// the Job's UID), so the garbage collector deletes the Lease with the
// Job.
//
// Errors: no namespace; an envelope value Spec.Allow does not hold
// (*NotAllowedError, naming the envelope's field); no image (neither the
// envelope's k8s.image nor Spec.Image).
func Render(s Spec, a launchers.Attempt, now time.Time) (*batchv1.Job, *coordinationv1.Lease, error) {
	c := a.Claim()
	env := a.Envelope
	k := env.K8s
	if k == nil {
		k = &envelope.K8s{}
	}
	image := k.Image
	if image == "" {
		image = s.Image
	}
	if s.Namespace == "" {
		return nil, nil, errors.New("k8s launcher: namespace is required")
	}
	if err := s.Allow.Check(k, s.Image); err != nil {
		return nil, nil, fmt.Errorf("k8s launcher: %w", err)
	}
	if image == "" {
		return nil, nil, errors.New("k8s launcher: no container image: give the envelope's k8s.image or the launcher's default image (--k8s-image)")
	}
	name := JobName(c)
	labels, annotations := Labels(env, c, name), Annotations(env, c, name)

	cmd := external.Render(s.Target, c)
	argv := cmd.Argv
	container := corev1.Container{
		Name:                     ContainerName,
		Image:                    image,
		Command:                  argv,
		Resources:                resources(env),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// Without CAP_SYS_PTRACE (or any other), the task's command cannot
		// read the non-dumpable `wdc exec` through /proc, even as root.
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
	}
	if s.ExecutorSecret != "" {
		container.EnvFrom = append(container.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: s.ExecutorSecret}}})
	}
	if s.ExecutorConfigMap != "" {
		container.EnvFrom = append(container.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: s.ExecutorConfigMap}}})
	}
	if s.AttemptKeys {
		container.Env = append(container.Env, corev1.EnvVar{Name: external.EnvAttemptKeyData, ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: KeySecretName(c)}, Key: KeySecretKey}}})
	}
	pod := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		Containers:                    []corev1.Container{container},
		ServiceAccountName:            s.ServiceAccount,
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		NodeSelector:                  maps.Clone(k.NodeSelector),
		TerminationGracePeriodSeconds: ptr.To[int64](30),
	}
	if k.RuntimeClassName != "" {
		pod.RuntimeClassName = ptr.To(k.RuntimeClassName)
	}
	pod.PriorityClassName = k.PriorityClassName
	for _, t := range k.Tolerations {
		pod.Tolerations = append(pod.Tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator),
			Value: t.Value, Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.TolerationSeconds})
	}
	if s.TaskPVC != "" {
		pod.Volumes = []corev1.Volume{{Name: TaskVolumeName, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.TaskPVC}}}}
		pod.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: TaskVolumeName, MountPath: TaskMountPath, SubPath: c.TaskID}}
		pod.Containers[0].Command = append(pod.Containers[0].Command, "--work-dir", TaskMountPath)
	}
	ttl := k.TTLSecondsAfterFinished
	if ttl == nil {
		ttl = s.TTLSecondsAfterFinished
	}
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: labels, Annotations: annotations},
		Spec: batchv1.JobSpec{
			// wdc owns retries: a failed pod ends the attempt, and the
			// task decides on a new attempt with a new fence.
			BackoffLimit:     ptr.To[int32](0),
			PodFailurePolicy: PodFailurePolicy(),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: maps.Clone(annotations)},
				Spec:       pod,
			},
		},
	}
	if k.ActiveDeadlineSeconds > 0 {
		job.Spec.ActiveDeadlineSeconds = ptr.To(k.ActiveDeadlineSeconds)
	}
	if ttl != nil {
		job.Spec.TTLSecondsAfterFinished = ptr.To(int32(*ttl))
	}

	d := a.Lease.TTL
	if d <= 0 {
		d = s.LeaseDuration
	}
	secs := int32((d + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	t := metav1.NewMicroTime(now.UTC().Truncate(time.Microsecond))
	l := &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.Namespace, Labels: maps.Clone(labels), Annotations: maps.Clone(annotations)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(HolderIdentity(c)),
			LeaseDurationSeconds: ptr.To(secs),
			AcquireTime:          &t,
			RenewTime:            &t,
		},
	}
	return job, l, nil
}

// RenderKeySecret builds the Secret that hands the attempt's key (as
// external.AttemptKey encodes it, for this attempt alone) to its pod: named KeySecretName(c), immutable, labelled as the Job, and
// owned by the Job (owner), so the garbage collector deletes it with the
// Job. The key is in the Secret's data only, never in the Job.
func RenderKeySecret(s Spec, a launchers.Attempt, key []byte, owner *batchv1.Job) (*corev1.Secret, error) {
	c := a.Claim()
	if _, err := external.ParseAttemptKey(key, c, "k8s launcher: the key"); err != nil {
		return nil, err
	}
	name := JobName(c)
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: KeySecretName(c), Namespace: s.Namespace, Labels: Labels(a.Envelope, c, name),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: owner.Name, UID: owner.UID}}},
		Immutable: ptr.To(true),
		Type:      corev1.SecretTypeOpaque,
		Data:      map[string][]byte{KeySecretKey: key},
	}, nil
}

// PodFailurePolicy is every Job's: a pod with the DisruptionTarget
// condition (eviction, preemption, node loss: the pod's failure is not
// the task's) fails the Job by rule 0, which the launcher reports as
// infra_killed; any other non-zero exit of `wdc exec` fails it by rule 1
// — the executor has already reported the program's own outcome.
func PodFailurePolicy() *batchv1.PodFailurePolicy {
	return &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionFailJob, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}}},
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
			ContainerName: ptr.To(ContainerName), Operator: batchv1.PodFailurePolicyOnExitCodesOpNotIn, Values: []int32{0}}},
	}}
}

// Labels are an attempt's labels: managed-by, worker, task, lease (the
// Lease's name), attempt, fence, world and run, each made a valid value
// (LabelValue).
func Labels(env envelope.Envelope, c lease.Claim, leaseName string) map[string]string {
	out := map[string]string{LabelManagedBy: ManagedByValue}
	for k, v := range fullValues(env, c, leaseName) {
		out[k] = LabelValue(v)
	}
	return out
}

// Annotations hold the full values of the labels (AnnotationPrefix +
// the label's name after "wdc.dev/") and the envelope digest.
func Annotations(env envelope.Envelope, c lease.Claim, leaseName string) map[string]string {
	out := map[string]string{AnnotationDigest: c.EnvelopeDigest}
	for k, v := range fullValues(env, c, leaseName) {
		out[AnnotationPrefix+k[len("wdc.dev/"):]] = v
	}
	return out
}

func fullValues(env envelope.Envelope, c lease.Claim, leaseName string) map[string]string {
	return map[string]string{
		LabelWorker: c.WorkerID, LabelTask: c.TaskID, LabelLease: leaseName,
		LabelAttempt: strconv.FormatInt(c.Attempt, 10), LabelFence: strconv.FormatInt(c.Fence, 10),
		LabelWorld: env.WorldID, LabelRun: env.RunID,
	}
}

// resources maps the envelope's resources to the container's requests
// and limits (equal: the pod gets what placement reserved). Slots and
// custom resources are wdc's own accounting and are not sent.
func resources(env envelope.Envelope) corev1.ResourceRequirements {
	r := env.Resources
	list := corev1.ResourceList{}
	if r.CPUMillis > 0 {
		list[corev1.ResourceCPU] = *apiresource.NewMilliQuantity(r.CPUMillis, apiresource.DecimalSI)
	}
	if r.MemoryBytes > 0 {
		list[corev1.ResourceMemory] = *apiresource.NewQuantity(r.MemoryBytes, apiresource.BinarySI)
	}
	if r.GPUs > 0 {
		list[GPUResource] = *apiresource.NewQuantity(r.GPUs, apiresource.DecimalSI)
	}
	if len(list) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Requests: list, Limits: maps.Clone(list)}
}
