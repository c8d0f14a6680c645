package identity

import (
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/wdc-runtime/wdc/lease"
)

// MaxSignedAge is how old a worker's own signed message may be when it
// is judged (its SignedAt against the validator's now), and how far in
// the future it may be dated (clock skew). Older is RejectReplayed.
const MaxSignedAge = 2 * time.Minute

// Verifier judges signed messages against a trust bundle. A nil Verifier
// is ModeOff. It is safe for concurrent use and never changes after
// construction (a Workload API bundle source may rotate its authorities).
type Verifier struct {
	// Mode is off, optional or required; empty is ModeOff.
	Mode Mode
	// TrustDomain is the only trust domain whose identities are believed,
	// even when Bundle also holds federated domains' authorities.
	TrustDomain spiffeid.TrustDomain
	// Bundle gives the trust domain's authorities (an *x509bundle.Bundle,
	// or a Workload API source that SPIRE keeps current); required unless
	// Mode is off.
	Bundle x509bundle.Source
	// Revocations, when set, refuses certificates it revokes
	// (RejectUnauthenticated) whatever a workflow remembers: a revocation
	// there outlives the registry entry's termination, reset or deletion.
	Revocations Revocations
}

// Verdict is what a Verifier found about an accepted message.
type Verdict struct {
	// Signed is false for an unsigned message accepted in ModeOptional,
	// or any message in ModeOff.
	Signed bool
	// ID is the signer's SPIFFE ID when Signed.
	ID spiffeid.ID
}

// NewVerifier checks that mode, trust domain and bundle fit together.
func NewVerifier(mode Mode, td spiffeid.TrustDomain, bundle x509bundle.Source) (*Verifier, error) {
	if _, err := ParseMode(string(mode)); err != nil {
		return nil, err
	}
	if b, ok := bundle.(*x509bundle.Bundle); mode != ModeOff && (bundle == nil || ok && (b == nil || b.Empty())) {
		return nil, fmt.Errorf("identity %s needs a trust bundle", mode)
	}
	if mode != ModeOff && td.IsZero() {
		return nil, fmt.Errorf("identity %s needs a trust domain", mode)
	}
	return &Verifier{Mode: mode, TrustDomain: td, Bundle: bundle}, nil
}

func (v *Verifier) off() bool { return v == nil || v.Mode == "" || v.Mode == ModeOff }

// Enabled reports whether v checks identities (mode optional or required;
// a nil Verifier is off).
func (v *Verifier) Enabled() bool { return !v.off() }

