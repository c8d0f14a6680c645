package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"github.com/wdc-runtime/wdc/lease"
)

// Proof is what a signed message carries: the signer's X.509-SVID, for an
// attempt's message the key its worker delegated to it, and a signature
// over the message's exact content (Content).
type Proof struct {
	// Chain is the worker's X.509-SVID, leaf first (DER).
	Chain [][]byte `json:"chain"`
	// Delegation is set on an attempt's messages: Signature is then by
	// Delegation.Key, which the chain's leaf delegated.
	Delegation *Delegation `json:"delegation,omitempty"`
	// SignedAt is when the signer signed, by its clock (UTC, milliseconds).
	SignedAt time.Time `json:"signed_at"`
	// Signature is over Content(kind, message, SignedAt).
	Signature []byte `json:"signature"`
}

// Delegation is a worker's grant of an Ed25519 key to one attempt: the key
// speaks only for Claim (task, worker, attempt, fence, envelope digest)
// and only until NotAfter.
type Delegation struct {
	Claim lease.Claim `json:"claim"`
	// Key is the attempt's Ed25519 public key (32 bytes).
	Key []byte `json:"key"`
	// NotAfter ends the delegation; it never outlives the worker's SVID.
	NotAfter time.Time `json:"not_after"`
	// Signature is the worker's, by its SVID's key, over the fields above.
	Signature []byte `json:"signature"`
}

// Content is the bytes a Proof signs: a domain label, the message's kind
// (its update or signal name), the signing time, and encoding/json's
// encoding of the message without its proof. Signer and verifier encode
// the same Go type, whose encoding is deterministic (fields in order, map
// keys sorted) and survives Temporal's JSON payloads unchanged; integers
// stay exact, where a float64-based canonical form (RFC 8785) would let
// two fences above 2^53 share one signature. Errors: message does not
// marshal.
func Content(kind string, message any, signedAt time.Time) ([]byte, error) {
	raw, err := json.Marshal(message)
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", kind, err)
	}
	head := "wdc-signed-message/v1\x00" + kind + "\x00" + signedAt.UTC().Format(time.RFC3339Nano) + "\x00"
	return append([]byte(head), raw...), nil
}

func (d Delegation) content() ([]byte, error) {
	d.Signature = nil
	return Content("delegation", d, d.NotAfter)
}

// signingTime is t as a Proof carries it (UTC, milliseconds), so that it
// survives JSON unchanged.
func signingTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// Signer signs as a fleet worker with its X.509-SVID, the current one of
// its source: a SPIRE agent's Workload API (workloadapi.X509Source)
// rotates it, a fixed SVID never changes.
type Signer struct {
	src x509svid.Source
	// ClockOffset, when set, is added to every time the signer signs at
	// (Sign, and ForAttempt's keys): how far its wall clock is off. Nil
	// in production; a test plays a skewed clock with it.
	ClockOffset func() time.Duration
}

// NewSigner returns a signer for a fixed svid. Errors: no certificate or
// no key.
func NewSigner(svid *x509svid.SVID) (*Signer, error) {
	if svid == nil || len(svid.Certificates) == 0 || svid.PrivateKey == nil {
		return nil, errors.New("identity: an SVID with a certificate and a key is required")
	}
	return &Signer{src: svid}, nil
}

// NewSignerFrom returns a signer that signs with src's current SVID.
func NewSignerFrom(src x509svid.Source) *Signer { return &Signer{src: src} }

// current is the source's SVID and its chain (DER).
func (s *Signer) current() (*x509svid.SVID, [][]byte, error) {
	svid, err := s.src.GetX509SVID()
	if err != nil {
		return nil, nil, fmt.Errorf("identity: no X.509-SVID: %w", err)
	}
	chain := make([][]byte, 0, len(svid.Certificates))
	for _, c := range svid.Certificates {
		chain = append(chain, c.Raw)
	}
	return svid, chain, nil
}

// Verifier is a verifier in mode, in the signer's trust domain, over the
// trust bundle that comes with its SVID source (a Workload API source, or
// a DirSource's bundle.pem). Errors: the source carries no bundle, or it
// has no SVID now.
func (s *Signer) Verifier(mode Mode) (*Verifier, error) {
	b, ok := s.src.(x509bundle.Source)
	if !ok {
		return nil, errors.New("identity: this SVID source carries no trust bundle")
	}
	id := s.ID()
	if id.IsZero() {
		return nil, errors.New("identity: no X.509-SVID to take the trust domain from")
	}
	return NewVerifier(mode, id.TrustDomain(), b)
}

// ID is the signer's SPIFFE ID (zero when its source has no SVID).
func (s *Signer) ID() spiffeid.ID {
	svid, _, err := s.current()
	if err != nil {
		return spiffeid.ID{}
	}
	return svid.ID
}

