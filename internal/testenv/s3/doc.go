// Package s3test starts the embedded S3 server (internal/s3gw) on a free
// 127.0.0.1 port for tests, and hands out buckets on it with blob-store
// URLs.
//
// VersityGW runs one gateway per process, so Start starts it once and
// every later call shares it; each caller takes its own bucket.
//
// Import it as s3test ("github.com/wdc-runtime/wdc/internal/testenv/s3");
// it is one of the test environments under internal/testenv, beside kube
// (kubetest) and ray (raytest), and nothing outside tests imports it.
package s3test
