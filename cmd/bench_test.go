package cmd

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every bad bench flag is refused with exit code 2 and the flag named,
// before any server, control plane or agent starts (run's --address has
// no server behind it).
func TestBenchRefusesBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no tasks", []string{"--tasks", "0"}, "--tasks 0: must be at least 1"},
		{"negative workers", []string{"--workers", "-1"}, "--workers -1: must not be negative"},
		{"heartbeat interval too short", []string{"--heartbeat-interval", "10ms"}, "--heartbeat-interval 10ms"},
		{"one agent", []string{"--agents", "1"}, "--agents 1: must be at least 2"},
		{"agent heartbeat interval zero", []string{"--agent-heartbeat-interval", "0s"}, "--agent-heartbeat-interval 0s"},
		{"no trials", []string{"--trials", "0"}, "--trials 0: must be at least 1"},
		{"heartbeat window too short", []string{"--heartbeat-window", "500ms"}, "--heartbeat-window 500ms"},
		{"lease heartbeat above half the window", []string{"--heartbeat-window", "10s", "--lease-heartbeat-interval", "6s"}, "--lease-heartbeat-interval 6s"},
		{"no selections", []string{"--selections", "0"}, "--selections 0: must be at least 1"},
		{"unknown phase", []string{"--phases", "throughput,warp"}, `unknown phase "warp"`},
		{"empty phases", []string{"--phases", ","}, "--phases \",\": name at least one"},
		{"malformed duration", []string{"--heartbeat-window", "soon"}, "--heartbeat-window"},
		{"bad output", []string{"-o", "yaml"}, "--output \"yaml\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := run(t, append([]string{"bench"}, tt.args...)...)
			assert.Equal(t, ExitUsage, code, stderr)
			assert.Contains(t, stderr, tt.want)
			assert.Empty(t, stdout)
		})
	}
}
