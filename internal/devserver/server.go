package devserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/metrics"
	"go.temporal.io/server/common/persistence/sql"
	"go.temporal.io/server/common/persistence/sql/sqlplugin"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	"go.temporal.io/server/common/resolver"
	"go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"

	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/internal/devopts"
)

// DefaultNamespace is the namespace every dev server creates.
const DefaultNamespace = "default"

// clusterName is the single cluster of a dev server.
const clusterName = "active"

// memoryDBCounter makes in-memory SQLite database names unique within a
// process, so two servers in one test binary never share a store.
var memoryDBCounter atomic.Int64

// Options configures a Server (see devopts.Options).
type Options = devopts.Options

var _ devopts.StartFunc = StartServer

// StartServer is Start behind the devopts.StartFunc signature, for callers
// that must not import this package's types.
func StartServer(ctx context.Context, opts Options) (devopts.Server, error) {
	s, err := Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Server is a running embedded Temporal server.
type Server struct {
	opts     Options
	server   temporal.Server
	ui       *uiServer
	frontend string
	uiAddr   string
	started  time.Duration
	s3       *s3Endpoint // nil when no S3 endpoint is served
}

// Start creates the store if needed, registers namespaces and search
// attributes, starts the server and, when asked, the Web UI. It returns when
// the frontend answers; the context bounds that wait.
//
// With opts.S3 it also serves an S3 endpoint (see devopts.S3Options) and
// creates its bucket.
//
// Errors: a port already in use (named as the CLI flag: port, ui-port,
// s3-port), an invalid S3 bucket name, a DBFilename whose directory cannot
// be created (it is created if absent) or that is not a SQLite database, or more search attributes of one type
// than SQLite visibility has slots for.
func Start(ctx context.Context, opts Options) (*Server, error) {
	began := time.Now()
	if opts.IP == "" {
		opts.IP = "127.0.0.1"
	}
	if net.ParseIP(opts.IP) == nil {
		return nil, fmt.Errorf("ip %q: not an IP address", opts.IP)
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "off"
	}
	if opts.Port == 0 {
		p, err := freePort(opts.IP)
		if err != nil {
			return nil, err
		}
		opts.Port = p
	} else if err := checkPortFree(opts.IP, opts.Port); err != nil {
		return nil, fmt.Errorf("port %d: %w", opts.Port, err)
	}
	if opts.EnableUI {
		if opts.UIPort == 0 {
			opts.UIPort = opts.Port + 1000
		}
		if err := checkPortFree(opts.IP, opts.UIPort); err != nil {
			return nil, fmt.Errorf("ui-port %d: %w", opts.UIPort, err)
		}
	}
	if opts.S3 != nil {
		if err := checkS3Options(opts); err != nil {
			return nil, err
		}
	}

	sqlCfg, err := prepareStore(opts)
	if err != nil {
		return nil, err
	}
	logger, err := newLogger(opts.LogLevel)
	if err != nil {
		return nil, err
	}
	cfg, err := serverConfig(opts, sqlCfg)
	if err != nil {
		return nil, err
	}
	srv, err := temporal.NewServer(
		temporal.WithConfig(cfg),
		temporal.ForServices(temporal.DefaultServices),
		// Static membership: one host per service. With ringpop, a restart on
		// the same database tries to join the previous process's members.
		temporal.WithStaticHosts(staticHosts(cfg)),
		temporal.WithLogger(logger),
		temporal.WithCustomMetricsHandler(metrics.NoopMetricsHandler),
		temporal.WithDynamicConfigClient(dynamicConfig(opts)),
	)
	if err != nil {
		return nil, fmt.Errorf("create temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start temporal server: %w", err)
	}
	s := &Server{opts: opts, server: srv, frontend: net.JoinHostPort(dialIP(opts.IP), strconv.Itoa(opts.Port))}
	if err := s.waitReady(ctx); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	if opts.EnableUI {
		// With TLS the UI reaches the frontend with the server's own
		// certificate, so it acts with the server's rights: it listens on
		// the loopback only.
		uiIP := opts.IP
		if opts.TLS != nil {
			uiIP = "127.0.0.1"
		}
		ui, err := startUI(uiIP, opts.UIPort, s.frontend, opts.TLS)
		if err != nil {
			_ = srv.Stop()
			return nil, err
		}
		s.ui = ui
		s.uiAddr = "http://" + net.JoinHostPort(uiIP, strconv.Itoa(opts.UIPort))
	}
	if opts.S3 != nil {
		e, err := startS3(opts)
		if err != nil {
			_ = s.Stop()
			return nil, err
		}
		s.s3 = e
	}
	s.started = time.Since(began)
	return s, nil
}

// FrontendHostPort is the gRPC address clients dial, e.g. "127.0.0.1:7233".
func (s *Server) FrontendHostPort() string { return s.frontend }

// UIAddress is the Web UI's URL, or "" when the UI is off.
func (s *Server) UIAddress() string { return s.uiAddr }

// Namespaces lists the namespaces this server was started with.
func (s *Server) Namespaces() []string {
	return append([]string{DefaultNamespace}, s.opts.Namespaces...)
}

// StartupDuration is how long Start took until the frontend answered.
func (s *Server) StartupDuration() time.Duration { return s.started }

// S3 describes the S3 endpoint (credentials included), or nil when none
// is served.
func (s *Server) S3() *devopts.S3Info {
	if s.s3 == nil {
		return nil
	}
	info := s.s3.info
	return &info
}

// Stop stops the S3 endpoint (removing a temporary one's directory), the
// UI and the server. Safe to call once.
func (s *Server) Stop() error {
	var err error
	if s.s3 != nil {
		err = s.s3.stop()
	}
	if s.ui != nil {
		s.ui.stop()
	}
	return errors.Join(err, s.server.Stop())
}

// waitReady dials the frontend until it answers a health check and every
// namespace is visible.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var lastErr error
	for {
		copts := client.Options{HostPort: s.frontend, Namespace: DefaultNamespace, Logger: quietSDKLogger{}}
		if s.opts.TLS != nil {
			cfg, err := ClientTLS(s.opts.TLS.CertFile, s.opts.TLS.KeyFile, s.opts.TLS.CAFile)
			if err != nil {
				return err
			}
			copts.ConnectionOptions.TLS = cfg
		}
		c, err := client.DialContext(ctx, copts)
		if err == nil {
			lastErr = s.ensureSearchAttributes(ctx, c)
			c.Close()
			if lastErr == nil {
				return nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("temporal server at %s not ready: %w", s.frontend, errors.Join(ctx.Err(), lastErr))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ensureSearchAttributes adds any search attribute missing from a namespace
// that existed before (a database made by an older wdc). New namespaces get
// them straight in the store before start, which is immediate.
func (s *Server) ensureSearchAttributes(ctx context.Context, c client.Client) error {
	for _, ns := range s.Namespaces() {
		missing, err := wdcclient.MissingSearchAttributes(ctx, c, ns, s.opts.SearchAttributes)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			if err := wdcclient.AddSearchAttributes(ctx, c, ns, missing, s.opts.SearchAttributes); err != nil {
				return err
			}
		}
	}
	return nil
}

// prepareStore returns the SQLite config, creating the schema in a new file
// and the namespaces (with search attributes) when absent. It first pins
// SQLite's allocator pages (pinAllocatorPages).
func prepareStore(opts Options) (*config.SQL, error) {
	pinAllocatorPages()
	sqlCfg := &config.SQL{PluginName: sqliteplugin.PluginName, ConnectAttributes: map[string]string{}}
	if opts.DBFilename == "" {
		sqlCfg.DatabaseName = fmt.Sprintf("wdc-mem-%d-%d", os.Getpid(), memoryDBCounter.Add(1))
		sqlCfg.ConnectAttributes["mode"] = "memory"
		sqlCfg.ConnectAttributes["cache"] = "shared"
		// The SQLite plugin creates the schema itself when it opens a
		// memory database.
	} else {
		path, err := filepath.Abs(opts.DBFilename)
		if err != nil {
			return nil, fmt.Errorf("db-filename %q: %w", opts.DBFilename, err)
		}
		sqlCfg.DatabaseName = path
		sqlCfg.ConnectAttributes["mode"] = "rwc"
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, fmt.Errorf("db-filename %q: create its directory: %w", opts.DBFilename, err)
		}
		if fi, err := os.Stat(path); errors.Is(err, os.ErrNotExist) || (err == nil && fi.Size() == 0) {
			if err := sqlite.SetupSchema(sqlCfg); err != nil {
				_ = os.Remove(path)
				return nil, fmt.Errorf("db-filename %q: set up schema: %w", opts.DBFilename, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("db-filename %q: %w", opts.DBFilename, err)
		}
	}
	var nsConfigs []*sqlite.NamespaceConfig
	for _, ns := range append([]string{DefaultNamespace}, opts.Namespaces...) {
		nc, err := sqlite.NewNamespaceConfig(clusterName, ns, false, opts.SearchAttributes)
		if err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		nsConfigs = append(nsConfigs, nc)
	}
	if err := sqlite.CreateNamespaces(sqlCfg, nsConfigs...); err != nil {
		return nil, fmt.Errorf("create namespaces: %w", err)
	}
	if err := seedVisibilityStats(sqlCfg); err != nil {
		return nil, fmt.Errorf("visibility index statistics: %w", err)
	}
	return sqlCfg, nil
}

// visibilityStats are the SQLite planner statistics (sqlite_stat1) that
// seedVisibilityStats gives the visibility indexes: one namespace of a
// million rows, in which a workflow or run ID names about two rows, a
// keyword value a thousand, and any other indexed value (a status, an
// empty namespace division, an integer) a tenth or more. Without them
// SQLite picks an index by the shape of the query alone: Temporal adds
// "TemporalNamespaceDivision IS NULL" to every list, whose index holds
// every row, so a list by workflow ID read the whole table.
const visibilityStats = `
DELETE FROM sqlite_stat1 WHERE tbl = 'executions_visibility';
INSERT INTO sqlite_stat1 (tbl, idx, stat)
SELECT 'executions_visibility', m.name,
       '1000000 1000000 ' ||
       CASE WHEN m.name IN ('by_workflow_id', 'by_root_workflow_id', 'by_parent_workflow_id', 'by_root_run_id', 'by_parent_run_id') THEN '2'
            WHEN m.name LIKE 'by_keyword%' THEN '1000'
            WHEN m.name = 'default_idx' THEN '1'
            ELSE '100000' END ||
       substr(' 1 1 1 1 1 1 1 1 1 1', 1, 2 * ((SELECT count(*) FROM pragma_index_info(m.name)) - 2))
FROM sqlite_master AS m
WHERE m.type = 'index' AND m.tbl_name = 'executions_visibility' AND m.sql IS NOT NULL;
ANALYZE sqlite_master;`

// seedVisibilityStats writes visibilityStats into the store, replacing
// any statistics a file database had (ANALYZE first creates the table).
func seedVisibilityStats(cfg *config.SQL) error {
	db, err := sql.NewSQLAdminDB(sqlplugin.DbKindUnknown, cfg, resolver.NewNoopResolver(), log.NewNoopLogger(), metrics.NoopMetricsHandler)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	if err := db.Exec("ANALYZE sqlite_master"); err != nil {
		return err
	}
	for _, stmt := range strings.Split(visibilityStats, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" {
			if err := db.Exec(stmt); err != nil {
				return fmt.Errorf("%.40s…: %w", stmt, err)
			}
		}
	}
	return nil
}

// staticHosts maps every service to its single local host.
func staticHosts(cfg *config.Config) map[primitives.ServiceName]static.Hosts {
	hosts := map[primitives.ServiceName]static.Hosts{}
	for name, svc := range cfg.Services {
		hosts[primitives.ServiceName(name)] = static.SingleLocalHost(net.JoinHostPort(dialIP(svc.RPC.BindOnIP), strconv.Itoa(svc.RPC.GRPCPort)))
	}
	return hosts
}

// dialIP is the address to reach a service bound to ip: loopback for the
// unspecified address (0.0.0.0, ::).
func dialIP(ip string) string {
	if parsed := net.ParseIP(ip); parsed == nil || parsed.IsUnspecified() {
		return "127.0.0.1"
	}
	return ip
}

// serverConfig is the static configuration of a single-node, single-shard
// server whose frontend is at opts.IP:opts.Port and whose other services
// listen on free loopback ports, none of them one the options name (the
// Web UI's and S3's start after these services).
func serverConfig(opts Options, sqlCfg *config.SQL) (*config.Config, error) {
	avoid := []int{opts.Port}
	if opts.EnableUI {
		avoid = append(avoid, opts.UIPort)
	}
	if opts.S3 != nil {
		avoid = append(avoid, opts.S3.Port)
	}
	ports, err := freePorts("127.0.0.1", 3, avoid)
	if err != nil {
		return nil, err
	}
	services := map[string]config.Service{"frontend": {RPC: config.RPC{GRPCPort: opts.Port, BindOnIP: opts.IP}}}
	for i, name := range []string{"history", "matching", "worker"} {
		services[name] = config.Service{RPC: config.RPC{GRPCPort: ports[i], BindOnIP: "127.0.0.1"}}
	}
	frontend := net.JoinHostPort(dialIP(opts.IP), strconv.Itoa(opts.Port))
	global := config.Global{Membership: config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: opts.IP}}
	if t := opts.TLS; t != nil {
		// Clients must present a certificate of t.CAFile; the system worker
		// presents the server's own.
		ca := []string{t.CAFile}
		global.TLS = config.RootTLS{
			Frontend: config.GroupTLS{
				Server: config.ServerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFiles: ca, RequireClientAuth: true},
				Client: config.ClientTLS{RootCAFiles: ca},
			},
			SystemWorker: config.WorkerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile, Client: config.ClientTLS{RootCAFiles: ca}},
		}
	}
	return &config.Config{
		Global: global,
		Persistence: config.Persistence{
			DefaultStore:     sqliteplugin.PluginName,
			VisibilityStore:  sqliteplugin.PluginName,
			NumHistoryShards: 1,
			DataStores:       map[string]config.DataStore{sqliteplugin.PluginName: {SQL: sqlCfg}},
		},
		ClusterMetadata: &cluster.Config{
			EnableGlobalNamespace:    false,
			FailoverVersionIncrement: 10,
			MasterClusterName:        clusterName,
			CurrentClusterName:       clusterName,
			ClusterInformation: map[string]cluster.ClusterInformation{
				clusterName: {Enabled: true, InitialFailoverVersion: 1, RPCAddress: frontend},
			},
		},
		DCRedirectionPolicy: config.DCRedirectionPolicy{Policy: "noop"},
		Services:            services,
		Archival: config.Archival{
			History:    config.HistoryArchival{State: "disabled"},
			Visibility: config.VisibilityArchival{State: "disabled"},
		},
		NamespaceDefaults: config.NamespaceDefaults{Archival: config.ArchivalNamespaceDefaults{
			History:    config.HistoryArchivalNamespaceDefaults{State: "disabled"},
			Visibility: config.VisibilityArchivalNamespaceDefaults{State: "disabled"},
		}},
		PublicClient: config.PublicClient{HostPort: frontend},
	}, nil
}

