package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/devopts"
)

func (a *app) newServerCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "server",
		Short: "Run an embedded Temporal server",
	}
	c.AddCommand(a.newStartDevCommand())
	return c
}

type startDevOptions struct {
	dbFilename string
	ip         string
	port       int
	uiPort     int
	headless   bool
	namespaces []string
	logLevel   string
	s3Port     int
	noS3       bool
	s3Bucket   string
	s3Access   string
	s3Secret   string
	tls        bool
	caDir      string
}

func (a *app) newStartDevCommand() *cobra.Command {
	o := &startDevOptions{}
	c := &cobra.Command{
		Use:   "start-dev",
		Short: "Start an embedded Temporal server with wdc's search attributes and the Web UI",
		Long: `Start a complete Temporal server inside this process (go.temporal.io/server):
SQLite persistence, namespace "default" (plus any --namespace), every wdc search
attribute registered before the first workflow, and the Temporal Web UI.

It also serves an S3 endpoint for the artifact store on --s3-port (the embedded
VersityGW gateway, files under a directory) with bucket --s3-bucket, so agents
on other machines need no shared filesystem. It prints the --blob-url to give
every wdc command (or export as WDC_BLOB_URL) and the AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY to export where they run. --no-s3 turns it off.

State lives in --db-filename; without it, everything is kept in memory and lost
on exit. Restarting on the same file keeps every workflow (workers, tasks, runs).
The S3 data lives beside it in <db-filename>.s3/, with credentials generated
once and kept in <db-filename>.s3/credentials (mode 0600), so they stay the same
across restarts; in memory mode they are new each time and the data is removed
on exit. --s3-access-key and --s3-secret-key (env WDC_DEV_S3_ACCESS_KEY,
WDC_DEV_S3_SECRET_KEY) choose them instead (not stored).

With --ip 0.0.0.0 every service (frontend, Web UI, S3 endpoint) listens on all
interfaces and the printed URL names this machine's first non-loopback IPv4
address. With --ip set to one address, they listen on that address only, not
on 127.0.0.1: start-dev then prints the --address (and TEMPORAL_ADDRESS) every
other wdc command needs, on this host too. --db-filename's directory is created
if absent.

Identity: start-dev runs wdc's own issuer in --ca-dir (env WDC_CA_DIR; default
<db-filename>.ca/, in memory a new one removed on exit; its root key ca.key is
mode 0600 and never leaves that directory). With WDC_CA_DIR set to it, a
control plane requires signed messages (its ca.pem is the trust bundle), an
agent enrolls itself into <ca-dir>/workers/<id>/ and signs, and 'runs commit',
'runs close', 'tasks cancel' and 'workers revoke' sign as submitter $USER: the
quickstart runs with identity required and no other step. 'wdc workers
enroll --ca-dir' issues the same identities by hand.

With --tls the frontend serves TLS and requires a client certificate of that
issuer, so an agent's SVID is also its TLS certificate ('wdc agent --svid-dir
DIR --tls'). start-dev prints how each command and the temporal CLI connect.
Stop with Ctrl-C (SIGINT) or SIGTERM.`,
		Example: `  wdc server start-dev --db-filename wdc.db
  wdc server start-dev --port 7233 --ui-port 8233 --namespace science
  wdc server start-dev --headless --no-s3
  wdc server start-dev --ip 0.0.0.0 --db-filename /var/lib/wdc/dev.db --s3-bucket artifacts -o json
  wdc server start-dev --db-filename wdc.db --tls          # issuer in wdc.db.ca/`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if o.s3Access == "" {
				o.s3Access = a.deps.Getenv("WDC_DEV_S3_ACCESS_KEY")
			}
			if o.s3Secret == "" {
				o.s3Secret = a.deps.Getenv("WDC_DEV_S3_SECRET_KEY")
			}
			if err := o.validate(); err != nil {
				return err
			}
			return a.runStartDev(c.Context(), o)
		},
	}
	f := c.Flags()
	f.StringVarP(&o.dbFilename, "db-filename", "f", "", "SQLite file for all state (created if absent); empty keeps state in memory")
	f.StringVar(&o.ip, "ip", "127.0.0.1", "IP address the frontend, the Web UI and the S3 endpoint bind to (0.0.0.0: every interface); on any other than 127.0.0.1 or 0.0.0.0, other commands on this host need the --address start-dev prints")
	f.IntVarP(&o.port, "port", "p", 7233, "frontend gRPC port")
	f.IntVar(&o.uiPort, "ui-port", 0, "Web UI port (default: --port + 1000)")
	f.BoolVar(&o.headless, "headless", false, "do not serve the Web UI")
	f.StringArrayVar(&o.namespaces, "namespace", nil, "extra namespace to create (repeatable); \"default\" always exists")
	f.StringVar(&o.logLevel, "server-log-level", "off", "the Temporal server's own log level: debug, info, warn, error, off")
	f.IntVar(&o.s3Port, "s3-port", 7300, "S3 endpoint port for the artifact store")
	f.BoolVar(&o.noS3, "no-s3", false, "do not serve the S3 endpoint")
	f.StringVar(&o.s3Bucket, "s3-bucket", "wdc", "bucket to create on the S3 endpoint")
	f.StringVar(&o.s3Access, "s3-access-key", "", "S3 access key ID clients must use (env WDC_DEV_S3_ACCESS_KEY; default: generated, kept beside --db-filename)")
	f.StringVar(&o.s3Secret, "s3-secret-key", "", "S3 secret access key (env WDC_DEV_S3_SECRET_KEY; default: generated, kept beside --db-filename)")
	f.BoolVar(&o.tls, "tls", false, "serve the frontend with TLS, requiring client certificates from the issuer in --ca-dir")
	f.StringVar(&o.caDir, "ca-dir", a.deps.Getenv(envCADir), "the issuer's directory (identities, and with --tls the frontend's certificates), created on first use (env "+envCADir+"; default <db-filename>.ca; in memory: a new one, removed on exit)")
	return c
}

