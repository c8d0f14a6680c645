package k8s

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	kubetest "github.com/wdc-runtime/wdc/internal/testenv/kube"
)

// What an envelope's k8s section may set is the agent's choice: Render
// refuses anything off the allowlists, naming the envelope's field and
// the flag, and renders what they allow.
func TestRenderHonoursTheAllowlists(t *testing.T) {
	exists := func(key, effect string) envelope.Toleration {
		return envelope.Toleration{Key: key, Operator: "Exists", Effect: effect}
	}
	equal := func(key, value, effect string) envelope.Toleration {
		return envelope.Toleration{Key: key, Operator: "Equal", Value: value, Effect: effect}
	}
	for _, c := range []struct {
		name  string
		allow Allowlist
		k8s   envelope.K8s
		want  string // "" = rendered
	}{
		{"image not allowed", Allowlist{}, envelope.K8s{Image: "evil/img:1"},
			`k8s.image "evil/img:1" is not on the agent's --k8s-allowed-images (the list is empty: the envelope may set none; the agent's --k8s-image "registry.example/wdc:1.0" is always accepted)`},
		{"image off every glob", Allowlist{Images: []string{"registry.example.com/sim/*", "ghcr.io/org/solver:*"}}, envelope.K8s{Image: "ghcr.io/org/other:1"},
			`k8s.image "ghcr.io/org/other:1" is not on the agent's --k8s-allowed-images (allowed: registry.example.com/sim/*, ghcr.io/org/solver:*;`},
		{"image glob does not cross /", Allowlist{Images: []string{"registry.example.com/sim/*"}}, envelope.K8s{Image: "registry.example.com/sim/a/b:1"}, `k8s.image "registry.example.com/sim/a/b:1"`},
		{"image allowed by glob", Allowlist{Images: []string{"registry.example.com/sim/*", "ghcr.io/org/solver:*"}}, envelope.K8s{Image: "ghcr.io/org/solver:2.1"}, ""},
		{"image equal to the default", Allowlist{}, envelope.K8s{Image: "registry.example/wdc:1.0"}, ""},
		{"image * alone", Allowlist{Images: []string{"*"}}, envelope.K8s{Image: "any.registry/x/y:z"}, ""},

		{"toleration not allowed", Allowlist{}, envelope.K8s{Tolerations: []envelope.Toleration{exists("gpu", "NoSchedule")}},
			`k8s.tolerations[0] "gpu:NoSchedule" is not on the agent's --k8s-allowed-tolerations (the list is empty: the envelope may set none)`},
		{"toleration allowed by key", Allowlist{Tolerations: []string{"gpu"}}, envelope.K8s{Tolerations: []envelope.Toleration{exists("gpu", ""), equal("gpu", "a100", "NoSchedule")}}, ""},
		{"second toleration refused", Allowlist{Tolerations: []string{"gpu"}}, envelope.K8s{Tolerations: []envelope.Toleration{exists("gpu", ""), equal("dedicated", "x", "")}},
			`k8s.tolerations[1] "dedicated=x" is not on the agent's --k8s-allowed-tolerations (allowed: gpu)`},
		{"toleration value and effect", Allowlist{Tolerations: []string{"dedicated=wdc-*:NoSchedule"}}, envelope.K8s{Tolerations: []envelope.Toleration{equal("dedicated", "wdc-sim", "NoSchedule")}}, ""},
		{"a value pattern refuses Exists", Allowlist{Tolerations: []string{"dedicated=wdc"}}, envelope.K8s{Tolerations: []envelope.Toleration{exists("dedicated", "")}},
			`k8s.tolerations[0] "dedicated" is not on`},
		{"an effect pattern refuses every effect", Allowlist{Tolerations: []string{"gpu:NoSchedule"}}, envelope.K8s{Tolerations: []envelope.Toleration{exists("gpu", "")}},
			`k8s.tolerations[0] "gpu" is not on`},
		{"a wrong effect", Allowlist{Tolerations: []string{"gpu:NoSchedule"}}, envelope.K8s{Tolerations: []envelope.Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoExecute", TolerationSeconds: ptr.To[int64](5)}}},
			`k8s.tolerations[0] "gpu:NoExecute" is not on`},
		{"Exists with an empty key needs *", Allowlist{Tolerations: []string{"*:NoSchedule", "gpu"}}, envelope.K8s{Tolerations: []envelope.Toleration{exists("", "NoSchedule")}},
			`k8s.tolerations[0] ":NoSchedule" is not on the agent's --k8s-allowed-tolerations (an empty key with operator Exists tolerates every taint: only the pattern "*" allows it)`},
		{"Exists with an empty key and *", Allowlist{Tolerations: []string{"*"}}, envelope.K8s{Tolerations: []envelope.Toleration{exists("", ""), exists("node.kubernetes.io/unreachable", "")}}, ""},

		{"priority class not allowed", Allowlist{}, envelope.K8s{PriorityClassName: "system-cluster-critical"},
			`k8s.priority_class_name "system-cluster-critical" is not on the agent's --k8s-allowed-priority-classes (the list is empty: the envelope may set none)`},
		{"priority class allowed", Allowlist{PriorityClasses: []string{"batch-*"}}, envelope.K8s{PriorityClassName: "batch-low"}, ""},
		{"runtime class not allowed", Allowlist{RuntimeClasses: []string{"gvisor"}}, envelope.K8s{RuntimeClassName: "runc"},
			`k8s.runtime_class_name "runc" is not on the agent's --k8s-allowed-runtime-classes (allowed: gvisor)`},
		{"runtime class allowed", Allowlist{RuntimeClasses: []string{"gvisor", "kata"}}, envelope.K8s{RuntimeClassName: "kata"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := testSpec()
			s.Allow = c.allow
			a := testAttempt(t, func(e *envelope.Envelope) { e.K8s = &c.k8s })
			job, l, err := Render(s, a, renderTime)
			if c.want == "" {
				require.NoError(t, err)
				pod := job.Spec.Template.Spec
				if c.k8s.Image != "" {
					assert.Equal(t, c.k8s.Image, pod.Containers[0].Image)
				}
				assert.Len(t, pod.Tolerations, len(c.k8s.Tolerations))
				assert.Equal(t, c.k8s.PriorityClassName, pod.PriorityClassName)
				assert.NotNil(t, l)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			var refused *NotAllowedError
			assert.True(t, errors.As(err, &refused), "typed: %T", err)
			assert.Nil(t, job)
			assert.Nil(t, l)
		})
	}
}

func TestAllowlistValidateNamesTheFlag(t *testing.T) {
	for _, c := range []struct {
		allow Allowlist
		want  string
	}{
		{Allowlist{Images: []string{"registry.example.com/[sim"}}, `--k8s-allowed-images "registry.example.com/[sim": syntax error in pattern`},
		{Allowlist{Images: []string{""}}, `--k8s-allowed-images "": empty pattern`},
		{Allowlist{PriorityClasses: []string{`batch-\`}}, `--k8s-allowed-priority-classes "batch-\\": syntax error in pattern`},
		{Allowlist{RuntimeClasses: []string{"[a-"}}, `--k8s-allowed-runtime-classes "[a-": syntax error in pattern`},
		{Allowlist{Tolerations: []string{"gpu=[x"}}, `--k8s-allowed-tolerations "gpu=[x": syntax error in pattern`},
		{Allowlist{Tolerations: []string{"gpu:[No"}}, `--k8s-allowed-tolerations "gpu:[No": syntax error in pattern`},
		{Allowlist{Tolerations: []string{":NoSchedule"}}, `--k8s-allowed-tolerations ":NoSchedule": no key: want KEY[=VALUE][:EFFECT], or "*" alone`},
	} {
		assert.ErrorContains(t, c.allow.Validate(), c.want)
	}
	assert.NoError(t, Allowlist{Images: []string{"ghcr.io/org/solver:*"}, Tolerations: []string{"*", "gpu", "dedicated=wdc:NoSchedule", "pool/*:No*"},
		PriorityClasses: []string{"batch-?"}, RuntimeClasses: []string{"gvisor"}}.Validate())
}

// A refused envelope ends at Render: Submit creates nothing, stores
// nothing, and its error is the typed refusal (the activity turns every
// Submit error into launch_failed).
func TestSubmitCreatesNothingForAnEnvelopeOffTheAllowlists(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	blobs, err := blobstore.OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	l, err := New(ctx, Options{WorkerID: "k8s-pool", Client: client, Spec: testSpec(), Apply: true, Blobs: blobs, Reporter: &kubetest.Reports{}})
	require.NoError(t, err)
	defer l.Shutdown(ctx, "test")
	a := testAttempt(t, func(e *envelope.Envelope) { e.K8s = &envelope.K8s{Image: "evil/img:1"} })
	_, err = l.Submit(ctx, a)
	var refused *NotAllowedError
	require.True(t, errors.As(err, &refused), "%v", err)
	assert.Equal(t, "k8s.image", refused.Field)
	for _, act := range client.Actions() {
		assert.Contains(t, []string{"list", "watch"}, act.GetVerb(), "%s %s", act.GetVerb(), act.GetResource())
	}
	_, err = blobs.Envelope(ctx, a.Lease.EnvelopeDigest)
	assert.Error(t, err, "not even the envelope was stored")
}
