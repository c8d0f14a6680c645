package resource

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidate(t *testing.T) {
	assert.Empty(t, List{CPUMillis: 1, MemoryBytes: 2, GPUs: 3, Slots: 4, Custom: map[string]int64{"licenses": 4}}.Validate("r"))
	got := List{CPUMillis: -1, GPUs: -2, Slots: -1, Custom: map[string]int64{"ok": -3, "Bad": 1}}.Validate("capacity")
	var fields []string
	for _, p := range got {
		fields = append(fields, p.Field)
	}
	assert.Equal(t, []string{"capacity.cpu_millis", "capacity.gpus", "capacity.slots", "capacity.custom.Bad", "capacity.custom.ok"}, fields)
}

func TestArithmeticAndShortfall(t *testing.T) {
	capacity := List{CPUMillis: 4000, MemoryBytes: 1 << 30, Custom: map[string]int64{"licenses": 2}}
	used := List{CPUMillis: 1500, Custom: map[string]int64{"licenses": 2}}
	free := capacity.Sub(used)
	assert.Equal(t, List{CPUMillis: 2500, MemoryBytes: 1 << 30}, free, "zero custom amounts are dropped")
	assert.Equal(t, capacity, free.Add(used))
	assert.Equal(t, "", free.Shortfall(List{CPUMillis: 2500}))
	assert.Equal(t, "cpu_millis: need 2501, free 2500", free.Shortfall(List{CPUMillis: 2501}))
	assert.Equal(t, "custom.licenses: need 1, free 0", free.Shortfall(List{Custom: map[string]int64{"licenses": 1}}))
	assert.Equal(t, "slots: need 3, free 2", List{Slots: 2}.Shortfall(List{Slots: 3}))
	assert.Equal(t, List{Slots: 1}, List{Slots: 3}.Sub(List{Slots: 2}))
	assert.False(t, List{Slots: 1}.IsZero())
	assert.True(t, List{}.IsZero())
	assert.True(t, List{Custom: map[string]int64{"x": 0}}.IsZero())
	assert.False(t, free.IsZero())
}

func TestCloneDoesNotShare(t *testing.T) {
	a := List{Custom: map[string]int64{"x": 1}}
	b := a.Clone()
	b.Custom["x"] = 2
	assert.Equal(t, int64(1), a.Custom["x"])
}

func TestShare(t *testing.T) {
	capacity := List{CPUMillis: 4000, MemoryBytes: 8 << 30, Slots: 4, Custom: map[string]int64{"licenses": 2}}
	tests := []struct {
		name string
		used List
		want float64
	}{
		{"nothing", List{}, 0},
		{"cpu dominates", List{CPUMillis: 2000, MemoryBytes: 1 << 30, Slots: 1}, 0.5},
		{"slots dominate", List{Slots: 3}, 0.75},
		{"custom dominates", List{Slots: 1, Custom: map[string]int64{"licenses": 2}}, 1},
		{"over-used", List{Slots: 6}, 1.5},
		{"a resource capacity lacks is left out", List{GPUs: 1, Slots: 1}, 0.25},
		{"negative amounts count as zero", List{CPUMillis: -1000}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.used.Share(capacity))
		})
	}
}
