package lease

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Backoff is the wait between an attempt's end and the next grant:
// Initial·Multiplier^(n−1), capped at Max, then reduced by up to Jitter of
// itself. n is the number of the retry (1 for the first retry).
type Backoff struct {
	// Initial is the first retry's base delay. Default 1s.
	Initial time.Duration `json:"initial"`
	// Max caps the base delay. Default 30s.
	Max time.Duration `json:"max"`
	// Multiplier grows the base delay per retry; ≥ 1. Default 2.
	Multiplier float64 `json:"multiplier"`
	// Jitter is the fraction (0..1) of the delay that is randomised away so
	// that tasks failing together do not retry together. Default 0.2.
	Jitter float64 `json:"jitter"`
}

// DefaultBackoff is used for zero fields of a Backoff.
var DefaultBackoff = Backoff{Initial: time.Second, Max: 30 * time.Second, Multiplier: 2, Jitter: 0.2}

// WithDefaults fills zero fields from DefaultBackoff.
func (b Backoff) WithDefaults() Backoff {
	if b.Initial == 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max == 0 {
		b.Max = DefaultBackoff.Max
	}
	if b.Multiplier == 0 {
		b.Multiplier = DefaultBackoff.Multiplier
	}
	return b
}

// Validate names the first bad field. Errors: a negative duration, Max <
// Initial, Multiplier < 1, Jitter outside [0, 1].
func (b Backoff) Validate() error {
	switch {
	case b.Initial < 0:
		return fmt.Errorf("backoff.initial: must not be negative (got %s)", b.Initial)
	case b.Max < 0:
		return fmt.Errorf("backoff.max: must not be negative (got %s)", b.Max)
	case b.Max < b.Initial:
		return fmt.Errorf("backoff.max: %s is below backoff.initial %s", b.Max, b.Initial)
	case b.Multiplier < 1:
		return fmt.Errorf("backoff.multiplier: must be at least 1 (got %g)", b.Multiplier)
	case b.Jitter < 0 || b.Jitter > 1:
		return fmt.Errorf("backoff.jitter: must be between 0 and 1 (got %g)", b.Jitter)
	}
	return nil
}

// ErrBadRetry is returned by Delay for a retry number below 1.
var ErrBadRetry = errors.New("retry number must be at least 1")

// Delay is the wait before retry n of a task. The jitter is derived from
// seed (e.g. the task ID) and n with SHA-256, so the same inputs give the
// same delay on every replay, which workflow code needs.
func (b Backoff) Delay(n int64, seed string) (time.Duration, error) {
	if n < 1 {
		return 0, ErrBadRetry
	}
	b = b.WithDefaults()
	base := float64(b.Initial)
	for i := int64(1); i < n && base < float64(b.Max); i++ {
		base *= b.Multiplier
	}
	if base > float64(b.Max) {
		base = float64(b.Max)
	}
	sum := sha256.Sum256([]byte(seed + "/" + strconv.FormatInt(n, 10)))
	unit := float64(binary.BigEndian.Uint64(sum[:8])>>11) / float64(1<<53) // [0, 1)
	return time.Duration(base * (1 - b.Jitter*unit)), nil
}
