package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/resource"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func reg(id string) Registration {
	return Registration{
		WorkerID:     id,
		Capacity:     resource.List{CPUMillis: 4000, MemoryBytes: 8 << 30, GPUs: 1, Custom: map[string]int64{"licenses": 2}},
		Labels:       map[string]string{"zone": "eu-1", "example.com/rack": "r7"},
		Capabilities: []string{"docker", "cuda12", "docker"},
	}
}

func TestRegistrationValidate(t *testing.T) {
	require.NoError(t, reg("w-1").Validate())
	tests := []struct {
		name  string
		edit  func(*Registration)
		field string
	}{
		{"empty ID", func(r *Registration) { r.WorkerID = "" }, "worker_id: required"},
		{"bad ID", func(r *Registration) { r.WorkerID = "no spaces" }, "worker_id"},
		{"ID too long", func(r *Registration) { r.WorkerID = string(make([]byte, 64)) }, "worker_id"},
		{"negative cpu", func(r *Registration) { r.Capacity.CPUMillis = -1 }, "capacity.cpu_millis"},
		{"negative memory", func(r *Registration) { r.Capacity.MemoryBytes = -5 }, "capacity.memory_bytes"},
		{"negative custom", func(r *Registration) { r.Capacity.Custom = map[string]int64{"x": -1} }, "capacity.custom.x"},
		{"bad custom name", func(r *Registration) { r.Capacity.Custom = map[string]int64{"Bad!": 1} }, "capacity.custom.Bad!"},
		{"bad label key", func(r *Registration) { r.Labels = map[string]string{"-bad": "x"} }, `labels: key "-bad"`},
		{"bad label value", func(r *Registration) { r.Labels = map[string]string{"zone": "a b"} }, "labels.zone"},
		{"bad capability", func(r *Registration) { r.Capabilities = []string{"has space"} }, "capabilities[0]"},
		{"offline before stale", func(r *Registration) { r.StaleAfter, r.OfflineAfter = time.Minute, time.Second }, "offline_after"},
		{"negative stale", func(r *Registration) { r.StaleAfter = -time.Second }, "stale_after"},
		{"negative heartbeat", func(r *Registration) { r.HeartbeatInterval = -time.Second }, "heartbeat_interval"},
		{"heartbeat not below stale", func(r *Registration) { r.HeartbeatInterval = DefaultStaleAfter }, "heartbeat_interval"},
		{"negative slots", func(r *Registration) { r.Capacity.Slots = -1 }, "capacity.slots"},
		{"reservation check too short", func(r *Registration) { r.ReservationCheckAfter = time.Second }, "reservation_check_after"},
		{"negative reservation check", func(r *Registration) { r.ReservationCheckAfter = -time.Minute }, "reservation_check_after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := reg("w-1")
			tc.edit(&r)
			err := r.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
	// Several problems are reported together on one line.
	r := reg("bad id")
	r.Capacity.GPUs = -1
	err := r.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "worker_id")
	assert.Contains(t, err.Error(), "capacity.gpus")
	assert.NotContains(t, err.Error(), "\n")
}

func TestLivenessTransitions(t *testing.T) {
	var w Worker
	lost := w.Register(reg("w-1"), t0)
	assert.Empty(t, lost)
	assert.Equal(t, Active, w.State)
	assert.Equal(t, int64(1), w.Incarnation)
	assert.Equal(t, []string{"cuda12", "docker"}, w.Capabilities, "sorted and deduplicated")
	assert.Equal(t, t0.Add(DefaultStaleAfter), w.NextDeadline())

	changed, _ := w.Evaluate(t0.Add(DefaultStaleAfter - time.Second))
	assert.False(t, changed)
	require.NoError(t, w.Reserve("t1", 1, Requirements{Resources: resource.List{CPUMillis: 1000}}, t0))
	changed, lost = w.Evaluate(t0.Add(DefaultStaleAfter))
	assert.True(t, changed)
	assert.Equal(t, Stale, w.State)
	assert.Equal(t, []Reservation{{TaskID: "t1", Fence: 1, Resources: resource.List{CPUMillis: 1000, Slots: 1}, ReservedAt: t0}}, lost, "a STALE worker's reservations are lost")
	assert.Empty(t, w.Reservations)
	assert.Equal(t, t0.Add(DefaultOfflineAfter), w.NextDeadline())

	revived := t0.Add(DefaultStaleAfter + 2*time.Second)
	require.NoError(t, w.Heartbeat(Heartbeat{WorkerID: "w-1", Incarnation: 1, Seq: 1}, revived))
	assert.Equal(t, Active, w.State, "a heartbeat revives a STALE worker")

	changed, _ = w.Evaluate(revived.Add(DefaultOfflineAfter))
	assert.True(t, changed)
	assert.Equal(t, Offline, w.State, "no heartbeat for offline-after")
	assert.True(t, w.NextDeadline().IsZero())
	err := w.Heartbeat(Heartbeat{WorkerID: "w-1", Incarnation: 1, Seq: 2}, revived.Add(DefaultOfflineAfter+time.Second))
	assert.ErrorIs(t, err, ErrOffline)
	assert.Equal(t, Offline, w.State)

	w.Register(reg("w-1"), t0.Add(90*time.Second))
	assert.Equal(t, int64(2), w.Incarnation)
	assert.Equal(t, Active, w.State)
	err = w.Heartbeat(Heartbeat{WorkerID: "w-1", Incarnation: 1, Seq: 3}, t0.Add(91*time.Second))
	assert.ErrorIs(t, err, ErrWrongIncarnation, "the old incarnation is ignored")
	assert.ErrorIs(t, w.Heartbeat(Heartbeat{WorkerID: "w-2", Incarnation: 2}, t0), ErrWrongWorker)
}

func TestReRegistrationLosesReservations(t *testing.T) {
	var w Worker
	w.Register(reg("w-1"), t0)
	require.NoError(t, w.Reserve("t1", 4, Requirements{}, time.Time{}))
	lost := w.Register(reg("w-1"), t0.Add(time.Second))
	assert.Equal(t, []Reservation{{TaskID: "t1", Fence: 4, Resources: resource.List{Slots: DefaultSlotRequest}}}, lost)
	assert.Empty(t, w.Reservations)
}

func TestRevoke(t *testing.T) {
	var w Worker
	w.Register(reg("w-1"), t0)
	require.NoError(t, w.Reserve("t1", 4, Requirements{}, time.Time{}))
	w.Drain("maintenance", t0)
	lost := w.Revoke(t0.Add(-time.Hour), "key leaked", t0.Add(time.Second))
	assert.Equal(t, []Reservation{{TaskID: "t1", Fence: 4, Resources: resource.List{Slots: DefaultSlotRequest}}}, lost)
	assert.Empty(t, w.Reservations)
	assert.Equal(t, Offline, w.State)
	assert.ErrorIs(t, w.Heartbeat(Heartbeat{WorkerID: "w-1", Incarnation: 1, Seq: 1}, t0.Add(2*time.Second)), ErrOffline,
		"the revoked incarnation's heartbeats are refused")
	changed, _ := w.Evaluate(t0.Add(time.Hour))
	assert.False(t, changed, "it stays OFFLINE")

	w.Revoke(t0.Add(-2*time.Hour), "again", t0.Add(3*time.Second))
	assert.Equal(t, t0.Add(-time.Hour), w.RevokedThrough, "an earlier floor does not lower the later one")
	w.Register(reg("w-1"), t0.Add(4*time.Second))
	assert.Equal(t, Active, w.State)
	assert.Equal(t, t0.Add(-time.Hour), w.RevokedThrough, "the floor outlives the incarnation")
	assert.Equal(t, "again", w.RevokeReason)
}

func TestDrain(t *testing.T) {
	var w Worker
	w.Register(reg("w-1"), t0)
	require.NoError(t, w.Reserve("t1", 1, Requirements{}, time.Time{}))
	w.Drain("maintenance", t0.Add(time.Second))
	assert.Equal(t, Draining, w.State)
	assert.Len(t, w.Reservations, 1, "running leases are kept")
	err := w.Reserve("t2", 1, Requirements{}, time.Time{})
	var inel *Ineligible
	require.True(t, errors.As(err, &inel))
	assert.Equal(t, IneligibleState, inel.Reason)
	require.NoError(t, w.Heartbeat(Heartbeat{WorkerID: "w-1", Incarnation: 1, Seq: 1}, t0.Add(2*time.Second)))
	assert.Equal(t, Draining, w.State, "heartbeats keep a draining worker draining")
	w.Evaluate(t0.Add(30 * time.Second))
	assert.Equal(t, Stale, w.State, "a silent draining worker still goes STALE")
	w.Heartbeat(Heartbeat{WorkerID: "w-1", Incarnation: 1, Seq: 2}, t0.Add(31*time.Second))
	assert.Equal(t, Draining, w.State)
}

func TestReserveAndRelease(t *testing.T) {
	var w Worker
	w.Register(reg("w-1"), t0)
	req := Requirements{Resources: resource.List{CPUMillis: 3000, GPUs: 1}}
	require.NoError(t, w.Reserve("t1", 1, req, time.Time{}))
	require.NoError(t, w.Reserve("t1", 1, req, time.Time{}), "idempotent for the same task and fence")
	assert.Len(t, w.Reservations, 1)
	assert.Equal(t, int64(1000), w.Free().CPUMillis)
	require.NoError(t, w.Reserve("t1", 2, req, time.Time{}), "a newer fence of the same task replaces the old reservation")
	assert.Len(t, w.Reservations, 1)
	assert.Equal(t, int64(2), w.Reservations[0].Fence)
	assert.False(t, w.Release("t1", 1), "a late release of an older fence is ignored")
	assert.True(t, w.HasReservation("t1", 2))
	assert.True(t, w.Release("t1", 2))
	assert.Equal(t, int64(4000), w.Free().CPUMillis)
}

func TestEligible(t *testing.T) {
	base := func() *Worker {
		var w Worker
		w.Register(reg("w-1"), t0)
		return &w
	}
	tests := []struct {
		name   string
		worker func() *Worker
		req    Requirements
		reason string
	}{
		{"fits", base, Requirements{Resources: resource.List{CPUMillis: 4000, GPUs: 1, Custom: map[string]int64{"licenses": 2}}, Capabilities: []string{"docker"}, Selector: map[string]string{"zone": "eu-1"}}, ""},
		{"zero request fits", base, Requirements{}, ""},
		{"default slot request on a full worker", func() *Worker {
			w := base() // 4 cores: 4 slots
			for i := range 4 {
				require.NoError(t, w.Reserve(fmt.Sprint("other-", i), 1, Requirements{}, t0))
			}
			return w
		}, Requirements{}, IneligibleCapacity},
		{"explicit slots beyond capacity", base, Requirements{Resources: resource.List{Slots: 5}}, IneligibleCapacity},
		{"explicit slots within capacity", base, Requirements{Resources: resource.List{Slots: 4}}, ""},
		{"stale", func() *Worker { w := base(); w.Evaluate(t0.Add(time.Hour)); return w }, Requirements{}, IneligibleState},
		{"draining", func() *Worker { w := base(); w.Drain("", t0); return w }, Requirements{}, IneligibleState},
		{"cpu", base, Requirements{Resources: resource.List{CPUMillis: 4001}}, IneligibleCapacity},
		{"memory", base, Requirements{Resources: resource.List{MemoryBytes: 9 << 30}}, IneligibleCapacity},
		{"gpu", base, Requirements{Resources: resource.List{GPUs: 2}}, IneligibleCapacity},
		{"custom", base, Requirements{Resources: resource.List{Custom: map[string]int64{"licenses": 3}}}, IneligibleCapacity},
		{"unknown custom", base, Requirements{Resources: resource.List{Custom: map[string]int64{"tpu": 1}}}, IneligibleCapacity},
		{"reserved capacity counts", func() *Worker {
			w := base()
			_ = w.Reserve("other", 1, Requirements{Resources: resource.List{CPUMillis: 3500}}, time.Time{})
			return w
		}, Requirements{Resources: resource.List{CPUMillis: 1000}}, IneligibleCapacity},
		{"capability", base, Requirements{Capabilities: []string{"docker", "fpga"}}, IneligibleCapability},
		{"selector missing label", base, Requirements{Selector: map[string]string{"arch": "arm64"}}, IneligibleSelector},
		{"selector wrong value", base, Requirements{Selector: map[string]string{"zone": "us-2"}}, IneligibleSelector},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Eligible(tc.worker(), tc.req)
			if tc.reason == "" {
				assert.NoError(t, err)
				return
			}
			var inel *Ineligible
			require.True(t, errors.As(err, &inel), "got %v", err)
			assert.Equal(t, tc.reason, inel.Reason)
			assert.Equal(t, "w-1", inel.WorkerID)
		})
	}
}