func (o *startDevOptions) validate() error {
	if net.ParseIP(o.ip) == nil {
		return usagef("--ip %q: not an IP address", o.ip)
	}
	if o.port < 1 || o.port > 65535 {
		return usagef("--port %d: want 1-65535", o.port)
	}
	if o.uiPort == 0 {
		o.uiPort = o.port + 1000
	}
	if o.uiPort < 1 || o.uiPort > 65535 {
		return usagef("--ui-port %d: want 1-65535", o.uiPort)
	}
	if !o.headless && o.uiPort == o.port {
		return usagef("--ui-port %d: must differ from --port", o.uiPort)
	}
	for _, ns := range o.namespaces {
		if ns == "" || strings.ContainsAny(ns, " /") {
			return usagef("--namespace %q: not a valid namespace name", ns)
		}
	}
	switch o.logLevel {
	case "debug", "info", "warn", "error", "off":
	default:
		return usagef("--server-log-level %q: want debug, info, warn, error or off", o.logLevel)
	}
	if o.noS3 {
		return nil
	}
	if o.s3Port < 1 || o.s3Port > 65535 {
		return usagef("--s3-port %d: want 1-65535", o.s3Port)
	}
	if o.s3Port == o.port || (!o.headless && o.s3Port == o.uiPort) {
		return usagef("--s3-port %d: must differ from --port and --ui-port", o.s3Port)
	}
	if !devopts.ValidBucket(o.s3Bucket) {
		return usagef("--s3-bucket %q: want 3-63 of a-z, 0-9, '.', '-', starting and ending with a letter or digit", o.s3Bucket)
	}
	if (o.s3Access == "") != (o.s3Secret == "") {
		return usagef("--s3-access-key and --s3-secret-key: give both or neither")
	}
	return nil
}

// addressHint is what start-dev says when the frontend it serves (on ip
// and port, reached at frontend) is not at the default --address: the
// flag every other wdc command needs, or "" when the default reaches it.
func addressHint(ip string, port int, frontend string) string {
	def := net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) == defaultAddress
	if p := net.ParseIP(ip); def && p != nil && (p.IsUnspecified() || p.Equal(net.IPv4(127, 0, 0, 1))) {
		return ""
	}
	return fmt.Sprintf("Not on the default %s: give every other wdc command (on this host too) --address %s\n  export TEMPORAL_ADDRESS=%s", defaultAddress, frontend, frontend)
}

