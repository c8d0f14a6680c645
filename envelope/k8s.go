package envelope

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/wdc-runtime/wdc/fleet"
)

// K8s holds what only the Kubernetes launcher reads: how the attempt's Job
// and pod are scheduled and bounded. Absent (nil) in envelopes that do not
// use it, so it changes no other envelope's digest. Names follow the
// batch/v1 Job and core/v1 PodSpec fields they fill.
type K8s struct {
	// Image is the container image that runs `wdc exec` (it must hold the
	// wdc binary and what the command needs). Empty: the launcher's
	// default image (`wdc agent --k8s-image`).
	Image string `json:"image,omitempty"`
	// ActiveDeadlineSeconds bounds the Job from its pod's start
	// (Job.spec.activeDeadlineSeconds); 0: no bound.
	ActiveDeadlineSeconds int64 `json:"active_deadline_seconds,omitempty"`
	// TTLSecondsAfterFinished deletes the finished Job that many seconds
	// after it ends (Job.spec.ttlSecondsAfterFinished; 0 deletes it at
	// once). Absent: the launcher's default.
	TTLSecondsAfterFinished *int64 `json:"ttl_seconds_after_finished,omitempty"`
	// RuntimeClassName and PriorityClassName name cluster objects that must
	// exist: the launcher checks them before it creates anything.
	RuntimeClassName  string `json:"runtime_class_name,omitempty"`
	PriorityClassName string `json:"priority_class_name,omitempty"`
	// NodeSelector is the pod's node selector (label syntax).
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Tolerations are the pod's tolerations.
	Tolerations []Toleration `json:"tolerations,omitempty"`
}

// Toleration is a core/v1 Toleration.
type Toleration struct {
	Key string `json:"key,omitempty"`
	// Operator is "Equal" (default) or "Exists".
	Operator string `json:"operator,omitempty"`
	Value    string `json:"value,omitempty"`
	// Effect is "", "NoSchedule", "PreferNoSchedule" or "NoExecute".
	Effect string `json:"effect,omitempty"`
	// TolerationSeconds applies to NoExecute only.
	TolerationSeconds *int64 `json:"toleration_seconds,omitempty"`
}

// Kubernetes limits the k8s section is checked against.
const (
	// MaxK8sSeconds bounds active_deadline_seconds and
	// ttl_seconds_after_finished: the API server stores the TTL as int32.
	MaxK8sSeconds = 1<<31 - 1
	// MaxImageBytes is a generous bound on an image reference.
	MaxImageBytes = 4096
	// MaxTolerations bounds the list (the API server has no fixed limit).
	MaxTolerations = 64
)

// validateK8s adds a problem per invalid field of k, under "k8s.".
func (v *ValidationError) validateK8s(k *K8s) {
	if k == nil {
		return
	}
	switch {
	case len(k.Image) > MaxImageBytes:
		v.add("k8s.image", fmt.Sprintf("longer than %d bytes", MaxImageBytes))
	case strings.ContainsAny(k.Image, " \t\r\n\x00"):
		v.add("k8s.image", fmt.Sprintf("%q contains whitespace or NUL", k.Image))
	}
	if k.ActiveDeadlineSeconds < 0 || k.ActiveDeadlineSeconds > MaxK8sSeconds {
		v.add("k8s.active_deadline_seconds", fmt.Sprintf("must be between 0 (no bound) and %d", MaxK8sSeconds))
	}
	if t := k.TTLSecondsAfterFinished; t != nil && (*t < 0 || *t > MaxK8sSeconds) {
		v.add("k8s.ttl_seconds_after_finished", fmt.Sprintf("must be between 0 and %d", MaxK8sSeconds))
	}
	for _, c := range []struct{ field, name string }{{"k8s.runtime_class_name", k.RuntimeClassName}, {"k8s.priority_class_name", k.PriorityClassName}} {
		if c.name == "" {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(c.name); len(msgs) > 0 {
			v.add(c.field, fmt.Sprintf("%q: %s", c.name, strings.Join(msgs, "; ")))
		}
	}
	if err := fleet.ValidateLabels("k8s.node_selector", k.NodeSelector); err != nil {
		v.add("k8s.node_selector", strings.TrimPrefix(err.Error(), "k8s.node_selector: "))
	}
	if len(k.Tolerations) > MaxTolerations {
		v.add("k8s.tolerations", fmt.Sprintf("at most %d (got %d)", MaxTolerations, len(k.Tolerations)))
	}
	for i, t := range k.Tolerations {
		f := fmt.Sprintf("k8s.tolerations[%d]", i)
		if t.Key != "" {
			if msgs := validation.IsQualifiedName(t.Key); len(msgs) > 0 {
				v.add(f+".key", fmt.Sprintf("%q: %s", t.Key, strings.Join(msgs, "; ")))
			}
		}
		switch t.Operator {
		case "", "Equal":
			if msgs := validation.IsValidLabelValue(t.Value); len(msgs) > 0 {
				v.add(f+".value", fmt.Sprintf("%q: %s", t.Value, strings.Join(msgs, "; ")))
			}
			if t.Key == "" {
				v.add(f+".key", "required unless operator is Exists")
			}
		case "Exists":
			if t.Value != "" {
				v.add(f+".value", "must be empty when operator is Exists")
			}
		default:
			v.add(f+".operator", fmt.Sprintf("%q: want Equal or Exists", t.Operator))
		}
		switch t.Effect {
		case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			v.add(f+".effect", fmt.Sprintf("%q: want NoSchedule, PreferNoSchedule or NoExecute (or empty: all)", t.Effect))
		}
		if t.TolerationSeconds != nil && t.Effect != "NoExecute" {
			v.add(f+".toleration_seconds", "only with effect NoExecute")
		}
	}
}
