package kubetest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A Job's pod is created by the real Job controller, run by the test
// kubelet as a local process with exactly its declared environment, and
// its exit code decides the Job.
func TestClusterRunsAJobsPodAsALocalProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes control plane")
	}
	ctx := context.Background()
	c, err := Start(ctx, t.TempDir())
	require.NoError(t, err)
	defer c.Stop()
	defer func() {
		if t.Failed() {
			t.Log(c.Logs())
		}
	}()
	ns := "kubetest"
	_, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
		StringData: map[string]string{"FROM_SECRET": "yes"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	k, err := StartKubelet(c.Client, KubeletOptions{Namespace: ns, Dir: t.TempDir()})
	require.NoError(t, err)
	defer k.Stop()

	t.Setenv("LEAK_ME", "leaked")
	job := func(name, script string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
				Name: "c", Image: "none", Command: []string{"/bin/sh", "-c", script},
				Env:     []corev1.EnvVar{{Name: "LITERAL", Value: "v"}},
				EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}},
			}}}}}}
	}
	_, err = c.Client.BatchV1().Jobs(ns).Create(ctx, job("ok", `env | sort; exit 0`), metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = c.Client.BatchV1().Jobs(ns).Create(ctx, job("fails", `exit 3`), metav1.CreateOptions{})
	require.NoError(t, err)
	// A container that drops every capability holds none, even as root.
	nocaps := job("nocaps", `grep -E '^(CapEff|NoNewPrivs)' /proc/self/status`)
	nocaps.Spec.Template.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	_, err = c.Client.BatchV1().Jobs(ns).Create(ctx, nocaps, metav1.CreateOptions{})
	require.NoError(t, err)
	finished := func(name string) *batchv1.JobCondition {
		j, err := c.Client.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		for _, cond := range j.Status.Conditions {
			if (cond.Type == batchv1.JobComplete || cond.Type == batchv1.JobFailed) && cond.Status == corev1.ConditionTrue {
				return &cond
			}
		}
		return nil
	}
	require.Eventually(t, func() bool { return finished("ok") != nil && finished("fails") != nil && finished("nocaps") != nil }, 60*time.Second, 100*time.Millisecond)
	assert.Equal(t, batchv1.JobComplete, finished("ok").Type)
	assert.Equal(t, batchv1.JobFailed, finished("fails").Type)
	capPods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=nocaps"})
	require.NoError(t, err)
	require.Len(t, capPods.Items, 1)
	assert.Equal(t, "CapEff:\t0000000000000000\nNoNewPrivs:\t1\n", k.Output(capPods.Items[0].Name))
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=ok"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	out := k.Output(pods.Items[0].Name)
	assert.Contains(t, out, "FROM_SECRET=yes\n")
	assert.Contains(t, out, "LITERAL=v\n")
	assert.NotContains(t, out, "LEAK_ME")
	_, hasHome := os.LookupEnv("HOME")
	if hasHome {
		assert.NotContains(t, out, "HOME=")
	}
}
