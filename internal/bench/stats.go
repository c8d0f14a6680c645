package bench

import (
	"math"
	"sort"
	"time"
)

// Percentile is the nearest-rank percentile p (0 < p ≤ 100) of samples:
// the smallest sample with at least p % of the samples at or below it.
// With fewer than 100 samples, p99 is the largest. It returns 0 for no
// samples. samples is not modified.
func Percentile(samples []float64, p float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	s := append([]float64(nil), samples...)
	sort.Float64s(s)
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// Throughput is n completions over the window from the earliest start to
// the latest close, in completions per second; 0 when the window is empty.
func Throughput(n int, starts, closes []time.Time) float64 {
	if n == 0 || len(starts) == 0 || len(closes) == 0 {
		return 0
	}
	first, last := starts[0], closes[0]
	for _, t := range starts {
		if t.Before(first) {
			first = t
		}
	}
	for _, t := range closes {
		if t.After(last) {
			last = t
		}
	}
	d := last.Sub(first).Seconds()
	if d <= 0 {
		return 0
	}
	return float64(n) / d
}

func ptr[T any](v T) *T { return &v }

// round3 keeps three decimals (milliseconds for seconds).
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
