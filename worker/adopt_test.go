package worker

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/lease"
)

func TestSplitAdoptedByTaskAndFence(t *testing.T) {
	a := lease.Claim{TaskID: "a", WorkerID: "w", Attempt: 1, Fence: 1}
	b := lease.Claim{TaskID: "b", WorkerID: "w", Attempt: 2, Fence: 3}
	c := lease.Claim{TaskID: "c", WorkerID: "w", Attempt: 1, Fence: 1}
	assert.Equal(t, []fleet.Adoption{{TaskID: "a", Attempt: 1, Fence: 1}, {TaskID: "b", Attempt: 2, Fence: 3}}, adoptions([]lease.Claim{a, b}))
	adopted, refused := splitAdopted([]lease.Claim{a, b, c}, []api.ReservationRef{{TaskID: "a", Fence: 1}, {TaskID: "b", Fence: 2}})
	assert.Equal(t, []lease.Claim{a}, adopted)
	assert.Equal(t, []lease.Claim{b, c}, refused, "another fence of the same task is refused")
}
