package envelope

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestK8sSectionDecodesAndKeepsOtherDigests(t *testing.T) {
	doc := `{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"launcher":"k8s",
	"k8s":{"image":"registry.example/wdc:1","active_deadline_seconds":600,"ttl_seconds_after_finished":0,
	"runtime_class_name":"gvisor","priority_class_name":"batch-low","node_selector":{"pool":"gpu"},
	"tolerations":[{"key":"gpu","operator":"Exists","effect":"NoSchedule"},{"key":"d","value":"wdc","effect":"NoExecute","toleration_seconds":30}]}}`
	e, err := Decode(strings.NewReader(doc), true)
	require.NoError(t, err)
	require.NotNil(t, e.K8s)
	require.NotNil(t, e.K8s.TTLSecondsAfterFinished)
	assert.Equal(t, int64(0), *e.K8s.TTLSecondsAfterFinished, "0 (delete at once) is kept apart from absent")
	assert.Len(t, e.K8s.Tolerations, 2)
	assert.Contains(t, e.Requirements().Capabilities, "launcher/k8s", "a k8s task needs a k8s worker")

	local := Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"true"}}
	local.Normalize()
	assert.Empty(t, local.Requirements().Capabilities)
	d, err := local.Digest()
	require.NoError(t, err)
	assert.Equal(t, "sha256:ad27c0131a0743a2474773a07cd85885cf6b57b65fb556b9cda8bc68b51a65ac", d, "no k8s section, no change")
}

func TestK8sSectionRejections(t *testing.T) {
	base := func(k8s string) string {
		return `{"task_id":"t1","run_id":"r1","world_id":"w1","command":["true"],"launcher":"k8s","k8s":` + k8s + `}`
	}
	for _, tc := range []struct {
		name, k8s string
		want      []string
	}{
		{"unknown field", `{"imagee":"x"}`, []string{`k8s.imagee: unknown field (did you mean "image"?)`}},
		{"image with space", `{"image":"a b"}`, []string{"k8s.image", "whitespace"}},
		{"image too long", `{"image":"` + strings.Repeat("a", MaxImageBytes+1) + `"}`, []string{"k8s.image", "longer than"}},
		{"negative deadline", `{"active_deadline_seconds":-1}`, []string{"k8s.active_deadline_seconds"}},
		{"huge ttl", `{"ttl_seconds_after_finished":2147483648}`, []string{"k8s.ttl_seconds_after_finished"}},
		{"bad runtime class", `{"runtime_class_name":"Not_A_Name"}`, []string{"k8s.runtime_class_name", "Not_A_Name"}},
		{"bad priority class", `{"priority_class_name":"` + strings.Repeat("p", 254) + `"}`, []string{"k8s.priority_class_name"}},
		{"bad node selector", `{"node_selector":{"pool":"has space"}}`, []string{"k8s.node_selector"}},
		{"bad toleration operator", `{"tolerations":[{"key":"a","operator":"Maybe"}]}`, []string{"k8s.tolerations[0].operator", "Equal or Exists"}},
		{"bad toleration effect", `{"tolerations":[{"key":"a","effect":"Sometimes"}]}`, []string{"k8s.tolerations[0].effect"}},
		{"equal without key", `{"tolerations":[{"value":"x"}]}`, []string{"k8s.tolerations[0].key", "required unless operator is Exists"}},
		{"exists with value", `{"tolerations":[{"key":"a","operator":"Exists","value":"x"}]}`, []string{"k8s.tolerations[0].value", "empty"}},
		{"bad toleration key", `{"tolerations":[{"key":"a b","operator":"Exists"}]}`, []string{"k8s.tolerations[0].key"}},
		{"bad toleration value", `{"tolerations":[{"key":"a","value":"has space"}]}`, []string{"k8s.tolerations[0].value"}},
		{"seconds without NoExecute", `{"tolerations":[{"key":"a","operator":"Exists","toleration_seconds":5}]}`, []string{"k8s.tolerations[0].toleration_seconds", "NoExecute"}},
		{"too many tolerations", `{"tolerations":[` + strings.TrimSuffix(strings.Repeat(`{"operator":"Exists"},`, MaxTolerations+1), ",") + `]}`, []string{"k8s.tolerations", "at most"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(strings.NewReader(base(tc.k8s)), true)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
