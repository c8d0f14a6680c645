package s3test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/wdc-runtime/wdc/internal/s3gw"
)

// Region is the region the gateway reports and URLs name.
const Region = s3gw.Region

// Server is the running test gateway.
type Server struct {
	*s3gw.Gateway
}

var (
	once    sync.Once
	running *Server
	runErr  error
)

// Start starts the process's gateway on first use (state under a new
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
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	g, err := s3gw.Start(s3gw.Options{
		Dir: filepath.Join(base, "s3"), Addr: addr,
		AccessKey: "wdctest" + s3gw.RandomKey(4), SecretKey: s3gw.RandomKey(20),
	})
	if err != nil {
		return nil, err
	}
	return &Server{g}, nil
}

// NewBucket creates a bucket named after hint (made unique) and returns
// its name.
func (s *Server) NewBucket(hint string) (string, error) {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(hint))
	if len(name) > 40 {
		name = name[:40]
	}
	name = strings.Trim("wdc-"+name, "-") + "-" + s3gw.RandomKey(4)
	if err := s.CreateBucket(name); err != nil {
		return "", err
	}
	return name, nil
}

// URL is the blob-store URL of bucket on this server (credentials come
// from the environment: see Env).
func (s *Server) URL(bucket string) string { return s.Gateway.URL(bucket, "") }

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
