package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/wdc-runtime/wdc/api"
)

// observeSince records the time since began on the activity's timer
// name (a histogram in seconds on /metrics).
func observeSince(ctx context.Context, name string, began time.Time) {
	activity.GetMetricsHandler(ctx).Timer(name).Record(time.Since(began))
}

// countIngested adds the bytes of the promoted artifacts and logs to
// api.MetricIngestBytes.
func countIngested(ctx context.Context, lists ...[]api.Artifact) {
	var n int64
	for _, l := range lists {
		for _, a := range l {
			n += a.SizeBytes
		}
	}
	activity.GetMetricsHandler(ctx).Counter(api.MetricIngestBytes).Inc(n)
}
