package cmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/grpc"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/telemetry"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/worker"
)

// globalOptions are the persistent flags, named as in the temporal CLI.
type globalOptions struct {
	address       string
	namespace     string
	output        string
	tlsCertPath   string
	tlsKeyPath    string
	tlsCAPath     string
	tlsServerName string
	tls           bool
	apiKey        string
	logLevel      string
	logFormat     string
	// grpcCompression is --grpc-compression: auto, gzip or none.
	grpcCompression string
	// controlPlaneTimeout bounds each call that waits on the control plane.
	controlPlaneTimeout time.Duration
	// svidDir is the command's --svid-dir, if any: with TLS and no
	// --tls-cert-path, its SVID is the client certificate (read again at
	// each handshake) and, without --tls-ca-path, its bundle the CA.
	svidDir string
	profileFlags
}

// defaultControlPlaneTimeout is --control-plane-timeout's default: far
// above what a live control plane takes to answer an update or query
// (milliseconds), far below "forever".
const defaultControlPlaneTimeout = 30 * time.Second

const defaultAddress = "127.0.0.1:7233"

func (g *globalOptions) bind(root *cobra.Command, getenv func(string) string) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	f := root.PersistentFlags()
	f.StringVar(&g.address, "address", env("TEMPORAL_ADDRESS", defaultAddress), "Temporal frontend host:port (env TEMPORAL_ADDRESS)")
	f.StringVarP(&g.namespace, "namespace", "n", env("TEMPORAL_NAMESPACE", "default"), "Temporal namespace (env TEMPORAL_NAMESPACE)")
	f.StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	f.StringVar(&g.tlsCertPath, "tls-cert-path", env("TEMPORAL_TLS_CERT", ""), "client certificate for mTLS (env TEMPORAL_TLS_CERT)")
	f.StringVar(&g.tlsKeyPath, "tls-key-path", env("TEMPORAL_TLS_KEY", ""), "client key for mTLS (env TEMPORAL_TLS_KEY)")
	f.StringVar(&g.tlsCAPath, "tls-ca-path", env("TEMPORAL_TLS_CA", ""), "CA certificate to verify the server (env TEMPORAL_TLS_CA)")
	f.StringVar(&g.tlsServerName, "tls-server-name", env("TEMPORAL_TLS_SERVER_NAME", ""), "server name to verify (env TEMPORAL_TLS_SERVER_NAME)")
	tlsDefault, _ := strconv.ParseBool(env("TEMPORAL_TLS", "false"))
	f.BoolVar(&g.tls, "tls", tlsDefault, "use TLS (implied by the other --tls-* flags) (env TEMPORAL_TLS)")
	f.StringVar(&g.apiKey, "api-key", env("TEMPORAL_API_KEY", ""), "API key sent as a bearer token (env TEMPORAL_API_KEY)")
	f.StringVar(&g.logLevel, "log-level", env("WDC_LOG_LEVEL", "warn"), "wdc's own log level on stderr: debug, info, warn, error (env WDC_LOG_LEVEL)")
	f.StringVar(&g.logFormat, "log-format", env("WDC_LOG_FORMAT", telemetry.LogText), "format of the log lines on stderr, wdc's and the Temporal SDK's alike: text (key=value) or json (one object per line) (env WDC_LOG_FORMAT)")
	f.StringVar(&g.grpcCompression, "grpc-compression", env("WDC_GRPC_COMPRESSION", compressionAuto), "compress gRPC requests to Temporal: gzip, none, or auto (none to a loopback address, gzip elsewhere) (env WDC_GRPC_COMPRESSION)")
	g.profileFlags.bind(f, getenv)
	f.DurationVar(&g.controlPlaneTimeout, "control-plane-timeout", defaultControlPlaneTimeout, "give up (exit 5) when the control plane has not answered one request (update or query) within this long; following a task with --wait is not bounded")
}

