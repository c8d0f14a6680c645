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
// registered (in memory, no UI; the UI adds its own start). It reports
// ms-to-ready per start.
func BenchmarkDevServerStart(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		srv, err := devserver.Start(context.Background(), devserver.Options{SearchAttributes: api.SearchAttributes()})
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

// BenchmarkDevServerStartWithUIAndFile is the same with a SQLite file and
// the Web UI, as `wdc server start-dev --db-filename F` runs by default.
func BenchmarkDevServerStartWithUIAndFile(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		db := b.TempDir() + "/wdc.db"
		srv, err := devserver.Start(context.Background(), devserver.Options{DBFilename: db, EnableUI: true, SearchAttributes: api.SearchAttributes()})
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
