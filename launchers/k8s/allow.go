package k8s

import (
	"fmt"
	"path"
	"strings"

	"github.com/wdc-runtime/wdc/envelope"
)

// The agent flags that fill an Allowlist; its errors name them.
const (
	FlagAllowedImages          = "k8s-allowed-images"
	FlagAllowedTolerations     = "k8s-allowed-tolerations"
	FlagAllowedPriorityClasses = "k8s-allowed-priority-classes"
	FlagAllowedRuntimeClasses  = "k8s-allowed-runtime-classes"
)

// Allowlist is what an envelope's k8s section may set beyond the
// launcher's defaults. The executor container receives the executor
// Secret (Spec.ExecutorSecret: AWS_*, TEMPORAL_API_KEY), so an image the
// submitter picks could print it; a toleration, priority class or runtime
// class puts the pod where the operator did not mean it to run.
//
// Every entry is a path.Match glob ("*" and "?" do not match "/"; "[a-z]"
// classes); "*" alone matches anything. An empty list allows nothing.
type Allowlist struct {
	// Images the envelope's k8s.image may name (--k8s-allowed-images), e.g.
	// "registry.example.com/sim/*", "ghcr.io/org/solver:*". An image equal
	// to Spec.Image is always allowed.
	Images []string
	// Tolerations, each KEY[=VALUE][:EFFECT] (--k8s-allowed-tolerations);
	// see allowsToleration.
	Tolerations []string
	// PriorityClasses and RuntimeClasses: the names k8s.priority_class_name
	// and k8s.runtime_class_name may give.
	PriorityClasses []string
	RuntimeClasses  []string
}

// NotAllowedError: the envelope's k8s section sets a value that the
// agent's allowlist (Flag) does not hold. Field is the envelope's JSON
// path ("k8s.image", "k8s.tolerations[0]", …). A retry cannot fix it.
type NotAllowedError struct {
	Field, Value, Flag string
	// Detail says what is allowed.
	Detail string
}

func (e *NotAllowedError) Error() string {
	return fmt.Sprintf("%s %q is not on the agent's --%s (%s)", e.Field, e.Value, e.Flag, e.Detail)
}

// Validate checks every pattern's syntax: path.Match's, and for a
// toleration KEY[=VALUE][:EFFECT] with a non-empty KEY. Errors name the
// flag and the pattern.
func (a Allowlist) Validate() error {
	for _, l := range []struct {
		flag     string
		patterns []string
	}{{FlagAllowedImages, a.Images}, {FlagAllowedPriorityClasses, a.PriorityClasses}, {FlagAllowedRuntimeClasses, a.RuntimeClasses}} {
		for _, p := range l.patterns {
			if err := validGlob(p); err != nil {
				return fmt.Errorf("--%s %q: %w", l.flag, p, err)
			}
		}
	}
	for _, p := range a.Tolerations {
		if _, err := parseTolerationPattern(p); err != nil {
			return fmt.Errorf("--%s %q: %w", FlagAllowedTolerations, p, err)
		}
	}
	return nil
}

