package blobstore

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

var artifactMiB = flag.Int("artifact-mib", 0, "size of BenchmarkLargeArtifact's artifact in MiB (env WDC_BENCH_ARTIFACT_MIB; default 256)")

// BenchmarkLargeArtifact moves one large artifact through each backend the
// way an attempt's output travels: the executor stages the file (upload),
// ingest promotes it (re-hash while streaming into sha256/<hex>), a client
// copies the result out (CopyTo, verified). It reports MB/s per step and
// the growth of the process's peak RSS, which stays small however large
// the artifact: nothing holds it in memory. The s3 backend's gateway runs
// in this process and its buffers count; WDC_BENCH_BLOB_URL adds a store
// in another process (with its AWS_* credentials in the environment),
// whose growth is the client's alone.
//
//	go test ./internal/blobstore -run '^$' -bench LargeArtifact -artifact-mib 1024
func BenchmarkLargeArtifact(b *testing.B) {
	mib := *artifactMiB
	if mib == 0 {
		mib = 256
		if v, err := strconv.Atoi(os.Getenv("WDC_BENCH_ARTIFACT_MIB")); err == nil && v > 0 {
			mib = v
		}
	}
	size := int64(mib) << 20
	src := filepath.Join(b.TempDir(), "artifact")
	digest := writeRandomFile(b, src, size)
	all := backends
	if u := os.Getenv("WDC_BENCH_BLOB_URL"); u != "" {
		// A store in another process (e.g. the S3 endpoint of
		// `wdc server start-dev`): the RSS growth is then wdc's side only,
		// without an in-process gateway's buffers.
		all = append(all, struct {
			name string
			open func(t testing.TB) *Store
		}{"external", func(t testing.TB) *Store {
			s, err := Open(context.Background(), u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}})
	}
	for _, be := range all {
		b.Run(fmt.Sprintf("%s/%dMiB", be.name, mib), func(b *testing.B) {
			ctx := context.Background()
			s := be.open(b)
			out := filepath.Join(b.TempDir(), "out")
			b.SetBytes(size)
			var stage, promote, copyOut time.Duration
			resetPeakRSS()
			base := rssKiB("VmRSS")
			b.ResetTimer()
			for i := range b.N {
				key := StagingPrefix("bench", int64(i), 1) + "artifact"
				t0 := time.Now()
				f, err := os.Open(src)
				if err != nil {
					b.Fatal(err)
				}
				d, n, err := s.Stage(ctx, key, f)
				f.Close()
				if err != nil || d != digest || n != size {
					b.Fatalf("stage: %v (%s, %d bytes)", err, d, n)
				}
				t1 := time.Now()
				if _, err := s.Promote(ctx, key, digest); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if err := s.CopyTo(ctx, digest, out, 0o644); err != nil {
					b.Fatal(err)
				}
				t3 := time.Now()
				stage, promote, copyOut = stage+t1.Sub(t0), promote+t2.Sub(t1), copyOut+t3.Sub(t2)
				b.StopTimer()
				// The next round promotes afresh.
				if err := s.RemovePrefix(ctx, "sha256/"); err != nil {
					b.Fatal(err)
				}
				if err := s.RemoveTaskStaging(ctx, "bench"); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			growth := float64(rssKiB("VmHWM")-base) / 1024
			mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / 1e6 / d.Seconds() }
			b.ReportMetric(mbps(stage), "stage-MB/s")
			b.ReportMetric(mbps(promote), "promote-MB/s")
			b.ReportMetric(mbps(copyOut), "copyout-MB/s")
			b.ReportMetric(growth, "peakRSS-growth-MiB")
			b.Logf("%s, %d MiB x %d: stage %.0f MB/s, promote %.0f MB/s, copy out %.0f MB/s; peak RSS growth %.1f MiB",
				be.name, mib, b.N, mbps(stage), mbps(promote), mbps(copyOut), growth)
		})
	}
}

// writeRandomFile writes size pseudo-random bytes to path (1 MiB at a
// time) and returns their digest.
func writeRandomFile(b *testing.B, path string, size int64) string {
	b.Helper()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{'w', 'd', 'c'})
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := io.CopyN(w, rng, size); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	d, _, err := HashFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// resetPeakRSS resets the kernel's VmHWM of this process (Linux: "5" to
// /proc/self/clear_refs); best effort.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// rssKiB reads a field (VmRSS, VmHWM) of /proc/self/status in KiB.
func rssKiB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
