package telemetry

import (
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
)

// The tags the SDK puts on every metric of a client (its RootTags) and on
// those of a worker, a workflow and an activity. A zero series must carry
// the same tag names as the events that later increment it: the
// Prometheus registry takes one label set per metric name.
const (
	tagNamespace    = "namespace"
	tagClientName   = "client_name"
	tagWorkerType   = "worker_type"
	tagWorkflowType = "workflow_type"
	tagActivityType = "activity_type"
	tagTaskQueue    = "task_queue"
	sdkClientName   = "temporal_go"
	sdkNone         = "none"
)

// sdkTags are the tags of a metric emitted on the control plane's task
// queue by workflowType and activityType (sdkNone: none).
func sdkTags(namespace, workflowType, activityType string) map[string]string {
	return map[string]string{
		tagNamespace: namespace, tagClientName: sdkClientName, tagWorkerType: sdkNone,
		tagWorkflowType: workflowType, tagActivityType: activityType, tagTaskQueue: api.ControlTaskQueue,
	}
}

func withReason(tags map[string]string, reason string) map[string]string {
	out := map[string]string{api.MetricTagReason: reason}
	for k, v := range tags {
		out[k] = v
	}
	return out
}

// ExportControlPlaneZeros creates, at zero, every series of wdc's that a
// control plane in namespace emits (each reason of the lease and result
// counters, the selection and ingest histograms, the workers in each
// state), so that /metrics shows
// them from the start and rate() and absent() work. h is the handler
// given to the control plane's client (Metrics.Handler).
func ExportControlPlaneZeros(h client.MetricsHandler, namespace string) {
	task := sdkTags(namespace, api.TaskWorkflowType, sdkNone)
	th := h.WithTags(task)
	th.Counter(api.MetricLeasesGranted)
	th.Counter(api.MetricLeasesExpired)
	th.Counter(api.MetricResultsAccepted)
	h.WithTags(sdkTags(namespace, api.RunWorkflowType, sdkNone)).Counter(api.MetricTaskReportsConflicting)
	for _, r := range api.MetricRevokedReasons {
		h.WithTags(withReason(task, string(r))).Counter(api.MetricLeasesRevoked)
	}
	for _, r := range api.MetricRejectedReasons() {
		h.WithTags(withReason(task, r)).Counter(api.MetricResultsRejected)
	}
	// SelectWorker and (up to workflows.LocalIngestMaxBytes) Ingest run
	// as local activities, whose handler carries no workflow or activity
	// type (a larger Ingest, a regular activity, adds its own series).
	local := h.WithTags(sdkTags(namespace, sdkNone, sdkNone))
	local.Timer(api.MetricWorkerSelection)
	local.Timer(api.MetricIngest)
	local.Counter(api.MetricIngestBytes)
	for _, st := range WorkerStates {
		h.WithTags(map[string]string{api.MetricTagState: string(st)}).Gauge(api.MetricWorkers).Update(0)
	}
}

// ExportAgentZeros creates, at zero, every series of wdc's that an agent
// emits: the attempts running, the heartbeat round trip, and the results
// its executors count as refused (each fence reason). h is the handler
// given to the agent (Metrics.Handler), which adds no SDK tags.
func ExportAgentZeros(h client.MetricsHandler) {
	h.Gauge(api.MetricAttemptsRunning).Update(0)
	h.Timer(api.MetricHeartbeatRoundTrip)
	for _, r := range api.MetricFenceReasons {
		h.WithTags(map[string]string{api.MetricTagReason: string(r)}).Counter(api.MetricResultsRejected)
	}
}