func (g *globalOptions) validate() error {
	switch g.output {
	case "text", "json":
	default:
		return usagef("--output %q: want text or json", g.output)
	}
	if _, err := parseLogLevel(g.logLevel); err != nil {
		return err
	}
	if err := telemetry.CheckLogFormat(g.logFormat); err != nil {
		return usageError{err}
	}
	if g.address == "" {
		return usagef("--address: required (host:port)")
	}
	switch g.grpcCompression {
	case compressionAuto, compressionGzip, compressionNone:
	default:
		return usagef("--grpc-compression %q: want auto, gzip or none", g.grpcCompression)
	}
	if g.controlPlaneTimeout < time.Second {
		return usagef("--control-plane-timeout %s: must be at least 1s", g.controlPlaneTimeout)
	}
	return nil
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// logger writes wdc's own logs to stderr at --log-level.
func (a *app) logger() *slog.Logger {
	lvl, _ := parseLogLevel(a.global.logLevel)
	return slog.New(telemetry.NewLogHandler(a.deps.Stderr, a.global.logFormat, lvl))
}

// dial connects to Temporal with the global flags and extra gRPC dial
// options (e.g. worker.DialOptions).
func (a *app) dial(ctx context.Context, extra ...grpc.DialOption) (client.Client, error) {
	if err := a.global.validate(); err != nil {
		return nil, err
	}
	return a.dialAddress(ctx, a.global.address, extra...)
}

func (a *app) dialAddress(ctx context.Context, address string, extra ...grpc.DialOption) (client.Client, error) {
	opts, err := a.clientOptions(address, extra...)
	if err != nil {
		return nil, err
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		hint := "is the server running there (wdc server start-dev)? Another server: pass --address or set TEMPORAL_ADDRESS"
		if msg := err.Error(); strings.Contains(msg, "x509") || strings.Contains(msg, "tls") || strings.Contains(msg, "server preface") || strings.Contains(msg, "broken pipe") {
			hint = "does the server require TLS and a client certificate (--tls, --tls-cert-path, --tls-key-path, --tls-ca-path; start-dev --tls prints them)? " + hint
		}
		return nil, fmt.Errorf("connect to Temporal at %s (namespace %s): %w; %s", address, a.global.namespace, err, hint)
	}
	return c, nil
}

// clientOptions are the SDK client options of every connection a wdc
// process opens: the global flags, the process's identity (a.identity),
// and a keepalive that follows the process's heartbeat (worker.KeepAlive
// of a.heartbeat).
func (a *app) clientOptions(address string, extra ...grpc.DialOption) (client.Options, error) {
	g := &a.global
	identity := a.identity
	if identity == "" {
		identity = api.CLIIdentity(hostname())
	}
	opts := client.Options{
		HostPort:  address,
		Namespace: g.namespace,
		Identity:  identity,
		Logger:    sdklog.NewStructuredLogger(a.sdkLogger()),
		// nil unless --metrics-address: the SDK then uses a no-op handler.
		MetricsHandler: a.metrics,
	}
	opts.ConnectionOptions.DialOptions = extra
	opts.ConnectionOptions.GrpcCompression = grpcCompression(g.grpcCompression, address)
	heartbeat := a.heartbeat
	if heartbeat == 0 {
		heartbeat = fleet.DefaultHeartbeatInterval
	}
	ka := worker.KeepAlive(heartbeat)
	opts.ConnectionOptions.KeepAliveTime = ka.Time
	opts.ConnectionOptions.KeepAliveTimeout = ka.Timeout
	opts.ConnectionOptions.DisableKeepAlivePermitWithoutStream = !ka.PermitWithoutStream
	if g.tls || g.tlsCertPath != "" || g.tlsKeyPath != "" || g.tlsCAPath != "" || g.tlsServerName != "" || g.tlsCertData != nil || g.tlsCAData != nil {
		cfg, err := g.tlsConfig()
		if err != nil {
			return client.Options{}, err
		}
		opts.ConnectionOptions.TLS = cfg
	}
	if g.apiKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(g.apiKey)
	}
	return opts, nil
}