func (a *app) runStartDev(ctx context.Context, o *startDevOptions) error {
	if a.deps.StartDevServer == nil {
		return errors.New("this build has no embedded server")
	}
	opts := devopts.Options{
		DBFilename: o.dbFilename, IP: o.ip, Port: o.port, UIPort: o.uiPort, EnableUI: !o.headless,
		Namespaces: o.namespaces, SearchAttributes: api.SearchAttributes(), LogLevel: o.logLevel,
	}
	if !o.noS3 {
		opts.S3 = &devopts.S3Options{Port: o.s3Port, Bucket: o.s3Bucket, AccessKey: o.s3Access, SecretKey: o.s3Secret}
	}
	dev, cleanup, err := o.openIssuer()
	if err != nil {
		return err
	}
	defer cleanup()
	var devTLS *startDevTLS
	if o.tls {
		if devTLS, err = o.issueTLS(dev); err != nil {
			return err
		}
		opts.TLS = &devTLS.files
	}
	srv, err := a.deps.StartDevServer(ctx, opts)
	if err != nil {
		return startDevError(err)
	}
	store := o.dbFilename
	if store == "" {
		store = "in memory (lost on exit; use --db-filename to keep it)"
	}
	info := map[string]any{
		"address": srv.FrontendHostPort(), "ui": srv.UIAddress(), "namespaces": append([]string{"default"}, o.namespaces...),
		"store": store, "ready_seconds": srv.StartupDuration().Seconds(),
	}
	info["identity"] = map[string]any{"ca_dir": dev.dir, "trust_bundle": filepath.Join(dev.dir, identity.CACertFile),
		"env": map[string]string{envCADir: dev.dir}}
	if devTLS != nil {
		info["tls"] = map[string]any{"ca_dir": devTLS.caDir, "ca": devTLS.files.CAFile, "server_cert": devTLS.files.CertFile}
	}
	s3 := srv.S3()
	if s3 != nil {
		info["s3"] = map[string]any{
			"endpoint": s3.Endpoint, "bucket": s3.Bucket, "blob_url": s3.BlobURL, "region": s3.Region, "dir": s3.Dir,
			"persistent": s3.Persistent,
			"env":        map[string]string{"WDC_BLOB_URL": s3.BlobURL, "AWS_ACCESS_KEY_ID": s3.AccessKey, "AWS_SECRET_ACCESS_KEY": s3.SecretKey, "AWS_REGION": s3.Region},
		}
	}
	if err := a.emit(info, func(w io.Writer) error {
		fmt.Fprintf(w, "Temporal server ready in %s\n", srv.StartupDuration().Round(time.Millisecond))
		fmt.Fprintf(w, "  frontend   %s\n", srv.FrontendHostPort())
		if hint := addressHint(o.ip, o.port, srv.FrontendHostPort()); hint != "" {
			fmt.Fprintf(w, "%s\n", hint)
		}
		if srv.UIAddress() != "" {
			fmt.Fprintf(w, "  web ui     %s\n", srv.UIAddress())
		}
		fmt.Fprintf(w, "  namespaces %s\n", strings.Join(append([]string{"default"}, o.namespaces...), ", "))
		fmt.Fprintf(w, "  store      %s\n", store)
		if s3 != nil {
			fmt.Fprintf(w, "  s3         %s (bucket %s, files in %s)\n", s3.Endpoint, s3.Bucket, s3.Dir)
			fmt.Fprintf(w, "Artifact store: give every wdc command this environment (or --blob-url):\n")
			fmt.Fprintf(w, "  export WDC_BLOB_URL='%s'\n", s3.BlobURL)
			fmt.Fprintf(w, "  export AWS_ACCESS_KEY_ID='%s' AWS_SECRET_ACCESS_KEY='%s' AWS_REGION=%s\n", s3.AccessKey, s3.SecretKey, s3.Region)
		}
		fmt.Fprintf(w, "Identity: the issuer is in %s. With this in their environment, control planes\n", dev.dir)
		fmt.Fprintf(w, "require signed messages and agents and submitters enroll themselves from it:\n")
		fmt.Fprintf(w, "  export %s=%s\n", envCADir, dev.dir)
		if devTLS != nil {
			devTLS.explain(w, srv.FrontendHostPort())
		}
		fmt.Fprintf(w, "Stop with Ctrl-C.\n")
		return nil
	}); err != nil {
		_ = srv.Stop()
		return err
	}
	<-ctx.Done()
	fmt.Fprintln(a.deps.Stderr, "wdc: stopping the server")
	return srv.Stop()
}

// startDevError names the flag in the dev server's refusals of a port
// (port, ui-port, s3-port: "--s3-port 7300: cannot listen …").
func startDevError(err error) error {
	for _, flag := range []string{"s3-port ", "ui-port ", "port "} {
		if strings.HasPrefix(err.Error(), flag) {
			return fmt.Errorf("--%w", err)
		}
	}
	return err
}

