// Package s3gw runs wdc's embedded S3 server: the VersityGW gateway
// (github.com/versity/versitygw, Apache-2.0) serving a POSIX directory,
// one directory per bucket. `wdc server start-dev` serves it beside
// Temporal, and internal/testenv/s3 starts it for tests. Only this package
// (and tests) import VersityGW.
//
// VersityGW allows one gateway per process at a time: a second Start
// while one runs fails.
package s3gw

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
)

// Region is the region the gateway reports and its URLs name.
const Region = "us-east-1"

// Options configures a gateway.
type Options struct {
	// Dir holds the gateway's state: Dir/buckets (one directory per
	// bucket) and Dir/meta (object metadata). Created when missing.
	Dir string
	// Addr is the listen address, IP:port (e.g. "127.0.0.1:7300";
	// "0.0.0.0:7300" for every interface). Required.
	Addr string
	// AccessKey and SecretKey are the root account's credentials
	// (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY of its clients).
	// Required.
	AccessKey, SecretKey string
}

// Gateway is a running embedded S3 server.
type Gateway struct {
	// Addr is the address it listens on (Options.Addr).
	Addr string
	// AccessKey and SecretKey are the root account's credentials.
	AccessKey, SecretKey string
	// Root is the directory holding the buckets.
	Root string

	cancel context.CancelFunc
	done   chan error
}

// ReadyTimeout bounds how long Start waits for the gateway to answer HTTP.
const ReadyTimeout = 30 * time.Second

// Start starts a gateway and returns when it answers HTTP on Addr.
//
// Errors: missing options, Addr already in use (the error names Addr), a
// directory that cannot be created, or a gateway already running in this
// process.
func Start(opts Options) (*Gateway, error) {
	if opts.Dir == "" || opts.Addr == "" || opts.AccessKey == "" || opts.SecretKey == "" {
		return nil, errors.New("s3 gateway: Dir, Addr, AccessKey and SecretKey are required")
	}
	// Fail on a busy port before starting anything (the gateway itself
	// would only report it from its goroutine).
	l, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("s3 gateway: cannot listen on %s (already in use?): %w", opts.Addr, err)
	}
	l.Close()
	// The metadata directory must not be under the root, nor share its
	// path as a string prefix (VersityGW compares strings): "buckets" and
	// "meta" are siblings that are not prefixes of each other.
	root, side := filepath.Join(opts.Dir, "buckets"), filepath.Join(opts.Dir, "meta")
	for _, d := range []string{root, side} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("s3 gateway: %w", err)
		}
	}
	// VersityGW prints two notices on standard output while it starts
	// (its metadata directory; single-account mode). Standard output is
	// the caller's (start-dev prints its JSON there): they go to
	// /dev/null until the gateway answers.
	defer quietStdout()()
	ms, err := meta.NewSideCar(side)
	if err != nil {
		return nil, fmt.Errorf("s3 gateway: metadata directory: %w", err)
	}
	be, err := posix.New(root, ms, posix.PosixOpts{SideCarDir: side, CopyObjectThreshold: 5 << 30})
	if err != nil {
		return nil, fmt.Errorf("s3 gateway: posix backend: %w", err)
	}
	cfg := &embedgw.Config{
		RootUserAccess:    opts.AccessKey,
		RootUserSecret:    opts.SecretKey,
		Region:            Region,
		Ports:             []string{opts.Addr},
		MaxConnections:    1000,
		MaxRequests:       1000,
		MultipartMaxParts: 10000, // S3's limit
		Quiet:             true,
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Gateway{Addr: opts.Addr, AccessKey: opts.AccessKey, SecretKey: opts.SecretKey, Root: root, cancel: cancel, done: make(chan error, 1)}
	go func() { g.done <- embedgw.RunVersityGW(ctx, be, cfg) }()
	probe := "http://" + dialAddr(opts.Addr) + "/"
	deadline := time.Now().Add(ReadyTimeout)
	for {
		select {
		case err := <-g.done:
			cancel()
			return nil, fmt.Errorf("s3 gateway on %s stopped: %v", opts.Addr, err)
		default:
		}
		if resp, err := http.Get(probe); err == nil {
			resp.Body.Close()
			return g, nil
		}
		if time.Now().After(deadline) {
			cancel()
			return nil, fmt.Errorf("s3 gateway on %s did not answer within %s", opts.Addr, ReadyTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the gateway and waits (at most 10 s) until it has released
// its port. Safe to call once.
func (g *Gateway) Stop() error {
	g.cancel()
	select {
	case err := <-g.done:
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	case <-time.After(10 * time.Second):
		return fmt.Errorf("s3 gateway on %s did not stop within 10s", g.Addr)
	}
}

// CreateBucket makes bucket name exist (a directory under Root, which the
// POSIX backend serves as a bucket). An existing bucket is kept. Errors: a
// name that is not a single directory name, or the directory cannot be
// created.
func (g *Gateway) CreateBucket(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("bucket %q: not a bucket name", name)
	}
	if err := os.Mkdir(filepath.Join(g.Root, name), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("bucket %s: %w", name, err)
	}
	return nil
}

// Endpoint is the gateway's HTTP endpoint as reached at host (an IP or
// name; "" for the listen address, with 127.0.0.1 for an unspecified IP).
func (g *Gateway) Endpoint(host string) string {
	addr := dialAddr(g.Addr)
	if host != "" {
		_, port, _ := net.SplitHostPort(g.Addr)
		addr = net.JoinHostPort(host, port)
	}
	return "http://" + addr
}

// URL is the blob-store URL (gocloud.dev s3blob) of bucket on this
// gateway, reached at host (see Endpoint). It holds no credentials: those
// come from the AWS default chain (see Env).
func (g *Gateway) URL(bucket, host string) string {
	return BucketURL(bucket, g.Endpoint(host))
}

// BucketURL is the blob-store URL of bucket on an S3 endpoint without TLS
// (http://host:port), path-style, in Region.
func BucketURL(bucket, endpoint string) string {
	return "s3://" + bucket + "?endpoint=" + endpoint + "&use_path_style=true&region=" + Region + "&disable_https=true"
}

// Env are the environment variables that give the AWS default chain this
// gateway's credentials and region.
func (g *Gateway) Env() map[string]string {
	return map[string]string{"AWS_ACCESS_KEY_ID": g.AccessKey, "AWS_SECRET_ACCESS_KEY": g.SecretKey, "AWS_REGION": Region}
}

// RandomKey returns n random bytes, hex-encoded (2n characters): for
// generated access and secret keys.
func RandomKey(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("s3gw: no randomness"))
	}
	return hex.EncodeToString(b)
}

// quietStdout points os.Stdout at /dev/null and returns the function that
// restores it. Writers that captured os.Stdout before are unaffected.
func quietStdout() (restore func()) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return func() {}
	}
	saved := os.Stdout
	os.Stdout = null
	return func() {
		os.Stdout = saved
		null.Close()
	}
}

// dialAddr is addr with an unspecified IP (0.0.0.0, ::) replaced by
// 127.0.0.1, for connecting from this machine.
func dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}
