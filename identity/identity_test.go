package identity

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/lease"
)

type msg struct {
	WorkerID string `json:"worker_id"`
	N        int    `json:"n"`
	Proof    *Proof `json:"proof,omitempty"`
}

func signerFor(t *testing.T, iss *Issuer, worker string, ttl time.Duration) *Signer {
	t.Helper()
	svid, err := iss.IssueWorker(worker, ttl)
	require.NoError(t, err)
	s, err := NewSigner(svid)
	require.NoError(t, err)
	return s
}

func reasonOf(rej *lease.Rejection) lease.RejectReason {
	if rej == nil {
		return ""
	}
	return rej.Reason
}

func TestWorkerMessages(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	iss, err := NewIssuer(td)
	require.NoError(t, err)
	other, err := NewIssuer(td) // same trust domain, another root
	require.NoError(t, err)
	now := time.Now()
	a := signerFor(t, iss, "worker-a", time.Hour)
	b := signerFor(t, iss, "worker-b", time.Hour)
	forged := signerFor(t, other, "worker-a", time.Hour)
	expired := signerFor(t, iss, "worker-a", time.Millisecond)

	sign := func(s *Signer, m msg, at time.Time) (msg, *Proof) {
		p, err := s.Sign("register", m, at)
		require.NoError(t, err)
		return m, p
	}
	base := msg{WorkerID: "worker-a", N: 1}
	for _, tc := range []struct {
		name string
		mode Mode
		at   time.Time
		make func() (msg, *Proof)
		want lease.RejectReason
	}{
		{"signed by the worker", ModeRequired, now, func() (msg, *Proof) { return sign(a, base, now) }, ""},
		{"unsigned, required", ModeRequired, now, func() (msg, *Proof) { return base, nil }, lease.RejectUnauthenticated},
		{"unsigned, optional", ModeOptional, now, func() (msg, *Proof) { return base, nil }, ""},
		{"anything, off", ModeOff, now, func() (msg, *Proof) { return base, &Proof{Signature: []byte("x")} }, ""},
		{"bad signature, optional", ModeOptional, now, func() (msg, *Proof) {
			m, p := sign(a, base, now)
			m.N = 2
			return m, p
		}, lease.RejectUnauthenticated},
		{"content changed", ModeRequired, now, func() (msg, *Proof) {
			m, p := sign(a, base, now)
			m.N = 2
			return m, p
		}, lease.RejectUnauthenticated},
		{"another worker's SVID", ModeRequired, now, func() (msg, *Proof) { return sign(b, base, now) }, lease.RejectWrongIdentity},
		{"a root the bundle does not hold", ModeRequired, now, func() (msg, *Proof) { return sign(forged, base, now) }, lease.RejectUnauthenticated},
		{"an expired SVID", ModeRequired, now.Add(time.Minute), func() (msg, *Proof) { return sign(expired, base, now) }, lease.RejectUnauthenticated},
		{"signed long ago (replayed)", ModeRequired, now.Add(MaxSignedAge + time.Second), func() (msg, *Proof) { return sign(a, base, now) }, lease.RejectReplayed},
		{"dated in the future", ModeRequired, now, func() (msg, *Proof) { return sign(a, base, now.Add(MaxSignedAge+time.Second)) }, lease.RejectUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(tc.mode, td, iss.Bundle())
			require.NoError(t, err)
			m, p := tc.make()
			verdict, rej := v.Worker(tc.at, "worker-a", "register", m, p)
			require.Equal(t, tc.want, reasonOf(rej), "%v", rej)
			if rej == nil && tc.mode == ModeRequired {
				require.True(t, verdict.Signed)
				require.Equal(t, "spiffe://wdc.local/wdc/worker/worker-a", verdict.ID.String())
			}
		})
	}
}

