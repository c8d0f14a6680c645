package blobstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/wdc-runtime/wdc/internal/envelope"
)

// Store is a blob store rooted at a data directory. Safe for concurrent use
// by several processes on one filesystem (writes are rename-atomic).
type Store struct {
	root string
}

// ErrDigestMismatch: content did not hash to the declared digest.
var ErrDigestMismatch = errors.New("digest mismatch")

// ErrNotFound: no blob or staged file with that name.
var ErrNotFound = errors.New("not found")

// DigestBytes is the content digest of b: "sha256:" + hex SHA-256.
func DigestBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// HashFile returns the content digest and size of the file at path without
// storing it.
func HashFile(path string) (digest string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	if size, err = io.Copy(h, f); err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), size, nil
}

// Open returns the store at dataDir, creating its directories.
func Open(dataDir string) (*Store, error) {
	if dataDir == "" {
		return nil, errors.New("blob store: data dir is empty")
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	for _, d := range []string{"blobs/sha256", "staging", "tmp"} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, fmt.Errorf("blob store: %w", err)
		}
	}
	return &Store{root: abs}, nil
}

// Root is the data directory.
func (s *Store) Root() string { return s.root }

// BlobPath is where the blob with digest ("sha256:<hex>") lives. Errors: a
// malformed digest.
func (s *Store) BlobPath(digest string) (string, error) {
	if !envelope.DigestPattern.MatchString(digest) {
		return "", fmt.Errorf("blob store: %q is not a sha256 digest", digest)
	}
	hexd := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(s.root, "blobs", "sha256", hexd[:2], hexd), nil
}

// Has reports whether the blob exists.
func (s *Store) Has(digest string) bool {
	p, err := s.BlobPath(digest)
	if err != nil {
		return false
	}
	_, err = os.Stat(p)
	return err == nil
}

// Put stores r's bytes and returns their digest and size. Storing content
// that is already present is a no-op.
func (s *Store) Put(r io.Reader) (digest string, size int64, err error) {
	tmp, err := os.CreateTemp(filepath.Join(s.root, "tmp"), "put-*")
	if err != nil {
		return "", 0, fmt.Errorf("blob store: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	size, err = io.Copy(io.MultiWriter(tmp, h), r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", 0, fmt.Errorf("blob store: write: %w", err)
	}
	digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return digest, size, s.install(tmp.Name(), digest)
}

// PutFile stores the file at path.
func (s *Store) PutFile(path string) (digest string, size int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	return s.Put(f)
}

// Promote copies the file at src into the store, hashing while copying, and
// keeps it only when it hashes to want. Errors: ErrNotFound when src is
// missing, ErrDigestMismatch (wrapped, with both digests), or an error for a
// src that is not a regular file (a symlink is refused, never followed).
func (s *Store) Promote(src, want string) (size int64, err error) {
	if _, err := s.BlobPath(want); err != nil {
		return 0, err
	}
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%s: %w", src, ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: not a regular file (%s)", src, fi.Mode().Type())
	}
	f, err := os.OpenFile(src, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	tmp, err := os.CreateTemp(filepath.Join(s.root, "tmp"), "promote-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	size, err = io.Copy(io.MultiWriter(tmp, h), f)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("promote %s: %w", src, err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if got != want {
		return 0, fmt.Errorf("%s: %w: declared %s, content is %s", src, ErrDigestMismatch, want, got)
	}
	return size, s.install(tmp.Name(), want)
}

// install renames a complete, synced temp file into place as digest.
func (s *Store) install(tmpPath, digest string) error {
	dst, err := s.BlobPath(digest)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dst); err == nil {
		return nil // content-addressed: already there
	}
	dir := filepath.Dir(dst)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(tmpPath, 0o444); err != nil {
		return err
	}
	if err := os.Rename(tmpPath, dst); err != nil {
		return fmt.Errorf("blob store: install %s: %w", digest, err)
	}
	return syncDir(dir)
}

// Open opens a blob for reading. Errors: ErrNotFound.
func (s *Store) Open(digest string) (*os.File, error) {
	p, err := s.BlobPath(digest)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", digest, ErrNotFound)
	}
	return f, err
}

// CopyTo writes the blob to dst atomically (temp + fsync + rename),
// verifying its hash on the way. dst's directory must exist.
func (s *Store) CopyTo(digest, dst string, mode os.FileMode) error {
	src, err := s.Open(digest)
	if err != nil {
		return err
	}
	defer src.Close()
	return WriteFileAtomic(dst, mode, func(w io.Writer) error {
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(w, h), src); err != nil {
			return err
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
			return fmt.Errorf("blob %s: %w: content is %s (store corrupted?)", digest, ErrDigestMismatch, got)
		}
		return nil
	})
}

// StagingDir is where attempt (attempt, fence) of taskID stages outputs:
// <data-dir>/staging/<task>/<attempt>-<fence>. taskID must be a valid ID
// (fleet.IDPattern), which the workflows guarantee.
func (s *Store) StagingDir(taskID string, attempt, fence int64) string {
	return filepath.Join(s.TaskStagingDir(taskID), strconv.FormatInt(attempt, 10)+"-"+strconv.FormatInt(fence, 10))
}

// TaskStagingDir is <data-dir>/staging/<task>.
func (s *Store) TaskStagingDir(taskID string) string {
	return filepath.Join(s.root, "staging", filepath.Base(taskID))
}

// LogStagingDir is where an attempt stages its stdout.log and stderr.log:
// <data-dir>/staging/<task>/<attempt>-<fence>.logs (beside the outputs, so
// no output name can collide with them).
func (s *Store) LogStagingDir(taskID string, attempt, fence int64) string {
	return s.StagingDir(taskID, attempt, fence) + ".logs"
}

// RemoveStaging deletes an attempt's staging directories (outputs, logs).
func (s *Store) RemoveStaging(taskID string, attempt, fence int64) error {
	if err := os.RemoveAll(s.LogStagingDir(taskID, attempt, fence)); err != nil {
		return err
	}
	return os.RemoveAll(s.StagingDir(taskID, attempt, fence))
}

// RemoveTaskStaging deletes every attempt's staging of a task.
func (s *Store) RemoveTaskStaging(taskID string) error {
	return os.RemoveAll(s.TaskStagingDir(taskID))
}

// WriteFileAtomic writes path via a temp file in the same directory: write,
// fsync, rename, fsync the directory. On any error the temp file is removed
// and path is untouched.
func WriteFileAtomic(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
