package fleet

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/internal/resource"
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

	changed, _ := w.Evaluate(t0.Add(14 * time.Second))
	assert.False(t, changed)
	require.NoError(t, w.Reserve("t1", 1, Requirements{Resources: resource.List{CPUMillis: 1000}}, time.Time{}))
	changed, lost = w.Evaluate(t0.Add(15 * time.Second))
	assert.True(t, changed)
	assert.Equal(t, Stale, w.State)
	assert.Equal(t, []Reservation{{TaskID: "t1", Fence: 1, Resources: resource.List{CPUMillis: 1000}}}, lost, "a STALE worker's reservations are lost")
	assert.Empty(t, w.Reservations)
	assert.Equal(t, t0.Add(DefaultOfflineAfter), w.NextDeadline())

	require.NoError(t, w.Heartbeat(Heartbeat{WorkerID: "w-1", Incarnation: 1, Seq: 1}, t0.Add(20*time.Second)))
	assert.Equal(t, Active, w.State, "a heartbeat revives a STALE worker")

	changed, _ = w.Evaluate(t0.Add(80 * time.Second))
	assert.True(t, changed)
	assert.Equal(t, Offline, w.State, "no heartbeat for offline-after")
	assert.True(t, w.NextDeadline().IsZero())
	err := w.Heartbeat(Heartbeat{WorkerID: "w-1", Incarnation: 1, Seq: 2}, t0.Add(81*time.Second))
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
	assert.Equal(t, []Reservation{{TaskID: "t1", Fence: 4}}, lost)
	assert.Empty(t, w.Reservations)
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

func TestRank(t *testing.T) {
	mk := func(id string, cpu int64, state State) Worker {
		var w Worker
		r := reg(id)
		r.Capacity.CPUMillis = cpu
		w.Register(r, t0)
		w.State = state
		return w
	}
	workers := []Worker{mk("c", 2000, Active), mk("a", 4000, Active), mk("b", 4000, Active), mk("d", 8000, Stale)}
	ranked, passed := Rank(workers, Requirements{Resources: resource.List{CPUMillis: 1000}}, "")
	ids := func(ws []Worker) []string {
		var out []string
		for _, w := range ws {
			out = append(out, w.WorkerID)
		}
		return out
	}
	assert.Equal(t, []string{"a", "b", "c"}, ids(ranked), "most free CPU first, then ID")
	require.Len(t, passed, 1)
	assert.Equal(t, "d", passed[0].WorkerID)

	ranked, _ = Rank(workers, Requirements{}, "a")
	assert.Equal(t, []string{"b", "c", "a"}, ids(ranked), "the previous holder goes last")
}

func TestValidateID(t *testing.T) {
	for _, ok := range []string{"a", "worker-1", "A.b_c-9", "x123456789012345678901234567890123456789012345678901234567890ab"} {
		assert.NoError(t, ValidateID("id", ok), ok)
	}
	for _, bad := range []string{"", "-a", "a-", "a/b", "a b", "ä", "x1234567890123456789012345678901234567890123456789012345678901ab"} {
		assert.Error(t, ValidateID("id", bad), bad)
	}
}
