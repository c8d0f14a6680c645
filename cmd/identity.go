package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
)

// Environment variables of the identity flags.
const (
	envIdentity         = "WDC_IDENTITY"
	envTrustBundle      = "WDC_TRUST_BUNDLE"
	envTrustDomain      = "WDC_TRUST_DOMAIN"
	envSVIDDir          = "WDC_SVID_DIR"
	envCADir            = "WDC_CA_DIR"
	envSubmitterSVIDDir = "WDC_SUBMITTER_SVID_DIR"
	envRevocations      = "WDC_REVOCATIONS"
)

// trustFlags are the control plane's identity flags.
type trustFlags struct {
	mode, bundle, domain, socket, revocations, caDir string
}

func (f *trustFlags) bind(fs *pflag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.mode, "identity", getenv(envIdentity), "off, optional or required: whether registrations and results must be signed by the worker's SVID and the attempt's delegated key (env "+envIdentity+"; default required with --trust-bundle, --spiffe-socket or --ca-dir; without them, give off explicitly)")
	fs.StringVar(&f.bundle, "trust-bundle", getenv(envTrustBundle), "PEM file of the trust domain's X.509 authorities: the issuer's ca.pem ('wdc workers enroll') or a SPIRE bundle (env "+envTrustBundle+")")
	bindSocket(fs, &f.socket, getenv, "the trust bundle comes from a SPIRE agent's Workload API at this socket, kept current as SPIRE rotates it")
	bindTrustDomain(fs, &f.domain, getenv)
	fs.StringVar(&f.caDir, "ca-dir", getenv(envCADir), "zero setup: without --trust-bundle or --spiffe-socket, trust the issuer in this directory (its ca.pem), as 'wdc server start-dev' prints it (env "+envCADir+")")
	fs.StringVar(&f.revocations, "revocations", getenv(envRevocations), "revocation list (JSON lines, as 'wdc workers revoke --revocations FILE' appends them), read again when it changes: a certificate it revokes is refused whatever the registry remembers (env "+envRevocations+")")
}

func bindSocket(fs *pflag.FlagSet, p *string, getenv func(string) string, what string) {
	fs.StringVar(p, "spiffe-socket", getenv(identity.EnvSocket), what+" (a path or unix:// address; env "+identity.EnvSocket+")")
}

func bindTrustDomain(fs *pflag.FlagSet, p *string, getenv func(string) string) {
	d := getenv(envTrustDomain)
	if d == "" {
		d = identity.DefaultTrustDomain
	}
	fs.StringVar(p, "trust-domain", d, "the SPIFFE trust domain (env "+envTrustDomain+")")
}

// verifier builds the control plane's identity.Verifier (nil when off);
// close releases its Workload API source, if any.
func (f *trustFlags) verifier(ctx context.Context) (v *identity.Verifier, close func(), err error) {
	close = func() {}
	if f.bundle == "" && f.socket == "" && f.caDir != "" && f.mode != string(identity.ModeOff) {
		f.bundle = filepath.Join(f.caDir, identity.CACertFile)
		if _, err := os.Stat(f.bundle); err != nil {
			return nil, close, usagef("--ca-dir %s: no issuer there (%v); 'wdc server start-dev' prints its directory", f.caDir, err)
		}
	}
	mode := f.mode
	if mode == "" {
		if f.bundle == "" && f.socket == "" {
			return nil, close, usagef("identity: no trust bundle: give --trust-bundle, --spiffe-socket or --ca-dir (%s) so that registrations, results and submissions must be signed, or --identity off to run without (anyone with namespace access can then speak for any worker and start any work)", envCADir)
		}
		mode = string(identity.ModeRequired)
	}
	m, err := identity.ParseMode(mode)
	if err != nil {
		return nil, close, usagef("--identity: %v", err)
	}
	if m == identity.ModeOff {
		if f.revocations != "" {
			return nil, close, usagef("--revocations: needs --identity optional or required (and --trust-bundle or --spiffe-socket)")
		}
		return nil, close, nil
	}
	td, err := spiffeid.TrustDomainFromString(f.domain)
	if err != nil {
		return nil, close, usagef("--trust-domain %q: %v", f.domain, err)
	}
	switch {
	case f.bundle != "" && f.socket != "":
		return nil, close, usagef("--trust-bundle and --spiffe-socket: give one")
	case f.socket != "":
		src, err := identity.OpenWorkloadAPI(ctx, f.socket, nil)
		if err != nil {
			return nil, close, fmt.Errorf("--spiffe-socket: %w", err)
		}
		v, err := identity.NewVerifier(m, td, src)
		if err == nil {
			err = f.addRevocations(v)
		}
		return v, func() { src.Close() }, err
	case f.bundle == "":
		return nil, close, usagef("--identity %s: --trust-bundle (or %s) or --spiffe-socket is required", m, envTrustBundle)
	}
	b, err := identity.LoadBundle(td, f.bundle)
	if err != nil {
		return nil, close, usagef("--trust-bundle %s: %v", f.bundle, err)
	}
	v, err = identity.NewVerifier(m, td, b)
	if err != nil {
		return nil, close, err
	}
	return v, close, f.addRevocations(v)
}

