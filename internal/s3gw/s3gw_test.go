package s3gw

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"
)

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func TestStartRefusals(t *testing.T) {
	_, err := Start(Options{Dir: t.TempDir(), Addr: freeAddr(t), AccessKey: "ak"})
	assert.ErrorContains(t, err, "Dir, Addr, AccessKey and SecretKey are required")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = Start(Options{Dir: t.TempDir(), Addr: l.Addr().String(), AccessKey: "ak", SecretKey: "sk"})
	assert.ErrorContains(t, err, "cannot listen on "+l.Addr().String())
}

// A gateway serves its buckets over S3 with its credentials, refuses a
// second gateway in the process, and releases its port when stopped.
func TestGatewayServesBuckets(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	g, err := Start(Options{Dir: dir, Addr: addr, AccessKey: "wdcak", SecretKey: RandomKey(20)})
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			g.Stop()
		}
	}()
	assert.DirExists(t, filepath.Join(dir, "buckets"))
	assert.DirExists(t, filepath.Join(dir, "meta"))
	require.NoError(t, g.CreateBucket("wdc"))
	require.NoError(t, g.CreateBucket("wdc"), "an existing bucket is kept")
	for _, bad := range []string{"", "..", "a/b"} {
		assert.Error(t, g.CreateBucket(bad), bad)
	}
	_, port, _ := net.SplitHostPort(addr)
	assert.Equal(t, "http://10.0.0.5:"+port, g.Endpoint("10.0.0.5"))
	assert.Equal(t, "s3://wdc?endpoint=http://"+addr+"&use_path_style=true&region=us-east-1&disable_https=true", g.URL("wdc", ""))

	for k, v := range g.Env() {
		t.Setenv(k, v)
	}
	ctx := context.Background()
	b, err := blob.OpenBucket(ctx, g.URL("wdc", ""))
	require.NoError(t, err)
	require.NoError(t, b.WriteAll(ctx, "k", []byte("v"), nil))
	got, err := b.ReadAll(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "v", string(got))
	b.Close()
	onDisk, err := os.ReadFile(filepath.Join(dir, "buckets", "wdc", "k"))
	require.NoError(t, err)
	assert.Equal(t, "v", string(onDisk), "a bucket is a directory, an object a file")

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	b, err = blob.OpenBucket(ctx, g.URL("wdc", ""))
	require.NoError(t, err)
	_, err = b.ReadAll(ctx, "k")
	assert.Error(t, err, "wrong credentials are refused")
	b.Close()

	_, err = Start(Options{Dir: t.TempDir(), Addr: freeAddr(t), AccessKey: "a", SecretKey: "b"})
	assert.ErrorContains(t, err, "only one instance per process")

	require.NoError(t, g.Stop())
	stopped = true
	c, err := net.Dial("tcp", addr)
	if err == nil {
		c.Close()
	}
	assert.Error(t, err, "the port is released")
	assert.Len(t, RandomKey(4), 8, "hex of 4 random bytes")
}