func reject(reason lease.RejectReason, format string, args ...any) *lease.Rejection {
	return &lease.Rejection{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// signer is every check's start: identity off accepts, an unsigned
// message is unsigned's to decide, else p's certificate chain must verify
// at now, in the trust domain. done says the caller returns verdict and
// rej as they are; otherwise id and pub are the signer's.
func (v *Verifier) signer(now time.Time, kind string, p *Proof) (id spiffeid.ID, pub any, verdict Verdict, rej *lease.Rejection, done bool) {
	switch {
	case v.off():
		return id, nil, Verdict{}, nil, true
	case p == nil:
		verdict, rej = v.unsigned(kind)
		return id, nil, verdict, rej, true
	}
	id, chains, err := x509svid.ParseAndVerify(p.Chain, v.Bundle, x509svid.WithTime(now))
	if err != nil {
		return id, nil, Verdict{}, reject(lease.RejectUnauthenticated, "the signer's certificate does not verify against this control plane's trust bundle at %s (another issuer, or expired): %v", now.UTC().Format(time.RFC3339), err), true
	}
	if !id.MemberOf(v.TrustDomain) {
		return id, nil, Verdict{}, reject(lease.RejectWrongIdentity, "%s is not in trust domain %s", id, v.TrustDomain), true
	}
	leaf := chains[0][0]
	if v.Revocations != nil {
		if r, ok := v.Revocations.Revoked(id); ok && r.Refuses(leaf.NotBefore) {
			return id, nil, Verdict{}, reject(lease.RejectUnauthenticated, "%s was revoked through %s on the revocation list (%s): its certificate issued %s is refused; enroll it again",
				id, r.RevokedThrough.UTC().Format(time.RFC3339), r.Reason, leaf.NotBefore.UTC().Format(time.RFC3339)), true
		}
	}
	return id, leaf.PublicKey, Verdict{}, nil, false
}

// unsignedListed refuses an unsigned message of a worker on the
// revocation list (ModeOptional would accept it): which certificate it
// holds cannot be told.
func (v *Verifier) unsignedListed(worker, kind string, p *Proof) *lease.Rejection {
	if p != nil || v.off() || v.Revocations == nil {
		return nil
	}
	id, err := WorkerID(v.TrustDomain, worker)
	if err != nil {
		return nil
	}
	if _, listed := v.Revocations.Revoked(id); listed {
		return reject(lease.RejectUnauthenticated, "%s of worker %q is not signed, and %s is on the revocation list", kind, worker, id)
	}
	return nil
}

// unsigned decides an unsigned message: accepted in ModeOptional, else
// RejectUnauthenticated.
func (v *Verifier) unsigned(kind string) (Verdict, *lease.Rejection) {
	if v.Mode == ModeOptional {
		return Verdict{}, nil
	}
	return Verdict{}, reject(lease.RejectUnauthenticated, "%s is not signed; this control plane requires signed messages (identity %s): sign with --svid-dir or --spiffe-socket, or with --ca-dir (WDC_CA_DIR) naming the dev issuer 'wdc server start-dev' prints", kind, v.Mode)
}

// Worker judges message of kind that fleet worker `worker` signs with its
// own SVID (register, worker heartbeat): the chain verifies at now, its ID
// is the worker's, the signature matches the content (message without its
// proof), and SignedAt is within MaxSignedAge of now. Rejections:
// unauthenticated, wrong_identity, replayed. The caller also refuses a
// SignedAt not after the last it accepted (replayed).
func (v *Verifier) Worker(now time.Time, worker, kind string, message any, p *Proof) (Verdict, *lease.Rejection) {
	if rej := v.unsignedListed(worker, kind, p); rej != nil {
		return Verdict{}, rej
	}
	return v.own(now, kind, message, p, func(id spiffeid.ID) bool {
		got, ok := WorkerOf(id)
		return ok && got == worker
	}, fmt.Sprintf("worker %q", worker))
}

// Submitter judges message of kind that a submitter signs with its own
// SVID (spiffe://<td>/wdc/submitter/<name>: commit, close, cancel), as
// Worker does; Verdict.ID names the submitter. Rejections:
// unauthenticated, wrong_identity, replayed.
func (v *Verifier) Submitter(now time.Time, kind string, message any, p *Proof) (Verdict, *lease.Rejection) {
	return v.own(now, kind, message, p, func(id spiffeid.ID) bool {
		_, ok := SubmitterOf(id)
		return ok
	}, "a submitter")
}

// Authority judges a submitter's standing authority for work (a task's
// api.TaskAuthority): signed with a submitter's own SVID whose chain
// verifies at the signing time, not at now, so a task started or reset
// long after its submission still verifies; a revocation still refuses
// it. SignedAt may not be later than now plus MaxSignedAge. Rejections:
// unauthenticated, wrong_identity.
func (v *Verifier) Authority(now time.Time, kind string, message any, p *Proof) (Verdict, *lease.Rejection) {
	if p != nil && p.SignedAt.After(now.Add(MaxSignedAge)) && !v.off() {
		return Verdict{}, reject(lease.RejectUnauthenticated, "%s is signed at %s, in the future", kind, p.SignedAt.Format(time.RFC3339))
	}
	at := now
	if p != nil {
		at = p.SignedAt
	}
	id, pub, verdict, rej, done := v.signer(at, kind, p)
	if done {
		return verdict, rej
	}
	if _, ok := SubmitterOf(id); !ok || p.Delegation != nil {
		return Verdict{}, reject(lease.RejectWrongIdentity, "%s must be signed by a submitter's own SVID, not by %s", kind, id)
	}
	if rej := v.content(pub, kind, message, p); rej != nil {
		return Verdict{}, rej
	}
	return Verdict{Signed: true, ID: id}, nil
}

// own judges a message signed with the sender's own SVID, whose ID must
// satisfy is (described by who).
func (v *Verifier) own(now time.Time, kind string, message any, p *Proof, is func(spiffeid.ID) bool, who string) (Verdict, *lease.Rejection) {
	id, pub, verdict, rej, done := v.signer(now, kind, p)
	if done {
		return verdict, rej
	}
	if !is(id) {
		return Verdict{}, reject(lease.RejectWrongIdentity, "%s must be signed by %s, not by %s", kind, who, id)
	}
	if p.Delegation != nil {
		return Verdict{}, reject(lease.RejectWrongIdentity, "%s is signed by an attempt's key, not by %s", kind, who)
	}
	if rej := v.content(pub, kind, message, p); rej != nil {
		return Verdict{}, rej
	}
	switch {
	case p.SignedAt.Before(now.Add(-MaxSignedAge)):
		return Verdict{}, reject(lease.RejectReplayed, "%s signed at %s is older than %s", kind, p.SignedAt.Format(time.RFC3339), MaxSignedAge)
	case p.SignedAt.After(now.Add(MaxSignedAge)):
		return Verdict{}, reject(lease.RejectUnauthenticated, "%s is signed at %s, in the future", kind, p.SignedAt.Format(time.RFC3339))
	}
	return Verdict{Signed: true, ID: id}, nil
}

// Attempt judges message of kind from the attempt c (submit-result, lease
// heartbeat, attempt-failed): the chain verifies at now and is worker
// c.WorkerID's, issued no earlier than registeredWith (the certificate the
// worker registered with when the lease was granted; zero: not checked,
// so a revoked or rotated-away certificate cannot delegate), the worker
// delegated p.Delegation.Key to exactly c and not past now, and that key
// signed the content (message without its proof). Rejections:
// unauthenticated, wrong_identity. A replay of a whole signed message is
// the same claim again: the fence check and the update's ID answer it.
func (v *Verifier) Attempt(now time.Time, kind string, c lease.Claim, registeredWith time.Time, message any, p *Proof) (Verdict, *lease.Rejection) {
	if rej := v.unsignedListed(c.WorkerID, kind, p); rej != nil {
		return Verdict{}, rej
	}
	id, pub, verdict, rej, done := v.signer(now, kind, p)
	if done {
		return verdict, rej
	}
	if got, ok := WorkerOf(id); !ok || got != c.WorkerID {
		return Verdict{}, reject(lease.RejectWrongIdentity, "%s of %s is signed under %s, not worker %q", kind, c, id, c.WorkerID)
	}
	if issued, err := p.IssuedAt(); err != nil || issued.Before(registeredWith) {
		return Verdict{}, reject(lease.RejectUnauthenticated, "%s of %s is delegated under a certificate issued at %s, before the one worker %q registered with (%s): revoked or rotated away",
			kind, c, issued.UTC().Format(time.RFC3339), c.WorkerID, registeredWith.UTC().Format(time.RFC3339))
	}
	d := p.Delegation
	if d == nil {
		return Verdict{}, reject(lease.RejectWrongIdentity, "%s of %s is signed by the worker's key, not by a key delegated to the attempt", kind, c)
	}
	dc, err := d.content()
	if err != nil || !verifySignature(pub, dc, d.Signature) {
		return Verdict{}, reject(lease.RejectUnauthenticated, "%s of %s carries a delegation %s did not sign", kind, c, id)
	}
	if d.Claim != c {
		return Verdict{}, reject(lease.RejectWrongIdentity, "%s of %s is signed with the key of attempt %s", kind, c, d.Claim)
	}
	if now.After(d.NotAfter) {
		return Verdict{}, reject(lease.RejectUnauthenticated, "%s of %s: the attempt's key expired at %s", kind, c, d.NotAfter.Format(time.RFC3339))
	}
	if len(d.Key) != ed25519.PublicKeySize {
		return Verdict{}, reject(lease.RejectUnauthenticated, "%s of %s: the delegated key is not an Ed25519 key", kind, c)
	}
	if rej := v.content(ed25519.PublicKey(d.Key), kind, message, p); rej != nil {
		return Verdict{}, rej
	}
	return Verdict{Signed: true, ID: id}, nil
}

func (v *Verifier) content(pub any, kind string, message any, p *Proof) *lease.Rejection {
	content, err := Content(kind, message, p.SignedAt)
	if err != nil {
		return reject(lease.RejectUnauthenticated, "%v", err)
	}
	if !verifySignature(pub, content, p.Signature) {
		return reject(lease.RejectUnauthenticated, "the signature of %s does not match its content", kind)
	}
	return nil
}