func TestValidateID(t *testing.T) {
	for _, ok := range []string{"a", "worker-1", "A.b_c-9", "x123456789012345678901234567890123456789012345678901234567890ab"} {
		assert.NoError(t, ValidateID("id", ok), ok)
	}
	for _, bad := range []string{"", "-a", "a-", "a/b", "a b", "ä", "x1234567890123456789012345678901234567890123456789012345678901ab"} {
		assert.Error(t, ValidateID("id", bad), bad)
	}
}

func TestLivenessDefaultsDeriveFromTheHeartbeatInterval(t *testing.T) {
	assert.Equal(t, 2*time.Second, DefaultHeartbeatInterval)
	assert.Equal(t, 8*time.Second, DefaultStaleAfter)
	assert.Equal(t, 30*time.Second, DefaultOfflineAfter)
	assert.Equal(t, DefaultHeartbeatInterval, DefaultStaleAfter/HeartbeatsPerStaleWindow, "an agent heartbeats every StaleAfter/4")
	var w Worker
	w.Register(reg("w-1"), t0)
	assert.Equal(t, DefaultHeartbeatInterval, w.HeartbeatPeriod())
	r := reg("w-2")
	r.StaleAfter, r.OfflineAfter = 12*time.Second, time.Minute
	w.Register(r, t0)
	assert.Equal(t, 3*time.Second, w.HeartbeatPeriod(), "derived from a configured stale window")
	r.HeartbeatInterval = time.Second
	w.Register(r, t0)
	assert.Equal(t, time.Second, w.HeartbeatPeriod(), "a declared interval wins")
}

