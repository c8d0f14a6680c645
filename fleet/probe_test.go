package fleet

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/resource"
)

func listed(id string, state State, cores int64, labels map[string]string, caps ...string) Listed {
	return Listed{WorkerID: id, State: state, Profile: &Profile{WorkerID: id, Incarnation: 1,
		Capacity: resource.List{CPUMillis: cores * 1000, Slots: cores}, Labels: labels, Capabilities: caps}}
}

// Probe rules out, by the one eligibility rule on the listed state and
// profile, every worker that could not take the task even when idle, and
// names why; a worker listed without a profile cannot be ruled out.
func TestProbeRulesOutByProfile(t *testing.T) {
	fleet := []Listed{
		listed("drained", Draining, 8, map[string]string{"zone": "a"}),
		listed("small", Active, 1, map[string]string{"zone": "a"}, "gpu"),
		listed("other-zone", Active, 8, map[string]string{"zone": "b"}),
		listed("no-gpu", Active, 8, map[string]string{"zone": "a"}),
		listed("fits", Active, 8, map[string]string{"zone": "a"}, "gpu"),
		{WorkerID: "old-record", State: Active},
		{WorkerID: "old-stale", State: Stale},
	}
	req := Requirements{Resources: resource.List{CPUMillis: 2000}, Selector: map[string]string{"zone": "a"}, Capabilities: []string{"gpu"}}
	drawn, possible, passed := Probe(fleet, req, Placement{}, 10, nil)
	assert.ElementsMatch(t, []string{"fits", "old-record"}, drawn)
	assert.Equal(t, 2, possible)
	reasons := map[string]string{}
	for _, p := range passed {
		reasons[p.WorkerID] = p.Reason
	}
	assert.Equal(t, map[string]string{
		"drained": IneligibleState, "small": IneligibleCapacity, "other-zone": IneligibleSelector,
		"no-gpu": IneligibleCapability, "old-stale": IneligibleState,
	}, reasons)
}

// At most k are drawn; skipped (already asked) workers are neither drawn
// nor passed over but still count as possible; avoided workers come last.
func TestProbeDrawsAtMostKAvoidedLast(t *testing.T) {
	var fleet []Listed
	for i := range 10 {
		fleet = append(fleet, listed(fmt.Sprintf("w%d", i), Active, 4, nil))
	}
	drawn, possible, passed := Probe(fleet, Requirements{}, Placement{Seed: "t/1"}, 4, nil)
	require.Len(t, drawn, 4)
	assert.Equal(t, 10, possible)
	assert.Empty(t, passed)

	skip := map[string]bool{}
	for _, id := range drawn {
		skip[id] = true
	}
	next, possible, _ := Probe(fleet, Requirements{}, Placement{Seed: "t/1"}, 4, skip)
	assert.Len(t, next, 4)
	assert.Equal(t, 10, possible)
	for _, id := range next {
		assert.False(t, skip[id], "%s was asked already", id)
	}

	avoid := []string{"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7"}
	drawn, _, _ = Probe(fleet, Requirements{}, Placement{Seed: "t/1", Avoid: avoid}, 4, nil)
	assert.ElementsMatch(t, []string{"w8", "w9", "w0", "w1"}, drawn, "the two never-failed workers, then the oldest losses")
	assert.ElementsMatch(t, []string{"w8", "w9"}, drawn[:2])
	assert.Equal(t, []string{"w0", "w1"}, drawn[2:])
}

// Different seeds draw different workers: 200 selections over 100 idle
// workers ask nearly all of them, and none is asked by most selections
// (no herding onto the first by name or rank).
func TestProbeSeedsSpreadSelections(t *testing.T) {
	var fleet []Listed
	for i := range 100 {
		fleet = append(fleet, listed(fmt.Sprintf("w%03d", i), Active, 4, nil))
	}
	asked := map[string]int{}
	for i := range 200 {
		drawn, _, _ := Probe(fleet, Requirements{}, Placement{Seed: SelectionSeed(fmt.Sprint("task-", i), 1)}, DefaultProbes, nil)
		require.Len(t, drawn, DefaultProbes)
		for _, id := range drawn {
			asked[id]++
		}
	}
	assert.Greater(t, len(asked), 90, "workers asked at least once")
	for id, n := range asked {
		assert.Less(t, n, 40, "%s asked by %d of 200 selections", id, n)
	}
}

// When more than k workers that are not avoided could take the task, one
// draw still goes to the avoided worker with the oldest loss: it may be
// the only one with room.
func TestProbeKeepsOneDrawForTheOldestAvoidedWorker(t *testing.T) {
	var fleet []Listed
	for i := range 10 {
		fleet = append(fleet, listed(fmt.Sprintf("w%d", i), Active, 4, nil))
	}
	fleet = append(fleet, listed("lost-1", Active, 4, nil), listed("lost-2", Active, 4, nil))
	drawn, possible, _ := Probe(fleet, Requirements{}, Placement{Seed: "t/2", Avoid: []string{"lost-2", "lost-1"}}, 4, nil)
	require.Len(t, drawn, 4)
	assert.Equal(t, 12, possible)
	assert.Equal(t, "lost-2", drawn[3], "the oldest loss takes the last draw")
	for _, id := range drawn[:3] {
		assert.NotContains(t, []string{"lost-1", "lost-2"}, id)
	}
}
