package testsuite

import (
	"context"
	"testing"
	"time"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/devserver"
)

// BenchmarkDevServerStart measures `wdc server start-dev`'s time to ready:
// from Start to a frontend that answers with wdc's search attributes
// registered (in memory, no UI). It reports ms-to-ready per start.
func BenchmarkDevServerStart(b *testing.B) {
	benchStart(b, func() devserver.Options { return devserver.Options{SearchAttributes: api.SearchAttributes()} })
}

// BenchmarkDevServerStartWithUIAndFile is the same with a new SQLite file
// and the Web UI, as `wdc server start-dev --db-filename F` runs.
func BenchmarkDevServerStartWithUIAndFile(b *testing.B) {
	benchStart(b, func() devserver.Options {
		return devserver.Options{DBFilename: b.TempDir() + "/wdc.db", EnableUI: true, SearchAttributes: api.SearchAttributes()}
	})
}

func benchStart(b *testing.B, opts func() devserver.Options) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		srv, err := devserver.Start(context.Background(), opts())
		if err != nil {
			b.Fatal(err)
		}
		total += srv.StartupDuration()
		b.StopTimer()
		if err := srv.Stop(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-ready")
}
