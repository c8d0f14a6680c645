package cmd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/wdc-runtime/wdc/internal/telemetry"
)

// metricsAddressHelp documents --metrics-address of `control-plane` and
// `agent`.
const metricsAddressHelp = "serve Prometheus metrics (/metrics: wdc's and the Temporal SDK's), /healthz and /readyz on this host:port, e.g. :9464 (default: off) (env WDC_METRICS_ADDRESS)"

// bindMetricsAddress binds --metrics-address to address.
func (a *app) bindMetricsAddress(f *pflag.FlagSet, address *string) {
	f.StringVar(address, "metrics-address", a.deps.Getenv("WDC_METRICS_ADDRESS"), metricsAddressHelp)
}

// startMetrics serves /metrics, /healthz and /readyz on address, and makes
// the SDK metrics handler over that registry a.metrics, so that every
// client dialled afterwards reports into it. /readyz answers 503 until
// the command gives the server its readiness check. With address "" it
// does nothing and returns a nil server (SetReady on it is a no-op). stop
// reports what is pending and closes the endpoint.
func (a *app) startMetrics(address string) (srv *telemetry.Server, stop func(), err error) {
	if address == "" {
		return nil, func() {}, nil
	}
	m := telemetry.NewMetrics(a.logger())
	srv, err = telemetry.Serve(address, m.Registry)
	if err != nil {
		_ = m.Close()
		return nil, nil, usageError{err}
	}
	a.metrics = m.Handler
	a.notice(fmt.Sprintf("metrics on http://%s/metrics (health: /healthz, readiness: /readyz)", srv.Addr()))
	return srv, func() {
		_ = m.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
	}, nil
}

// notice writes one line for the operator on stderr, whatever
// --log-level: "wdc: LINE" as text; with --log-format json a JSON log line
// (level INFO, msg LINE), so that stderr stays one format.
func (a *app) notice(line string) {
	writeNotice(a.deps.Stderr, a.global.logFormat, slog.LevelInfo, line)
}

func writeNotice(w io.Writer, format string, level slog.Level, line string) {
	if format != telemetry.LogJSON {
		fmt.Fprintln(w, "wdc: "+line)
		return
	}
	h := telemetry.NewLogHandler(w, format, slog.LevelDebug)
	_ = h.Handle(context.Background(), slog.NewRecord(time.Now(), level, line, 0))
}
