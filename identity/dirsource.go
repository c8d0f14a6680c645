package identity

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
)

// DirSource is an x509svid.Source over a directory WriteSVID wrote: it
// reads the SVID again whenever svid.pem or svid.key changed, so an agent
// picks up `wdc workers enroll` run again without a restart. A directory
// caught mid-write (a new key beside the old certificate) keeps the SVID
// last read until both files match.
type DirSource struct {
	dir string

	mu      sync.Mutex
	svid    *x509svid.SVID
	bundle  *x509bundle.Bundle // bundle.pem, read with the SVID
	files   [2]os.FileInfo     // svid.pem and svid.key at the last read
	lastErr error
}

// NewDirSource reads the SVID in dir. Errors: the directory holds no
// valid SVID now.
func NewDirSource(dir string) (*DirSource, error) {
	s := &DirSource{dir: dir}
	if _, err := s.GetX509SVID(); err != nil {
		return nil, err
	}
	return s, nil
}

// GetX509SVID returns the directory's current SVID (x509svid.Source).
func (s *DirSource) GetX509SVID() (*x509svid.SVID, error) {
	files, err := s.stat()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.svid != nil && same(files, s.files) {
		return s.svid, nil
	}
	if err == nil {
		var svid *x509svid.SVID
		var bundle *x509bundle.Bundle
		if svid, bundle, err = LoadSVID(s.dir); err == nil {
			s.svid, s.bundle, s.files, s.lastErr = svid, bundle, files, nil
			return svid, nil
		}
	}
	s.lastErr = err
	if s.svid != nil {
		return s.svid, nil
	}
	return nil, err
}

// GetX509BundleForTrustDomain is the trust bundle written beside the SVID
// (bundle.pem), read again with it (x509bundle.Source). Errors: td is not
// the SVID's trust domain, or no SVID was read.
func (s *DirSource) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	if _, err := s.GetX509SVID(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bundle.GetX509BundleForTrustDomain(td)
}

// LastError is the last failed read of the directory (nil once a read
// succeeded again): an SVID left in place by a bad write.
func (s *DirSource) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

func (s *DirSource) stat() ([2]os.FileInfo, error) {
	var files [2]os.FileInfo
	for i, name := range []string{SVIDCertFile, SVIDKeyFile} {
		fi, err := os.Stat(filepath.Join(s.dir, name))
		if err != nil {
			return files, fmt.Errorf("svid in %s: %w", s.dir, err)
		}
		files[i] = fi
	}
	return files, nil
}

// same reports whether both files are unchanged: the same inode (WriteSVID
// renames a new file into place) with the same modification time and size.
func same(a, b [2]os.FileInfo) bool {
	for i := range a {
		if a[i] == nil || b[i] == nil || !os.SameFile(a[i], b[i]) || !a[i].ModTime().Equal(b[i].ModTime()) || a[i].Size() != b[i].Size() {
			return false
		}
	}
	return true
}
