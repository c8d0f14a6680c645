package blobstore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob://
	_ "gocloud.dev/blob/fileblob"  // file://
	_ "gocloud.dev/blob/gcsblob"   // gs://
	_ "gocloud.dev/blob/s3blob"    // s3://
	"gocloud.dev/gcerrors"

	"github.com/wdc-runtime/wdc/envelope"
)

// Store is the artifact store behind one bucket URL. Safe for concurrent
// use, also by several processes sharing the bucket.
type Store struct {
	bucket *blob.Bucket
	where  string // the URL without secrets, for messages
	dir    string // the local directory of a file:// store, else ""
}

// ErrDigestMismatch: content did not hash to the declared digest.
var ErrDigestMismatch = errors.New("digest mismatch")

// ErrNotFound: no blob or staged object with that name.
var ErrNotFound = errors.New("not found")

// copyBuf is the streaming buffer size of every copy.
const copyBuf = 1 << 20

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
	if size, err = io.CopyBuffer(h, f, make([]byte, copyBuf)); err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), size, nil
}

// DefaultURL is the store URL of a data directory: file://<data-dir>/blobs.
func DefaultURL(dataDir string) (string, error) {
	if dataDir == "" {
		return "", errors.New("blob store: data dir is empty")
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("blob store: %w", err)
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(abs, "blobs"))}).String(), nil
}

// OpenDir opens the default store of a data directory (DefaultURL).
func OpenDir(ctx context.Context, dataDir string) (*Store, error) {
	u, err := DefaultURL(dataDir)
	if err != nil {
		return nil, err
	}
	return Open(ctx, u)
}

// Open opens the store at rawURL: file:///dir (created when missing) or
// s3://bucket?endpoint=…&region=…&use_path_style=true&disable_https=true
// (credentials from the AWS default chain). Errors name the URL without
// secrets.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("blob store: %q is not a URL (file:///dir or s3://bucket?…)", Redact(rawURL))
	}
	s := &Store{where: Redact(rawURL)}
	if u.Scheme == "file" {
		// Temp files beside their object (a rename never crosses
		// filesystems), no metadata sidecars, and no setup needed.
		q := u.Query()
		for k, v := range map[string]string{"create_dir": "true", "no_tmp_dir": "true", "metadata": "skip"} {
			if !q.Has(k) {
				q.Set(k, v)
			}
		}
		u.RawQuery = q.Encode()
		s.dir = filepath.FromSlash(u.Path)
		if (u.Host != "" && u.Host != "localhost") || !filepath.IsAbs(s.dir) {
			return nil, fmt.Errorf("blob store %s: want an absolute directory (file:///abs/dir)", s.where)
		}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, fmt.Errorf("blob store %s: %w", s.where, err)
		}
	}
	if s.bucket, err = blob.OpenBucket(ctx, u.String()); err != nil {
		return nil, fmt.Errorf("blob store %s: open: %w", s.where, scrub(err, rawURL, s.where))
	}
	return s, nil
}

// Close releases the bucket.
func (s *Store) Close() error { return s.bucket.Close() }

// String is the store's URL without secrets.
func (s *Store) String() string { return s.where }

// LocalDir is the directory of a file:// store, "" for other stores.
func (s *Store) LocalDir() string { return s.dir }

// Redact returns rawURL without user info and with the values of
// secret-looking query parameters replaced, for messages and logs.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparsable URL>"
	}
	u.User = nil
	q := u.Query()
	changed := false
	for k := range q {
		l := strings.ToLower(k)
		for _, s := range []string{"secret", "password", "token", "credential", "signature", "key"} {
			if strings.Contains(l, s) {
				q.Set(k, "REDACTED")
				changed = true
				break
			}
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// scrub replaces the raw URL in a driver's error message by its redacted
// form (drivers may quote it).
func scrub(err error, raw, redacted string) error {
	if raw == redacted || !strings.Contains(err.Error(), raw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), raw, redacted))
}

// ContentKey is the key of the blob with digest "sha256:<hex>":
// sha256/<hex>. Errors: a malformed digest.
func ContentKey(digest string) (string, error) {
	if !envelope.DigestPattern.MatchString(digest) {
		return "", fmt.Errorf("blob store: %q is not a sha256 digest", digest)
	}
	return "sha256/" + strings.TrimPrefix(digest, "sha256:"), nil
}

// TaskStagingPrefix is staging/<task>/. taskID must be a valid ID
// (fleet.IDPattern), which the workflows guarantee; a "/" in it is refused
// by keeping only its last element.
func TaskStagingPrefix(taskID string) string {
	if i := strings.LastIndexByte(taskID, '/'); i >= 0 {
		taskID = taskID[i+1:]
	}
	return "staging/" + taskID + "/"
}