func TestAttemptMessages(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	iss, err := NewIssuer(td)
	require.NoError(t, err)
	now := time.Now()
	a := signerFor(t, iss, "worker-a", time.Hour)
	b := signerFor(t, iss, "worker-b", time.Hour)
	claim := lease.Claim{TaskID: "t1", WorkerID: "worker-a", Attempt: 2, Fence: 2, EnvelopeDigest: "sha256:00"}
	old := claim
	old.Attempt, old.Fence = 1, 1
	key, err := a.Delegate(claim, now.Add(time.Hour))
	require.NoError(t, err)
	oldKey, err := a.Delegate(old, now.Add(time.Hour))
	require.NoError(t, err)
	bClaim := claim
	bClaim.WorkerID = "worker-b"
	bKey, err := b.Delegate(bClaim, now.Add(time.Hour))
	require.NoError(t, err)
	shortKey, err := a.Delegate(claim, now.Add(time.Second))
	require.NoError(t, err)
	v, err := NewVerifier(ModeRequired, td, iss.Bundle())
	require.NoError(t, err)

	m := msg{WorkerID: "worker-a", N: 7}
	signed := func(k *AttemptKey) *Proof {
		p, err := k.Sign("submit-result", m, now)
		require.NoError(t, err)
		return p
	}
	workerSigned, err := a.Sign("submit-result", m, now)
	require.NoError(t, err)
	tampered := signed(key)
	d := *tampered.Delegation
	d.Claim.Fence = 9
	tampered.Delegation = &d

	for _, tc := range []struct {
		name string
		at   time.Time
		p    *Proof
		want lease.RejectReason
	}{
		{"the attempt's own key", now, signed(key), ""},
		{"unsigned", now, nil, lease.RejectUnauthenticated},
		{"another attempt's key", now, signed(oldKey), lease.RejectWrongIdentity},
		{"another worker's attempt key", now, signed(bKey), lease.RejectWrongIdentity},
		{"the worker's key, not delegated", now, workerSigned, lease.RejectWrongIdentity},
		{"a delegation edited to another fence", now, tampered, lease.RejectUnauthenticated},
		{"an expired delegation", now.Add(time.Minute), signed(shortKey), lease.RejectUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rej := v.Attempt(tc.at, "submit-result", claim, time.Time{}, m, tc.p)
			require.Equal(t, tc.want, reasonOf(rej), "%v", rej)
		})
	}
	t.Run("a certificate issued before the one the worker registered with", func(t *testing.T) {
		issued, err := signed(key).IssuedAt()
		require.NoError(t, err)
		_, rej := v.Attempt(now, "submit-result", claim, issued, m, signed(key))
		require.Nil(t, rej, "the registration's own certificate")
		_, rej = v.Attempt(now, "submit-result", claim, issued.Add(time.Second), m, signed(key))
		require.Equal(t, lease.RejectUnauthenticated, reasonOf(rej), "revoked or rotated away: %v", rej)
	})
	t.Run("a signature moved to another kind of message", func(t *testing.T) {
		_, rej := v.Attempt(now, "attempt-failed", claim, time.Time{}, m, signed(key))
		require.Equal(t, lease.RejectUnauthenticated, reasonOf(rej))
	})
}

