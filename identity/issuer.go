package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// Files of an issuer's directory and of an SVID directory.
const (
	// CACertFile is the issuer's root certificate: the trust bundle (PEM).
	CACertFile = "ca.pem"
	// CAKeyFile is the issuer's root key (PKCS #8 PEM, mode 0600).
	CAKeyFile = "ca.key"
	// SVIDCertFile is an SVID's certificate chain, leaf first (PEM).
	SVIDCertFile = "svid.pem"
	// SVIDKeyFile is an SVID's private key (PKCS #8 PEM, mode 0600).
	SVIDKeyFile = "svid.key"
	// BundleFile is the trust bundle beside an SVID (PEM).
	BundleFile = "bundle.pem"
)

// DefaultSVIDTTL is how long an SVID the issuer writes for `wdc workers
// enroll` stays valid: re-enroll (rotate) before then.
const DefaultSVIDTTL = 30 * 24 * time.Hour

// Issuer is a certificate authority of one trust domain that issues
// X.509-SVIDs: start-dev's, the demo's and the tests'. Its key never
// leaves it or its directory.
type Issuer struct {
	td   spiffeid.TrustDomain
	cert *x509.Certificate
	key  crypto.Signer
}

// Backdate is how far before its issue an Issuer's certificate is valid
// (NotBefore), for clocks behind the issuer's.
const Backdate = time.Minute

// NewIssuer returns an issuer with a new ECDSA P-256 root, valid ten years.
func NewIssuer(td spiffeid.TrustDomain) (*Issuer, error) {
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"wdc"}, CommonName: "wdc root " + td.Name()},
		URIs:                  []*urlT{td.ID().URL()},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	cert, key, err := certify(tmpl, nil, nil)
	if err != nil {
		return nil, err
	}
	return &Issuer{td: td, cert: cert, key: key}, nil
}

// LoadOrCreateIssuer reads the issuer kept in dir (CACertFile, CAKeyFile),
// or creates one there (the key with mode 0600, the directory 0700).
func LoadOrCreateIssuer(dir string, td spiffeid.TrustDomain) (*Issuer, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		iss, err := NewIssuer(td)
		if err != nil {
			return nil, err
		}
		return iss, iss.save(dir)
	}
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	certs, err := parseCerts(certPEM)
	if err != nil || len(certs) != 1 {
		return nil, fmt.Errorf("%s: want one PEM certificate: %v", certPath, err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	id, err := x509svid.IDFromCert(certs[0])
	if err != nil || id.TrustDomain() != td {
		return nil, fmt.Errorf("%s: not the root of trust domain %s", certPath, td)
	}
	return &Issuer{td: td, cert: certs[0], key: key}, nil
}

func (i *Issuer) save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	keyPEM, err := marshalKey(i.key)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, CACertFile), certPEM(i.cert), 0o644)
}

// TrustDomain is the issuer's trust domain.
func (i *Issuer) TrustDomain() spiffeid.TrustDomain { return i.td }

// Bundle is the trust bundle that verifies what the issuer issues.
func (i *Issuer) Bundle() *x509bundle.Bundle {
	return x509bundle.FromX509Authorities(i.td, []*x509.Certificate{i.cert})
}

// Issue returns a new X.509-SVID for id with a new ECDSA P-256 key, valid
// for ttl from now (a minute earlier, for clock skew).
func (i *Issuer) Issue(id spiffeid.ID, ttl time.Duration) (*x509svid.SVID, error) {
	if !id.MemberOf(i.td) {
		return nil, fmt.Errorf("%s is not in trust domain %s", id, i.td)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"wdc"}},
		URIs:         []*urlT{id.URL()},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	cert, key, err := certify(tmpl, i.cert, i.key)
	if err != nil {
		return nil, err
	}
	return &x509svid.SVID{ID: id, Certificates: []*x509.Certificate{cert}, PrivateKey: key}, nil
}

// IssueServer is Issue for TemporalServerID, also naming hosts (IP
// addresses or DNS names) as the certificate's subject alternative names:
// a Temporal frontend's serving certificate, which its own system worker
// also presents as a client.
func (i *Issuer) IssueServer(hosts []string, ttl time.Duration) (*x509svid.SVID, error) {
	id := TemporalServerID(i.td)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"wdc"}, CommonName: "temporal frontend"},
		URIs:         []*urlT{id.URL()},
		NotBefore:    now.Add(-Backdate),
		NotAfter:     now.Add(ttl),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	cert, key, err := certify(tmpl, i.cert, i.key)
	if err != nil {
		return nil, err
	}
	return &x509svid.SVID{ID: id, Certificates: []*x509.Certificate{cert}, PrivateKey: key}, nil
}

// IssueWorker is Issue for fleet worker id's SPIFFE ID.
func (i *Issuer) IssueWorker(id string, ttl time.Duration) (*x509svid.SVID, error) {
	sid, err := WorkerID(i.td, id)
	if err != nil {
		return nil, fmt.Errorf("worker id %q: %w", id, err)
	}
	return i.Issue(sid, ttl)
}

// WriteSVID writes svid and the bundle into dir (SVIDCertFile, SVIDKeyFile
// with mode 0600, BundleFile), replacing what was there: what `wdc workers
// enroll` leaves for an agent's --svid-dir.
func WriteSVID(dir string, svid *x509svid.SVID, bundle *x509bundle.Bundle) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	certs, key, err := svid.Marshal()
	if err != nil {
		return err
	}
	bundlePEM, err := bundle.Marshal()
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, SVIDKeyFile), key, 0o600); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, SVIDCertFile), certs, 0o644); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, BundleFile), bundlePEM, 0o644)
}

// LoadSVID reads what WriteSVID wrote. The bundle's trust domain is the
// SVID's.
func LoadSVID(dir string) (*x509svid.SVID, *x509bundle.Bundle, error) {
	svid, err := x509svid.Load(filepath.Join(dir, SVIDCertFile), filepath.Join(dir, SVIDKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("svid in %s: %w", dir, err)
	}
	bundle, err := x509bundle.Load(svid.ID.TrustDomain(), filepath.Join(dir, BundleFile))
	if err != nil {
		return nil, nil, fmt.Errorf("trust bundle in %s: %w", dir, err)
	}
	return svid, bundle, nil
}

// LoadBundle reads a PEM trust bundle (the issuer's CACertFile, or a SPIRE
// bundle) for trust domain td.
func LoadBundle(td spiffeid.TrustDomain, path string) (*x509bundle.Bundle, error) {
	return x509bundle.Load(td, path)
}

type urlT = url.URL

// certify makes a new ECDSA P-256 key and its certificate from tmpl,
// signed by parent's key (self-signed when parent is nil).
func certify(tmpl, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func marshalKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseKey(b []byte) (crypto.Signer, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("no PEM private key")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	return s, nil
}

// writeFile writes b to path through a temporary file and a rename, so a
// reader never sees half a key.
func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