// StagingPrefix is where attempt (attempt, fence) of taskID stages its
// outputs: staging/<task>/<attempt>-<fence>/.
func StagingPrefix(taskID string, attempt, fence int64) string {
	return TaskStagingPrefix(taskID) + strconv.FormatInt(attempt, 10) + "-" + strconv.FormatInt(fence, 10) + "/"
}

// LogStagingPrefix is where an attempt stages its stdout.log and
// stderr.log: staging/<task>/<attempt>-<fence>.logs/ (beside the outputs,
// so no output name can collide with them).
func LogStagingPrefix(taskID string, attempt, fence int64) string {
	p := StagingPrefix(taskID, attempt, fence)
	return p[:len(p)-1] + ".logs/"
}

// StagedKey joins a prefix and a staged name after checking the name with
// the output-path rule (clean, relative, no ".."), so no name leaves its
// prefix.
func StagedKey(prefix, name string) (string, error) {
	if err := envelope.ValidateRelativePath(name); err != nil {
		return "", fmt.Errorf("staged name %q: %w", name, err)
	}
	return prefix + name, nil
}

// fail wraps err with the store and the operation, mapping a missing
// object to ErrNotFound.
func (s *Store) fail(op, key string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound || errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("blob store %s: %s %s: %w", s.where, op, key, ErrNotFound)
	}
	return fmt.Errorf("blob store %s: %s %s: %w", s.where, op, key, err)
}

// legacyKey is where the store before gocloud kept a blob under
// <data-dir>/blobs: sha256/<2 hex>/<64 hex>. Blobs there are still read
// (file stores only: that store had no other backend), so an existing
// data dir keeps its results; new blobs go to ContentKey.
func legacyKey(key string) string {
	h := strings.TrimPrefix(key, "sha256/")
	return "sha256/" + h[:2] + "/" + h
}

// Has reports whether the blob with digest exists. Only the store's "not
// found" means absent: any other failure (an unreachable endpoint, denied
// credentials) is returned, naming the store's URL (without secrets) and
// the operation. Errors: a malformed digest.
func (s *Store) Has(ctx context.Context, digest string) (bool, error) {
	key, err := ContentKey(digest)
	if err != nil {
		return false, err
	}
	ok, err := s.Exists(ctx, key)
	if err != nil || ok || s.dir == "" {
		return ok, err
	}
	return s.Exists(ctx, legacyKey(key))
}

// Exists reports whether an object (any key) exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	ok, err := s.bucket.Exists(ctx, key)
	if err != nil {
		return false, s.fail("stat", key, err)
	}
	return ok, nil
}

// Size is the size of an object (any key). Errors: ErrNotFound.
func (s *Store) Size(ctx context.Context, key string) (int64, error) {
	a, err := s.bucket.Attributes(ctx, key)
	if err != nil {
		return 0, s.fail("stat", key, err)
	}
	return a.Size, nil
}

// List returns the keys under prefix, sorted.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	it := s.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			return keys, nil
		}
		if err != nil {
			return nil, s.fail("list", prefix, err)
		}
		if !o.IsDir {
			keys = append(keys, o.Key)
		}
	}
}

// write streams r into key while hashing it. When want is not empty and
// the content hashes differently, the write is aborted (nothing appears
// under key) and the error wraps ErrDigestMismatch. A read error of r also
// aborts it.
func (s *Store) write(ctx context.Context, key string, r io.Reader, want string, progress func(int64)) (digest string, size int64, err error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.bucket.NewWriter(wctx, key, &blob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return "", 0, s.fail("write", key, err)
	}
	h := sha256.New()
	if progress != nil {
		r = &countingReader{r: r, progress: progress}
	}
	size, err = io.CopyBuffer(io.MultiWriter(w, h), r, make([]byte, copyBuf))
	if err != nil {
		cancel()
		_ = w.Close()
		return "", size, err
	}
	digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	if want != "" && digest != want {
		cancel()
		_ = w.Close()
		return digest, size, fmt.Errorf("%w: declared %s, content is %s", ErrDigestMismatch, want, digest)
	}
	if err := w.Close(); err != nil {
		return "", 0, s.fail("write", key, err)
	}
	s.syncLocal(key)
	return digest, size, nil
}

