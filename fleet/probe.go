package fleet

import (
	"sort"

	"github.com/wdc-runtime/wdc/resource"
)

// Profile is the part of a worker's record that changes only when it
// registers: what it offers, not what it holds. The registry publishes it
// in the worker workflow's memo (api.MemoWorkerProfile), so one visibility
// list gives every worker's profile without asking each worker.
type Profile struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
	// Capacity is the registered capacity, slots filled in (Worker.Capacity).
	Capacity     resource.List     `json:"capacity"`
	Labels       map[string]string `json:"labels,omitempty"`
	Capabilities []string          `json:"capabilities,omitempty"`
}

// Profile returns w's profile.
func (w *Worker) Profile() Profile {
	return Profile{WorkerID: w.WorkerID, Incarnation: w.Incarnation, Capacity: w.Capacity, Labels: w.Labels, Capabilities: w.Capabilities}
}

// Listed is a worker as a visibility list shows it: its state (the
// WdcWorkerState search attribute) and its profile, nil when the worker's
// record predates published profiles.
type Listed struct {
	WorkerID string
	State    State
	Profile  *Profile
}

// DefaultProbes is how many workers one selection round asks for their
// current record (Probe's k).
const DefaultProbes = 4

// Probe picks, from a listed fleet, the workers a selection asks for their
// current record: at most k of the ones that could take the task if idle,
// so a selection's cost does not grow with the fleet. It is the
// "power of k choices": the listed state and profile rule out workers by
// the one eligibility rule (Eligible on the profile with nothing
// reserved: state, selector, capabilities, total capacity), and among the
// rest k are drawn in an order seeded by p.Seed, so concurrent selections
// ask different workers and spread instead of herding onto one; Place
// then ranks the k by their actual load and freshness.
//
// Order of the draw: workers not in p.Avoid first, then avoided ones
// (oldest loss first); within each, by the hash of p.Seed and the worker
// ID (by worker ID when Seed is empty). When k or more workers that are
// not avoided could take the task, the last draw goes to the avoided one
// with the oldest loss (if any), so it is asked while the others may all
// be full. A worker listed without a profile
// cannot be ruled out and is drawn like the others. skip names workers
// already asked (an earlier round); they are neither drawn nor passed.
//
// It returns the drawn workers in draw order, how many listed workers
// could take the task if idle (drawn or not), and why the others cannot,
// in input order. It is a pure function of its arguments.
func Probe(listed []Listed, req Requirements, p Placement, k int, skip map[string]bool) (drawn []string, possible int, passed []Ineligible) {
	lost := lossIndex(p.Avoid)
	var cands []placeKey
	for _, l := range listed {
		if l.Profile != nil {
			w := Worker{WorkerID: l.WorkerID, State: l.State, Capacity: l.Profile.Capacity, Labels: l.Profile.Labels, Capabilities: l.Profile.Capabilities}
			if err := Eligible(&w, req); err != nil {
				passed = append(passed, *err.(*Ineligible))
				continue
			}
		} else if l.State != Active {
			passed = append(passed, Ineligible{WorkerID: l.WorkerID, Reason: IneligibleState, Detail: "state is " + string(l.State)})
			continue
		}
		possible++
		if !skip[l.WorkerID] {
			cands = append(cands, p.key(l.WorkerID, lost))
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if c := cands[i].byAvoid(cands[j]); c != 0 {
			return c < 0
		}
		return cands[i].byTie(cands[j]) < 0
	})
	// One draw is kept for the avoided worker with the oldest loss when
	// there are at least k others: otherwise a task that lost a lease on
	// the only worker with room would never ask it while the others are
	// full (Place still ranks it last among the answers).
	n := min(k, len(cands))
	if k >= 2 && len(cands) > k && !cands[k-1].avoided {
		for _, c := range cands[k:] {
			if c.avoided {
				cands[k-1] = c
				break
			}
		}
	}
	for _, c := range cands[:n] {
		drawn = append(drawn, c.id)
	}
	return drawn, possible, passed
}
