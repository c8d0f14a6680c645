package blobstore

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sha256 of "hello\n", checked with sha256sum.
const helloDigest = "sha256:5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"

func TestPutIsContentAddressedAndReadOnly(t *testing.T) {
	s, err := Open(t.TempDir())
	require.NoError(t, err)
	d, n, err := s.Put(strings.NewReader("hello\n"))
	require.NoError(t, err)
	assert.Equal(t, helloDigest, d)
	assert.Equal(t, int64(6), n)
	assert.True(t, s.Has(d))
	d2, _, err := s.Put(strings.NewReader("hello\n"))
	require.NoError(t, err)
	assert.Equal(t, d, d2)
	p, _ := s.BlobPath(d)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o444), fi.Mode().Perm(), "blobs are immutable")
	assertNoTempFiles(t, s)
}

func TestPromoteVerifiesTheDigest(t *testing.T) {
	s, _ := Open(t.TempDir())
	dir := s.StagingDir("t1", 2, 3)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	good := filepath.Join(dir, "good.txt")
	require.NoError(t, os.WriteFile(good, []byte("hello\n"), 0o644))

	n, err := s.Promote(good, helloDigest)
	require.NoError(t, err)
	assert.Equal(t, int64(6), n)
	assert.True(t, s.Has(helloDigest))

	bad := filepath.Join(dir, "bad.txt")
	require.NoError(t, os.WriteFile(bad, []byte("tampered\n"), 0o644))
	other := "sha256:" + strings.Repeat("ab", 32)
	_, err = s.Promote(bad, other)
	require.ErrorIs(t, err, ErrDigestMismatch)
	assert.Contains(t, err.Error(), other)
	assert.False(t, s.Has(other), "a mismatching file is never promoted")

	_, err = s.Promote(filepath.Join(dir, "missing"), helloDigest)
	require.ErrorIs(t, err, ErrNotFound)

	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(good, link))
	_, err = s.Promote(link, helloDigest)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a regular file")
	assertNoTempFiles(t, s)
}

func TestCopyToDetectsCorruption(t *testing.T) {
	s, _ := Open(t.TempDir())
	d, _, err := s.Put(strings.NewReader("hello\n"))
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "copy")
	require.NoError(t, s.CopyTo(d, out, 0o644))
	b, _ := os.ReadFile(out)
	assert.Equal(t, "hello\n", string(b))

	p, _ := s.BlobPath(d)
	require.NoError(t, os.Chmod(p, 0o644))
	require.NoError(t, os.WriteFile(p, []byte("rotten\n"), 0o644))
	dst := filepath.Join(t.TempDir(), "copy2")
	err = s.CopyTo(d, dst, 0o644)
	require.ErrorIs(t, err, ErrDigestMismatch)
	_, statErr := os.Stat(dst)
	assert.True(t, errors.Is(statErr, os.ErrNotExist), "nothing half-written on failure")

	_, err = s.Open("sha256:" + strings.Repeat("00", 32))
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = s.BlobPath("sha256:../../etc")
	assert.Error(t, err)
}

func TestWriteFileAtomicLeavesNothingOnError(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(p, []byte("old"), 0o644))
	err := WriteFileAtomic(p, 0o644, func(w io.Writer) error {
		_, _ = w.Write([]byte("partial"))
		return errors.New("disk on fire")
	})
	require.Error(t, err)
	b, _ := os.ReadFile(p)
	assert.Equal(t, "old", string(b), "the old content survives")
	entries, _ := os.ReadDir(dir)
	assert.Len(t, entries, 1, "no temp file left behind")
}

func TestStagingLayoutAndCleanup(t *testing.T) {
	s, _ := Open(t.TempDir())
	assert.Equal(t, filepath.Join(s.Root(), "staging", "t1", "2-5"), s.StagingDir("t1", 2, 5))
	require.NoError(t, os.MkdirAll(s.StagingDir("t1", 1, 1), 0o755))
	require.NoError(t, os.MkdirAll(s.StagingDir("t1", 2, 2), 0o755))
	require.NoError(t, s.RemoveStaging("t1", 1, 1))
	assert.NoDirExists(t, s.StagingDir("t1", 1, 1))
	assert.DirExists(t, s.StagingDir("t1", 2, 2))
	require.NoError(t, s.RemoveTaskStaging("t1"))
	assert.NoDirExists(t, s.TaskStagingDir("t1"))
}

func assertNoTempFiles(t *testing.T, s *Store) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.Root(), "tmp"))
	require.NoError(t, err)
	assert.Empty(t, entries)
}

func TestDigestBytesAndHashFileAgreeWithPut(t *testing.T) {
	assert.Equal(t, helloDigest, DigestBytes([]byte("hello\n")))
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("hello\n"), 0o644))
	d, n, err := HashFile(p)
	require.NoError(t, err)
	assert.Equal(t, helloDigest, d)
	assert.Equal(t, int64(6), n)
	_, _, err = HashFile(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)
}
