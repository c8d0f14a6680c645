package cmd

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
)

// Environment variables of the identity flags.
const (
	envIdentity    = "WDC_IDENTITY"
	envTrustBundle = "WDC_TRUST_BUNDLE"
	envTrustDomain = "WDC_TRUST_DOMAIN"
	envSVIDDir     = "WDC_SVID_DIR"
	envCADir       = "WDC_CA_DIR"
)

// trustFlags are the control plane's identity flags.
type trustFlags struct {
	mode, bundle, domain, socket string
}

func (f *trustFlags) bind(fs *pflag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.mode, "identity", getenv(envIdentity), "off, optional or required: whether registrations and results must be signed by the worker's SVID and the attempt's delegated key (env "+envIdentity+"; default required with --trust-bundle or --spiffe-socket, else off)")
	fs.StringVar(&f.bundle, "trust-bundle", getenv(envTrustBundle), "PEM file of the trust domain's X.509 authorities: the issuer's ca.pem ('wdc workers enroll') or a SPIRE bundle (env "+envTrustBundle+")")
	bindSocket(fs, &f.socket, getenv, "the trust bundle comes from a SPIRE agent's Workload API at this socket, kept current as SPIRE rotates it")
	bindTrustDomain(fs, &f.domain, getenv)
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
	mode := f.mode
	if mode == "" {
		mode = string(identity.ModeOff)
		if f.bundle != "" || f.socket != "" {
			mode = string(identity.ModeRequired)
		}
	}
	m, err := identity.ParseMode(mode)
	if err != nil {
		return nil, close, usagef("--identity: %v", err)
	}
	switch {
	case m == identity.ModeOff:
		return nil, close, nil
	case f.bundle != "" && f.socket != "":
		return nil, close, usagef("--trust-bundle and --spiffe-socket: give one")
	case f.socket != "":
		src, err := identity.OpenWorkloadAPI(ctx, f.socket)
		if err != nil {
			return nil, close, fmt.Errorf("--spiffe-socket: %w", err)
		}
		v, err := identity.NewVerifier(m, src)
		return v, func() { src.Close() }, err
	case f.bundle == "":
		return nil, close, usagef("--identity %s: --trust-bundle (or %s) or --spiffe-socket is required", m, envTrustBundle)
	}
	td, err := spiffeid.TrustDomainFromString(f.domain)
	if err != nil {
		return nil, close, usagef("--trust-domain %q: %v", f.domain, err)
	}
	b, err := identity.LoadBundle(td, f.bundle)
	if err != nil {
		return nil, close, usagef("--trust-bundle %s: %v", f.bundle, err)
	}
	v, err = identity.NewVerifier(m, b)
	return v, close, err
}

// svidFlags are an agent's identity flags.
type svidFlags struct{ dir, socket string }

func (f *svidFlags) bind(fs *pflag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.dir, "svid-dir", getenv(envSVIDDir), "directory with the worker's X.509-SVID (svid.pem, svid.key, bundle.pem), as 'wdc workers enroll' writes it: the agent signs its registration with it and delegates a key to each attempt (env "+envSVIDDir+"; default: unsigned)")
	bindSocket(fs, &f.socket, getenv, "take the worker's X.509-SVID from a SPIRE agent's Workload API at this socket instead of --svid-dir, rotated as SPIRE renews it")
}

// signer returns the worker's signer (nil with neither flag) after
// checking that its SVID names workerID; close releases a Workload API
// source.
func (f *svidFlags) signer(ctx context.Context, workerID string) (s *identity.Signer, close func(), err error) {
	close = func() {}
	switch {
	case f.dir != "" && f.socket != "":
		return nil, close, usagef("--svid-dir and --spiffe-socket: give one")
	case f.socket != "":
		src, err := identity.OpenWorkloadAPI(ctx, f.socket)
		if err != nil {
			return nil, close, fmt.Errorf("--spiffe-socket: %w", err)
		}
		s = identity.NewSignerFrom(src)
		close = func() { src.Close() }
	case f.dir != "":
		svid, _, err := identity.LoadSVID(f.dir)
		if err != nil {
			return nil, close, usagef("--svid-dir: %v", err)
		}
		if s, err = identity.NewSigner(svid); err != nil {
			return nil, close, err
		}
	default:
		return nil, close, nil
	}
	if got, ok := identity.WorkerOf(s.ID()); !ok || got != workerID {
		close()
		return nil, func() {}, usagef("the worker's SVID is %s, not worker %q's", s.ID(), workerID)
	}
	return s, close, nil
}