// syncLocal makes a file-backend object durable (the driver renames
// without fsync): the file, then its directory. Best effort.
func (s *Store) syncLocal(key string) {
	if s.dir == "" {
		return
	}
	p := filepath.Join(s.dir, filepath.FromSlash(key))
	for _, q := range []string{p, filepath.Dir(p)} {
		if f, err := os.Open(q); err == nil {
			_ = f.Sync()
			f.Close()
		}
	}
}

// Stage streams r into key (a staging key) and returns its digest and
// size. A read error of r aborts the write and is returned as is.
func (s *Store) Stage(ctx context.Context, key string, r io.Reader) (digest string, size int64, err error) {
	return s.write(ctx, key, r, "", nil)
}

// Put stores r's bytes and returns their digest and size. The bytes go to
// a temporary key first (their digest is not known yet) and are promoted
// from there (streamed again, no size limit); storing content already
// present is a no-op.
func (s *Store) Put(ctx context.Context, r io.Reader) (digest string, size int64, err error) {
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	tmp := "tmp/put-" + hex.EncodeToString(rnd[:])
	defer func() { _ = s.bucket.Delete(context.WithoutCancel(ctx), tmp) }()
	digest, size, err = s.write(ctx, tmp, r, "", nil)
	if err != nil {
		return "", 0, fmt.Errorf("blob store %s: put: %w", s.where, err)
	}
	if _, err := s.Promote(ctx, tmp, digest); err != nil {
		return "", 0, err
	}
	return digest, size, nil
}

// PutFile stores the file at path: it hashes the file, then streams it
// into place, aborting if it no longer hashes the same.
func (s *Store) PutFile(ctx context.Context, path string) (digest string, size int64, err error) {
	digest, size, err = HashFile(path)
	if err != nil {
		return "", 0, err
	}
	key, _ := ContentKey(digest)
	if ok, err := s.intact(ctx, key, digest, size); err != nil || ok {
		return digest, size, err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	if _, _, err := s.write(ctx, key, f, digest, nil); err != nil {
		return "", 0, fmt.Errorf("blob store %s: put %s: %w", s.where, path, err)
	}
	return digest, size, nil
}

// Promote re-hashes the staged object at srcKey while streaming it into
// sha256/<hex of want>, and completes that write only when the content
// hashes to want. Errors: ErrNotFound when srcKey is missing,
// ErrDigestMismatch (wrapped, with both digests); nothing is then written.
// Any other error is the store's (unreachable, denied, gone mid-stream):
// the write is aborted as well, and a retry may succeed. When the blob is
// already there the staged object is only re-hashed.
func (s *Store) Promote(ctx context.Context, srcKey, want string) (size int64, err error) {
	return s.PromoteWithProgress(ctx, srcKey, want, nil)
}

// PromoteWithProgress is Promote calling progress (when not nil) with the
// number of bytes re-hashed so far, after every read from the staged
// object, so a caller can heartbeat by bytes through a large object.
func (s *Store) PromoteWithProgress(ctx context.Context, srcKey, want string, progress func(bytes int64)) (size int64, err error) {
	key, err := ContentKey(want)
	if err != nil {
		return 0, err
	}
	r, err := s.bucket.NewReader(ctx, srcKey, readerOptions)
	if err != nil {
		return 0, s.fail("promote", srcKey, err)
	}
	defer r.Close()
	exists, err := s.Exists(ctx, key)
	if err != nil {
		return 0, err
	}
	if exists {
		var src io.Reader = r
		if progress != nil {
			src = &countingReader{r: r, progress: progress}
		}
		h := sha256.New()
		size, err = io.CopyBuffer(h, src, make([]byte, copyBuf))
		if err != nil {
			return 0, s.fail("promote", srcKey, err)
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
			return 0, fmt.Errorf("blob store %s: promote %s: %w: declared %s, content is %s", s.where, srcKey, ErrDigestMismatch, want, got)
		}
		if ok, err := s.intact(ctx, key, want, size); err != nil || ok {
			return size, err
		}
		// The stored blob was altered: the staged copy, which hashes
		// right, replaces it.
		if r, err = s.bucket.NewReader(ctx, srcKey, readerOptions); err != nil {
			return 0, s.fail("promote", srcKey, err)
		}
		defer r.Close()
	}
	_, size, err = s.write(ctx, key, r, want, progress)
	if err != nil {
		if errors.Is(err, ErrDigestMismatch) {
			return 0, fmt.Errorf("blob store %s: promote %s: %w", s.where, srcKey, err)
		}
		return 0, s.fail("promote", srcKey, err)
	}
	return size, nil
}

// readerOptions quiets the AWS SDK's "Skipped validation of multipart
// checksum" warning on every read of a multipart object: the store checks
// every byte against its SHA-256 digest itself.
var readerOptions = &blob.ReaderOptions{BeforeRead: func(as func(any) bool) error {
	var opts *[]func(*s3.Options)
	if as(&opts) {
		*opts = append(*opts, func(o *s3.Options) { o.DisableLogOutputChecksumValidationSkipped = true })
	}
	return nil
}}

// countingReader calls progress with the bytes read so far after every
// read.
type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.n += int64(n)
		c.progress(c.n)
	}
	return n, err
}

