package identity

import (
	"bufio"
	"bytes"
	"context"
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
// (Revocation). Revoked reads memory only (it runs in workflow
// validators); Refresh, or Watch in the background, reads the file again
// when its size or modification time changed and adds what it holds. A
// revocation is never forgotten while the process runs: not when the
// file turns unreadable or malformed, nor when a line is removed or the
// file is read half-written. Safe for concurrent use.
type RevocationFile struct {
	path string

	mu    sync.RWMutex
	stamp [2]int64 // size, mtime in ns
	byID  map[spiffeid.ID]Revocation
}

// OpenRevocationFile reads the list at path. Errors: the file cannot be
// read, or a line is not a Revocation with a SPIFFE ID and a time (named
// by its number).
func OpenRevocationFile(path string) (*RevocationFile, error) {
	f := &RevocationFile{path: path}
	if err := f.Refresh(); err != nil {
		return nil, err
	}
	return f, nil
}

// Revoked returns id's latest revocation in the list last read.
func (f *RevocationFile) Revoked(id spiffeid.ID) (Revocation, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r, ok := f.byID[id]
	return r, ok
}

// Refresh reads the file again if it changed since it was last read; on
// error the list is unchanged.
func (f *RevocationFile) Refresh() error {
	st, err := os.Stat(f.path)
	if err != nil {
		return err
	}
	stamp := [2]int64{st.Size(), st.ModTime().UnixNano()}
	f.mu.RLock()
	same := f.byID != nil && stamp == f.stamp
	f.mu.RUnlock()
	if same {
		return nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return err
	}
	list, err := ParseRevocations(b)
	if err != nil {
		return fmt.Errorf("%s: %w", f.path, err)
	}
	f.mu.Lock()
	if f.byID == nil {
		f.byID = map[spiffeid.ID]Revocation{}
	}
	for id, r := range list {
		if cur, ok := f.byID[id]; !ok || r.RevokedThrough.After(cur.RevokedThrough) {
			f.byID[id] = r
		}
	}
	f.stamp = stamp
	f.mu.Unlock()
	return nil
}

// Watch calls Refresh every interval until ctx is done, and onError with
// each failure that differs from the previous one (nil once it reads
// again).
func (f *RevocationFile) Watch(ctx context.Context, interval time.Duration, onError func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := f.Refresh()
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != last {
			last = msg
			onError(err)
		}
	}
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
