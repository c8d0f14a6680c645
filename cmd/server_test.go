package cmd

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// start-dev names the --address other commands need whenever the
// default (127.0.0.1:7233) does not reach its frontend.
func TestStartDevAddressHint(t *testing.T) {
	for _, tc := range []struct {
		ip       string
		port     int
		frontend string
		want     string
	}{
		{"127.0.0.1", 7233, "127.0.0.1:7233", ""},
		{"0.0.0.0", 7233, "10.0.0.5:7233", ""},
		{"10.0.0.5", 7233, "10.0.0.5:7233", "--address 10.0.0.5:7233"},
		{"127.0.0.1", 7234, "127.0.0.1:7234", "--address 127.0.0.1:7234"},
		{"0.0.0.0", 7234, "10.0.0.5:7234", "--address 10.0.0.5:7234"},
	} {
		got := addressHint(tc.ip, tc.port, tc.frontend)
		if tc.want == "" {
			assert.Empty(t, got, "%s:%d", tc.ip, tc.port)
			continue
		}
		assert.Contains(t, got, "give every other wdc command (on this host too) "+tc.want, "%s:%d", tc.ip, tc.port)
		assert.Contains(t, got, "export TEMPORAL_ADDRESS="+tc.frontend)
	}
}
