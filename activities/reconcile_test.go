package activities

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

func TestStaleReservation(t *testing.T) {
	active := func(worker string, fence int64) *lease.Lease {
		return &lease.Lease{WorkerID: worker, Fence: fence, State: lease.Active}
	}
	ended := func(worker string, fence int64) *lease.Lease {
		return &lease.Lease{WorkerID: worker, Fence: fence, State: lease.Expired}
	}
	for _, tc := range []struct {
		name  string
		view  api.TaskView
		fence int64
		stale bool
	}{
		{"first selection under way", api.TaskView{State: api.TaskPending}, 1, false},
		{"never granted", api.TaskView{State: api.TaskPending}, 3, true},
		{"current lease on this worker", api.TaskView{State: api.TaskLeased, Lease: active("w1", 2)}, 2, false},
		{"fence granted to another worker (ambiguous reserve)", api.TaskView{State: api.TaskLeased, Lease: active("w2", 2)}, 2, true},
		{"task moved past the fence", api.TaskView{State: api.TaskLeased, Lease: active("w1", 4)}, 2, true},
		{"next selection under way", api.TaskView{State: api.TaskBackoff, Lease: ended("w2", 2)}, 3, false},
		{"lease ended, release lost", api.TaskView{State: api.TaskBackoff, Lease: ended("w1", 2)}, 2, true},
		{"task ended", api.TaskView{State: api.TaskCompleted, Lease: active("w1", 2)}, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			why := staleReservation(tc.view, "w1", tc.fence)
			require.Equal(t, tc.stale, why != "", "why=%q", why)
		})
	}
}
