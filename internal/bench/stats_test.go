package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPercentileIsNearestRank(t *testing.T) {
	s := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	assert.Equal(t, 5.0, Percentile(s, 50))
	assert.Equal(t, 10.0, Percentile(s, 99))
	assert.Equal(t, 1.0, Percentile(s, 1))
	assert.Equal(t, 3.0, Percentile([]float64{3}, 99))
	assert.Equal(t, 0.0, Percentile(nil, 50))
	assert.Equal(t, []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}, s, "samples must not be reordered")
}

func TestThroughputUsesEarliestStartAndLatestClose(t *testing.T) {
	t0 := time.Unix(1000, 0)
	starts := []time.Time{t0.Add(time.Second), t0}
	closes := []time.Time{t0.Add(2 * time.Second), t0.Add(4 * time.Second)}
	assert.InDelta(t, 0.5, Throughput(2, starts, closes), 1e-9)
	assert.Equal(t, 0.0, Throughput(0, nil, nil))
	assert.Equal(t, 0.0, Throughput(1, []time.Time{t0}, []time.Time{t0}))
}
