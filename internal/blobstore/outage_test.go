package blobstore

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/internal/s3gw"
	s3test "github.com/wdc-runtime/wdc/internal/testenv/s3"
)

// cutProxy forwards TCP connections to target until cut, which closes its
// listener and every connection: the store "goes away". With cutAfter > 0
// it cuts itself once that many bytes went through (either direction).
type cutProxy struct {
	l        net.Listener
	target   string
	cutAfter int64
	moved    atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
	once     sync.Once
}

func newCutProxy(t *testing.T, target string, cutAfter int64) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{l: l, target: target, cutAfter: cutAfter}
	t.Cleanup(p.cut)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(u, c)
			go p.pipe(c, u)
		}
	}()
	return p
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			if p.cutAfter > 0 && p.moved.Add(int64(n)) >= p.cutAfter {
				p.cut()
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *cutProxy) cut() {
	p.once.Do(func() {
		p.l.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
}

func (p *cutProxy) endpoint() string { return "http://" + p.l.Addr().String() }

// s3Pair opens two stores on one new bucket of the embedded gateway: one
// direct, one through a proxy that cuts after cutAfter bytes.
func s3Pair(t *testing.T, cutAfter int64) (direct, flaky *Store, proxy *cutProxy) {
	direct, err := Open(context.Background(), s3test.Bucket(t))
	require.NoError(t, err)
	t.Cleanup(func() { direct.Close() })
	srv, err := s3test.Start()
	require.NoError(t, err)
	bucket := strings.TrimPrefix(strings.SplitN(direct.String(), "?", 2)[0], "s3://")
	proxy = newCutProxy(t, srv.Addr, cutAfter)
	flaky, err = Open(context.Background(), s3gw.BucketURL(bucket, proxy.endpoint()))
	require.NoError(t, err)
	t.Cleanup(func() { flaky.Close() })
	return direct, flaky, proxy
}

// A store that goes away in the middle of an upload leaves nothing under
// the key, and says so with an error that is neither "not found" nor a
// digest mismatch (so ingest retries it as infrastructure trouble rather
// than refusing the result).
func TestStoreGoneMidUploadLeavesNothing(t *testing.T) {
	direct, flaky, _ := s3Pair(t, 3<<20)
	ctx := context.Background()
	key := StagingPrefix("t1", 1, 1) + "big.bin"
	_, _, err := flaky.Stage(ctx, key, bytes.NewReader(bytes.Repeat([]byte("y"), 12<<20)))
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotFound) || errors.Is(err, ErrDigestMismatch), "%v", err)
	assert.Contains(t, err.Error(), flaky.String(), "names the store")
	keys, err := direct.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, keys, "no object, whole or partial")
}

// A store that goes away while a staged object is promoted promotes
// nothing: the blob never appears, the staged object stays for a retry.
func TestStoreGoneMidPromoteLeavesNothingPromoted(t *testing.T) {
	direct, flaky, _ := s3Pair(t, 5<<20)
	ctx := context.Background()
	content := bytes.Repeat([]byte("z"), 12<<20)
	key := StagingPrefix("t1", 1, 1) + "big.bin"
	d, _, err := direct.Stage(ctx, key, bytes.NewReader(content))
	require.NoError(t, err)
	var seen int64
	_, err = flaky.PromoteWithProgress(ctx, key, d, func(n int64) { seen = n })
	require.Error(t, err)
	assert.False(t, errors.Is(err, ErrNotFound) || errors.Is(err, ErrDigestMismatch), "%v", err)
	assert.Less(t, seen, int64(len(content)), "cut mid-stream")
	assert.False(t, has(t, direct, d), "nothing promoted")
	keys, err := direct.List(ctx, "sha256/")
	require.NoError(t, err)
	assert.Empty(t, keys)
	ok, err := direct.Exists(ctx, key)
	require.NoError(t, err)
	assert.True(t, ok, "the staged object is still there for a retry")
	// The same promotion through a store that answers succeeds.
	size, err := direct.Promote(ctx, key, d)
	require.NoError(t, err)
	assert.Equal(t, int64(len(content)), size)
}

// Only "not found" means absent: Has, Exists and PutFile against an
// endpoint that does not answer return the error, naming the store's URL
// (without secrets) and the operation.
func TestUnreachableStoreIsAnErrorNotAbsence(t *testing.T) {
	_, flaky, proxy := s3Pair(t, 0)
	ctx := context.Background()
	ok, err := flaky.Has(ctx, helloDigest)
	require.NoError(t, err, "reachable: an answer")
	assert.False(t, ok)
	proxy.cut()
	t.Setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
	ok, err = flaky.Has(ctx, helloDigest)
	require.Error(t, err)
	assert.False(t, ok)
	assert.NotErrorIs(t, err, ErrNotFound)
	for _, want := range []string{flaky.String(), "stat sha256/" + strings.TrimPrefix(helloDigest, "sha256:")} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "hunter2")
	_, err = flaky.Exists(ctx, "staging/x")
	assert.ErrorContains(t, err, "stat staging/x")
	_, err = flaky.Open(ctx, helloDigest)
	assert.ErrorContains(t, err, flaky.String())
	assert.NotErrorIs(t, err, ErrNotFound)
	_, _, err = flaky.Put(ctx, strings.NewReader("hello\n"))
	assert.ErrorContains(t, err, flaky.String())
}
