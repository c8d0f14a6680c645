package fleet

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/wdc-runtime/wdc/resource"
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
	// Resources must fit in the worker's free capacity. Resources.Slots
	// zero means DefaultSlotRequest (one slot), so a task that requests no
	// resources at all still takes one of the worker's slots (Request).
	Resources resource.List `json:"resources"`
	// Capabilities must all be among the worker's.
	Capabilities []string `json:"capabilities,omitempty"`
	// Selector: every key must be a worker label with exactly that value.
	Selector map[string]string `json:"selector,omitempty"`
}

// Request is what the task takes from a worker: Resources with a zero
// Slots read as DefaultSlotRequest. Eligible checks it against free
// capacity and Reserve holds it.
func (r Requirements) Request() resource.List { return taskRequest(r.Resources) }

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

// Error is "worker <id>: <reason>: <detail>".
func (e *Ineligible) Error() string {
	return fmt.Sprintf("worker %s: %s: %s", e.WorkerID, e.Reason, e.Detail)
}

// Eligible is the one eligibility rule: w may take a task needing
// req when w is ACTIVE (not STALE, DRAINING or OFFLINE), each selector key
// is a label of w with the same value, it has every required capability,
// and its free capacity (Worker.Free: capacity minus reservations, slots
// included) covers req.Request() — at least one slot, so a full worker is
// ineligible even for a task that requests no resources.
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
	if short := w.Free().Shortfall(req.Request()); short != "" {
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

// Error joins the problems' messages with "; " on one line.
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

// Placement is what orders eligible workers beyond eligibility itself: the
// task's history with them, the time liveness is judged at, and a seed
// that spreads tasks over equally good workers. The zero value ranks by
// load, then worker ID.
type Placement struct {
	// Avoid are workers that lost a lease of the task, oldest loss first;
	// a worker named more than once counts at its last (most recent) loss.
	// They are ranked after every other eligible worker.
	Avoid []string
	// Now is when freshness (Worker.Fresh) is judged; the caller reads the
	// clock. Zero judges every worker fresh.
	Now time.Time
	// Seed orders workers that tie on everything else: by the SHA-256 of
	// Seed, a NUL byte and the worker ID (its first 8 bytes), so the order is random-looking but the
	// same for the same seed and differs between seeds. Worker selection
	// uses "<task ID>/<fence>" (SelectionSeed). Empty orders ties by
	// worker ID.
	Seed string
}

// SelectionSeed is the Placement.Seed worker selection uses for a task's
// lease under fence: "<taskID>/<fence>". Each lease gets its own order of
// equally good workers, and a retried selection gets the same one.
func SelectionSeed(taskID string, fence int64) string {
	return taskID + "/" + strconv.FormatInt(fence, 10)
}

// Place filters workers with Eligible and orders the eligible ones for
// selection, most preferred first. Each rule only breaks ties of the rules
// before it:
//
//  1. workers not in p.Avoid before avoided ones, and among avoided ones
//     the one whose last loss is oldest first (a retry goes to a worker
//     that has not failed the task while there is one);
//  2. fresh workers (Worker.Fresh at p.Now) before late ones (silent for
//     more than LateAfterHeartbeats heartbeats: likely dead, not yet
//     STALE);
//  3. least loaded first (Worker.Load: the dominant fraction of capacity
//     reserved, slots included);
//  4. by the hash of p.Seed and the worker ID (or by worker ID when Seed
//     is empty), so N tasks spread over N idle workers.
//
// It also returns why each other worker was passed over, in input order.
// It is a pure function of its arguments.
func Place(workers []Worker, req Requirements, p Placement) (eligible []Worker, passed []Ineligible) {
	type candidate struct {
		w    Worker
		key  placeKey
		late bool
		load float64
	}
	lost := lossIndex(p.Avoid)
	var cands []candidate
	for i := range workers {
		w := workers[i]
		if err := Eligible(&w, req); err != nil {
			passed = append(passed, *err.(*Ineligible))
			continue
		}
		cands = append(cands, candidate{w: w, key: p.key(w.WorkerID, lost), late: !w.Fresh(p.Now), load: w.Load()})
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := &cands[i], &cands[j]
		if c := a.key.byAvoid(b.key); c != 0 {
			return c < 0
		}
		switch {
		case a.late != b.late:
			return b.late
		case a.load != b.load:
			return a.load < b.load
		}
		return a.key.byTie(b.key) < 0
	})
	for _, c := range cands {
		eligible = append(eligible, c.w)
	}
	return eligible, passed
}

// placeKey is a worker's place in the two placement rules that do not
// depend on its record: avoidance (rule 1) and the seeded tie-break (rule
// 4). Place and Probe share it.
type placeKey struct {
	id      string
	avoided bool
	lostAt  int // index of the last loss in Placement.Avoid
	tie     uint64
}

// lossIndex maps each avoided worker to the index of its last loss.
func lossIndex(avoid []string) map[string]int {
	lost := make(map[string]int, len(avoid))
	for i, id := range avoid {
		lost[id] = i
	}
	return lost
}

func (p Placement) key(id string, lost map[string]int) placeKey {
	k := placeKey{id: id}
	k.lostAt, k.avoided = lost[id]
	if p.Seed != "" {
		sum := sha256.Sum256([]byte(p.Seed + "\x00" + id))
		k.tie = binary.BigEndian.Uint64(sum[:8])
	}
	return k
}

// byAvoid orders by rule 1: not avoided first, then the oldest loss
// first; 0 when it does not decide.
func (a placeKey) byAvoid(b placeKey) int {
	switch {
	case a.avoided != b.avoided:
		if b.avoided {
			return -1
		}
		return 1
	case a.avoided && a.lostAt != b.lostAt:
		return cmp.Compare(a.lostAt, b.lostAt)
	}
	return 0
}

// byTie orders by rule 4: the seeded hash, then the worker ID.
func (a placeKey) byTie(b placeKey) int {
	if c := cmp.Compare(a.tie, b.tie); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// Rank is Place with at most one avoided worker (avoid, the last holder;
// empty for none), no clock (every worker counts as fresh) and no seed
// (ties by worker ID): the deterministic order `wdc workers assign` and the
// submit-time fit check show. Worker selection calls Place.
func Rank(workers []Worker, req Requirements, avoid string) (eligible []Worker, passed []Ineligible) {
	var p Placement
	if avoid != "" {
		p.Avoid = []string{avoid}
	}
	return Place(workers, req, p)
}

// relevance orders reasons from "could take it later" to "never will".
var relevance = map[string]int{IneligibleCapacity: 0, "reserve_rejected": 1, "unreachable": 2, IneligibleState: 3, IneligibleCapability: 4, IneligibleSelector: 5}

// SortByRelevance orders passed-over workers so that the ones closest to
// taking the task (only short of free capacity) come first and workers the
// task does not select come last; stable within a reason.
func SortByRelevance(passed []Ineligible) {
	sort.SliceStable(passed, func(i, j int) bool { return relevance[passed[i].Reason] < relevance[passed[j].Reason] })
}