func TestFresh(t *testing.T) {
	var w Worker
	w.Register(reg("w-1"), t0) // heartbeat period 2 s
	tests := []struct {
		name  string
		now   time.Time
		fresh bool
	}{
		{"no clock", time.Time{}, true},
		{"just heartbeated", t0, true},
		{"one missed heartbeat", t0.Add(3 * time.Second), true},
		{"exactly two periods", t0.Add(2 * DefaultHeartbeatInterval), true},
		{"just over two periods", t0.Add(2*DefaultHeartbeatInterval + time.Nanosecond), false},
		{"past the stale window", t0.Add(DefaultStaleAfter + time.Second), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.fresh, w.Fresh(tc.now))
		})
	}
}

func TestSlots(t *testing.T) {
	for _, tc := range []struct{ cpu, slots int64 }{{0, 1}, {500, 1}, {1000, 1}, {1999, 1}, {2000, 2}, {16000, 16}} {
		assert.Equal(t, tc.slots, DefaultSlots(tc.cpu), "cpu %dm", tc.cpu)
	}
	var w Worker
	w.Register(reg("w-1"), t0)
	assert.Equal(t, int64(4), w.Capacity.Slots, "registration records the default: one slot per core")
	r := reg("w-1")
	r.Capacity.Slots = 10
	w.Register(r, t0)
	assert.Equal(t, int64(10), w.Capacity.Slots, "declared slots are kept")

	assert.Equal(t, resource.List{Slots: 1}, Requirements{}.Request())
	assert.Equal(t, resource.List{CPUMillis: 500, Slots: 1}, Requirements{Resources: resource.List{CPUMillis: 500}}.Request())
	assert.Equal(t, resource.List{Slots: 3}, Requirements{Resources: resource.List{Slots: 3}}.Request())
}