// Sign signs message of kind at time at.
func (s *Signer) Sign(kind string, message any, at time.Time) (*Proof, error) {
	svid, chain, err := s.current()
	if err != nil {
		return nil, err
	}
	at = signingTime(s.clock(at))
	content, err := Content(kind, message, at)
	if err != nil {
		return nil, err
	}
	sig, err := signWith(svid.PrivateKey, content)
	if err != nil {
		return nil, err
	}
	return &Proof{Chain: chain, SignedAt: at, Signature: sig}, nil
}

// clock is at as the signer's clock tells it.
func (s *Signer) clock(at time.Time) time.Time {
	if s.ClockOffset == nil {
		return at
	}
	return at.Add(s.ClockOffset())
}

// Delegate makes a new Ed25519 key for the attempt c and signs its
// delegation, valid until notAfter (at most the SVID's expiry).
func (s *Signer) Delegate(c lease.Claim, notAfter time.Time) (*AttemptKey, error) {
	svid, chain, err := s.current()
	if err != nil {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	if na := svid.Certificates[0].NotAfter; notAfter.IsZero() || notAfter.After(na) {
		notAfter = na
	}
	d := Delegation{Claim: c, Key: pub, NotAfter: signingTime(notAfter)}
	content, err := d.content()
	if err != nil {
		return nil, err
	}
	if d.Signature, err = signWith(svid.PrivateKey, content); err != nil {
		return nil, err
	}
	return &AttemptKey{Chain: chain, Delegation: d, Key: priv}, nil
}

// AttemptSigner signs an attempt's messages: an AttemptKey, or a Signer's
// ForAttempt.
type AttemptSigner interface {
	Sign(kind string, message any, at time.Time) (*Proof, error)
}

// ForAttempt signs for the attempt c with a key delegated at each signing
// under the signer's current SVID, so an attempt that outlives one SVID
// (SPIRE rotates them hourly) still signs under a valid one. For an
// executor in the agent's own process (Local).
func (s *Signer) ForAttempt(c lease.Claim) AttemptSigner { return liveAttempt{s: s, c: c} }

type liveAttempt struct {
	s *Signer
	c lease.Claim
}

func (l liveAttempt) Sign(kind string, message any, at time.Time) (*Proof, error) {
	k, err := l.s.Delegate(l.c, time.Time{})
	if err != nil {
		return nil, err
	}
	return k.Sign(kind, message, l.s.clock(at))
}

// AttemptKey is an attempt's delegated key, what its executor signs with.
// It is a credential: it travels to an external executor only in a file
// readable by that executor alone. It is good until its delegation's
// NotAfter, at most the SVID's expiry at launch.
type AttemptKey struct {
	Chain      [][]byte           `json:"chain"`
	Delegation Delegation         `json:"delegation"`
	Key        ed25519.PrivateKey `json:"key"`
}

// Sign signs message of kind at time at with the attempt's key.
func (k *AttemptKey) Sign(kind string, message any, at time.Time) (*Proof, error) {
	at = signingTime(at)
	content, err := Content(kind, message, at)
	if err != nil {
		return nil, err
	}
	d := k.Delegation
	return &Proof{Chain: k.Chain, Delegation: &d, SignedAt: at, Signature: ed25519.Sign(k.Key, content)}, nil
}

func signWith(key crypto.Signer, content []byte) ([]byte, error) {
	if _, ok := key.Public().(ed25519.PublicKey); ok {
		return key.Sign(rand.Reader, content, crypto.Hash(0))
	}
	sum := sha256.Sum256(content)
	return key.Sign(rand.Reader, sum[:], crypto.SHA256)
}

// verifySignature checks sig over content by pub (ECDSA with SHA-256, or
// Ed25519).
func verifySignature(pub any, content, sig []byte) bool {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(content)
		return ecdsa.VerifyASN1(k, sum[:], sig)
	case ed25519.PublicKey:
		return ed25519.Verify(k, content, sig)
	}
	return false
}

// SignerID is the SPIFFE ID the proof's leaf certificate names, unverified:
// what a Verifier accepted it as, once it did.
func (p *Proof) SignerID() (spiffeid.ID, error) {
	leaf, err := p.leaf()
	if err != nil {
		return spiffeid.ID{}, err
	}
	return x509svid.IDFromCert(leaf)
}

// IssuedAt is the NotBefore of the proof's leaf certificate, unverified:
// when the identity a Verifier accepted was issued, once it did.
func (p *Proof) IssuedAt() (time.Time, error) {
	leaf, err := p.leaf()
	if err != nil {
		return time.Time{}, err
	}
	return leaf.NotBefore, nil
}

// leaf parses the chain's first certificate, unverified.
func (p *Proof) leaf() (*x509.Certificate, error) {
	if p == nil || len(p.Chain) == 0 {
		return nil, errors.New("identity: no certificate")
	}
	return x509.ParseCertificate(p.Chain[0])
}