// describe says what v checks, for the control plane's start line.
func (f *trustFlags) describe(v *identity.Verifier) string {
	if !v.Enabled() {
		return "off: registrations and results are not checked for signatures (give --trust-bundle, --spiffe-socket or --ca-dir)"
	}
	from := "trust bundle " + f.bundle
	if f.socket != "" {
		from = "the Workload API at " + f.socket
	}
	if f.revocations != "" {
		from += ", revocation list " + f.revocations
	}
	return fmt.Sprintf("%s (trust domain %s, %s)", v.Mode, v.TrustDomain, from)
}

// addRevocations gives v the --revocations list, if any.
func (f *trustFlags) addRevocations(v *identity.Verifier) error {
	if f.revocations == "" {
		return nil
	}
	list, err := identity.OpenRevocationFile(f.revocations)
	if err != nil {
		return usagef("--revocations: %v", err)
	}
	v.Revocations = list
	return nil
}

// svidFlags are the identity flags of an agent or a submitter; caDir and
// user are for enrolling from a dev issuer (enrollFromCA).
type svidFlags struct{ dir, socket, caDir, user string }

// bindCA binds --ca-dir and reads the user a submitter enrolls as.
func (f *svidFlags) bindCA(fs *pflag.FlagSet, getenv func(string) string, what string) {
	fs.StringVar(&f.caDir, "ca-dir", getenv(envCADir), "zero setup: without --svid-dir or --spiffe-socket, "+what+" from the issuer in this directory, as 'wdc server start-dev' prints it (env "+envCADir+")")
	f.user = getenv("USER")
}

func (f *svidFlags) bind(fs *pflag.FlagSet, getenv func(string) string) {
	f.bindCA(fs, getenv, "enroll the worker into <ca-dir>/workers/<id>/")
	fs.StringVar(&f.dir, "svid-dir", getenv(envSVIDDir), "directory with the worker's X.509-SVID (svid.pem, svid.key, bundle.pem), as 'wdc workers enroll' writes it: the agent signs its registration with it and delegates a key to each attempt, and reads it again when it changes (enroll again to rotate); with --tls and no --tls-cert-path also the TLS client certificate (env "+envSVIDDir+"; default: unsigned)")
	bindSocket(fs, &f.socket, getenv, "take the worker's X.509-SVID from a SPIRE agent's Workload API at this socket instead of --svid-dir, rotated as SPIRE renews it")
}

