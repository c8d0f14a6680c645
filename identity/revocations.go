package identity

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Revocation revokes every certificate of one SPIFFE ID issued (NotBefore)
// at or before RevokedThrough: one line of a revocation list, as
// `wdc workers revoke --revocations FILE` appends it.
type Revocation struct {
	SPIFFEID       string    `json:"spiffe_id"`
	RevokedThrough time.Time `json:"revoked_through"`
	Reason         string    `json:"reason,omitempty"`
}

// Refuses reports whether r refuses a certificate whose NotBefore is
// notBefore.
func (r Revocation) Refuses(notBefore time.Time) bool { return !notBefore.After(r.RevokedThrough) }

// Revocations is what a Verifier consults beside the bundle: the latest
// revocation of id, if any.
type Revocations interface {
	Revoked(id spiffeid.ID) (Revocation, bool)
}

// RevocationFile is a revocation list kept in a file of JSON lines
// (Revocation), read again whenever its size or modification time
// changes. A file that becomes unreadable or malformed keeps the list last
// read (a revocation is never forgotten) and LastError says why. Safe for
// concurrent use.
type RevocationFile struct {
	path string

	mu      sync.Mutex
	stamp   [2]int64 // size, mtime in ns
	byID    map[spiffeid.ID]Revocation
	lastErr error
}

// OpenRevocationFile reads the list at path. Errors: the file cannot be
// read, or a line is not a Revocation with a SPIFFE ID and a time (named
// by its number).
func OpenRevocationFile(path string) (*RevocationFile, error) {
	f := &RevocationFile{path: path}
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := f.load(st); err != nil {
		return nil, err
	}
	return f, nil
}

// Revoked returns id's latest revocation in the file.
func (f *RevocationFile) Revoked(id spiffeid.ID) (Revocation, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st, err := os.Stat(f.path); err != nil {
		f.lastErr = err
	} else if stampOf(st) != f.stamp {
		if err := f.load(st); err != nil {
			f.lastErr = err
		}
	}
	r, ok := f.byID[id]
	return r, ok
}

// LastError is the last failure to read the file again (nil after a
// successful read).
func (f *RevocationFile) LastError() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastErr
}

func stampOf(st os.FileInfo) [2]int64 { return [2]int64{st.Size(), st.ModTime().UnixNano()} }

// load reads the whole file; on error the list is unchanged.
func (f *RevocationFile) load(st os.FileInfo) error {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return err
	}
	list, err := ParseRevocations(b)
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	f.byID, f.stamp, f.lastErr = list, stampOf(st), nil
	return nil
}

// ParseRevocations reads JSON lines of Revocation (blank lines and lines
// starting with # are skipped) into each ID's latest revocation.
func ParseRevocations(b []byte) (map[spiffeid.ID]Revocation, error) {
	list := map[spiffeid.ID]Revocation{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		var r Revocation
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		id, err := spiffeid.FromString(r.SPIFFEID)
		if err != nil {
			return nil, fmt.Errorf("line %d: spiffe_id %q: %w", n, r.SPIFFEID, err)
		}
		if r.RevokedThrough.IsZero() {
			return nil, fmt.Errorf("line %d: revoked_through: required", n)
		}
		if cur, ok := list[id]; !ok || r.RevokedThrough.After(cur.RevokedThrough) {
			list[id] = r
		}
	}
	return list, sc.Err()
}