// A record carried from before slots and heartbeat intervals existed
// decodes and behaves like a new one: slots per core, one slot per held
// reservation, heartbeat period StaleAfter/4.
func TestRecordFromBeforeSlotsDecodes(t *testing.T) {
	old := `{"worker_id":"w-old","incarnation":3,"state":"ACTIVE",
		"capacity":{"cpu_millis":2000,"memory_bytes":1073741824},
		"stale_after":15000000000,"offline_after":60000000000,
		"registered_at":"2026-01-01T00:00:00Z","last_heartbeat_at":"2026-01-01T00:00:00Z",
		"reservations":[{"task_id":"t1","fence":1,"resources":{"cpu_millis":100}}]}`
	var w Worker
	require.NoError(t, json.Unmarshal([]byte(old), &w))
	assert.Equal(t, 3750*time.Millisecond, w.HeartbeatPeriod())
	assert.Equal(t, resource.List{CPUMillis: 1900, MemoryBytes: 1 << 30, Slots: 1}, w.Free())
	assert.Equal(t, 0.5, w.Load())
	require.NoError(t, Eligible(&w, Requirements{}))
	require.NoError(t, w.Reserve("t2", 1, Requirements{}, t0))
	var inel *Ineligible
	require.ErrorAs(t, Eligible(&w, Requirements{}), &inel, "both slots are held")
	assert.Equal(t, "slots: need 1, free 0", inel.Detail)

	b, err := json.Marshal(Reservation{TaskID: "t", Fence: 1})
	require.NoError(t, err)
	assert.JSONEq(t, `{"task_id":"t","fence":1,"resources":{}}`, string(b), "a zero ReservedAt is omitted")
}