// bindSubmitter binds the flags for a command that changes a run or a task.
func (f *svidFlags) bindSubmitter(fs *pflag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.dir, "svid-dir", getenv(envSubmitterSVIDDir), "directory with your submitter X.509-SVID ('wdc workers enroll --submitter NAME'): the command is signed with it, as a control plane with identity required demands (env "+envSubmitterSVIDDir+"; default: unsigned)")
	bindSocket(fs, &f.socket, getenv, "take your submitter X.509-SVID from a SPIRE agent's Workload API at this socket instead of --svid-dir")
	f.bindCA(fs, getenv, "sign as submitter $USER, enrolled into <ca-dir>/submitters/<user>/")
}

// enrollFromCA issues an SVID for the identity id names from the issuer in
// --ca-dir into <ca-dir>/<sub>/<name>/ and uses it as --svid-dir, when
// neither --svid-dir nor --spiffe-socket is given; it says so on w.
// Errors: no issuer in --ca-dir, or its key cannot be read.
func (f *svidFlags) enrollFromCA(w io.Writer, sub, name string, id func(spiffeid.TrustDomain) (spiffeid.ID, error)) error {
	if f.caDir == "" || f.dir != "" || f.socket != "" {
		return nil
	}
	if _, err := os.Stat(filepath.Join(f.caDir, identity.CACertFile)); err != nil {
		return usagef("--ca-dir %s: no issuer there (%v); 'wdc server start-dev' prints its directory", f.caDir, err)
	}
	iss, err := identity.LoadOrCreateIssuer(f.caDir, spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	if err != nil {
		return fmt.Errorf("--ca-dir %s: %w", f.caDir, err)
	}
	sid, err := id(iss.TrustDomain())
	if err != nil {
		return err
	}
	dir := filepath.Join(f.caDir, sub, name)
	if have, _, err := identity.LoadSVID(dir); err == nil && have.ID == sid && time.Until(have.Certificates[0].NotAfter) > 24*time.Hour {
		if _, _, err := x509svid.Verify(have.Certificates, iss.Bundle()); err == nil {
			f.dir = dir // enrolled by this issuer before, and good for a day at least
			return nil
		}
	}
	svid, err := iss.Issue(sid, identity.DefaultSVIDTTL)
	if err != nil {
		return err
	}
	if err := identity.WriteSVID(dir, svid, iss.Bundle()); err != nil {
		return err
	}
	fmt.Fprintf(w, "wdc: enrolled as %s from the issuer in %s (%s)\n", sid, f.caDir, dir)
	f.dir = dir
	return nil
}

// submitterName is the name a submitter enrolls as from --ca-dir: $USER
// when it is a valid ID, else "dev".
func (f *svidFlags) submitterName() string {
	if f.user != "" && fleet.ValidateID("user", f.user) == nil {
		return f.user
	}
	return "dev"
}

// signer returns the signer the flags name (nil with neither) after
// checking its SVID with want (nil: any), which names what it must be;
// close releases a Workload API source.
func (f *svidFlags) signer(ctx context.Context, want func(spiffeid.ID) error) (s *identity.Signer, close func(), err error) {
	close = func() {}
	switch {
	case f.dir != "" && f.socket != "":
		return nil, close, usagef("--svid-dir and --spiffe-socket: give one")
	case f.socket != "":
		src, err := identity.OpenWorkloadAPI(ctx, f.socket, func(id spiffeid.ID) bool { return want == nil || want(id) == nil })
		if err != nil {
			return nil, close, fmt.Errorf("--spiffe-socket: %w", err)
		}
		s = identity.NewSignerFrom(src)
		close = func() { src.Close() }
	case f.dir != "":
		src, err := identity.NewDirSource(f.dir)
		if err != nil {
			return nil, close, usagef("--svid-dir: %v", err)
		}
		s = identity.NewSignerFrom(src)
	default:
		return nil, close, nil
	}
	if want == nil {
		return s, close, nil
	}
	if err := want(s.ID()); err != nil {
		close()
		return nil, func() {}, err
	}
	return s, close, nil
}

// isWorker checks that an SVID is fleet worker id's.
func isWorker(id string) func(spiffeid.ID) error {
	return func(sid spiffeid.ID) error {
		if got, ok := identity.WorkerOf(sid); !ok || got != id {
			return usagef("the SVID is %s, not worker %q's", sid, id)
		}
		return nil
	}
}

// isSubmitter checks that an SVID is a submitter's.
func isSubmitter(sid spiffeid.ID) error {
	if _, ok := identity.SubmitterOf(sid); !ok {
		return usagef("the SVID is %s, not a submitter's (spiffe://<td>/wdc/submitter/<name>: 'wdc workers enroll --submitter NAME')", sid)
	}
	return nil
}

// withSigner runs f with wc signing as the submitter the flags name.
func (f *svidFlags) withSigner(ctx context.Context, wc *wdcclient.Client, run func() error) error {
	name := f.submitterName()
	if err := f.enrollFromCA(os.Stderr, "submitters", name, func(td spiffeid.TrustDomain) (spiffeid.ID, error) {
		return identity.SubmitterID(td, name)
	}); err != nil {
		return err
	}
	s, closeSigner, err := f.signer(ctx, isSubmitter)
	if err != nil {
		return err
	}
	defer closeSigner()
	wc.Signer = s
	return run()
}

// enrollment is `workers enroll` output.
type enrollment struct {
	WorkerID  string    `json:"worker_id,omitempty"`
	Submitter string    `json:"submitter,omitempty"`
	SPIFFEID  string    `json:"spiffe_id"`
	SVIDDir   string    `json:"svid_dir"`
	Bundle    string    `json:"trust_bundle"`
	NotAfter  time.Time `json:"not_after"`
}

func (a *app) newWorkersEnrollCommand() *cobra.Command {
	var (
		workerID, submitter, caDir, svidDir, domain string
		controlPlane                                bool
		ttl                                         time.Duration
	)
	c := &cobra.Command{
		Use:   "enroll (--worker-id ID | --submitter NAME | --control-plane) --ca-dir DIR",
		Short: "Issue a worker's or a submitter's X.509-SVID from a local issuer, for --svid-dir",
		Long: `Issue an X.509-SVID (SPIFFE ID spiffe://<trust-domain>/wdc/worker/<id>) for a
fleet worker from the issuer in --ca-dir (created there on first use: ca.pem is
the trust bundle, ca.key the root key, mode 0600; keep it off the workers), and
write it with the bundle to --svid-dir for 'wdc agent --svid-dir'. Give the
control planes the bundle: 'wdc control-plane --trust-bundle <ca-dir>/ca.pem'.

Rotate by enrolling again before --ttl runs out and restarting the agent;
revoke by not renewing (short --ttl) or by a new issuer whose bundle replaces
the old one on every control plane. In production, use SPIRE instead and give
the control planes its bundle.

--submitter NAME issues spiffe://<trust-domain>/wdc/submitter/<name> instead:
the identity 'wdc runs commit', 'runs close' and 'tasks cancel' sign with
(--svid-dir); a run records who committed. --control-plane issues
spiffe://<trust-domain>/wdc/control-plane, a control plane's TLS client
certificate for a frontend that requires one ('wdc server start-dev --tls').

An SVID is also a TLS client certificate of the issuer: against
'wdc server start-dev --tls', 'wdc agent --svid-dir DIR --tls' connects with
it, and any other command with --tls-cert-path DIR/svid.pem --tls-key-path
DIR/svid.key --tls-ca-path <ca-dir>/ca.pem.`,
		Example: `  wdc workers enroll --worker-id worker-a --ca-dir /etc/wdc/ca --svid-dir /etc/wdc/worker-a
  wdc agent --worker-id worker-a --svid-dir /etc/wdc/worker-a --cpu 2 --memory 2Gi
  wdc workers enroll --submitter alice --ca-dir /etc/wdc/ca --svid-dir ~/.wdc/alice
  wdc runs commit sweep-7 --expected-parent-time 0 --event 1 --svid-dir ~/.wdc/alice`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			name, flag := workerID, "--worker-id"
			given := 0
			for _, set := range []bool{workerID != "", submitter != "", controlPlane} {
				if set {
					given++
				}
			}
			switch {
			case given > 1:
				return usagef("--worker-id, --submitter and --control-plane: give one")
			case submitter != "":
				name, flag = submitter, "--submitter"
			case controlPlane:
				name, flag = "control-plane", "--control-plane"
			case workerID == "":
				return usagef("--worker-id, --submitter or --control-plane: required")
			}
			if err := fleet.ValidateID(flag, name); err != nil {
				return usageError{err}
			}
			if caDir == "" {
				return usagef("--ca-dir: required (or set %s)", envCADir)
			}
			if ttl <= 0 {
				return usagef("--ttl: must be positive (got %s)", ttl)
			}
			td, err := spiffeid.TrustDomainFromString(domain)
			if err != nil {
				return usagef("--trust-domain %q: %v", domain, err)
			}
			id, err := identity.WorkerID(td, workerID)
			dir := filepath.Join(caDir, "workers", name)
			switch {
			case submitter != "":
				id, err = identity.SubmitterID(td, submitter)
				dir = filepath.Join(caDir, "submitters", name)
			case controlPlane:
				id, dir, err = identity.ControlPlaneID(td), filepath.Join(caDir, "control-plane"), nil
			}
			if err != nil {
				return usagef("%s %q: %v", flag, name, err)
			}
			if svidDir == "" {
				svidDir = dir
			}
			iss, err := identity.LoadOrCreateIssuer(caDir, td)
			if err != nil {
				return fmt.Errorf("issuer in %s: %w", caDir, err)
			}
			svid, err := iss.Issue(id, ttl)
			if err != nil {
				return err
			}
			if err := identity.WriteSVID(svidDir, svid, iss.Bundle()); err != nil {
				return err
			}
			out := enrollment{WorkerID: workerID, Submitter: submitter, SPIFFEID: svid.ID.String(), SVIDDir: svidDir,
				Bundle: filepath.Join(caDir, identity.CACertFile), NotAfter: svid.Certificates[0].NotAfter.UTC()}
			use := fmt.Sprintf("agent:          wdc agent --worker-id %s --svid-dir %s", workerID, svidDir)
			switch {
			case submitter != "":
				use = "runs commit|close, tasks cancel: --svid-dir " + svidDir
			case controlPlane:
				use = fmt.Sprintf("TLS client:     --tls-cert-path %s --tls-key-path %s --tls-ca-path %s",
					filepath.Join(svidDir, identity.SVIDCertFile), filepath.Join(svidDir, identity.SVIDKeyFile), filepath.Join(caDir, identity.CACertFile))
			}
			return a.emitf(out, "enrolled %s as %s until %s\n  %s\n  control planes: wdc control-plane --trust-bundle %s",
				name, out.SPIFFEID, out.NotAfter.Format(time.RFC3339), use, out.Bundle)
		},
	}
	c.Flags().StringVar(&workerID, "worker-id", "", "the fleet worker to enroll")
	c.Flags().StringVar(&submitter, "submitter", "", "the submitter to enroll instead of a worker (a person or a pipeline that commits, closes and cancels)")
	c.Flags().BoolVar(&controlPlane, "control-plane", false, "enroll the control plane instead (its TLS client certificate; default --svid-dir <ca-dir>/control-plane)")
	c.Flags().StringVar(&caDir, "ca-dir", a.deps.Getenv(envCADir), "the issuer's directory, created with a new root on first use (env "+envCADir+"; required)")
	c.Flags().StringVar(&svidDir, "svid-dir", "", "where to write svid.pem, svid.key (0600) and bundle.pem (default <ca-dir>/workers/<worker-id>, <ca-dir>/submitters/<name> or <ca-dir>/control-plane)")
	c.Flags().DurationVar(&ttl, "ttl", identity.DefaultSVIDTTL, "how long the SVID is valid")
	bindTrustDomain(c.Flags(), &domain, a.deps.Getenv)
	return c
}
