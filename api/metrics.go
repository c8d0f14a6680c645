package api

import (
	"slices"

	"github.com/wdc-runtime/wdc/lease"
)

// Names of wdc's metrics, as given to a metrics handler. The Prometheus
// names add the suffix of their kind: "_total" to counters, "_seconds" to
// timers (histograms in seconds); gauges keep their name. Every metric
// emitted from a workflow or an activity also carries the SDK's tags
// namespace, task_queue and workflow_type (and activity_type).
const (
	// MetricLeasesGranted counts leases granted (control plane).
	MetricLeasesGranted = "wdc_leases_granted"
	// MetricLeasesExpired counts leases that expired: no heartbeat renewed them
	// within their TTL (control plane).
	MetricLeasesExpired = "wdc_leases_expired"
	// MetricLeasesRevoked counts leases revoked, tagged MetricTagReason with the retry
	// reason (worker_lost, infra_killed, launch_failed; control plane).
	MetricLeasesRevoked = "wdc_leases_revoked"
	// MetricResultsAccepted counts results whose ingest committed (control
	// plane).
	MetricResultsAccepted = "wdc_results_accepted"
	// MetricResultsRejected counts refused results, tagged MetricTagReason
	// (the fence check's: stale_fence, wrong_worker, wrong_attempt,
	// wrong_task, digest_mismatch, lease_not_active; invalid_argument;
	// ingest_failed). The task workflow counts what it
	// refuses while it is open (control plane); a result sent to a task
	// that had already ended reaches no control plane, so the executor
	// that sent it counts that one (an agent's executor; a standalone
	// 'wdc exec' serves no metrics). Each refusal is counted once across
	// the fleet.
	MetricResultsRejected = "wdc_results_rejected"
	// MetricAttemptsRunning is the attempts running in this agent (gauge).
	MetricAttemptsRunning = "wdc_attempts_running"
	// MetricHeartbeatRoundTrip is a worker heartbeat's round trip: the
	// heartbeat recorded on the registry entry's liveness activity or,
	// when the entry has none, the heartbeat signal and the description of
	// the entry (agent; timer).
	MetricHeartbeatRoundTrip = "wdc_heartbeat_round_trip"
	// MetricWorkerSelection is one SelectWorker activity: drawing, filtering and
	// reserving a worker for a task (control plane; timer).
	MetricWorkerSelection = "wdc_worker_selection"
	// MetricIngestBytes counts bytes promoted from staging into the blob store
	// by parent ingest (control plane).
	MetricIngestBytes = "wdc_ingest_bytes"
	// MetricIngest is one Ingest activity, staged outputs to stored artifacts
	// (control plane; timer).
	MetricIngest = "wdc_ingest"
	// MetricTaskReportsConflicting counts outcomes a run received for a
	// task that had already ended differently (another state or result):
	// the run keeps the first (control plane). Any count is a bug.
	MetricTaskReportsConflicting = "wdc_task_reports_conflicting"
	// MetricTaskReportsUnverified counts task-ended signals a run ignored
	// because the task's own query did not say it ended: sent by someone
	// other than the task, or before an operator reset it (control plane).
	MetricTaskReportsUnverified = "wdc_task_reports_unverified"
	// MetricWorkers is the fleet's registry entries in each state, tagged
	// MetricTagState, as one control plane counts them in visibility every
	// WorkersCountInterval (control plane; gauge: take the max over
	// replicas, not the sum).
	MetricWorkers = "wdc_workers"
)

// MetricTagState is the tag (Prometheus label) that carries a worker
// state (MetricWorkers).
const MetricTagState = "state"

// MetricTagReason is the tag (Prometheus label) that carries a reason.
const MetricTagReason = "reason"

// MetricReasonIngestFailed tags a result refused because its ingest
// failed (MetricResultsRejected).
const MetricReasonIngestFailed = "ingest_failed"

// MetricRevokedReasons are the reason values of MetricLeasesRevoked: every
// retry reason but lease_expired, which MetricLeasesExpired counts.
var MetricRevokedReasons = []lease.RetryReason{lease.ReasonWorkerLost, lease.ReasonLaunchFailed, lease.ReasonInfraKilled, lease.ReasonOOMKilled}

// MetricFenceReasons are the fence check's reasons, the reason values of
// the MetricResultsRejected that an agent's executor counts.
var MetricFenceReasons = []lease.RejectReason{lease.RejectStaleFence, lease.RejectWrongWorker, lease.RejectWrongAttempt,
	lease.RejectWrongTask, lease.RejectDigestMismatch, lease.RejectLeaseNotActive}

// MetricIdentityReasons are the identity check's reasons: values of the
// MetricResultsRejected that a control plane counts for results and
// registrations it refused as unsigned, signed by the wrong key, or
// replayed.
var MetricIdentityReasons = []lease.RejectReason{lease.RejectUnauthenticated, lease.RejectWrongIdentity, lease.RejectReplayed}

// MetricRejectedReasons are the reason values of the MetricResultsRejected
// that a control plane counts: the fence check's, the identity check's,
// invalid_argument and ingest_failed.
func MetricRejectedReasons() []string {
	out := make([]string, 0, len(MetricFenceReasons)+len(MetricIdentityReasons)+2)
	for _, r := range append(slices.Clone(MetricFenceReasons), MetricIdentityReasons...) {
		out = append(out, string(r))
	}
	return append(out, ErrTypeInvalidArgument, MetricReasonIngestFailed)
}

// MetricUnsignedAccepted counts messages a control plane in identity mode
// optional accepted unsigned, tagged MetricTagKind (register,
// submit-result): what turning the mode to required would refuse.
const MetricUnsignedAccepted = "wdc_unsigned_accepted"

// MetricTagKind names a message's kind (its update or signal name).
const MetricTagKind = "kind"