// Check refuses the first value of k that a does not allow: its image
// (unless equal to defaultImage), each toleration, its priority class,
// its runtime class. Errors: *NotAllowedError.
func (a Allowlist) Check(k *envelope.K8s, defaultImage string) error {
	if k == nil {
		return nil
	}
	if k.Image != "" && k.Image != defaultImage && !matchAny(a.Images, k.Image) {
		detail := allowedDetail(a.Images)
		if defaultImage != "" {
			detail += fmt.Sprintf("; the agent's --k8s-image %q is always accepted", defaultImage)
		}
		return &NotAllowedError{Field: "k8s.image", Value: k.Image, Flag: FlagAllowedImages, Detail: detail}
	}
	for i, t := range k.Tolerations {
		if allowsToleration(a.Tolerations, t) {
			continue
		}
		detail := allowedDetail(a.Tolerations)
		if t.Key == "" {
			detail = "an empty key with operator Exists tolerates every taint: only the pattern \"*\" allows it"
		}
		return &NotAllowedError{Field: fmt.Sprintf("k8s.tolerations[%d]", i), Value: tolerationString(t), Flag: FlagAllowedTolerations, Detail: detail}
	}
	for _, c := range []struct {
		field, name, flag string
		patterns          []string
	}{
		{"k8s.priority_class_name", k.PriorityClassName, FlagAllowedPriorityClasses, a.PriorityClasses},
		{"k8s.runtime_class_name", k.RuntimeClassName, FlagAllowedRuntimeClasses, a.RuntimeClasses},
	} {
		if c.name != "" && !matchAny(c.patterns, c.name) {
			return &NotAllowedError{Field: c.field, Value: c.name, Flag: c.flag, Detail: allowedDetail(c.patterns)}
		}
	}
	return nil
}

func allowedDetail(patterns []string) string {
	if len(patterns) == 0 {
		return "the list is empty: the envelope may set none"
	}
	return "allowed: " + strings.Join(patterns, ", ")
}

// matchAny: s matches one of the globs ("*" alone matches anything).
func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok || p == "*" {
			return true
		}
	}
	return false
}

func validGlob(p string) error {
	if p == "" {
		return fmt.Errorf("empty pattern")
	}
	_, err := path.Match(p, "")
	return err
}

// tolerationPattern is a parsed KEY[=VALUE][:EFFECT].
type tolerationPattern struct {
	key, value, effect  string
	hasValue, hasEffect bool
}

func parseTolerationPattern(p string) (tolerationPattern, error) {
	rest, effect, hasEffect := strings.Cut(p, ":")
	key, value, hasValue := strings.Cut(rest, "=")
	tp := tolerationPattern{key: key, value: value, effect: effect, hasValue: hasValue, hasEffect: hasEffect}
	if key == "" {
		return tp, fmt.Errorf("no key: want KEY[=VALUE][:EFFECT], or \"*\" alone for every toleration")
	}
	for _, g := range []struct {
		glob string
		on   bool
	}{{key, true}, {value, hasValue}, {effect, hasEffect}} {
		if !g.on {
			continue
		}
		if _, err := path.Match(g.glob, ""); err != nil {
			return tp, err
		}
	}
	return tp, nil
}

// allowsToleration: one pattern KEY[=VALUE][:EFFECT] allows t. KEY
// matches t's key; with =VALUE, t must be operator Equal with a value
// VALUE matches (without it, any value, and operator Exists); with
// :EFFECT, EFFECT must match t's effect, where an empty effect (every
// effect) matches only a glob that matches "" such as "*". A toleration
// with an empty key (operator Exists: every taint) is allowed only by
// the pattern "*", which allows every toleration.
func allowsToleration(patterns []string, t envelope.Toleration) bool {
	for _, p := range patterns {
		if p == "*" {
			return true
		}
		tp, err := parseTolerationPattern(p)
		if err != nil || t.Key == "" {
			continue
		}
		if ok, _ := path.Match(tp.key, t.Key); !ok {
			continue
		}
		if tp.hasValue {
			if t.Operator == "Exists" {
				continue
			}
			if ok, _ := path.Match(tp.value, t.Value); !ok {
				continue
			}
		}
		if tp.hasEffect {
			if ok, _ := path.Match(tp.effect, t.Effect); !ok {
				continue
			}
		}
		return true
	}
	return false
}

// tolerationString writes t in the pattern syntax: KEY=VALUE for
// operator Equal, KEY for Exists, then :EFFECT when it has one.
func tolerationString(t envelope.Toleration) string {
	s := t.Key
	if t.Operator != "Exists" {
		s += "=" + t.Value
	}
	if t.Effect != "" {
		s += ":" + t.Effect
	}
	return s
}
