package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdklog "go.temporal.io/sdk/log"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestServerEndpoints(t *testing.T) {
	m := NewMetrics(nil)
	defer m.Close()
	s, err := Serve("127.0.0.1:0", m.Registry)
	require.NoError(t, err)
	defer s.Close(context.Background())
	base := "http://" + s.Addr()

	code, _ := get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, code)
	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "not ready: starting")

	s.SetReady(func(context.Context) error { return errors.New("not registered") })
	code, body = get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "not registered")
	s.SetReady(func(context.Context) error { return nil })
	code, _ = get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, code)

	// What goes through the SDK handler shows on /metrics with Prometheus
	// names, once reported (each tagged scope in its own turn: wait for
	// both counters).
	m.Handler.WithTags(map[string]string{"reason": "stale_fence"}).Counter("wdc_test_things").Inc(3)
	m.Handler.WithTags(map[string]string{"task_queue": "wdc-agent/a1"}).Counter("wdc_test_polls").Inc(1)
	m.Handler.Timer("wdc_test_wait").Record(250 * time.Millisecond)
	deadline := time.Now().Add(10 * ReportInterval)
	for {
		_, body = get(t, base+"/metrics")
		reported := strings.Contains(body, `wdc_test_things_total{reason="stale_fence"} 3`) &&
			strings.Contains(body, `wdc_test_polls_total{task_queue="wdc-agent/a1"} 1`)
		if reported || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	assert.Contains(t, body, `wdc_test_things_total{reason="stale_fence"} 3`)
	assert.Contains(t, body, `wdc_test_wait_seconds_count 1`)
	assert.Contains(t, body, `wdc_test_polls_total{task_queue="wdc-agent/a1"} 1`, "label values keep the queue's own name")
	assert.Contains(t, body, "go_goroutines")

	var nilServer *Server
	nilServer.SetReady(nil) // no --metrics-address: a no-op
}

func TestServeRejectsABadAddress(t *testing.T) {
	m := NewMetrics(nil)
	defer m.Close()
	_, err := Serve("127.0.0.1:notaport", m.Registry)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--metrics-address 127.0.0.1:notaport")
}

func TestLogFormats(t *testing.T) {
	require.NoError(t, CheckLogFormat("text"))
	require.NoError(t, CheckLogFormat("json"))
	err := CheckLogFormat("yaml")
	require.Error(t, err)
	assert.Equal(t, `--log-format "yaml": want text or json`, err.Error())

	var buf bytes.Buffer
	slog.New(NewLogHandler(&buf, LogJSON, slog.LevelInfo)).Info("attempt started", "task", "t1", "attempt", 1, "fence", 1, "worker", "w")
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	assert.Equal(t, "attempt started", line["msg"])
	assert.Equal(t, "t1", line["task"])

	buf.Reset()
	slog.New(NewLogHandler(&buf, LogText, slog.LevelWarn)).Info("hidden")
	slog.New(NewLogHandler(&buf, LogText, slog.LevelWarn)).Warn("shown", "task", "t1")
	assert.NotContains(t, buf.String(), "hidden")
	assert.Contains(t, buf.String(), "msg=shown task=t1")
}

func TestSDKLogHandlerShowsWorkflowLinesAndSDKErrors(t *testing.T) {
	var buf bytes.Buffer
	l := sdklog.NewStructuredLogger(slog.New(NewSDKLogHandler(&buf, LogText, slog.LevelInfo)))
	l.Info("Started Worker", "Namespace", "default")
	l.Warn("poll failed", "Namespace", "default")
	l.Error("workflow task failed", "Namespace", "default")
	sdklog.With(l, "WorkflowType", "WdcWorker").Info("worker lost reservation", "task", "t1")
	l.Info("activity line", "ActivityType", "Launch")
	sdklog.With(l, "WorkflowType", "WdcTask").Debug("hidden debug")
	out := buf.String()
	assert.NotContains(t, out, "Started Worker")
	assert.NotContains(t, out, "poll failed")
	assert.NotContains(t, out, "hidden debug")
	assert.Contains(t, out, "workflow task failed")
	assert.Contains(t, out, "worker lost reservation")
	assert.Contains(t, out, "activity line")

	buf.Reset()
	l = sdklog.NewStructuredLogger(slog.New(NewSDKLogHandler(&buf, LogText, slog.LevelDebug)))
	l.Info("Started Worker")
	l.Debug("poll request")
	sdklog.With(l, "WorkflowType", "WdcTask").Debug("selection detail")
	out = buf.String()
	assert.Contains(t, out, "Started Worker", "the SDK's info lines at debug")
	assert.NotContains(t, out, "poll request", "the SDK's own debug lines never")
	assert.Contains(t, out, "selection detail")
}
