// Package devopts holds the options and handle of an embedded dev server
// without importing go.temporal.io/server, so the CLI (and its tests) can
// describe and drive a dev server while only package devserver links the
// server itself (see docs/architecture.md, "Processes and task queues").
package devopts

import (
	"context"
	"regexp"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
)

// Options configures an embedded dev server. The zero value is an
// in-memory server on a random port without the Web UI.
type Options struct {
	// DBFilename is the SQLite file holding all state; empty keeps it in
	// memory (lost on stop). A restart on the same file keeps every workflow.
	DBFilename string
	// IP is the frontend's bind address. Default 127.0.0.1 (an IP, not a
	// host name).
	IP string
	// Port is the frontend gRPC port; 0 picks a free one.
	Port int
	// UIPort is the Web UI's HTTP port; 0 means Port+1000 (the `temporal
	// server start-dev` convention).
	UIPort int
	// EnableUI serves the Temporal Web UI.
	EnableUI bool
	// Namespaces are created besides "default"; existing ones are kept.
	Namespaces []string
	// SearchAttributes are registered on every namespace before start.
	// SQLite visibility allows 10 Keyword and 3 Int custom attributes.
	SearchAttributes map[string]enumspb.IndexedValueType
	// LogLevel is the server's log level: debug, info, warn, error or off
	// (default).
	LogLevel string
	// SuggestContinueAsNewAfter maps a namespace to the number of history
	// events after which Temporal suggests continue-as-new to its
	// workflows (Temporal's default is 4096). Tests lower it on a
	// namespace of their own to exercise continue-as-new under load.
	SuggestContinueAsNewAfter map[string]int
	// S3, when set, also serves an S3 endpoint (the embedded VersityGW
	// gateway) for the artifact store. Nil serves none.
	S3 *S3Options
	// TLS, when set, serves the frontend with TLS and requires a client
	// certificate issued by its CAFile; the Web UI then listens on
	// 127.0.0.1 only (it acts with the server's certificate). Nil serves
	// plain gRPC.
	TLS *TLSOptions
}

// TLSOptions are the dev server's frontend TLS files (PEM).
type TLSOptions struct {
	// CertFile and KeyFile are the frontend's serving certificate, which
	// the server's own system worker and Web UI also present as clients.
	CertFile, KeyFile string
	// CAFile holds the CA that issued CertFile and that every client
	// certificate must chain to.
	CAFile string
}

// bucketName is S3's bucket naming rule (3-63 of [a-z0-9.-], starting
// and ending with a letter or digit).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// ValidBucket reports whether name is a valid S3 bucket name: 3-63 of
// lowercase letters, digits, '.' and '-', starting and ending with a
// letter or digit.
func ValidBucket(name string) bool { return bucketName.MatchString(name) }

// S3Options configures the dev server's S3 endpoint.
type S3Options struct {
	// Port is its HTTP port on the server's IP (1-65535; wdc's default is
	// 7300). It must differ from the frontend's and the UI's.
	Port int
	// Bucket is created at start (kept when it exists). Default "wdc".
	Bucket string
	// Dir holds the buckets and their metadata. Empty: "<DBFilename>.s3"
	// beside a DBFilename (kept across restarts), or a temporary directory
	// removed at Stop for an in-memory server.
	Dir string
	// AccessKey and SecretKey are the credentials clients must present
	// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY). Both or neither: when
	// empty they are read from Dir/credentials, or generated and written
	// there (mode 0600) the first time, so a persistent server keeps them.
	AccessKey, SecretKey string
}

// S3Info describes a running S3 endpoint. It holds the secret key: print
// it to its operator only, never into a log or a workflow history.
type S3Info struct {
	// Endpoint is http://IP:port, with an IP other machines can use when
	// the server binds every interface.
	Endpoint string
	// Bucket is the bucket created at start.
	Bucket string
	// BlobURL is the --blob-url of Bucket (gocloud.dev s3blob URL without
	// credentials).
	BlobURL string
	// Region is the region to name (AWS_REGION).
	Region string
	// AccessKey and SecretKey are the credentials to export.
	AccessKey, SecretKey string
	// Dir holds the buckets (Dir/buckets/<bucket>/<key>) and metadata.
	Dir string
	// Persistent is false when Dir is removed at Stop.
	Persistent bool
}

// Server is a running embedded server.
type Server interface {
	// FrontendHostPort is the gRPC address clients dial.
	FrontendHostPort() string
	// UIAddress is the Web UI URL, or "" when the UI is off.
	UIAddress() string
	// StartupDuration is how long the start took until the frontend answered.
	StartupDuration() time.Duration
	// S3 describes the S3 endpoint, or nil when none is served.
	S3() *S3Info
	// Stop stops the UI and the server.
	Stop() error
}

// StartFunc starts an embedded server (devserver.Start).
type StartFunc func(ctx context.Context, opts Options) (Server, error)
