package bench

import (
	"path/filepath"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/identity"
)

// identities is the bench's issuer: it enrolls the agents (an SVID
// directory each), the simulated workers and the bench's own client (as
// submitter "bench"); nil when identity is off.
type identities struct {
	mode identity.Mode
	dir  string
	iss  *identity.Issuer
}

// newIdentities makes the issuer under opts.DataDir/identity and signs
// wc's commands as a submitter; nil with identity off.
func newIdentities(opts Options, wc *wdcclient.Client) (*identities, error) {
	if opts.Identity == identity.ModeOff {
		return nil, nil
	}
	dir := filepath.Join(opts.DataDir, "identity")
	iss, err := identity.LoadOrCreateIssuer(filepath.Join(dir, "ca"), spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	if err != nil {
		return nil, err
	}
	sub, err := identity.SubmitterID(iss.TrustDomain(), "bench")
	if err != nil {
		return nil, err
	}
	svid, err := iss.Issue(sub, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	if wc.Signer, err = identity.NewSigner(svid); err != nil {
		return nil, err
	}
	if err := identity.WriteSVID(filepath.Join(dir, "submitter"), svid, iss.Bundle()); err != nil {
		return nil, err
	}
	return &identities{mode: opts.Identity, dir: dir, iss: iss}, nil
}

// submitterArgs are the CLI's flags to sign as the bench's submitter.
func (i *identities) submitterArgs() []string {
	if i == nil {
		return nil
	}
	return []string{"--svid-dir", filepath.Join(i.dir, "submitter")}
}

// controlPlaneArgs are the control plane's identity flags.
func (i *identities) controlPlaneArgs() []string {
	if i == nil {
		return []string{"--identity", string(identity.ModeOff)}
	}
	return []string{"--identity", string(i.mode), "--trust-bundle", filepath.Join(i.dir, "ca", identity.CACertFile)}
}

// agentArgs enrolls agent id and returns its --svid-dir (--identity off
// with identity off).
func (i *identities) agentArgs(id string) ([]string, error) {
	if i == nil {
		return []string{"--identity", string(identity.ModeOff)}, nil
	}
	svid, err := i.iss.IssueWorker(id, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(i.dir, "workers", id)
	if err := identity.WriteSVID(dir, svid, i.iss.Bundle()); err != nil {
		return nil, err
	}
	return []string{"--svid-dir", dir}, nil
}

// signer enrolls simulated worker id (nil with identity off).
func (i *identities) signer(id string) (*identity.Signer, error) {
	if i == nil {
		return nil, nil
	}
	svid, err := i.iss.IssueWorker(id, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	return identity.NewSigner(svid)
}