func TestReserveRecordsItsTime(t *testing.T) {
	var w Worker
	w.Register(reg("w-1"), t0)
	require.NoError(t, w.Reserve("t1", 1, Requirements{}, t0.Add(time.Second)))
	require.NoError(t, w.Reserve("t1", 1, Requirements{}, t0.Add(time.Minute)), "a repeated reserve is idempotent")
	require.Len(t, w.Reservations, 1)
	assert.Equal(t, t0.Add(time.Second), w.Reservations[0].ReservedAt, "and keeps the first time")
	require.NoError(t, w.Reserve("t1", 2, Requirements{}, t0.Add(2*time.Minute)))
	require.Len(t, w.Reservations, 1)
	assert.Equal(t, t0.Add(2*time.Minute), w.Reservations[0].ReservedAt, "a newer fence is a new reservation")
	require.NoError(t, w.Reserve("t2", 1, Requirements{}, time.Time{}))
	assert.True(t, w.Reservations[1].ReservedAt.IsZero(), "a caller without a time leaves it zero")
}

func ids(ws []Worker) []string {
	out := []string{}
	for _, w := range ws {
		out = append(out, w.WorkerID)
	}
	return out
}

// worker returns an ACTIVE worker registered at t0 with cores CPUs (and as
// many slots), edited by the options.
func worker(id string, cores int64, opts ...func(*Worker)) Worker {
	var w Worker
	r := reg(id)
	r.Capacity.CPUMillis = cores * 1000
	w.Register(r, t0)
	for _, o := range opts {
		o(&w)
	}
	return w
}

func holding(n int) func(*Worker) {
	return func(w *Worker) {
		for i := range n {
			if err := w.Reserve(fmt.Sprintf("held-%d", i), 1, Requirements{}, t0); err != nil {
				panic(err)
			}
		}
	}
}

func heartbeatAt(at time.Time) func(*Worker) {
	return func(w *Worker) { w.LastHeartbeatAt = at }
}

func inState(s State) func(*Worker) { return func(w *Worker) { w.State = s } }

