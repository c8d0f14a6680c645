package blobstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	s3test "github.com/wdc-runtime/wdc/internal/testenv/s3"
)

// backends opens a fresh store on each backend the contract holds for:
// the file backend and a real S3 server (the embedded gateway; one that
// cannot start fails the test, never skips it).
var backends = []struct {
	name string
	open func(t testing.TB) *Store
}{
	{"file", func(t testing.TB) *Store {
		s, err := OpenDir(context.Background(), t.TempDir())
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"s3", func(t testing.TB) *Store {
		s, err := Open(context.Background(), s3test.Bucket(t))
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		return s
	}},
}

func TestContract(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			for _, c := range contract {
				t.Run(c.name, func(t *testing.T) { c.run(t, b.open(t)) })
			}
		})
	}
}

var contract = []struct {
	name string
	run  func(t *testing.T, s *Store)
}{
	{"PutGetStatDelete", func(t *testing.T, s *Store) {
		ctx := context.Background()
		d, n, err := s.Put(ctx, strings.NewReader("hello\n"))
		require.NoError(t, err)
		assert.Equal(t, helloDigest, d)
		assert.Equal(t, int64(6), n)
		assert.True(t, has(t, s, d))
		d2, _, err := s.Put(ctx, strings.NewReader("hello\n"))
		require.NoError(t, err)
		assert.Equal(t, d, d2, "content-addressed: the same bytes, the same blob")
		r, err := s.Open(ctx, d)
		require.NoError(t, err)
		b, err := io.ReadAll(r)
		require.NoError(t, r.Close())
		require.NoError(t, err)
		assert.Equal(t, "hello\n", string(b))
		key, _ := ContentKey(d)
		size, err := s.Size(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, int64(6), size)
		keys, err := s.List(ctx, "")
		require.NoError(t, err)
		assert.Equal(t, []string{key}, keys, "Put leaves no temporary object")

		out := filepath.Join(t.TempDir(), "copy")
		require.NoError(t, s.CopyTo(ctx, d, out, 0o600))
		b, _ = os.ReadFile(out)
		assert.Equal(t, "hello\n", string(b))

		p := filepath.Join(t.TempDir(), "f")
		require.NoError(t, os.WriteFile(p, []byte("file bytes\n"), 0o644))
		fd, fn, err := s.PutFile(ctx, p)
		require.NoError(t, err)
		assert.Equal(t, DigestBytes([]byte("file bytes\n")), fd)
		assert.Equal(t, int64(11), fn)
		assert.True(t, has(t, s, fd))

		require.NoError(t, s.RemovePrefix(ctx, "sha256/"))
		assert.False(t, has(t, s, d))
		assert.Error(t, s.RemovePrefix(ctx, "/"), "never everything")
	}},
	{"Missing", func(t *testing.T, s *Store) {
		ctx := context.Background()
		none := "sha256:" + strings.Repeat("00", 32)
		assert.False(t, has(t, s, none))
		_, err := s.Open(ctx, none)
		assert.ErrorIs(t, err, ErrNotFound)
		err = s.CopyTo(ctx, none, filepath.Join(t.TempDir(), "x"), 0o644)
		assert.ErrorIs(t, err, ErrNotFound)
		_, err = s.Promote(ctx, StagingPrefix("t1", 1, 1)+"missing", helloDigest)
		assert.ErrorIs(t, err, ErrNotFound)
		_, err = s.Size(ctx, "staging/nothing")
		assert.ErrorIs(t, err, ErrNotFound)
		ok, err := s.Exists(ctx, "staging/nothing")
		require.NoError(t, err)
		assert.False(t, ok)
		assert.Contains(t, err2str(s.Open(ctx, none)), s.String(), "errors name the store")
		require.NoError(t, s.RemoveTaskStaging(ctx, "never-staged"), "removing nothing is fine")
	}},
	{"StageAndPromote", func(t *testing.T, s *Store) {
		ctx := context.Background()
		key, err := StagedKey(StagingPrefix("t1", 2, 3), "deep/good.txt")
		require.NoError(t, err)
		d, n, err := s.Stage(ctx, key, strings.NewReader("hello\n"))
		require.NoError(t, err)
		assert.Equal(t, helloDigest, d)
		assert.Equal(t, int64(6), n)
		assert.False(t, has(t, s, d), "staging is not content")
		var progress []int64
		size, err := s.PromoteWithProgress(ctx, key, helloDigest, func(n int64) { progress = append(progress, n) })
		require.NoError(t, err)
		assert.Equal(t, int64(6), size)
		assert.Equal(t, []int64{6}, progress, "progress counts the bytes re-hashed")
		assert.True(t, has(t, s, helloDigest))
		// Promoting content already present re-hashes only.
		size, err = s.Promote(ctx, key, helloDigest)
		require.NoError(t, err)
		assert.Equal(t, int64(6), size)
	}},
	{"DigestMismatchRefused", func(t *testing.T, s *Store) {
		ctx := context.Background()
		key := StagingPrefix("t1", 2, 3) + "bad.txt"
		_, _, err := s.Stage(ctx, key, strings.NewReader("tampered\n"))
		require.NoError(t, err)
		other := "sha256:" + strings.Repeat("ab", 32)
		_, err = s.Promote(ctx, key, other)
		require.ErrorIs(t, err, ErrDigestMismatch)
		assert.Contains(t, err.Error(), other)
		assert.Contains(t, err.Error(), DigestBytes([]byte("tampered\n")))
		assert.False(t, has(t, s, other), "a mismatching object is never promoted")
		keys, err := s.List(ctx, "sha256/")
		require.NoError(t, err)
		assert.Empty(t, keys, "nothing half-written under sha256/")
		// A large one too (several upload parts on S3).
		big := bytes.Repeat([]byte("x"), 12<<20)
		_, _, err = s.Stage(ctx, key, bytes.NewReader(big))
		require.NoError(t, err)
		_, err = s.Promote(ctx, key, other)
		require.ErrorIs(t, err, ErrDigestMismatch)
		keys, err = s.List(ctx, "sha256/")
		require.NoError(t, err)
		assert.Empty(t, keys)
		_, err = s.Promote(ctx, key, "sha256:nothex")
		assert.Error(t, err)
	}},
	{"PromoteProgressByBytes", func(t *testing.T, s *Store) {
		ctx := context.Background()
		content := bytes.Repeat([]byte("p"), 7<<20)
		key := StagingPrefix("t1", 1, 1) + "big"
		d, _, err := s.Stage(ctx, key, bytes.NewReader(content))
		require.NoError(t, err)
		for _, round := range []string{"new blob", "blob already there"} {
			var progress []int64
			_, err = s.PromoteWithProgress(ctx, key, d, func(n int64) { progress = append(progress, n) })
			require.NoError(t, err, round)
			require.Greater(t, len(progress), 1, "%s: called while the bytes stream", round)
			assert.True(t, slices.IsSorted(progress), round)
			assert.Equal(t, int64(len(content)), progress[len(progress)-1], round)
		}
	}},
	{"ConcurrentPromoteOfOneDigest", func(t *testing.T, s *Store) {
		ctx := context.Background()
		content := bytes.Repeat([]byte("concurrent\n"), 300_000) // ~3.3 MB
		want := DigestBytes(content)
		const n = 6
		for i := range n {
			_, _, err := s.Stage(ctx, fmt.Sprintf("%s%d", StagingPrefix("t1", int64(i), 1), i), bytes.NewReader(content))
			require.NoError(t, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.Promote(ctx, fmt.Sprintf("%s%d", StagingPrefix("t1", int64(i), 1), i), want)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			assert.NoError(t, err, "promote %d", i)
		}
		r, err := s.Open(ctx, want)
		require.NoError(t, err)
		defer r.Close()
		got, err := io.ReadAll(r)
		require.NoError(t, err)
		assert.Equal(t, want, DigestBytes(got), "one whole blob")
		keys, err := s.List(ctx, "sha256/")
		require.NoError(t, err)
		assert.Len(t, keys, 1)
	}},
	{"StagingRemoved", func(t *testing.T, s *Store) {
		ctx := context.Background()
		for _, k := range []string{
			StagingPrefix("t1", 1, 1) + "a", StagingPrefix("t1", 1, 1) + "d/b", LogStagingPrefix("t1", 1, 1) + "stdout.log",
			StagingPrefix("t1", 2, 2) + "a", StagingPrefix("t10", 1, 1) + "a",
		} {
			_, _, err := s.Stage(ctx, k, strings.NewReader(k))
			require.NoError(t, err)
		}
		require.NoError(t, s.RemoveStaging(ctx, "t1", 1, 1))
		keys, err := s.List(ctx, "staging/")
		require.NoError(t, err)
		assert.Equal(t, []string{"staging/t1/2-2/a", "staging/t10/1-1/a"}, keys)
		require.NoError(t, s.RemoveTaskStaging(ctx, "t1"))
		keys, err = s.List(ctx, "staging/")
		require.NoError(t, err)
		assert.Equal(t, []string{"staging/t10/1-1/a"}, keys, "a task's prefix is not another's")
		if s.LocalDir() != "" {
			assert.NoDirExists(t, filepath.Join(s.LocalDir(), "staging", "t1"), "no empty directories left")
		}
	}},
	{"StageReadErrorAborts", func(t *testing.T, s *Store) {
		ctx := context.Background()
		key := StagingPrefix("t1", 1, 1) + "partial"
		_, _, err := s.Stage(ctx, key, io.MultiReader(strings.NewReader("some"), errReader{}))
		require.ErrorIs(t, err, errBroken)
		ok, err := s.Exists(ctx, key)
		require.NoError(t, err)
		assert.False(t, ok, "a failed upload leaves nothing")
	}},
}

var errBroken = fmt.Errorf("broken reader")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBroken }

func err2str(_ io.ReadCloser, err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
