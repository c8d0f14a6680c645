package bench

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statCPUSeconds adds utime, stime, cutime and cstime, counting fields
// after the command name however odd that name is.
func TestStatCPUSeconds(t *testing.T) {
	tests := []struct {
		name, stat string
		want       float64
		wantErr    bool
	}{
		{"plain", "4242 (wdc) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 20 30 20 0 12 0 100 0 0", 2.5, false},
		{"name with spaces and parens", "7 (a b) c)) R 1 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 1 0 0", 0.1, false},
		{"no name", "7 a R 1", 0, true},
		{"truncated", "7 (a) R 1 7 7 0 -1 0 0 0 0 0 1 2", 0, true},
		{"not a number", "7 (a) R 1 7 7 0 -1 0 0 0 0 0 x 2 3 4 20", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := statCPUSeconds(tt.stat)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tt.want, got, 1e-9)
		})
	}
}

// This process's own /proc entry parses, and its CPU time only grows.
func TestProcCPUSecondsOfSelf(t *testing.T) {
	before, err := procCPUSeconds(os.Getpid())
	require.NoError(t, err)
	deadline := selfCPUSeconds() + 0.05
	for selfCPUSeconds() < deadline {
	}
	after, err := procCPUSeconds(os.Getpid())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, after, before+0.03)
	_, err = procCPUSeconds(-1)
	assert.Error(t, err)
}