// startDevTLS is start-dev's TLS: its issuer's directory and the frontend's
// files.
type startDevTLS struct {
	caDir string
	files devopts.TLSOptions
}

// devIssuer is start-dev's issuer and its directory.
type devIssuer struct {
	dir string
	iss *identity.Issuer
}

// openIssuer loads or creates the issuer in --ca-dir (WDC_CA_DIR, else
// beside --db-filename, else a temporary directory that cleanup removes).
func (o *startDevOptions) openIssuer() (d devIssuer, cleanup func(), err error) {
	cleanup = func() {}
	dir := o.caDir
	switch {
	case dir == "" && o.dbFilename != "":
		dir = o.dbFilename + ".ca"
	case dir == "":
		if dir, err = os.MkdirTemp("", "wdc-dev-ca-"); err != nil {
			return d, cleanup, err
		}
		cleanup = func() { os.RemoveAll(dir) }
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs // printed for commands run elsewhere
	}
	iss, err := identity.LoadOrCreateIssuer(dir, spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	if err != nil {
		cleanup()
		what := "--ca-dir " + dir
		if o.caDir == "" {
			what = "the issuer beside --db-filename, " + dir
		}
		return d, func() {}, fmt.Errorf("%s: %w", what, err)
	}
	return devIssuer{dir: dir, iss: iss}, cleanup, nil
}

// issueTLS issues the frontend's certificate from d for every address it
// may be dialed at.
func (o *startDevOptions) issueTLS(d devIssuer) (*startDevTLS, error) {
	dir, iss := d.dir, d.iss
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if ip := net.ParseIP(o.ip); ip.IsUnspecified() {
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok {
					hosts = append(hosts, n.IP.String())
				}
			}
		}
		if h, err := os.Hostname(); err == nil {
			hosts = append(hosts, h)
		}
	} else {
		hosts = append(hosts, o.ip)
	}
	svid, err := iss.IssueServer(hosts, identity.DefaultSVIDTTL)
	if err == nil {
		err = identity.WriteSVID(filepath.Join(dir, "server"), svid, iss.Bundle())
	}
	if err != nil {
		return nil, fmt.Errorf("the frontend's certificate in %s: %w", dir, err)
	}
	server := filepath.Join(dir, "server")
	return &startDevTLS{caDir: dir, files: devopts.TLSOptions{CertFile: filepath.Join(server, identity.SVIDCertFile),
		KeyFile: filepath.Join(server, identity.SVIDKeyFile), CAFile: filepath.Join(dir, identity.CACertFile)}}, nil
}

// explain prints how each client connects to a TLS frontend at address.
func (t *startDevTLS) explain(w io.Writer, address string) {
	d := t.caDir
	fmt.Fprintf(w, "TLS: the frontend requires a client certificate of the issuer in %s (ca.pem):\n", d)
	fmt.Fprintf(w, "  wdc workers enroll --ca-dir %s --worker-id worker-a      # the agent's SVID is its TLS certificate too\n", d)
	fmt.Fprintf(w, "  wdc agent --worker-id worker-a --svid-dir %s/workers/worker-a --tls\n", d)
	fmt.Fprintf(w, "  wdc workers enroll --ca-dir %s --control-plane\n", d)
	fmt.Fprintf(w, "  wdc control-plane --trust-bundle %[1]s/ca.pem --tls-cert-path %[1]s/control-plane/svid.pem --tls-key-path %[1]s/control-plane/svid.key --tls-ca-path %[1]s/ca.pem\n", d)
	fmt.Fprintf(w, "  wdc workers enroll --ca-dir %s --submitter me\n", d)
	fmt.Fprintf(w, "  export TEMPORAL_TLS_CERT=%[1]s/submitters/me/svid.pem TEMPORAL_TLS_KEY=%[1]s/submitters/me/svid.key TEMPORAL_TLS_CA=%[1]s/ca.pem   # other wdc commands (not in the agents' shell)\n", d)
	fmt.Fprintf(w, "  temporal workflow list --address %[2]s --tls-cert-path %[1]s/submitters/me/svid.pem --tls-key-path %[1]s/submitters/me/svid.key --tls-ca-path %[1]s/ca.pem\n", d, address)
	fmt.Fprintf(w, "  The Web UI uses the server's certificate: it listens on 127.0.0.1 only.\n")
}
