package telemetry

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
)

// A control plane's and an agent's registries, scraped right after the
// zero series are created, show every wdc metric at 0, one series per
// reason; incrementing afterwards with the SDK's tags lands on the same
// series, with no registration conflict.
func TestZeroSeriesFromTheStart(t *testing.T) {
	var logs bytes.Buffer
	cp := NewMetrics(slog.New(slog.NewTextHandler(&logs, nil)))
	defer cp.Close()
	ExportControlPlaneZeros(cp.Handler, "default")
	srv, err := Serve("127.0.0.1:0", cp.Registry)
	require.NoError(t, err)
	defer srv.Close(context.Background())
	_, body := get(t, "http://"+srv.Addr()+"/metrics")
	for _, name := range []string{api.MetricLeasesGranted, api.MetricLeasesExpired, api.MetricResultsAccepted} {
		assert.Regexp(t, `(?m)^`+name+`_total\{[^}]*workflow_type="WdcTask"[^}]*\} 0$`, body)
	}
	for _, r := range api.MetricRevokedReasons {
		assert.Regexp(t, `(?m)^wdc_leases_revoked_total\{[^}]*reason="`+string(r)+`"[^}]*\} 0$`, body)
	}
	for _, r := range api.MetricRejectedReasons() {
		assert.Regexp(t, `(?m)^wdc_results_rejected_total\{[^}]*reason="`+r+`"[^}]*\} 0$`, body)
	}
	// Local activities: no activity or workflow type.
	assert.Regexp(t, `(?m)^wdc_worker_selection_seconds_count\{activity_type="none"[^}]*\} 0$`, body)
	assert.Regexp(t, `(?m)^wdc_ingest_seconds_count\{activity_type="none"[^}]*\} 0$`, body)
	assert.Regexp(t, `(?m)^wdc_ingest_bytes_total\{activity_type="none"[^}]*\} 0$`, body)

	// What a workflow later emits (the SDK's root, worker and workflow
	// tags) lands on the zero series.
	sdk := cp.Handler.WithTags(map[string]string{"namespace": "default", "client_name": "temporal_go", "worker_type": "none",
		"workflow_type": "none", "activity_type": "none", "task_queue": "none"})
	sdk.WithTags(map[string]string{"task_queue": api.ControlTaskQueue}).WithTags(map[string]string{"workflow_type": api.TaskWorkflowType}).
		WithTags(map[string]string{api.MetricTagReason: "worker_lost"}).Counter(api.MetricLeasesRevoked).Inc(1)
	require.NoError(t, cp.Close())
	_, body = get(t, "http://"+srv.Addr()+"/metrics")
	assert.Regexp(t, `(?m)^wdc_leases_revoked_total\{[^}]*reason="worker_lost"[^}]*\} 1$`, body)
	assert.Equal(t, 1, strings.Count(body, `reason="worker_lost"`), "one series")
	assert.Empty(t, logs.String(), "no registration conflict")

	ag := NewMetrics(slog.New(slog.NewTextHandler(&logs, nil)))
	defer ag.Close()
	ExportAgentZeros(ag.Handler)
	asrv, err := Serve("127.0.0.1:0", ag.Registry)
	require.NoError(t, err)
	defer asrv.Close(context.Background())
	_, body = get(t, "http://"+asrv.Addr()+"/metrics")
	assert.Regexp(t, `(?m)^wdc_attempts_running 0$`, body)
	assert.Regexp(t, `(?m)^wdc_heartbeat_round_trip_seconds_count 0$`, body)
	for _, r := range api.MetricFenceReasons {
		assert.Contains(t, body, `wdc_results_rejected_total{reason="`+string(r)+`"} 0`)
	}
	assert.Empty(t, logs.String(), "no registration conflict")
}