// intact reports whether key exists and holds content of digest want and
// size bytes; a blob that was altered in place (appended to, rewritten)
// is not, and the next good upload of its content replaces it.
func (s *Store) intact(ctx context.Context, key, want string, size int64) (bool, error) {
	got, err := s.Size(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil || got != size {
		return false, err
	}
	r, err := s.bucket.NewReader(ctx, key, readerOptions)
	if err != nil {
		return false, s.fail("read", key, err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, r, make([]byte, copyBuf)); err != nil {
		return false, s.fail("read", key, err)
	}
	return "sha256:"+hex.EncodeToString(h.Sum(nil)) == want, nil
}

// Open opens a blob for reading. The reader hashes what it serves: at the
// end it returns an error wrapping ErrDigestMismatch instead of io.EOF
// when the content is not the digest's (the store was altered). Errors:
// ErrNotFound.
func (s *Store) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	key, err := ContentKey(digest)
	if err != nil {
		return nil, err
	}
	r, err := s.bucket.NewReader(ctx, key, readerOptions)
	if gcerrors.Code(err) == gcerrors.NotFound && s.dir != "" {
		if lr, lerr := s.bucket.NewReader(ctx, legacyKey(key), readerOptions); lerr == nil {
			return &verifyingReader{rc: lr, h: sha256.New(), want: digest}, nil
		}
	}
	if err != nil {
		return nil, s.fail("read", key, err)
	}
	return &verifyingReader{rc: r, h: sha256.New(), want: digest}, nil
}

// verifyingReader hashes what it reads and fails at the end when the
// content is not want's.
type verifyingReader struct {
	rc   io.ReadCloser
	h    hash.Hash
	want string
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if got := "sha256:" + hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			return n, fmt.Errorf("blob %s: %w: content is %s (the store was altered)", v.want, ErrDigestMismatch, got)
		}
	}
	return n, err
}

func (v *verifyingReader) Close() error { return v.rc.Close() }

// CopyTo writes the blob to dst atomically (temp + fsync + rename),
// verifying its hash on the way. dst's directory must exist.
func (s *Store) CopyTo(ctx context.Context, digest, dst string, mode os.FileMode) error {
	src, err := s.Open(ctx, digest)
	if err != nil {
		return err
	}
	defer src.Close()
	return WriteFileAtomic(dst, mode, func(w io.Writer) error {
		h := sha256.New()
		if _, err := io.CopyBuffer(io.MultiWriter(w, h), src, make([]byte, copyBuf)); err != nil {
			return s.fail("read", digest, err)
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
			return fmt.Errorf("blob %s: %w: content is %s (store corrupted?)", digest, ErrDigestMismatch, got)
		}
		return nil
	})
}

// RemovePrefix deletes every object under prefix (which must end in "/").
func (s *Store) RemovePrefix(ctx context.Context, prefix string) error {
	if !strings.HasSuffix(prefix, "/") || strings.Trim(prefix, "/") == "" {
		return fmt.Errorf("blob store %s: refusing to remove prefix %q", s.where, prefix)
	}
	keys, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.bucket.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return s.fail("delete", k, err)
		}
	}
	if s.dir != "" { // the file backend leaves empty directories
		p := filepath.Join(s.dir, filepath.FromSlash(prefix))
		_ = os.RemoveAll(p)
		for p = filepath.Dir(p); p != s.dir && strings.HasPrefix(p, s.dir) && os.Remove(p) == nil; p = filepath.Dir(p) {
		}
	}
	return nil
}

// RemoveStaging deletes an attempt's staging (outputs and logs).
func (s *Store) RemoveStaging(ctx context.Context, taskID string, attempt, fence int64) error {
	if err := s.RemovePrefix(ctx, LogStagingPrefix(taskID, attempt, fence)); err != nil {
		return err
	}
	return s.RemovePrefix(ctx, StagingPrefix(taskID, attempt, fence))
}

// RemoveTaskStaging deletes every attempt's staging of a task.
func (s *Store) RemoveTaskStaging(ctx context.Context, taskID string) error {
	return s.RemovePrefix(ctx, TaskStagingPrefix(taskID))
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
