// Package s3test starts an embedded S3 server (VersityGW on a POSIX
// directory) on a free 127.0.0.1 port for tests and the dev server, and
// hands out buckets on it with blob-store URLs. Only this package (and
// tests) import VersityGW.
//
// VersityGW runs one gateway per process, so Start starts it once and
// every later call shares it; each caller takes its own bucket.
package s3test

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
	"sync"
	"time"

	"github.com/versity/versitygw/backend/meta"
	"github.com/versity/versitygw/backend/posix"
	"github.com/versity/versitygw/embedgw"
)

// Region is the region the gateway reports and URLs name.
const Region = "us-east-1"

// Server is a running embedded S3 gateway.
type Server struct {
	// Endpoint is http://127.0.0.1:<port>.
	Endpoint string
	// AccessKey and SecretKey are the root account's credentials.
	AccessKey, SecretKey string
	// Root is the directory holding the buckets (one directory each).
	Root string
}

var (
	once    sync.Once
	running *Server
	runErr  error
)

// Start starts the process's gateway on first use (data under a new
// temporary directory, random credentials) and returns it; later calls
// return the same server, or the same error.
func Start() (*Server, error) {
	once.Do(func() { running, runErr = start() })
	return running, runErr
}

func start() (*Server, error) {
	base, err := os.MkdirTemp("", "wdc-s3test-")
	if err != nil {
		return nil, err
	}
	// The sidecar directory must not be under the root, nor share its
	// path as a prefix (the check compares strings).
	root, side := filepath.Join(base, "buckets"), filepath.Join(base, "sidecar")
	for _, d := range []string{root, side} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	ms, err := meta.NewSideCar(side)
	if err != nil {
		return nil, fmt.Errorf("s3test: sidecar: %w", err)
	}
	be, err := posix.New(root, ms, posix.PosixOpts{SideCarDir: side, CopyObjectThreshold: 5 << 30})
	if err != nil {
		return nil, fmt.Errorf("s3test: posix backend: %w", err)
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Endpoint: "http://" + addr, AccessKey: "wdctest" + randHex(4), SecretKey: randHex(20), Root: root}
	cfg := &embedgw.Config{
		RootUserAccess:    s.AccessKey,
		RootUserSecret:    s.SecretKey,
		Region:            Region,
		Ports:             []string{addr},
		MaxConnections:    1000,
		MaxRequests:       1000,
		MultipartMaxParts: 10000,
		Quiet:             true,
	}
	done := make(chan error, 1)
	go func() { done <- embedgw.RunVersityGW(context.Background(), be, cfg) }()
	// Ready when the port answers HTTP.
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			return nil, fmt.Errorf("s3test: gateway on %s stopped: %v", addr, err)
		default:
		}
		if resp, err := http.Get(s.Endpoint + "/"); err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("s3test: gateway on %s did not answer within 30s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// NewBucket creates a bucket (a directory under Root, which the POSIX
// backend serves as a bucket) named after hint, and returns its name.
func (s *Server) NewBucket(hint string) (string, error) {
	name := strings.ToLower(hint)
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim("wdc-"+name+"-"+randHex(4), "-")
	if err := os.Mkdir(filepath.Join(s.Root, name), 0o755); err != nil {
		return "", fmt.Errorf("s3test: bucket %s: %w", name, err)
	}
	return name, nil
}

// URL is the blob-store URL of bucket on this server (credentials come
// from the environment: see Env).
func (s *Server) URL(bucket string) string {
	return "s3://" + bucket + "?endpoint=" + s.Endpoint + "&use_path_style=true&region=" + Region + "&disable_https=true"
}

// Env are the environment variables that give the AWS default chain this
// server's credentials.
func (s *Server) Env() map[string]string {
	return map[string]string{"AWS_ACCESS_KEY_ID": s.AccessKey, "AWS_SECRET_ACCESS_KEY": s.SecretKey, "AWS_REGION": Region}
}

// T is the part of testing.TB that Bucket needs.
type T interface {
	Helper()
	Name() string
	Setenv(key, value string)
	Fatalf(format string, args ...any)
}

// Bucket starts the gateway (once per process), creates a bucket for the
// test, sets the credentials in the test's environment and returns the
// bucket's URL. A gateway that cannot start fails the test: it is never
// skipped.
func Bucket(t T) string {
	t.Helper()
	s, err := Start()
	if err != nil {
		t.Fatalf("embedded S3 server: %v", err)
	}
	b, err := s.NewBucket(t.Name())
	if err != nil {
		t.Fatalf("%v", err)
	}
	for k, v := range s.Env() {
		t.Setenv(k, v)
	}
	return s.URL(b)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(errors.New("s3test: no randomness"))
	}
	return hex.EncodeToString(b)
}
