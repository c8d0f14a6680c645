package cmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/internal/bench"
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

// The table shows the CLI path's figures, the CPU per task and the sweep
// as measured, and "-" for a figure of a phase that did not run.
func TestBenchTableShowsCLIPathAndSweep(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	r := bench.Result{
		BareThroughput: f(12.5), SubmitRateCLI: f(4.25), WdcThroughputCLI: f(4.5), ThroughputRatioCLI: f(0.36),
		CPUCost: bench.CPUCost{Server: f(0.14), ControlPlane: f(0.024), Agents: f(0.022), CLI: f(0.0005)},
		Sweep: &bench.Sweep{
			Tasks: 400, Submitted: 400, Completed: 400, SubmitSeconds: 87.1, SubmitRate: 4.6,
			CompletionSeconds: 87.6, CompletionRate: 4.57, ContinuedAsNew: 1, Commits: 35,
			Max:     bench.RunLoad{HistoryLength: 3372, HistoryBytes: 1410352, PendingChildren: 102, PendingBytes: 83172},
			End:     bench.RunLoad{HistoryLength: 3000, HistoryBytes: 1400000, PendingBytes: 1525},
			CPUCost: bench.CPUCost{Server: f(0.155), ControlPlane: f(0.025), Agents: f(0.0215), CLI: f(0.0005)},
		},
		Params: bench.Params{SubmitConcurrency: 8},
	}
	var out bytes.Buffer
	require.NoError(t, writeBenchTable(&out, r))
	rows := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			rows[f[0]] = f[1]
		}
	}
	for name, want := range map[string]string{
		"submit_rate_cli": "4.25", "wdc_throughput_cli": "4.5", "throughput_ratio_cli": "0.36",
		"cpu_seconds_per_task_server": "0.14", "cpu_seconds_per_task_control_plane": "0.024",
		"cpu_seconds_per_task_agents": "0.022", "cpu_seconds_per_task_cli": "0.0005",
		"submit_rate": "-", "failover_p50": "-",
	} {
		assert.Equal(t, want, rows[name], name)
	}
	assert.Contains(t, out.String(), "starts and SubmitTask calls 8 at a time")
	assert.Contains(t, out.String(), "sweep: 400 tasks, 400 submitted in 87.1s (4.6 tasks/s), 400 completed in 87.6s (4.57 tasks/s); 1 continue-as-new, 35 commits")
	assert.Contains(t, out.String(), "largest history 3372 events, 1410352 B; pending state 83172 B, 102 children, 0 activities (at the end: 3000 events, 1400000 B, 1525 B pending)")
	assert.Contains(t, out.String(), "sweep: CPU seconds per task: server 0.1550s, control plane 0.0250s, agents 0.0215s, CLI 0.0005s")
}