func TestIssuerAndSVIDFiles(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	dir := t.TempDir()
	iss, err := LoadOrCreateIssuer(filepath.Join(dir, "ca"), td)
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, "ca", CAKeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	again, err := LoadOrCreateIssuer(filepath.Join(dir, "ca"), td)
	require.NoError(t, err)
	require.True(t, iss.Bundle().Equal(again.Bundle()), "a second load reads the same root")

	svid, err := again.IssueWorker("worker-a", time.Hour)
	require.NoError(t, err)
	require.NoError(t, WriteSVID(filepath.Join(dir, "a"), svid, again.Bundle()))
	st, err = os.Stat(filepath.Join(dir, "a", SVIDKeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	loaded, bundle, err := LoadSVID(filepath.Join(dir, "a"))
	require.NoError(t, err)
	s, err := NewSigner(loaded)
	require.NoError(t, err)
	p, err := s.Sign("register", msg{WorkerID: "worker-a"}, time.Now())
	require.NoError(t, err)
	v, err := NewVerifier(ModeRequired, td, bundle)
	require.NoError(t, err)
	_, rej := v.Worker(time.Now(), "worker-a", "register", msg{WorkerID: "worker-a"}, p)
	require.Nil(t, rej)

	_, err = NewVerifier(ModeRequired, td, nil)
	require.Error(t, err, "required without a bundle")
	_, err = ParseMode("on")
	require.ErrorContains(t, err, "want off, optional or required")
}

// A DirSource follows `workers enroll` run again into its directory, and
// keeps the SVID it has while the directory is half-written or gone.
func TestDirSourceRereadsTheDirectory(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	iss, err := NewIssuer(td)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "svid")
	_, err = NewDirSource(dir)
	require.Error(t, err, "no SVID yet")

	first, err := iss.IssueWorker("worker-a", time.Hour)
	require.NoError(t, err)
	require.NoError(t, WriteSVID(dir, first, iss.Bundle()))
	src, err := NewDirSource(dir)
	require.NoError(t, err)
	got, err := src.GetX509SVID()
	require.NoError(t, err)
	require.Equal(t, first.Certificates[0].Raw, got.Certificates[0].Raw)

	second, err := iss.IssueWorker("worker-a", time.Hour)
	require.NoError(t, err)
	require.NoError(t, WriteSVID(dir, second, iss.Bundle()))
	got, err = src.GetX509SVID()
	require.NoError(t, err)
	require.Equal(t, second.Certificates[0].Raw, got.Certificates[0].Raw, "the enrolled-again SVID")

	third, err := iss.IssueWorker("worker-a", time.Hour)
	require.NoError(t, err)
	_, key, err := third.Marshal()
	require.NoError(t, err)
	require.NoError(t, writeFile(filepath.Join(dir, SVIDKeyFile), key, 0o600)) // its certificate not written yet
	got, err = src.GetX509SVID()
	require.NoError(t, err)
	require.Equal(t, second.Certificates[0].Raw, got.Certificates[0].Raw, "a key without its certificate is not taken")
	require.Error(t, src.LastError())

	require.NoError(t, os.RemoveAll(dir))
	got, err = src.GetX509SVID()
	require.NoError(t, err)
	require.Equal(t, second.Certificates[0].Raw, got.Certificates[0].Raw)
}

// rotating is an x509svid.Source whose SVID a test replaces.
type rotating struct{ svid *x509svid.SVID }

func (r *rotating) GetX509SVID() (*x509svid.SVID, error) { return r.svid, nil }

// A rotated SVID signs from then on; a key delegated under the old one
// stays good while the old certificate is valid; a root taken out of the
// bundle (revocation by re-keying the trust domain) refuses both.
func TestRotationAndRevocation(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	oldRoot, err := NewIssuer(td)
	require.NoError(t, err)
	newRoot, err := NewIssuer(td)
	require.NoError(t, err)
	first, err := oldRoot.IssueWorker("worker-a", time.Hour)
	require.NoError(t, err)
	src := &rotating{svid: first}
	s := NewSignerFrom(src)
	now := time.Now()
	claim := lease.Claim{TaskID: "t", WorkerID: "worker-a", Attempt: 1, Fence: 1, EnvelopeDigest: "sha256:00"}
	inFlight, err := s.Delegate(claim, time.Time{})
	require.NoError(t, err)

	second, err := newRoot.IssueWorker("worker-a", time.Hour)
	require.NoError(t, err)
	src.svid = second
	both := x509bundle.FromX509Authorities(td, append(oldRoot.Bundle().X509Authorities(), newRoot.Bundle().X509Authorities()...))
	during, err := NewVerifier(ModeRequired, td, both)
	require.NoError(t, err)
	m := msg{WorkerID: "worker-a"}
	p, err := inFlight.Sign("submit-result", m, now)
	require.NoError(t, err)
	_, rej := during.Attempt(now, "submit-result", claim, time.Time{}, m, p)
	require.Nil(t, rej, "the attempt delegated before the rotation still speaks")
	reg, err := s.Sign("register", m, now)
	require.NoError(t, err)
	_, rej = during.Worker(now, "worker-a", "register", m, reg)
	require.Nil(t, rej, "the rotated SVID signs")

	after, err := NewVerifier(ModeRequired, td, newRoot.Bundle())
	require.NoError(t, err)
	_, rej = after.Attempt(now, "submit-result", claim, time.Time{}, m, p)
	require.Equal(t, lease.RejectUnauthenticated, reasonOf(rej), "the old root is revoked")
	_, rej = after.Worker(now, "worker-a", "register", m, reg)
	require.Nil(t, rej)
}

// BenchmarkSignAndVerifyResult prices a signed result: the executor's
// signature with its attempt key, and the validator's check (chain to the
// bundle, delegation, signature).
func BenchmarkSignAndVerifyResult(b *testing.B) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	iss, err := NewIssuer(td)
	require.NoError(b, err)
	svid, err := iss.IssueWorker("worker-a", time.Hour)
	require.NoError(b, err)
	s, err := NewSigner(svid)
	require.NoError(b, err)
	claim := lease.Claim{TaskID: "t", WorkerID: "worker-a", Attempt: 1, Fence: 1, EnvelopeDigest: "sha256:00"}
	key, err := s.Delegate(claim, time.Time{})
	require.NoError(b, err)
	v, err := NewVerifier(ModeRequired, td, iss.Bundle())
	require.NoError(b, err)
	m := msg{WorkerID: "worker-a", N: 1}
	now := time.Now()
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			if _, err := key.Sign("submit-result", m, now); err != nil {
				b.Fatal(err)
			}
		}
	})
	p, err := key.Sign("submit-result", m, now)
	require.NoError(b, err)
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if _, rej := v.Attempt(now, "submit-result", claim, time.Time{}, m, p); rej != nil {
				b.Fatal(rej)
			}
		}
	})
	b.Run("delegate", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Delegate(claim, time.Time{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A bundle source that also holds a federated trust domain's authorities
// (as SPIRE's Workload API may) does not make that domain's identities
// speak for this one's workers.
func TestAnotherTrustDomainIsNotBelieved(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	partnerTD := spiffeid.RequireTrustDomainFromString("partner.org")
	ours, err := NewIssuer(td)
	require.NoError(t, err)
	partner, err := NewIssuer(partnerTD)
	require.NoError(t, err)
	set := x509bundle.NewSet(ours.Bundle(), partner.Bundle())
	v, err := NewVerifier(ModeRequired, td, set)
	require.NoError(t, err)
	now := time.Now()
	m := msg{WorkerID: "worker-a"}
	p, err := signerFor(t, partner, "worker-a", time.Hour).Sign("register", m, now)
	require.NoError(t, err)
	_, rej := v.Worker(now, "worker-a", "register", m, p)
	require.Equal(t, lease.RejectWrongIdentity, reasonOf(rej))
	p, err = signerFor(t, ours, "worker-a", time.Hour).Sign("register", m, now)
	require.NoError(t, err)
	_, rej = v.Worker(now, "worker-a", "register", m, p)
	require.Nil(t, rej)
}

// A signed message survives a JSON round trip (what Temporal's payloads
// do) and still verifies; integers above 2^53 keep distinct signatures.
func TestSignedContentSurvivesJSON(t *testing.T) {
	type message struct {
		Claim   lease.Claim       `json:"claim"`
		At      time.Time         `json:"at"`
		Labels  map[string]string `json:"labels,omitempty"`
		Names   []string          `json:"names"`
		Skipped []string          `json:"skipped,omitempty"`
		Proof   *Proof            `json:"proof,omitempty"`
	}
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	iss, err := NewIssuer(td)
	require.NoError(t, err)
	claim := lease.Claim{TaskID: "t", WorkerID: "worker-a", Attempt: 1, Fence: 1<<53 + 1, EnvelopeDigest: "sha256:00"}
	key, err := signerFor(t, iss, "worker-a", time.Hour).Delegate(claim, time.Time{})
	require.NoError(t, err)
	sent := message{Claim: claim, At: time.Now(), Labels: map[string]string{"b": "2", "a": "1"}, Names: []string{}}
	sent.Proof, err = key.Sign("submit-result", sent, time.Now())
	require.NoError(t, err)
	wire, err := json.Marshal(sent)
	require.NoError(t, err)
	var got message
	require.NoError(t, json.Unmarshal(wire, &got))
	p := got.Proof
	got.Proof = nil
	v, err := NewVerifier(ModeRequired, td, iss.Bundle())
	require.NoError(t, err)
	_, rej := v.Attempt(time.Now(), "submit-result", got.Claim, time.Time{}, got, p)
	require.Nil(t, rej)

	lower := claim
	lower.Fence = 1 << 53
	a, err := Content("k", claim, time.Time{})
	require.NoError(t, err)
	b, err := Content("k", lower, time.Time{})
	require.NoError(t, err)
	require.NotEqual(t, a, b)
}

func TestClockOffsetDatesWhatTheSignerSigns(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	iss, err := NewIssuer(td)
	require.NoError(t, err)
	v, err := NewVerifier(ModeRequired, td, iss.Bundle())
	require.NoError(t, err)
	s := signerFor(t, iss, "worker-a", time.Hour)
	now := time.Now()
	m := msg{WorkerID: "worker-a", N: 1}
	for _, tc := range []struct {
		offset time.Duration
		want   lease.RejectReason
	}{
		{0, ""},
		{-90 * time.Second, ""},
		{MaxSignedAge + time.Minute, lease.RejectUnauthenticated}, // in the future
		{-MaxSignedAge - time.Minute, lease.RejectReplayed},
	} {
		s.ClockOffset = func() time.Duration { return tc.offset }
		p, err := s.Sign("register", m, now)
		require.NoError(t, err)
		require.WithinDuration(t, now.Add(tc.offset), p.SignedAt, time.Millisecond, "offset %s", tc.offset)
		_, rej := v.Worker(now, "worker-a", "register", m, p)
		require.Equal(t, tc.want, reasonOf(rej), "offset %s: %v", tc.offset, rej)

		claim := lease.Claim{TaskID: "t", WorkerID: "worker-a", Attempt: 1, Fence: 1, EnvelopeDigest: "sha256:00"}
		p, err = s.ForAttempt(claim).Sign("submit-result", m, now)
		require.NoError(t, err)
		require.WithinDuration(t, now.Add(tc.offset), p.SignedAt, time.Millisecond, "an attempt's key, offset %s", tc.offset)
	}
}

func TestRevocationListRefusesWhatItRevokes(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	iss, err := NewIssuer(td)
	require.NoError(t, err)
	old := signerFor(t, iss, "worker-a", time.Hour)
	other := signerFor(t, iss, "worker-b", time.Hour)
	path := filepath.Join(t.TempDir(), "revoked.jsonl")
	require.NoError(t, os.WriteFile(path, []byte("# revocations\n\n"), 0o644))
	list, err := OpenRevocationFile(path)
	require.NoError(t, err)
	v, err := NewVerifier(ModeRequired, td, iss.Bundle())
	require.NoError(t, err)
	v.Revocations = list

	now := time.Now()
	claim := lease.Claim{TaskID: "t", WorkerID: "worker-a", Attempt: 1, Fence: 1, EnvelopeDigest: "sha256:x"}
	key, err := old.Delegate(claim, now.Add(time.Hour))
	require.NoError(t, err)
	judge := func(s *Signer) (*lease.Rejection, *lease.Rejection) {
		m := msg{WorkerID: "worker-a", N: 1}
		p, err := s.Sign("register", m, time.Now())
		require.NoError(t, err)
		_, own := v.Worker(time.Now(), s.ID().Path()[len("/wdc/worker/"):], "register", m, p)
		p, err = key.Sign("submit-result", m, time.Now())
		require.NoError(t, err)
		_, att := v.Attempt(time.Now(), "submit-result", claim, time.Time{}, m, p)
		return own, att
	}
	own, att := judge(old)
	require.Nil(t, own)
	require.Nil(t, att)

	id, err := WorkerID(td, "worker-a")
	require.NoError(t, err)
	// As `workers revoke` writes it: through the backdate of a certificate
	// issued now.
	line, err := json.Marshal(Revocation{SPIFFEID: id.String(), RevokedThrough: time.Now().Add(-Backdate), Reason: "key leaked"})
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.Write(append(line, '\n'))
	require.NoError(t, err)
	require.NoError(t, f.Close())

	own, _ = judge(old)
	require.Nil(t, own, "not read again yet")
	require.NoError(t, list.Refresh())
	own, att = judge(old)
	require.Equal(t, lease.RejectUnauthenticated, reasonOf(own), "the worker's own certificate")
	require.Contains(t, own.Message, "was revoked through")
	require.Equal(t, lease.RejectUnauthenticated, reasonOf(att), "a key it delegated")
	own, _ = judge(other)
	require.Nil(t, own, "another worker is not revoked")

	// Optional identity accepts unsigned messages, but not a listed
	// worker's.
	optional, err := NewVerifier(ModeOptional, td, iss.Bundle())
	require.NoError(t, err)
	optional.Revocations = list
	_, rej := optional.Worker(time.Now(), "worker-a", "register", msg{WorkerID: "worker-a"}, nil)
	require.Equal(t, lease.RejectUnauthenticated, reasonOf(rej))
	require.Contains(t, rej.Message, "on the revocation list")
	_, rej = optional.Attempt(time.Now(), "submit-result", claim, time.Time{}, msg{}, nil)
	require.Equal(t, lease.RejectUnauthenticated, reasonOf(rej))
	_, rej = optional.Worker(time.Now(), "worker-b", "register", msg{WorkerID: "worker-b"}, nil)
	require.Nil(t, rej)

	// A malformed list keeps the revocations it had.
	require.NoError(t, os.WriteFile(path, []byte("{not json\n"), 0o644))
	require.ErrorContains(t, list.Refresh(), "line 1")
	own, _ = judge(old)
	require.Equal(t, lease.RejectUnauthenticated, reasonOf(own))

	// A certificate issued after the revocation is believed.
	time.Sleep(1100 * time.Millisecond) // certificate times have whole seconds
	own, _ = judge(signerFor(t, iss, "worker-a", time.Hour))
	require.Nil(t, own, "enrolled again")
}

func TestParseRevocationsNamesTheBadLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"spiffe_id":"spiffe://wdc.local/wdc/worker/a"}`, "line 1: revoked_through: required"},
		{"\n" + `{"spiffe_id":"not an id","revoked_through":"2026-01-01T00:00:00Z"}`, `line 2: spiffe_id "not an id"`},
		{`{"spiffe_id":"spiffe://wdc.local/wdc/worker/a","revoked_through":"2026-01-01T00:00:00Z","extra":1}`, `line 1: json: unknown field "extra"`},
	} {
		_, err := ParseRevocations([]byte(tc.in))
		require.ErrorContains(t, err, tc.want)
	}
	list, err := ParseRevocations([]byte(`{"spiffe_id":"spiffe://wdc.local/wdc/worker/a","revoked_through":"2026-02-01T00:00:00Z"}
{"spiffe_id":"spiffe://wdc.local/wdc/worker/a","revoked_through":"2026-01-01T00:00:00Z"}`))
	require.NoError(t, err)
	require.Equal(t, 2026, list[spiffeid.RequireFromString("spiffe://wdc.local/wdc/worker/a")].RevokedThrough.Year())
	require.Equal(t, time.February, list[spiffeid.RequireFromString("spiffe://wdc.local/wdc/worker/a")].RevokedThrough.Month(), "the latest revocation counts")
}

func TestRevocationFileWatchReadsChangesAndSaysWhatFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "revoked.jsonl")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	list, err := OpenRevocationFile(path)
	require.NoError(t, err)
	errs := make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go list.Watch(ctx, 5*time.Millisecond, func(err error) { errs <- err })

	id := spiffeid.RequireFromString("spiffe://wdc.local/wdc/worker/a")
	require.NoError(t, os.WriteFile(path, []byte(`{"spiffe_id":"spiffe://wdc.local/wdc/worker/a","revoked_through":"2026-01-01T00:00:00Z"}`+"\n"), 0o644))
	require.Eventually(t, func() bool { _, ok := list.Revoked(id); return ok }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, os.WriteFile(path, []byte("oops\n"), 0o644))
	require.ErrorContains(t, <-errs, "line 1")
	_, ok := list.Revoked(id)
	require.True(t, ok, "kept")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	require.NoError(t, <-errs, "read again")
	_, ok = list.Revoked(id)
	require.True(t, ok, "a line taken out is not forgotten while the process runs")
}

func TestAuthorityIsJudgedAtItsSigningTime(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(DefaultTrustDomain)
	iss, err := NewIssuer(td)
	require.NoError(t, err)
	other, err := NewIssuer(td)
	require.NoError(t, err)
	submitter := func(iss *Issuer, name string, ttl time.Duration) *Signer {
		id, err := SubmitterID(td, name)
		require.NoError(t, err)
		svid, err := iss.Issue(id, ttl)
		require.NoError(t, err)
		s, err := NewSigner(svid)
		require.NoError(t, err)
		return s
	}
	alice := submitter(iss, "alice", time.Minute)
	forged := submitter(other, "alice", time.Hour)
	worker := signerFor(t, iss, "worker-a", time.Hour)
	now := time.Now()
	base := msg{WorkerID: "task-1", N: 1}
	sign := func(s *Signer, m msg, at time.Time) (msg, *Proof) {
		p, err := s.Sign("task-authority", m, at)
		require.NoError(t, err)
		return m, p
	}
	for _, tc := range []struct {
		name string
		at   time.Time
		make func() (msg, *Proof)
		want lease.RejectReason
	}{
		{"signed by a submitter", now, func() (msg, *Proof) { return sign(alice, base, now) }, ""},
		{"judged an hour later, after the SVID expired", now.Add(time.Hour), func() (msg, *Proof) { return sign(alice, base, now) }, ""},
		{"unsigned", now, func() (msg, *Proof) { return base, nil }, lease.RejectUnauthenticated},
		{"content changed", now, func() (msg, *Proof) {
			m, p := sign(alice, base, now)
			m.N = 2
			return m, p
		}, lease.RejectUnauthenticated},
		{"signed by a worker", now, func() (msg, *Proof) { return sign(worker, base, now) }, lease.RejectWrongIdentity},
		{"a root the bundle does not hold", now, func() (msg, *Proof) { return sign(forged, base, now) }, lease.RejectUnauthenticated},
		{"dated after its SVID expired", now.Add(2 * time.Hour), func() (msg, *Proof) { return sign(alice, base, now.Add(2*time.Hour)) }, lease.RejectUnauthenticated},
		{"dated in the future", now, func() (msg, *Proof) { return sign(alice, base, now.Add(MaxSignedAge+time.Second)) }, lease.RejectUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewVerifier(ModeRequired, td, iss.Bundle())
			require.NoError(t, err)
			m, p := tc.make()
			verdict, rej := v.Authority(tc.at, "task-authority", m, p)
			require.Equal(t, tc.want, reasonOf(rej), "%v", rej)
			if rej == nil {
				require.Equal(t, "spiffe://wdc.local/wdc/submitter/alice", verdict.ID.String())
			}
		})
	}
}