// signed reports whether an identity flag was given.
func (f *svidFlags) signed() bool { return f.dir != "" || f.socket != "" }

// enrollment is `workers enroll` output.
type enrollment struct {
	WorkerID string    `json:"worker_id"`
	SPIFFEID string    `json:"spiffe_id"`
	SVIDDir  string    `json:"svid_dir"`
	Bundle   string    `json:"trust_bundle"`
	NotAfter time.Time `json:"not_after"`
}

func (a *app) newWorkersEnrollCommand() *cobra.Command {
	var (
		workerID, caDir, svidDir, domain string
		ttl                              time.Duration
	)
	c := &cobra.Command{
		Use:   "enroll --worker-id ID --ca-dir DIR",
		Short: "Issue a worker's X.509-SVID from a local issuer, for 'wdc agent --svid-dir'",
		Long: `Issue an X.509-SVID (SPIFFE ID spiffe://<trust-domain>/wdc/worker/<id>) for a
fleet worker from the issuer in --ca-dir (created there on first use: ca.pem is
the trust bundle, ca.key the root key, mode 0600; keep it off the workers), and
write it with the bundle to --svid-dir for 'wdc agent --svid-dir'. Give the
control planes the bundle: 'wdc control-plane --trust-bundle <ca-dir>/ca.pem'.

Rotate by enrolling again before --ttl runs out and restarting the agent;
revoke by not renewing (short --ttl) or by a new issuer whose bundle replaces
the old one on every control plane. In production, use SPIRE instead and give
the control planes its bundle.`,
		Example: `  wdc workers enroll --worker-id worker-a --ca-dir /etc/wdc/ca --svid-dir /etc/wdc/worker-a
  wdc agent --worker-id worker-a --svid-dir /etc/wdc/worker-a --cpu 2 --memory 2Gi`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := fleet.ValidateID("--worker-id", workerID); err != nil {
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
			if svidDir == "" {
				svidDir = filepath.Join(caDir, "workers", workerID)
			}
			iss, err := identity.LoadOrCreateIssuer(caDir, td)
			if err != nil {
				return fmt.Errorf("issuer in %s: %w", caDir, err)
			}
			svid, err := iss.IssueWorker(workerID, ttl)
			if err != nil {
				return err
			}
			if err := identity.WriteSVID(svidDir, svid, iss.Bundle()); err != nil {
				return err
			}
			out := enrollment{WorkerID: workerID, SPIFFEID: svid.ID.String(), SVIDDir: svidDir,
				Bundle: filepath.Join(caDir, identity.CACertFile), NotAfter: svid.Certificates[0].NotAfter.UTC()}
			return a.emitf(out, "enrolled %s as %s until %s\n  agent:          wdc agent --worker-id %s --svid-dir %s\n  control planes: wdc control-plane --trust-bundle %s",
				workerID, out.SPIFFEID, out.NotAfter.Format(time.RFC3339), workerID, svidDir, out.Bundle)
		},
	}
	c.Flags().StringVar(&workerID, "worker-id", "", "the fleet worker to enroll (required)")
	c.Flags().StringVar(&caDir, "ca-dir", a.deps.Getenv(envCADir), "the issuer's directory, created with a new root on first use (env "+envCADir+"; required)")
	c.Flags().StringVar(&svidDir, "svid-dir", "", "where to write svid.pem, svid.key (0600) and bundle.pem (default <ca-dir>/workers/<worker-id>)")
	c.Flags().DurationVar(&ttl, "ttl", identity.DefaultSVIDTTL, "how long the SVID is valid")
	bindTrustDomain(c.Flags(), &domain, a.deps.Getenv)
	return c
}
