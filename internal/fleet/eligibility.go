package fleet

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/wdc-runtime/wdc/internal/resource"
)

// ValidateLabels checks label keys and values with the Kubernetes rules
// (k8s.io/apimachinery validation): a key is an optional DNS-subdomain
// prefix and '/', then a name of 1-63 of [A-Za-z0-9._-] starting and ending
// alphanumeric; a value is empty or matches the same name rule. field names
// the map in errors, e.g. "labels" or "selector".
func ValidateLabels(field string, labels map[string]string) error {
	var errs []error
	for _, k := range sortedKeys(labels) {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: key %q: %s", field, k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(labels[k]); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.%s: value %q: %s", field, k, labels[k], strings.Join(msgs, "; ")))
		}
	}
	return joinProblems(errs)
}

// Requirements is what a task needs from a worker: the envelope's resources,
// capabilities and label selector.
type Requirements struct {
	Resources resource.List `json:"resources"`
	// Capabilities must all be among the worker's.
	Capabilities []string `json:"capabilities,omitempty"`
	// Selector: every key must be a worker label with exactly that value.
	Selector map[string]string `json:"selector,omitempty"`
}

// Ineligible says why a worker cannot take a task. Reason is one of the
// Ineligible* constants.
type Ineligible struct {
	WorkerID string `json:"worker_id"`
	Reason   string `json:"reason"`
	Detail   string `json:"detail"`
}

// Reasons a worker is ineligible.
const (
	IneligibleState      = "not_active"
	IneligibleCapacity   = "insufficient_capacity"
	IneligibleCapability = "missing_capability"
	IneligibleSelector   = "selector_mismatch"
)

func (e *Ineligible) Error() string {
	return fmt.Sprintf("worker %s: %s: %s", e.WorkerID, e.Reason, e.Detail)
}

// Eligible is the one eligibility rule (STYLE 12): w may take a task needing
// req when w is ACTIVE (not STALE, DRAINING or OFFLINE), each selector key
// is a label of w with the same value, it has every required capability,
// and its free capacity (capacity minus reservations) covers req.Resources.
// It returns nil or an *Ineligible naming the first unmet condition, in
// that order (so a worker the task does not select is never reported as
// merely too full).
func Eligible(w *Worker, req Requirements) error {
	no := func(reason, format string, args ...any) error {
		return &Ineligible{WorkerID: w.WorkerID, Reason: reason, Detail: fmt.Sprintf(format, args...)}
	}
	if w.State != Active {
		return no(IneligibleState, "state is %s", w.State)
	}
	for _, k := range sortedKeys(req.Selector) {
		v, ok := w.Labels[k]
		if !ok {
			return no(IneligibleSelector, "has no label %q", k)
		}
		if v != req.Selector[k] {
			return no(IneligibleSelector, "label %s=%q, want %q", k, v, req.Selector[k])
		}
	}
	have := make(map[string]bool, len(w.Capabilities))
	for _, c := range w.Capabilities {
		have[c] = true
	}
	for _, c := range req.Capabilities {
		if !have[c] {
			return no(IneligibleCapability, "lacks capability %q", c)
		}
	}
	if short := w.Free().Shortfall(req.Resources); short != "" {
		return no(IneligibleCapacity, "%s", short)
	}
	return nil
}

// joinProblems joins errors into one whose message is "a; b; c" (one line,
// as the CLI prints it). nil for none.
func joinProblems(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return &Problems{Errs: errs}
}

// Problems is several validation errors reported together on one line.
type Problems struct{ Errs []error }

func (p *Problems) Error() string {
	msgs := make([]string, len(p.Errs))
	for i, e := range p.Errs {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.Is/As see each problem.
func (p *Problems) Unwrap() []error { return p.Errs }

var _ error = (*Problems)(nil)

// Rank filters workers with Eligible and orders the eligible ones for
// selection: any worker but avoid first (a retry prefers a new worker),
// then most free CPU, most free memory, then worker ID. It also returns why
// each other worker was passed over. Worker selection and `wdc workers
// assign` both use it.
func Rank(workers []Worker, req Requirements, avoid string) (eligible []Worker, passed []Ineligible) {
	for i := range workers {
		w := workers[i]
		if err := Eligible(&w, req); err != nil {
			passed = append(passed, *err.(*Ineligible))
			continue
		}
		eligible = append(eligible, w)
	}
	sort.SliceStable(eligible, func(i, j int) bool {
		a, b := &eligible[i], &eligible[j]
		if (a.WorkerID == avoid) != (b.WorkerID == avoid) {
			return b.WorkerID == avoid
		}
		fa, fb := a.Free(), b.Free()
		if fa.CPUMillis != fb.CPUMillis {
			return fa.CPUMillis > fb.CPUMillis
		}
		if fa.MemoryBytes != fb.MemoryBytes {
			return fa.MemoryBytes > fb.MemoryBytes
		}
		return a.WorkerID < b.WorkerID
	})
	return eligible, passed
}

// relevance orders reasons from "could take it later" to "never will".
var relevance = map[string]int{IneligibleCapacity: 0, "reserve_rejected": 1, "unreachable": 2, IneligibleState: 3, IneligibleCapability: 4, IneligibleSelector: 5}

// SortByRelevance orders passed-over workers so that the ones closest to
// taking the task (only short of free capacity) come first and workers the
// task does not select come last; stable within a reason.
func SortByRelevance(passed []Ineligible) {
	sort.SliceStable(passed, func(i, j int) bool { return relevance[passed[i].Reason] < relevance[passed[j].Reason] })
}
