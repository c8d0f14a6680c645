package testsuite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/internal/demo"
	"github.com/wdc-runtime/wdc/internal/telemetry"
)

// Namespaces of the telemetry tests: each has its own control plane, so
// what a /metrics shows is that test's alone.
const (
	nsMetricsDemo = "wdc-metrics-demo"
	nsTelemetry   = "wdc-telemetry"
)

// scrape reads a /metrics endpoint into its metric families.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// sample sums a family's counter or gauge values over the series whose
// labels include every name=value in match ("" for every series); -1
// when the family is absent.
func sample(fams map[string]*dto.MetricFamily, name string, match ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	var sum float64
series:
	for _, m := range f.GetMetric() {
		for _, kv := range match {
			k, v, _ := strings.Cut(kv, "=")
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// httpStatus is the status of a GET of path on addr (0 when unreachable).
func httpStatus(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// sdkFamilies are metric families the Temporal SDK emits in any process
// that polls and runs workflows and activities: their presence shows the
// SDK reports through wdc's registry.
var sdkFamilies = []string{
	"temporal_request_total",
	"temporal_workflow_task_execution_latency_seconds",
	"temporal_activity_execution_latency_seconds",
	"temporal_workflow_completed_total",
}

// The reference demo (attempt 1's lease expires, attempt 2 is accepted,
// attempt 1's late result is refused with stale_fence) run by one process
// whose control plane and agents report into one registry: its /metrics
// shows exactly that, next to the SDK's own families.
func TestMetricsAfterTheDemo(t *testing.T) {
	m := telemetry.NewMetrics(nil)
	srv, err := telemetry.Serve("127.0.0.1:0", m.Registry)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = m.Close()
		_ = srv.Close(context.Background())
	})
	assert.Equal(t, http.StatusOK, httpStatus(srv.Addr(), "/healthz"))
	assert.Equal(t, http.StatusServiceUnavailable, httpStatus(srv.Addr(), "/readyz"), "not ready before a check is set")

	c, err := client.Dial(client.Options{HostPort: suite.srv.FrontendHostPort(), Namespace: nsMetricsDemo, Logger: quietLogger{}, MetricsHandler: m.Handler})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	srv.SetReady(telemetry.TemporalReady(c))
	assert.Equal(t, http.StatusOK, httpStatus(srv.Addr(), "/readyz"))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := demo.Run(ctx, demo.Options{Client: c, DataDir: t.TempDir(), BlobURL: suite.blobURL, Suffix: "-metrics", Metrics: m.Handler})
	require.NoError(t, err)
	require.Empty(t, res.Violations())

	// Each tally scope reaches /metrics in its own turn of a report, so a
	// scrape may hold one counter and not another emitted with it: wait
	// for every one the demo emits, then check the exact values.
	task := "workflow_type=" + api.TaskWorkflowType
	var fams map[string]*dto.MetricFamily
	waitFor(t, 10*time.Second, "the demo's counters on /metrics", func() bool {
		fams = scrape(t, srv.Addr())
		return sample(fams, "wdc_leases_granted_total", task) >= 2 && sample(fams, "wdc_leases_expired_total", task) >= 1 &&
			sample(fams, "wdc_results_accepted_total", task) >= 1 && sample(fams, "wdc_results_rejected_total") >= 1 &&
			sample(fams, "wdc_worker_selection_seconds") >= 2 && sample(fams, "wdc_ingest_seconds") >= 1 &&
			sample(fams, "wdc_ingest_bytes_total") > 0
	})
	// Close reports what is still pending, so a count too many shows too.
	require.NoError(t, m.Close())
	fams = scrape(t, srv.Addr())
	assert.Equal(t, 2.0, sample(fams, "wdc_leases_granted_total", task), "two attempts, two leases")
	assert.Equal(t, 1.0, sample(fams, "wdc_leases_expired_total", task), "attempt 1's lease expired")
	assert.Equal(t, -1.0, sample(fams, "wdc_leases_revoked_total"), "no lease revoked")
	assert.Equal(t, 1.0, sample(fams, "wdc_results_accepted_total", task), "attempt 2's result")
	assert.Equal(t, 1.0, sample(fams, "wdc_results_rejected_total"), "one refusal in all")
	assert.Equal(t, 1.0, sample(fams, "wdc_results_rejected_total", "reason=stale_fence"), "attempt 1's late result")
	assert.GreaterOrEqual(t, sample(fams, "wdc_worker_selection_seconds"), 2.0, "one selection per lease at least")
	assert.Equal(t, 1.0, sample(fams, "wdc_ingest_seconds"), "one ingest")
	assert.Greater(t, sample(fams, "wdc_ingest_bytes_total"), 0.0)
	// The agents' heartbeat metrics: TestControlPlaneAndAgentTelemetry (the
	// demo may end before its agents' first worker heartbeat).
	for _, name := range sdkFamilies {
		assert.Contains(t, fams, name, "the SDK's metrics go through the same registry")
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// telemetryProc is a `wdc` subprocess with its stdout and stderr in files.
type telemetryProc struct {
	metrics string // host:port of its /metrics
	stderr  string // path of its stderr (the log lines)
}

// spawnTelemetry runs this binary as `wdc ARGS… --metrics-address …
// --log-format json` in nsTelemetry; it is stopped with SIGTERM at the
// end of the test, and its logs are shown when the test failed.
func spawnTelemetry(t *testing.T, name string, args ...string) *telemetryProc {
	t.Helper()
	dir := t.TempDir()
	p := &telemetryProc{metrics: fmt.Sprintf("127.0.0.1:%d", freePort(t)), stderr: filepath.Join(dir, "stderr")}
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	require.NoError(t, err)
	stderr, err := os.Create(p.stderr)
	require.NoError(t, err)
	c := exec.Command(os.Args[0], append(args, "--address", suite.srv.FrontendHostPort(), "-n", nsTelemetry,
		"--metrics-address", p.metrics, "--log-format", "json")...)
	c.Env = append(os.Environ(), envRunCLI+"=1")
	c.Stdout, c.Stderr = stdout, stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, c.Start())
	stopAtCleanup(t, c, 15*time.Second, func() {
		stdout.Close()
		stderr.Close()
		if t.Failed() {
			o, _ := os.ReadFile(filepath.Join(dir, "stdout"))
			e, _ := os.ReadFile(p.stderr)
			t.Logf("%s stdout:\n%s\n%s stderr:\n%s", name, o, name, e)
		}
	})
	return p
}

// logLines parses every line of a --log-format json stderr: each must be
// one JSON object.
func logLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "not a JSON line: %s", sc.Text())
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

// attemptFields are the attributes every log line about an attempt
// carries.
var attemptFields = []string{"task", "attempt", "fence", "worker"}

// assertAttemptLines checks that the lines naming a task carry the four
// attempt fields, and that each of want is among them.
func assertAttemptLines(t *testing.T, who string, lines []map[string]any, taskID string, want ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, l := range lines {
		if l["task"] != taskID {
			continue
		}
		msg, _ := l["msg"].(string)
		seen[msg] = true
		for _, k := range attemptFields {
			assert.Contains(t, l, k, "%s line %q", who, msg)
		}
	}
	for _, msg := range want {
		assert.True(t, seen[msg], "%s logged %q for task %s (saw %v)", who, msg, taskID, seen)
	}
}

// `wdc control-plane` and `wdc agent` with --metrics-address and
// --log-format json, as real processes: /healthz and /readyz answer,
// /metrics carries wdc's and the SDK's metrics, and every stderr line is
// JSON — the SDK's too — with the four attempt fields on each line about
// the attempt.
func TestControlPlaneAndAgentTelemetry(t *testing.T) {
	dataDir := t.TempDir()
	cp := spawnTelemetry(t, "control-plane", "control-plane", "--identity", "off", "--data-dir", dataDir, "--log-level", "debug")
	nsc := dialNamespace(t, nsTelemetry)
	wc := &wdcclient.Client{C: nsc}
	waitFor(t, 30*time.Second, "the control plane ready", func() bool { return httpStatus(cp.metrics, "/readyz") == http.StatusOK })
	assert.Equal(t, http.StatusOK, httpStatus(cp.metrics, "/healthz"))

	ag := spawnTelemetry(t, "agent", "agent", "--identity", "off", "--worker-id", "telemetry-a", "--cpu", "1", "--memory", "1Gi",
		"--label", "suite-test="+testLabel(t), "--data-dir", dataDir, "--log-level", "info")
	waitFor(t, 30*time.Second, "the agent ready (registered)", func() bool { return httpStatus(ag.metrics, "/readyz") == http.StatusOK })
	// Every wdc series is there from the start, at zero (one per reason).
	cpFams, agFams := scrape(t, cp.metrics), scrape(t, ag.metrics)
	for _, name := range []string{"wdc_leases_granted_total", "wdc_leases_expired_total", "wdc_leases_revoked_total",
		"wdc_results_accepted_total", "wdc_results_rejected_total", "wdc_worker_selection_seconds", "wdc_ingest_seconds", "wdc_ingest_bytes_total"} {
		assert.Equal(t, 0.0, sample(cpFams, name), "control plane: %s at zero before any task", name)
	}
	assert.Equal(t, 0.0, sample(cpFams, "wdc_leases_revoked_total", "reason=worker_lost"))
	assert.Equal(t, 0.0, sample(cpFams, "wdc_results_rejected_total", "reason=stale_fence"))
	assert.Equal(t, 0.0, sample(agFams, "wdc_results_rejected_total", "reason=stale_fence"), "agent: its executors' refusals")
	assert.Equal(t, 0.0, sample(agFams, "wdc_attempts_running"))

	dir := t.TempDir()
	env := filepath.Join(dir, "task.json")
	require.NoError(t, os.WriteFile(env, []byte(`{"task_id":"telemetry-task","run_id":"telemetry-run","world_id":"suite",
		"command":["/bin/sh","-c","echo done > outputs/out.txt"],"env":{"PATH":"/usr/bin:/bin"},
		"selector":{"suite-test":"`+testLabel(t)+`"}}`), 0o644))
	code, _, stderr := cli(t, "tasks", "submit", env, "--wait", "--data-dir", dataDir, "-n", nsTelemetry)
	require.Equal(t, cmd.ExitOK, code, stderr)
	view, err := wc.Task(context.Background(), "telemetry-task")
	require.NoError(t, err)
	require.NotNil(t, view.Result)
	// The task reported from the workflow task that kept its result; the
	// run's check of the report (the task's lease query) waited for that
	// workflow task and believed it, well before the run's 10-minute sweep.
	waitFor(t, 20*time.Second, "the run recording the task's result from its report", func() bool {
		rv, err := wc.Run(context.Background(), "telemetry-run")
		return err == nil && rv.WorkerResultEvents == 1
	})

	waitFor(t, 15*time.Second, "the task's counters and the agent's heartbeats on /metrics", func() bool {
		cpFams, agFams = scrape(t, cp.metrics), scrape(t, ag.metrics)
		return sample(cpFams, "wdc_results_accepted_total") >= 1 && sample(cpFams, "wdc_leases_granted_total") >= 1 &&
			sample(cpFams, "wdc_worker_selection_seconds") >= 1 && sample(cpFams, "wdc_ingest_seconds") >= 1 &&
			sample(agFams, "wdc_heartbeat_round_trip_seconds") > 0 && sample(agFams, "wdc_attempts_running") == 0
	})
	assert.Equal(t, 1.0, sample(cpFams, "wdc_results_accepted_total"))
	assert.Equal(t, 1.0, sample(cpFams, "wdc_leases_granted_total"))
	assert.Equal(t, 0.0, sample(cpFams, "wdc_leases_expired_total"))
	assert.Equal(t, 1.0, sample(cpFams, "wdc_worker_selection_seconds"), "one selection")
	assert.Equal(t, 1.0, sample(cpFams, "wdc_ingest_seconds"), "one ingest, on the zero series")
	assert.LessOrEqual(t, sample(cpFams, "wdc_task_reports_unverified_total"), 0.0, "the task's report was believed")
	for _, name := range []string{"wdc_leases_granted_total", "wdc_results_accepted_total", "wdc_worker_selection_seconds", "wdc_ingest_seconds", "wdc_ingest_bytes_total"} {
		assert.Len(t, cpFams[name].GetMetric(), 1, "%s: the events landed on the zero series (same labels)", name)
	}
	waitFor(t, 2*telemetry.WorkersCountInterval, "the agent counted ACTIVE in wdc_workers", func() bool {
		return sample(scrape(t, cp.metrics), "wdc_workers", "state=ACTIVE") >= 1
	})
	for _, name := range sdkFamilies {
		assert.Contains(t, cpFams, name, "control plane: the SDK's metrics go through the same registry")
	}
	assert.Contains(t, agFams, "temporal_activity_execution_latency_seconds", "agent: the SDK's metrics (LaunchAttempt)")
	assert.Contains(t, agFams, "go_goroutines", "the Go runtime collector")

	cpLines := logLines(t, cp.stderr)
	for _, l := range cpLines {
		assert.NotEqual(t, "metric not registered", l["msg"], "control plane: %v", l)
	}
	assertAttemptLines(t, "control plane", cpLines, "telemetry-task", "lease granted", "result accepted")
	// The executor logs its attempt's end after the result was accepted.
	var agLines []map[string]any
	waitFor(t, 10*time.Second, "the agent's attempt-ended line", func() bool {
		agLines = logLines(t, ag.stderr)
		for _, l := range agLines {
			if l["task"] == "telemetry-task" && l["msg"] == "attempt ended" {
				return true
			}
		}
		return false
	})
	for _, l := range agLines {
		assert.NotEqual(t, "metric not registered", l["msg"], "agent: %v", l)
	}
	assertAttemptLines(t, "agent", agLines, "telemetry-task", "attempt started", "attempt ended")
	sdkLine := false
	for _, l := range cpLines {
		if _, ok := l["Namespace"]; ok { // the SDK's own attributes (its worker start-up line)
			sdkLine = true
		}
	}
	assert.True(t, sdkLine, "the SDK's lines are JSON too, through the same handler")
}
