package blobstore

import (
	"context"
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

func TestDefaultURLIsTheDataDirsBlobs(t *testing.T) {
	dir := t.TempDir()
	u, err := DefaultURL(dir)
	require.NoError(t, err)
	assert.Equal(t, "file://"+filepath.ToSlash(filepath.Join(dir, "blobs")), u)
	s, err := OpenDir(context.Background(), dir)
	require.NoError(t, err)
	defer s.Close()
	d, _, err := s.Put(context.Background(), strings.NewReader("hello\n"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", strings.TrimPrefix(d, "sha256:")))
	require.NoError(t, err, "content lives at <data-dir>/blobs/sha256/<hex>")
	assert.Equal(t, "hello\n", string(b))
	entries, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no sidecar or temp files beside a blob")
}

func TestOpenRefusesBadURLsAndKeepsSecretsOut(t *testing.T) {
	_, err := Open(context.Background(), "no-scheme")
	require.Error(t, err)
	_, err = Open(context.Background(), "nosuch://user:hunter2@host/b?secret_key=hunter2")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
	assert.Contains(t, err.Error(), "nosuch://host/b")
	for _, rel := range []string{"file://relative/dir", "file:relative", "file://"} {
		_, err = Open(context.Background(), rel)
		assert.ErrorContains(t, err, "absolute", rel)
	}
	assert.Equal(t, "s3://b?access_key_id=REDACTED&endpoint=http%3A%2F%2Fx", Redact("s3://u:p@b?endpoint=http://x&access_key_id=AKIA"))
}

func TestCopyToDetectsCorruption(t *testing.T) {
	ctx := context.Background()
	s, err := OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	d, _, err := s.Put(ctx, strings.NewReader("hello\n"))
	require.NoError(t, err)
	key, _ := ContentKey(d)
	p := filepath.Join(s.LocalDir(), key)
	require.NoError(t, os.WriteFile(p, []byte("rotten\n"), 0o644))
	dst := filepath.Join(t.TempDir(), "copy2")
	err = s.CopyTo(ctx, d, dst, 0o644)
	require.ErrorIs(t, err, ErrDigestMismatch)
	_, statErr := os.Stat(dst)
	assert.True(t, errors.Is(statErr, os.ErrNotExist), "nothing half-written on failure")
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

func TestDigestBytesAndHashFileAgree(t *testing.T) {
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

func TestKeyRules(t *testing.T) {
	assert.Equal(t, "staging/t1/2-5/", StagingPrefix("t1", 2, 5))
	assert.Equal(t, "staging/t1/2-5.logs/", LogStagingPrefix("t1", 2, 5))
	assert.Equal(t, "staging/t1/", TaskStagingPrefix("t1"))
	assert.Equal(t, "staging/x/", TaskStagingPrefix("../x"), "a task ID never leaves staging/")
	k, err := ContentKey(helloDigest)
	require.NoError(t, err)
	assert.Equal(t, "sha256/"+strings.TrimPrefix(helloDigest, "sha256:"), k)
	for _, bad := range []string{"sha256:../../etc", "md5:abc", ""} {
		_, err := ContentKey(bad)
		assert.Error(t, err, bad)
	}
	k, err = StagedKey(StagingPrefix("t1", 1, 1), "deep/r.csv")
	require.NoError(t, err)
	assert.Equal(t, "staging/t1/1-1/deep/r.csv", k)
	for _, bad := range []string{"../x", "/etc/passwd", "a/../../b", ""} {
		_, err := StagedKey(StagingPrefix("t1", 1, 1), bad)
		assert.Error(t, err, bad)
	}
}

// A data dir written before the gocloud store (blobs/sha256/<2 hex>/<hex>)
// keeps its blobs readable.
func TestLegacyBlobsStayReadable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h := strings.TrimPrefix(helloDigest, "sha256:")
	old := filepath.Join(dir, "blobs", "sha256", h[:2], h)
	require.NoError(t, os.MkdirAll(filepath.Dir(old), 0o755))
	require.NoError(t, os.WriteFile(old, []byte("hello\n"), 0o444))
	s, err := OpenDir(ctx, dir)
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, has(t, s, helloDigest))
	out := filepath.Join(t.TempDir(), "out")
	require.NoError(t, s.CopyTo(ctx, helloDigest, out, 0o644))
	b, _ := os.ReadFile(out)
	assert.Equal(t, "hello\n", string(b))
}

// has is Has for a store that must answer.
func has(t testing.TB, s *Store, digest string) bool {
	t.Helper()
	ok, err := s.Has(context.Background(), digest)
	require.NoError(t, err)
	return ok
}

// gs:// and azblob:// have drivers: without credentials a URL opens (the
// driver authenticates on first use) or fails naming the URL and what is
// missing — never "no driver registered".
func TestCloudSchemesHaveDrivers(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", "")
	t.Setenv("AZURE_STORAGE_ACCOUNT", "")
	for _, tc := range []struct{ url, wantErr string }{
		{"gs://wdc-artifacts", ""},
		{"azblob://wdc-artifacts?storage_account=wdcacct", ""},
		{"azblob://wdc-artifacts", "AccountName is required"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			s, err := Open(context.Background(), tc.url)
			if tc.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.url, s.String())
				require.NoError(t, s.Close())
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "blob store "+tc.url+": open: ")
			assert.Contains(t, err.Error(), tc.wantErr)
			assert.NotContains(t, err.Error(), "no driver registered")
		})
	}
	_, err := Open(context.Background(), "nosuch://b")
	assert.ErrorContains(t, err, "no driver registered", "what an unknown scheme says")
}