func TestPlace(t *testing.T) {
	now := t0.Add(time.Second)
	late := heartbeatAt(now.Add(-2*DefaultHeartbeatInterval - time.Millisecond))
	tests := []struct {
		name    string
		workers []Worker
		req     Requirements
		p       Placement
		want    []string
		passed  []string
	}{
		{"idle equals: by ID without a seed",
			[]Worker{worker("c", 4), worker("a", 4), worker("b", 4)}, Requirements{}, Placement{Now: now},
			[]string{"a", "b", "c"}, nil},
		{"an avoided worker goes after every other eligible one",
			[]Worker{worker("a", 4), worker("b", 4, holding(3)), worker("c", 4, holding(3))}, Requirements{}, Placement{Avoid: []string{"a"}, Now: now},
			[]string{"b", "c", "a"}, nil},
		{"among avoided workers, the one that lost longest ago first",
			[]Worker{worker("a", 4), worker("b", 4), worker("c", 4), worker("d", 4, holding(3))}, Requirements{}, Placement{Avoid: []string{"b", "a", "c", "b"}, Now: now},
			[]string{"d", "a", "c", "b"}, nil},
		{"an avoided worker is still chosen when it is the only eligible one",
			[]Worker{worker("a", 4), worker("b", 4, inState(Draining))}, Requirements{}, Placement{Avoid: []string{"a"}, Now: now},
			[]string{"a"}, []string{"b"}},
		{"a late heartbeat goes after every fresh worker",
			[]Worker{worker("a", 4, late), worker("b", 4, holding(3)), worker("c", 4, late)}, Requirements{}, Placement{Now: now},
			[]string{"b", "a", "c"}, nil},
		{"a heartbeat exactly two periods old is fresh",
			[]Worker{worker("a", 4, heartbeatAt(now.Add(-2*DefaultHeartbeatInterval)), holding(1)), worker("b", 4, holding(2))}, Requirements{}, Placement{Now: now},
			[]string{"a", "b"}, nil},
		{"the period is the worker's own",
			[]Worker{worker("a", 4, late, func(w *Worker) { w.HeartbeatInterval = time.Minute }), worker("b", 4, holding(1))}, Requirements{}, Placement{Now: now},
			[]string{"a", "b"}, nil},
		{"no clock: nobody is late",
			[]Worker{worker("a", 4, late), worker("b", 4, holding(1))}, Requirements{}, Placement{},
			[]string{"a", "b"}, nil},
		{"avoidance outranks freshness",
			[]Worker{worker("a", 4), worker("b", 4, late)}, Requirements{}, Placement{Avoid: []string{"a"}, Now: now},
			[]string{"b", "a"}, nil},
		{"least loaded first, by fraction of slots",
			[]Worker{worker("a", 2, holding(1)), worker("b", 8, holding(2)), worker("c", 4, holding(1)), worker("d", 1)}, Requirements{}, Placement{Now: now},
			[]string{"d", "b", "c", "a"}, nil},
		{"load is the dominant resource",
			[]Worker{worker("a", 4, func(w *Worker) {
				_ = w.Reserve("big", 1, Requirements{Resources: resource.List{CPUMillis: 3000}}, t0)
			}), worker("b", 4, holding(2))}, Requirements{}, Placement{Now: now},
			[]string{"b", "a"}, nil},
		{"the default slot request makes a full worker ineligible",
			[]Worker{worker("a", 2, holding(2)), worker("b", 2, holding(1))}, Requirements{}, Placement{Now: now},
			[]string{"b"}, []string{"a"}},
		{"ineligible workers are passed over with their reason",
			[]Worker{worker("a", 4, inState(Stale)), worker("b", 1), worker("c", 4)}, Requirements{Resources: resource.List{CPUMillis: 2000}}, Placement{Now: now},
			[]string{"c"}, []string{"a", "b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ranked, passed := Place(tc.workers, tc.req, tc.p)
			assert.Equal(t, tc.want, ids(ranked))
			var got []string
			for _, p := range passed {
				got = append(got, p.WorkerID)
			}
			assert.Equal(t, tc.passed, got)
		})
	}
}

func TestPlaceSeedSpreadsTies(t *testing.T) {
	workers := []Worker{worker("a", 4), worker("b", 4), worker("c", 4)}
	firsts := map[string]int{}
	for i := range 3000 {
		ranked, _ := Place(workers, Requirements{}, Placement{Now: t0, Seed: SelectionSeed(fmt.Sprint("task-", i), 1)})
		firsts[ranked[0].WorkerID]++
	}
	for _, id := range []string{"a", "b", "c"} {
		assert.InDelta(t, 1000, firsts[id], 150, "worker %s first for %d of 3000 seeds (%v)", id, firsts[id], firsts)
	}

	// The same seed gives the same order whatever the input order.
	p := Placement{Now: t0, Seed: SelectionSeed("task-7", 3)}
	one, _ := Place(workers, Requirements{}, p)
	two, _ := Place([]Worker{workers[2], workers[0], workers[1]}, Requirements{}, p)
	assert.Equal(t, ids(one), ids(two))
	assert.Equal(t, "task-7/3", SelectionSeed("task-7", 3))

	// The seed only breaks ties: a less loaded worker still comes first.
	loaded := []Worker{worker("a", 4, holding(1)), worker("b", 4), worker("c", 4, holding(1))}
	for i := range 50 {
		ranked, _ := Place(loaded, Requirements{}, Placement{Now: t0, Seed: SelectionSeed(fmt.Sprint("task-", i), 1)})
		assert.Equal(t, "b", ranked[0].WorkerID)
	}
}