// ClientTLS is the TLS configuration of a client of a dev server started
// with TLSOptions: the client certificate certFile/keyFile and the server
// verified against caFile (PEM files).
func ClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func newLogger(level string) (log.Logger, error) {
	switch level {
	case "off":
		return log.NewNoopLogger(), nil
	case "debug", "info", "warn", "error":
		return log.NewZapLogger(log.BuildZapLogger(log.Config{Level: level})), nil
	default:
		return nil, fmt.Errorf("log-level %q: want one of debug, info, warn, error, off", level)
	}
}

// freePort asks the kernel for an unused TCP port on ip.
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePorts returns n distinct free ports on ip, none in avoid: each is
// held open until all are found, so none repeats.
func freePorts(ip string, n int, avoid []int) ([]int, error) {
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100 {
			return nil, fmt.Errorf("find %d free ports on %s: none left outside %v", n, ip, avoid)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", ip, err)
		}
		defer l.Close()
		if p := l.Addr().(*net.TCPAddr).Port; !slices.Contains(avoid, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// checkPortFree fails with a clear error when ip:port is already bound.
func checkPortFree(ip string, port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("must be between 1 and 65535")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("cannot listen on %s:%d (already in use?): %w", ip, port, err)
	}
	return l.Close()
}

// quietSDKLogger drops the SDK client's log lines while waiting for readiness.
type quietSDKLogger struct{}

func (quietSDKLogger) Debug(string, ...interface{}) {}
func (quietSDKLogger) Info(string, ...interface{})  {}
func (quietSDKLogger) Warn(string, ...interface{})  {}
func (quietSDKLogger) Error(string, ...interface{}) {}

// dynamicConfig is the server's fixed dynamic configuration.
func dynamicConfig(opts Options) dynamicconfig.StaticClient {
	dc := dynamicconfig.StaticClient{
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
		dynamicconfig.FrontendPersistenceMaxQPS.Key():               10000,
		dynamicconfig.HistoryPersistenceMaxQPS.Key():                45000,
		dynamicconfig.MatchingPersistenceMaxQPS.Key():               10000,
		// The default of 10 visibility calls per second is too few for
		// worker placement and `wdc workers list` on a busy fleet.
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 1000,
		// Timers otherwise fire up to 1 s late; leases with short TTLs
		// (the demo, tests) want them on time.
		dynamicconfig.TimerProcessorMaxTimeShift.Key(): 100 * time.Millisecond,
		// A Worker Deployment Version that is no longer current turns
		// DRAINED once visibility shows no open workflow pinned to it.
		// Temporal allows visibility 3 minutes to catch up and looks
		// every 3 minutes; SQLite visibility is written within a second,
		// so the dev server reports a drained version within seconds.
		dynamicconfig.VersionDrainageStatusVisibilityGracePeriod.Key(): 5 * time.Second,
		dynamicconfig.VersionDrainageStatusRefreshInterval.Key():       2 * time.Second,
	}
	if len(opts.SuggestContinueAsNewAfter) > 0 {
		var cvs []dynamicconfig.ConstrainedValue
		for _, ns := range sortedKeys(opts.SuggestContinueAsNewAfter) {
			cvs = append(cvs, dynamicconfig.ConstrainedValue{
				Constraints: dynamicconfig.Constraints{Namespace: ns},
				Value:       opts.SuggestContinueAsNewAfter[ns],
			})
		}
		dc[dynamicconfig.HistoryCountSuggestContinueAsNew.Key()] = cvs
	}
	return dc
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
