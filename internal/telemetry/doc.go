// Package telemetry is what an operator sees of a wdc process: its
// Prometheus registry (wdc's own metrics and the Temporal SDK's, through
// one tally scope), the HTTP endpoints /metrics, /healthz and /readyz, and
// the log handler that --log-format selects.
//
// wdc's metrics are emitted through the SDK's metrics handlers
// (workflow.GetMetricsHandler, activity.GetMetricsHandler, or the handler
// given to a client), never through a Prometheus registry directly: the
// workflow handler drops what a replay would emit twice, so a lease
// event is counted once, by the control plane that decided it. Counters
// are per process: sum them over every control-plane replica and agent.
package telemetry