// The values of --grpc-compression.
const (
	compressionAuto = "auto"
	compressionGzip = "gzip"
	compressionNone = "none"
)

// grpcCompression is the SDK's compression for mode at address: auto
// compresses only off the machine, where bytes cost more than the CPU
// that gzip takes on both ends (on loopback it is pure cost: about a
// tenth of a small server's CPU under load, measured by wdc bench).
func grpcCompression(mode, address string) client.GrpcCompression {
	switch mode {
	case compressionNone:
		return &client.GrpcCompressionNone{}
	case compressionGzip:
		return &client.GrpcCompressionGzip{}
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return &client.GrpcCompressionNone{}
	}
	return &client.GrpcCompressionGzip{}
}

// hostname is this machine's name for identities ("unknown" when the
// system does not say).
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}

// sdkLogger is the Temporal SDK's logger (telemetry.NewSDKLogHandler at
// --log-level): lines about a workflow or activity at that level, the
// SDK's others as errors, or from info at debug.
func (a *app) sdkLogger() *slog.Logger {
	lvl, _ := parseLogLevel(a.global.logLevel)
	return slog.New(telemetry.NewSDKLogHandler(a.deps.Stderr, a.global.logFormat, lvl))
}

func (g *globalOptions) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{ServerName: g.tlsServerName, MinVersion: tls.VersionTLS12, InsecureSkipVerify: g.tlsSkipVerify} //nolint:gosec // only when the profile says disable_host_verification
	if g.tlsCertData != nil || g.tlsKeyData != nil {
		cert, err := tls.X509KeyPair(g.tlsCertData, g.tlsKeyData)
		if err != nil {
			return nil, usagef("--profile %q: tls.client_cert_data/client_key_data: %v", g.profile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if g.tlsCAData != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(g.tlsCAData) {
			return nil, usagef("--profile %q: tls.server_ca_cert_data: no PEM certificate found", g.profile)
		}
		cfg.RootCAs = pool
	}
	if (g.tlsCertPath == "") != (g.tlsKeyPath == "") {
		return nil, usagef("--tls-cert-path and --tls-key-path go together")
	}
	if g.tlsCertPath != "" {
		cert, err := tls.LoadX509KeyPair(g.tlsCertPath, g.tlsKeyPath)
		if err != nil {
			return nil, usagef("--tls-cert-path/--tls-key-path: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if dir := g.svidDir; dir != "" && len(cfg.Certificates) == 0 {
		// Presented only to a server that asks for a client certificate.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(filepath.Join(dir, identity.SVIDCertFile), filepath.Join(dir, identity.SVIDKeyFile))
			if err != nil {
				return nil, fmt.Errorf("--svid-dir %s as the TLS client certificate: %w", dir, err)
			}
			return &cert, nil
		}
		if g.tlsCAPath == "" && g.tlsCAData == nil {
			// The issuer's root beside the system's: a server of a public
			// CA (Temporal Cloud) still verifies.
			pool, err := x509.SystemCertPool()
			if err != nil || pool == nil {
				pool = x509.NewCertPool()
			}
			bundle := filepath.Join(dir, identity.BundleFile)
			pem, err := os.ReadFile(bundle)
			if err != nil {
				return nil, usagef("--svid-dir: %v", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, usagef("--svid-dir: %s holds no PEM certificate", bundle)
			}
			cfg.RootCAs = pool
		}
	}
	if g.tlsCAPath != "" {
		pem, err := os.ReadFile(g.tlsCAPath)
		if err != nil {
			return nil, usagef("--tls-ca-path: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-ca-path %s: no PEM certificate found", g.tlsCAPath)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// withClient dials, runs f with a wdc client, and closes the connection.
// For commands that only read visibility or need no workflow to answer.
func (a *app) withClient(ctx context.Context, f func(*wdcclient.Client) error) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(a.wdcClient(c))
}

// withControlPlane is withClient for commands whose updates or queries a
// control plane must answer: it first checks that one polls wdc-control
// (RequirePoller, within a few seconds) and fails with an
// *UnavailableError (exit 5) before f sends anything when none does.
func (a *app) withControlPlane(ctx context.Context, f func(*wdcclient.Client) error) error {
	return a.withClient(ctx, func(wc *wdcclient.Client) error {
		if err := wc.RequirePoller(ctx, api.ControlTaskQueue); err != nil {
			return err
		}
		return f(wc)
	})
}

// wdcClient wraps a connection with the global flags: the address and
// namespace for messages, --control-plane-timeout for each call.
func (a *app) wdcClient(c client.Client) *wdcclient.Client {
	return &wdcclient.Client{C: c, Address: a.global.address, Namespace: a.global.namespace, CallTimeout: a.global.controlPlaneTimeout}
}

// printJSON writes v as indented JSON, with &, < and > as themselves (a
// URL's query stays copyable: s3://b?endpoint=…&region=…).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// emit prints v as JSON with -o json, else calls text.
func (a *app) emit(v any, text func(w io.Writer) error) error {
	if err := a.global.validate(); err != nil {
		return err
	}
	if a.global.output == "json" {
		return printJSON(a.deps.Stdout, v)
	}
	return text(a.deps.Stdout)
}

// emitf prints v as JSON with -o json, else one formatted line.
func (a *app) emitf(v any, format string, args ...any) error {
	return a.emit(v, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, format+"\n", args...)
		return err
	})
}

// emitTable prints rows as JSON with -o json, else as an aligned table
// under header (tab-separated), or empty when there are none.
func emitTable[T any](a *app, rows []T, empty, header string, row func(T) string) error {
	if rows == nil {
		rows = []T{}
	}
	return a.emit(rows, func(w io.Writer) error {
		if len(rows) == 0 {
			fmt.Fprintln(w, empty)
			return nil
		}
		tw := table(w)
		fmt.Fprintln(tw, header)
		for _, r := range rows {
			fmt.Fprintln(tw, row(r))
		}
		return tw.Flush()
	})
}

// connect opens the blob store (see openStore) and dials Temporal with
// extra gRPC dial options; close releases the connection.
func (a *app) connect(ctx context.Context, dataDir, blobURL string, extra ...grpc.DialOption) (c client.Client, store *blobstore.Store, err error) {
	if err := a.global.validate(); err != nil {
		return nil, nil, err
	}
	if store, err = a.openStore(ctx, dataDir, blobURL); err != nil {
		return nil, nil, err
	}
	if c, err = a.dial(ctx, extra...); err != nil {
		return nil, nil, err
	}
	return c, store, nil
}

// connectExecutor connects a process that runs attempts (`agent`,
// `exec`): the blob store, and Temporal with worker.DialOptions
// (redial promptly after a network cut: attempt heartbeats must get
// through within a fraction of their interval); then it requires a
// control plane, which answers registrations, lease queries and results
// (an *UnavailableError, exit 5, within a few seconds without one). On
// error nothing is left open.
func (a *app) connectExecutor(ctx context.Context, dataDir, blobURL string) (client.Client, *blobstore.Store, error) {
	tc, store, err := a.connect(ctx, dataDir, blobURL, worker.DialOptions()...)
	if err != nil {
		return nil, nil, err
	}
	if err := a.wdcClient(tc).RequirePoller(ctx, api.ControlTaskQueue); err != nil {
		tc.Close()
		store.Close()
		return nil, nil, err
	}
	if err := probeStore(ctx, store); err != nil {
		tc.Close()
		store.Close()
		return nil, nil, err
	}
	return tc, store, nil
}

// storeProbeTimeout bounds probeStore.
const storeProbeTimeout = 20 * time.Second

// probeStore asks the artifact store for one absent object, so that a
// store that cannot be reached, or whose credentials are missing or
// wrong, stops an agent or an executor at startup instead of failing
// every attempt after its command ran.
func probeStore(ctx context.Context, store *blobstore.Store) error {
	pctx, cancel := context.WithTimeout(ctx, storeProbeTimeout)
	defer cancel()
	_, err := store.Has(pctx, "sha256:"+strings.Repeat("0", 64))
	if err == nil {
		return nil
	}
	hint := ""
	if msg := err.Error(); strings.Contains(msg, "IMDS") || strings.Contains(msg, "credential") {
		hint = "; no usable S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
	}
	return fmt.Errorf("artifact store not usable: %w%s", err, hint)
}

// table writes aligned columns; call flush when done.
func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// openStore opens the artifact store: blobURL (--blob-url), else
// $WDC_BLOB_URL, else file://<data-dir>/blobs (the default data dir when
// dataDir is empty).
func (a *app) openStore(ctx context.Context, dataDir, blobURL string) (*blobstore.Store, error) {
	u, err := a.storeURL(dataDir, blobURL)
	if err != nil {
		return nil, err
	}
	return blobstore.Open(ctx, u)
}

// storeURL is the artifact store's URL as openStore resolves it.
func (a *app) storeURL(dataDir, blobURL string) (string, error) {
	if blobURL == "" {
		blobURL = a.deps.Getenv("WDC_BLOB_URL")
	}
	if blobURL != "" {
		return blobURL, nil
	}
	if dataDir == "" {
		dataDir = a.defaultDataDir()
	}
	return blobstore.DefaultURL(dataDir)
}

// execTarget is how a `wdc exec` rendered by this process connects: the
// same Temporal settings (the API key only by name) and blob store, with
// binary as argv[0].
func (a *app) execTarget(binary, blobURL string) external.Target {
	g := &a.global
	return external.Target{Binary: binary, Address: g.address, Namespace: g.namespace, BlobURL: blobURL,
		TLS: g.tls, TLSCertPath: g.tlsCertPath, TLSKeyPath: g.tlsKeyPath, TLSCAPath: g.tlsCAPath, TLSServerName: g.tlsServerName,
		APIKey: g.apiKey != ""}
}

// execBinaryHelp documents the flag that sets a rendered `wdc exec`'s argv[0].
const execBinaryHelp = "argv[0] of the rendered 'wdc exec' command: the wdc binary on the machine that runs it"

// putFile is a store's PutFile in the shape sealEnvelope takes.
func putFile(ctx context.Context, store *blobstore.Store) func(string) (string, int64, error) {
	return func(path string) (string, int64, error) { return store.PutFile(ctx, path) }
}

// defaultDataDir is $WDC_DATA_DIR, else $XDG_DATA_HOME/wdc, else
// ~/.local/share/wdc.
func (a *app) defaultDataDir() string {
	if d := a.deps.Getenv("WDC_DATA_DIR"); d != "" {
		return d
	}
	if d := a.deps.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "wdc")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "wdc")
	}
	return ".wdc"
}

const dataDirHelp = "this process's data directory: agents' task dirs, and the blob store (then shared by the control plane and agents) unless --blob-url says otherwise (env WDC_DATA_DIR; default $XDG_DATA_HOME/wdc or ~/.local/share/wdc)"

const blobURLHelp = "artifact store shared by the control plane and agents: file:///dir, s3://BUCKET?region=R[&endpoint=URL&use_path_style=true&disable_https=true] (credentials from the AWS default chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; 'wdc server start-dev' prints its own), gs://BUCKET or azblob://CONTAINER?storage_account=NAME (their default credentials); never credentials in the URL (env WDC_BLOB_URL; default file://<data-dir>/blobs)"

// appError renders wdc refusals for the CLI: invalid input is a usage
// error (exit 2).
func appError(err error) error {
	var we *wdcclient.Error
	if errors.As(err, &we) && (we.Type == api.ErrTypeInvalidArgument) {
		return usageError{err}
	}
	return err
}
