package testsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
)

// benchContractFields are the `wdc bench -o json` fields other tools read.
var benchContractFields = []string{
	"bare_throughput", "wdc_throughput", "throughput_ratio",
	"events_per_task", "events_by_type", "bare_events", "events_per_heartbeat",
	"failover_p50", "failover_p99", "selection_p50", "selection_p99", "false_stale",
	"machine", "versions",
}

// TestBenchCommandSmall runs `wdc bench` at a small size as a real
// subprocess (its own in-process server, control plane and agent
// subprocesses) and checks its JSON: every contract field present and
// plausible, and no agent left behind. It asserts no figure against a
// target: figures come from `make bench`.
func TestBenchCommandSmall(t *testing.T) {
	out := runBench(t, 3*time.Minute,
		"--tasks", "20", "--workers", "20", "--trials", "3", "--selections", "10",
		"--heartbeat-window", "5s", "--heartbeat-interval", "1s", "--agent-heartbeat-interval", "500ms")

	var raw map[string]any
	require.NoError(t, json.Unmarshal(out, &raw), string(out))
	for _, f := range benchContractFields {
		assert.Contains(t, raw, f)
		assert.NotNil(t, raw[f], f)
	}
	var r struct {
		BareThroughput     float64          `json:"bare_throughput"`
		WdcThroughput      float64          `json:"wdc_throughput"`
		ThroughputRatio    float64          `json:"throughput_ratio"`
		EventsPerTask      int64            `json:"events_per_task"`
		EventsByType       map[string]int64 `json:"events_by_type"`
		BareEvents         int64            `json:"bare_events"`
		EventsPerHeartbeat float64          `json:"events_per_heartbeat"`
		Heartbeats         int64            `json:"heartbeats"`
		FailoverP50        float64          `json:"failover_p50"`
		FailoverP99        float64          `json:"failover_p99"`
		FailoverSamples    []float64        `json:"failover_samples"`
		SelectionP50       float64          `json:"selection_p50"`
		SelectionP99       float64          `json:"selection_p99"`
		FalseStale         int64            `json:"false_stale"`
		Machine            struct {
			Cores     int    `json:"cores"`
			GOOS      string `json:"goos"`
			GoVersion string `json:"go_version"`
		} `json:"machine"`
		Versions struct {
			TemporalServer string `json:"temporal_server"`
			SDK            string `json:"temporal_sdk_module"`
		} `json:"versions"`
	}
	require.NoError(t, json.Unmarshal(out, &r))
	assert.Positive(t, r.BareThroughput)
	assert.Positive(t, r.WdcThroughput)
	assert.InDelta(t, r.WdcThroughput/r.BareThroughput, r.ThroughputRatio, 0.01)
	assert.Positive(t, r.EventsPerTask)
	var sum int64
	for _, n := range r.EventsByType {
		sum += n
	}
	assert.Equal(t, r.EventsPerTask, sum, "the breakdown adds up to the history length")
	assert.Positive(t, r.BareEvents)
	assert.Positive(t, r.EventsPerHeartbeat)
	assert.Positive(t, r.Heartbeats)
	assert.Len(t, r.FailoverSamples, 3)
	assert.Positive(t, r.FailoverP50)
	assert.LessOrEqual(t, r.FailoverP50, r.FailoverP99)
	assert.Positive(t, r.SelectionP50)
	assert.LessOrEqual(t, r.SelectionP50, r.SelectionP99)
	assert.GreaterOrEqual(t, r.FalseStale, int64(0))
	assert.Positive(t, r.Machine.Cores)
	assert.NotEmpty(t, r.Machine.GOOS)
	assert.NotEmpty(t, r.Machine.GoVersion)
	assert.NotEmpty(t, r.Versions.TemporalServer)
	assert.NotEmpty(t, r.Versions.SDK)

	// The bench's agents are gone with it.
	assert.Empty(t, processesWith(t, "bench-agent-"), "agent subprocesses left behind")
}

// runBench runs `wdc bench -o json ARGS…` as a subprocess of this binary
// (its own in-process server, control plane and agents), failing the test
// unless it exits 0 within timeout; it returns the JSON.
func runBench(t *testing.T, timeout time.Duration, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	c := exec.CommandContext(ctx, os.Args[0], append([]string{"bench", "-o", "json"}, args...)...)
	c.Env = append(os.Environ(), envRunCLI+"=1")
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	t.Logf("wdc bench %s took %s; progress:\n%s", strings.Join(args, " "), time.Since(began).Round(time.Millisecond), stderr.String())
	require.NoError(t, err)
	return stdout.Bytes()
}

// processesWith lists the command lines of this binary's processes that
// contain s.
func processesWith(t *testing.T, s string) []string {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if (args[0] == exe || args[0] == os.Args[0]) && strings.Contains(string(b), s) {
			out = append(out, strings.Join(args, " "))
		}
	}
	return out
}

