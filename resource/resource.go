package resource

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// List is an amount of each resource. The zero value is "nothing".
//
// JSON: {"cpu_millis": 2000, "memory_bytes": 4294967296, "gpus": 1,
// "slots": 4, "custom": {"licenses": 2}}; zero amounts are omitted.
type List struct {
	// CPUMillis is CPU in millicores: 1000 = one core (the Kubernetes
	// "1000m" unit). Non-negative.
	CPUMillis int64 `json:"cpu_millis,omitempty"`
	// MemoryBytes is memory in bytes. Non-negative.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// GPUs is a count of whole GPUs. Non-negative.
	GPUs int64 `json:"gpus,omitempty"`
	// Slots is a count of concurrent tasks: a worker's capacity offers
	// some, every task takes at least one. Non-negative. Zero has a
	// meaning given by the user of the list: package fleet reads a
	// worker's zero as one slot per whole CPU core (at least one) and a
	// task's zero as one slot (fleet.DefaultSlotRequest), so a worker's
	// capacity for tasks is never unbounded.
	Slots int64 `json:"slots,omitempty"`
	// Custom maps a resource name (see CustomNamePattern) to a
	// non-negative whole amount, e.g. {"licenses": 2}. An absent name is 0.
	Custom map[string]int64 `json:"custom,omitempty"`
}

// CustomNamePattern is what a custom resource name must match: a lowercase
// letter, then up to 62 lowercase letters, digits, '_', '-', '.' or '/'
// (it must also be usable as a Ray custom resource and a Kubernetes
// extended-resource suffix).
var CustomNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_./-]{0,62}$`)

// Problem is one invalid field of a List.
type Problem struct {
	// Field is the JSON path of the field, e.g. "resources.custom.licenses".
	Field string
	// Message says what is wrong with it.
	Message string
}

// Error is "<field>: <message>".
func (p Problem) Error() string { return p.Field + ": " + p.Message }

// Validate returns one Problem per negative amount or bad custom name.
// prefix is prepended to field names, e.g. "resources" or "capacity".
func (l List) Validate(prefix string) []Problem {
	var out []Problem
	check := func(field string, v int64) {
		if v < 0 {
			out = append(out, Problem{Field: prefix + "." + field, Message: fmt.Sprintf("must not be negative (got %d)", v)})
		}
	}
	check("cpu_millis", l.CPUMillis)
	check("memory_bytes", l.MemoryBytes)
	check("gpus", l.GPUs)
	check("slots", l.Slots)
	for _, name := range l.customNames() {
		if !CustomNamePattern.MatchString(name) {
			out = append(out, Problem{Field: prefix + ".custom." + name, Message: "invalid name: want a lowercase letter then up to 62 of [a-z0-9_./-]"})
			continue
		}
		check("custom."+name, l.Custom[name])
	}
	return out
}

// IsZero reports whether the list asks for nothing.
func (l List) IsZero() bool {
	if l.CPUMillis != 0 || l.MemoryBytes != 0 || l.GPUs != 0 || l.Slots != 0 {
		return false
	}
	for _, name := range l.customNames() {
		if l.Custom[name] != 0 {
			return false
		}
	}
	return true
}

// Add returns l + o.
func (l List) Add(o List) List { return l.combine(o, 1) }

// Sub returns l − o. Amounts may go negative; Fits treats those as short.
func (l List) Sub(o List) List { return l.combine(o, -1) }

func (l List) combine(o List, sign int64) List {
	out := List{
		CPUMillis:   l.CPUMillis + sign*o.CPUMillis,
		MemoryBytes: l.MemoryBytes + sign*o.MemoryBytes,
		GPUs:        l.GPUs + sign*o.GPUs,
		Slots:       l.Slots + sign*o.Slots,
	}
	names := mergeNames(l.customNames(), o.customNames())
	for _, name := range names {
		v := l.Custom[name] + sign*o.Custom[name]
		if v == 0 {
			continue
		}
		if out.Custom == nil {
			out.Custom = map[string]int64{}
		}
		out.Custom[name] = v
	}
	return out
}

// Shortfall returns "" when request fits in l (every amount of request ≤
// the same amount of l), else a description of every resource that does
// not fit, e.g. "cpu_millis: need 2000, free 1500; gpus: need 1, free 0".
func (l List) Shortfall(request List) string {
	type amount struct {
		name       string
		need, have int64
	}
	amounts := []amount{
		{"cpu_millis", request.CPUMillis, l.CPUMillis},
		{"memory_bytes", request.MemoryBytes, l.MemoryBytes},
		{"gpus", request.GPUs, l.GPUs},
		{"slots", request.Slots, l.Slots},
	}
	for _, name := range request.customNames() {
		amounts = append(amounts, amount{"custom." + name, request.Custom[name], l.Custom[name]})
	}
	var short []string
	for _, a := range amounts {
		if a.need > a.have {
			short = append(short, fmt.Sprintf("%s: need %d, free %d", a.name, a.need, a.have))
		}
	}
	return strings.Join(short, "; ")
}

// Fits reports whether request fits in l.
func (l List) Fits(request List) bool { return l.Shortfall(request) == "" }

// Share is the largest fraction of capacity that l uses, over every
// resource capacity offers (the dominant share): 0 when l uses nothing,
// 1 when some resource is fully used, above 1 when one is over-used. A
// resource capacity has none of (amount ≤ 0) is left out; l's negative
// amounts count as zero. Package fleet ranks workers by it.
func (l List) Share(capacity List) float64 {
	share := 0.0
	add := func(used, total int64) {
		if total > 0 && used > 0 {
			share = max(share, float64(used)/float64(total))
		}
	}
	add(l.CPUMillis, capacity.CPUMillis)
	add(l.MemoryBytes, capacity.MemoryBytes)
	add(l.GPUs, capacity.GPUs)
	add(l.Slots, capacity.Slots)
	for _, name := range capacity.customNames() {
		add(l.Custom[name], capacity.Custom[name])
	}
	return share
}

// Clone returns a deep copy (the Custom map is not shared).
func (l List) Clone() List {
	out := l
	if l.Custom != nil {
		out.Custom = make(map[string]int64, len(l.Custom))
		for _, name := range l.customNames() {
			out.Custom[name] = l.Custom[name]
		}
	}
	return out
}

// customNames returns the Custom keys in sorted order.
func (l List) customNames() []string {
	names := make([]string, 0, len(l.Custom))
	for name := range l.Custom {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func mergeNames(a, b []string) []string {
	seen := make(map[string]bool, len(a)+len(b))
	var out []string
	for _, n := range append(append([]string{}, a...), b...) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
