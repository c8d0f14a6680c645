package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
	"go.temporal.io/sdk/client"
	sdktally "go.temporal.io/sdk/contrib/tally"
)

// ReportInterval is how often the tally scope hands what was emitted to
// the Prometheus registry: a counter shows on /metrics at most this long
// after it was incremented.
const ReportInterval = time.Second

// Metrics is one process's Prometheus registry and the SDK metrics handler
// that feeds it. Give Handler to client.Options.MetricsHandler: the SDK's
// own metrics (temporal_*), and wdc's emitted from workflows and
// activities, then land in Registry.
type Metrics struct {
	// Registry holds every metric of the process, plus the Go runtime and
	// process collectors.
	Registry *prometheus.Registry
	// Handler is the SDK metrics handler over the registry (Prometheus
	// naming: counters end in _total, timers are histograms in seconds).
	Handler client.MetricsHandler

	closer io.Closer
}

// sanitize is the SDK's Prometheus sanitizing for metric and label names
// ([A-Za-z0-9_]), except that label values keep '-', '/', '.', ':' and '@'
// (Prometheus takes any text there): task_queue="wdc-agent/a1" names the
// real queue, so a query can use the name wdc prints.
var sanitize = func() tally.SanitizeOptions {
	o := sdktally.PrometheusSanitizeOptions
	o.ValueCharacters = tally.ValidCharacters{Ranges: tally.AlphanumericRange, Characters: []rune{'_', '-', '/', '.', ':', '@'}}
	return o
}()

// NewMetrics returns a registry with the Go and process collectors and an
// SDK metrics handler reporting into it every ReportInterval. log receives
// registration conflicts (nil: slog.Default()), which the tally reporter
// would otherwise panic on. Close flushes and stops the reporting.
func NewMetrics(log *slog.Logger) *Metrics {
	if log == nil {
		log = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reporter := tallyprom.NewReporter(tallyprom.Options{
		Registerer:       reg,
		DefaultTimerType: tallyprom.HistogramTimerType,
		OnRegisterError:  func(err error) { log.Warn("metric not registered", "error", err) },
	})
	scope, closer := tally.NewRootScope(tally.ScopeOptions{
		CachedReporter:  reporter,
		Separator:       tallyprom.DefaultSeparator,
		SanitizeOptions: &sanitize,
	}, ReportInterval)
	return &Metrics{Registry: reg, Handler: sdktally.NewMetricsHandler(sdktally.NewPrometheusNamingScope(scope)), closer: closer}
}

// Close reports what is pending and stops the reporting loop.
func (m *Metrics) Close() error { return m.closer.Close() }

// ReadyFunc says whether the process is ready to serve: nil, or why not.
type ReadyFunc func(ctx context.Context) error

// Server serves /metrics, /healthz and /readyz on one address.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}

	mu    sync.Mutex
	ready ReadyFunc
}

// readyTimeout bounds one readiness check (a Temporal health check).
const readyTimeout = 3 * time.Second

// Serve listens on address (host:port; port 0 picks a free one) and
// serves, until Close:
//
//   - /metrics: the registry, in the Prometheus text format;
//   - /healthz: 200 "ok" while the process runs;
//   - /readyz: 200 "ready" once SetReady was given a check and it passes,
//     else 503 with the reason.
//
// Errors: the address cannot be listened on (named).
func Serve(address string, reg *prometheus.Registry) (*Server, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address %s: %w", address, err)
	}
	s := &Server{ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", s.serveReady)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the address the server listens on (with the port chosen).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// SetReady sets the readiness check; nil makes /readyz answer 503 again.
// On a nil Server (no --metrics-address) it does nothing.
func (s *Server) SetReady(f ReadyFunc) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ready = f
}

func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f := s.ready
	s.mu.Unlock()
	err := errors.New("starting")
	if f != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		err = f(ctx)
		cancel()
	}
	if err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// Close stops serving, waiting up to ctx for requests in flight.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// TemporalReady is a ReadyFunc that passes while the Temporal frontend
// answers a health check through c.
func TemporalReady(c client.Client) ReadyFunc {
	return func(ctx context.Context) error {
		if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			return fmt.Errorf("Temporal not reachable: %w", err)
		}
		return nil
	}
}