// TestBenchCLIPathAndSweep runs `wdc bench --phases throughput` at 20
// tasks and `wdc bench --phases sweep` at 1,000 (CI's sweep; make bench's
// is 10,000), each as a real subprocess, and checks the figures of the
// path users take (`wdc tasks submit --batch`, a subprocess of the bench):
// the CLI rates and their ratio against the same run's bare baseline, the
// CPU time per task of each process, and the sweep's counts and run load.
func TestBenchCLIPathAndSweep(t *testing.T) {
	const n, sweepTasks = 20, 1000
	out := runBench(t, 2*time.Minute, "--phases", "throughput", "--tasks", strconv.Itoa(n), "--agent-heartbeat-interval", "500ms")
	sweepOut := runBench(t, 12*time.Minute, "--phases", "sweep", "--tasks", strconv.Itoa(sweepTasks))

	type load struct {
		HistoryLength   int64 `json:"history_length"`
		HistoryBytes    int64 `json:"history_bytes"`
		PendingChildren int64 `json:"pending_children"`
		PendingBytes    int64 `json:"pending_bytes"`
	}
	type cpu struct {
		Server       *float64 `json:"cpu_seconds_per_task_server"`
		ControlPlane *float64 `json:"cpu_seconds_per_task_control_plane"`
		Agents       *float64 `json:"cpu_seconds_per_task_agents"`
		CLI          *float64 `json:"cpu_seconds_per_task_cli"`
	}
	var r, sw struct {
		BareThroughput     float64  `json:"bare_throughput"`
		SubmitRate         float64  `json:"submit_rate"`
		SubmitRateCLI      float64  `json:"submit_rate_cli"`
		WdcThroughputCLI   float64  `json:"wdc_throughput_cli"`
		ThroughputRatioCLI float64  `json:"throughput_ratio_cli"`
		CPUBare            *float64 `json:"cpu_seconds_per_workflow_bare"`
		cpu
		Sweep *struct {
			Tasks          int     `json:"tasks"`
			Submitted      int64   `json:"submitted"`
			Completed      int64   `json:"completed"`
			SubmitRate     float64 `json:"submit_rate"`
			CompletionRate float64 `json:"completion_rate"`
			Commits        int64   `json:"commits"`
			Max            load    `json:"max"`
			End            load    `json:"end"`
			cpu
		} `json:"sweep"`
		Params struct {
			SubmitConcurrency int `json:"submit_concurrency"`
		} `json:"params"`
	}
	require.NoError(t, json.Unmarshal(out, &r), string(out))
	assert.Positive(t, r.BareThroughput)
	assert.Positive(t, r.SubmitRate)
	assert.Positive(t, r.SubmitRateCLI)
	assert.Positive(t, r.WdcThroughputCLI)
	assert.InDelta(t, r.WdcThroughputCLI/r.BareThroughput, r.ThroughputRatioCLI, 0.01)
	assert.Positive(t, r.Params.SubmitConcurrency)
	positive := func(what string, c cpu) {
		for name, v := range map[string]*float64{"server": c.Server, "control plane": c.ControlPlane, "agents": c.Agents, "cli": c.CLI} {
			if assert.NotNil(t, v, "%s: %s", what, name) {
				assert.Positive(t, *v, "%s: %s", what, name)
			}
		}
	}
	positive("throughput", r.cpu)
	require.NotNil(t, r.CPUBare)
	assert.Positive(t, *r.CPUBare)

	assert.Nil(t, r.Sweep, "the sweep runs only when named")

	require.NoError(t, json.Unmarshal(sweepOut, &sw), string(sweepOut))
	s := sw.Sweep
	require.NotNil(t, s, "sweep")
	assert.Equal(t, sweepTasks, s.Tasks)
	assert.Equal(t, int64(sweepTasks), s.Submitted)
	assert.Equal(t, s.Submitted, s.Completed, "every submitted task completed")
	assert.Positive(t, s.SubmitRate)
	assert.Positive(t, s.CompletionRate)
	assert.Positive(t, s.Commits, "the consumer committed results")
	assert.Positive(t, s.End.HistoryLength)
	assert.GreaterOrEqual(t, s.Max.HistoryLength, s.End.HistoryLength)
	assert.GreaterOrEqual(t, s.Max.HistoryBytes, s.End.HistoryBytes)
	assert.Positive(t, s.Max.PendingBytes, "open tasks and uncommitted results are pending state")
	assert.GreaterOrEqual(t, s.Max.PendingBytes, s.End.PendingBytes)
	assert.Zero(t, s.Max.PendingChildren, "tasks are top-level workflows, not the run's children")
	assert.LessOrEqual(t, s.Max.PendingBytes, int64(api.MaxRunPendingBytes))
	positive("sweep", s.cpu)

	assert.Empty(t, processesWith(t, "bench-agent-"), "agent subprocesses left behind")
	assert.Empty(t, processesWith(t, "control-plane"), "control plane subprocess left behind")
}
