package telemetry

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
)

// WorkersCountInterval is how often a control plane counts the fleet's
// workers by state for api.MetricWorkers.
const WorkersCountInterval = 15 * time.Second

// WorkerStates are the states api.MetricWorkers reports (a deregistered
// entry has ended and is not counted).
var WorkerStates = []fleet.State{fleet.Active, fleet.Stale, fleet.Draining, fleet.Offline}

// CountWorkers sets api.MetricWorkers{state} on h from visibility (the
// running registry entries in each state) now and every interval, until
// ctx ends. A count that fails leaves the gauge at its last value.
func CountWorkers(ctx context.Context, c client.Client, h client.MetricsHandler, interval time.Duration) {
	gauges := make(map[fleet.State]client.MetricsGauge, len(WorkerStates))
	for _, s := range WorkerStates {
		gauges[s] = h.WithTags(map[string]string{api.MetricTagState: string(s)}).Gauge(api.MetricWorkers)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, s := range WorkerStates {
			q := fmt.Sprintf(`%s = %q AND %s = %q AND ExecutionStatus = "Running"`,
				api.SAKind.GetName(), api.KindWorker, api.SAWorkerState.GetName(), s)
			if res, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q}); err == nil {
				gauges[s].Update(float64(res.GetCount()))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