// A blob altered in place (a command with write access to the store
// appended to it) is never served as its digest's content, and the next
// good upload of that content replaces it, by each way content arrives.
func TestAnAlteredBlobIsRefusedAndReplaced(t *testing.T) {
	ctx := context.Background()
	for _, upload := range []struct {
		name string
		put  func(t *testing.T, s *Store)
	}{
		{"Put", func(t *testing.T, s *Store) {
			_, _, err := s.Put(ctx, strings.NewReader("hello\n"))
			require.NoError(t, err)
		}},
		{"PutFile", func(t *testing.T, s *Store) {
			p := filepath.Join(t.TempDir(), "hello")
			require.NoError(t, os.WriteFile(p, []byte("hello\n"), 0o644))
			_, _, err := s.PutFile(ctx, p)
			require.NoError(t, err)
		}},
		{"a staged output promoted", func(t *testing.T, s *Store) {
			_, _, err := s.Stage(ctx, "staging/t1/1-1/out", strings.NewReader("hello\n"))
			require.NoError(t, err)
			_, err = s.Promote(ctx, "staging/t1/1-1/out", helloDigest)
			require.NoError(t, err)
		}},
	} {
		for _, alter := range []struct{ name, content string }{{"appended to", "hello\nevil\n"}, {"rewritten, same size", "HELLO\n"}} {
			t.Run(upload.name+"/"+alter.name, func(t *testing.T) {
				s, err := OpenDir(ctx, t.TempDir())
				require.NoError(t, err)
				upload.put(t, s)
				key, _ := ContentKey(helloDigest)
				require.NoError(t, os.WriteFile(filepath.Join(s.LocalDir(), key), []byte(alter.content), 0o644))

				r, err := s.Open(ctx, helloDigest)
				require.NoError(t, err)
				_, err = io.ReadAll(r)
				r.Close()
				require.ErrorIs(t, err, ErrDigestMismatch, "the altered blob is not served")

				upload.put(t, s)
				r, err = s.Open(ctx, helloDigest)
				require.NoError(t, err)
				b, err := io.ReadAll(r)
				r.Close()
				require.NoError(t, err)
				assert.Equal(t, "hello\n", string(b), "the good upload replaced it")
			})
		}
	}
}