// N tasks placed one after the other, each reserving on the first ranked
// worker, spread evenly over idle workers (issue: 30 resource-less tasks
// all landed on the first worker by name).
func TestSequentialPlacementSpreadsResourcelessTasks(t *testing.T) {
	workers := []Worker{worker("a", 16), worker("b", 16)}
	for i := range 30 {
		task := fmt.Sprint("task-", i)
		ranked, _ := Place(workers, Requirements{}, Placement{Now: t0, Seed: SelectionSeed(task, 1)})
		require.NotEmpty(t, ranked, "task %d found no worker", i)
		for j := range workers {
			if workers[j].WorkerID == ranked[0].WorkerID {
				require.NoError(t, workers[j].Reserve(task, 1, Requirements{}, t0))
			}
		}
	}
	assert.Len(t, workers[0].Reservations, 15)
	assert.Len(t, workers[1].Reservations, 15)

	// Slots bound a worker even for tasks that request nothing.
	small := []Worker{worker("a", 1), worker("b", 1)}
	placed := 0
	for i := range 5 {
		task := fmt.Sprint("task-", i)
		ranked, _ := Place(small, Requirements{}, Placement{Now: t0, Seed: SelectionSeed(task, 1)})
		if len(ranked) == 0 {
			continue
		}
		for j := range small {
			if small[j].WorkerID == ranked[0].WorkerID {
				require.NoError(t, small[j].Reserve(task, 1, Requirements{}, t0))
				placed++
			}
		}
	}
	assert.Equal(t, 2, placed, "two one-slot workers hold two tasks")
}

// Rank (the CLI's dry run) is Place with one avoided worker, no clock and
// no seed.
func TestRank(t *testing.T) {
	workers := []Worker{worker("c", 2), worker("a", 4, holding(1)), worker("b", 4), worker("d", 8, inState(Stale))}
	ranked, passed := Rank(workers, Requirements{Resources: resource.List{CPUMillis: 1000}}, "")
	assert.Equal(t, []string{"b", "c", "a"}, ids(ranked), "least loaded first, then ID")
	require.Len(t, passed, 1)
	assert.Equal(t, "d", passed[0].WorkerID)

	ranked, _ = Rank(workers, Requirements{}, "b")
	assert.Equal(t, []string{"c", "a", "b"}, ids(ranked), "the previous holder goes last")
}

func TestForTaskLeavesOutTheTasksOwnReservations(t *testing.T) {
	var w Worker
	w.Register(Registration{WorkerID: "a", Capacity: resource.List{CPUMillis: 1000, Slots: 2}}, t0)
	require.NoError(t, w.Reserve("t1", 3, Requirements{}, t0))
	require.NoError(t, w.Reserve("t2", 1, Requirements{}, t0))
	got := w.ForTask("t1")
	require.Len(t, got.Reservations, 1)
	assert.Equal(t, "t2", got.Reservations[0].TaskID)
	assert.Len(t, w.Reservations, 2, "the record itself is unchanged")
}

func TestReRegistrationKeepsAdoptedReservations(t *testing.T) {
	var w Worker
	w.Register(reg("w-1"), t0)
	require.NoError(t, w.Reserve("t1", 4, Requirements{}, t0))
	require.NoError(t, w.Reserve("t2", 1, Requirements{}, t0))
	require.NoError(t, w.Reserve("t3", 2, Requirements{}, t0))
	r := reg("w-1")
	r.Adopt = []Adoption{
		{TaskID: "t1", Attempt: 3, Fence: 4},
		{TaskID: "t3", Attempt: 1, Fence: 1}, // a fence the record does not hold
		{TaskID: "t9", Attempt: 1, Fence: 1}, // a task it holds nothing for
	}
	require.NoError(t, r.Validate())
	lost := w.Register(r, t0.Add(time.Second))
	assert.Equal(t, int64(2), w.Incarnation)
	assert.Equal(t, []Reservation{{TaskID: "t1", Fence: 4, Resources: resource.List{Slots: DefaultSlotRequest}, ReservedAt: t0}}, w.Reservations, "only the adopted fence is kept")
	var lostRefs []string
	for _, l := range lost {
		lostRefs = append(lostRefs, l.TaskID+"/"+strconv.FormatInt(l.Fence, 10))
	}
	assert.Equal(t, []string{"t2/1", "t3/2"}, lostRefs)
}

func TestRegistrationValidatesAdoptions(t *testing.T) {
	r := reg("w-1")
	r.Adopt = []Adoption{{TaskID: "t1", Attempt: 1, Fence: 1}, {TaskID: "bad id", Attempt: 1, Fence: 1}, {TaskID: "t2", Attempt: 0, Fence: 1}, {TaskID: "t1", Attempt: 2, Fence: 2}}
	err := r.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "adopt[1].task_id")
	assert.Contains(t, err.Error(), "adopt[2]: attempt and fence must be ≥ 1")
	assert.Contains(t, err.Error(), `adopt[3]: task "t1" adopted twice`)
}
