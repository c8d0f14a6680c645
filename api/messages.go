package api

import (
	"fmt"
	"time"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
)

// Claim is what every message from an attempt asserts about itself; see
// lease.Check.
type Claim = lease.Claim

// ---- WdcWorker ----

// WorkerInput starts (or continues) a WdcWorker. State is nil on the first
// run; continue-as-new carries the record forward.
type WorkerInput struct {
	WorkerID string        `json:"worker_id"`
	State    *fleet.Worker `json:"state,omitempty"`
	// IncarnationFloor is the last incarnation of a previous, deregistered
	// entry of the same worker; the next registration is one above it.
	IncarnationFloor int64 `json:"incarnation_floor,omitempty"`
	// Lost are worker-lost notifications decided but not yet sent when
	// the previous run continued as new; the new run sends them first.
	Lost []WorkerLostSignal `json:"lost,omitempty"`
	// ReconciledAt is when the previous run last checked its reservations
	// against their tasks (zero: never).
	ReconciledAt time.Time `json:"reconciled_at,omitzero"`
}

// RegisterInput is the register update: the worker's declaration.
type RegisterInput = fleet.Registration

// RegisterResult tells a worker process its incarnation: it must put it on
// every heartbeat.
type RegisterResult struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
	// Adopted are the reservations of RegisterInput.Adopt the registry
	// kept for the new incarnation (fleet.Worker.Register); an adoption
	// not listed was refused: its attempt must be stopped.
	Adopted []ReservationRef `json:"adopted,omitempty"`
}

// WorkerHeartbeatSignal is fleet.Heartbeat on the wire.
type WorkerHeartbeatSignal = fleet.Heartbeat

// DrainInput is the drain update's (empty) argument.
type DrainInput struct {
	// Reason is kept for operators, e.g. "kernel upgrade".
	Reason string `json:"reason,omitempty"`
	// WorkerID names the worker, so a signed drain speaks for it alone
	// (required with a proof).
	WorkerID string `json:"worker_id,omitempty"`
	// Proof is a submitter's, or the worker's own, signature over the
	// input without it (identity.Verifier.Submitter, Worker).
	Proof *identity.Proof `json:"proof,omitempty"`
}

// UndrainInput is the undrain update's argument: who signed it, for whom
// (as DrainInput).
type UndrainInput struct {
	WorkerID string          `json:"worker_id,omitempty"`
	Proof    *identity.Proof `json:"proof,omitempty"`
}

// DeregisterInput removes a worker from the registry.
type DeregisterInput struct {
	// Force deregisters even while the worker holds leases; their tasks are
	// told the worker is lost and retry elsewhere.
	Force  bool   `json:"force,omitempty"`
	Reason string `json:"reason,omitempty"`
	// WorkerID and Proof are as DrainInput's.
	WorkerID string          `json:"worker_id,omitempty"`
	Proof    *identity.Proof `json:"proof,omitempty"`
}

// RevokeInput revokes a worker's identity: its incarnation ends OFFLINE,
// its leases are lost (their tasks retry elsewhere), and it registers
// again only with a certificate issued after the revoke.
type RevokeInput struct {
	// WorkerID names the worker, so a signed revoke speaks for it alone.
	WorkerID string `json:"worker_id"`
	Reason   string `json:"reason,omitempty"`
	// Proof is the submitter's signature over the input without it.
	Proof *identity.Proof `json:"proof,omitempty"`
}

// SweepSignal asks a worker to re-evaluate its liveness now.
type SweepSignal struct{}

// ReserveInput asks a worker to hold capacity for a task's lease.
type ReserveInput struct {
	TaskID       string             `json:"task_id"`
	Fence        int64              `json:"fence"`
	Requirements fleet.Requirements `json:"requirements"`
}

// ReserveResult confirms a reservation.
type ReserveResult struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
	// IdentityIssuedAt is when the certificate of the worker's accepted
	// registration was issued (zero with identity off).
	IdentityIssuedAt time.Time `json:"identity_issued_at,omitzero"`
}

// ReleaseSignal returns the reservation held for TaskID under Fence.
type ReleaseSignal struct {
	TaskID string `json:"task_id"`
	Fence  int64  `json:"fence"`
}

// WorkerView is the worker query's answer: the record plus free capacity.
type WorkerView struct {
	fleet.Worker
	Free resource.List `json:"free"`
	// Registered is false for a workflow that has not been registered yet.
	Registered bool `json:"registered"`
	// QueryError is set by clients listing workers when the worker's
	// workflow did not answer its query (the control plane is down or
	// busy); State then comes from visibility and the rest is unknown.
	QueryError string `json:"query_error,omitempty"`
}

// ---- WdcTask ----

// TaskState is the task's lifecycle state (search attribute WdcTaskState).
type TaskState string

const (
	// TaskPending: looking for a worker for the next attempt.
	TaskPending TaskState = "PENDING"
	// TaskLeased: an attempt holds an ACTIVE lease.
	TaskLeased TaskState = "LEASED"
	// TaskIngesting: a result was accepted and its artifacts are being
	// verified into the blob store.
	TaskIngesting TaskState = "INGESTING"
	// TaskBackoff: waiting before the next attempt after a retry directive.
	TaskBackoff TaskState = "BACKOFF"
	// TaskCompleted: a result was accepted, whatever the program's exit code.
	TaskCompleted TaskState = "COMPLETED"
	// TaskRetriesExhausted: max attempts used without a result. A distinct
	// outcome, not a scientific failure.
	TaskRetriesExhausted TaskState = "RETRIES_EXHAUSTED"
	// TaskCancelled: cancelled by a user.
	TaskCancelled TaskState = "CANCELLED"
	// TaskAborted: the task's workflow ended without reporting an outcome
	// (terminated, failed, timed out or cancelled in Temporal, e.g. an
	// operator's Terminate). A run records it for a child it found closed,
	// and the client's task view says it (TaskView.ClosedAs); the task has
	// no result.
	TaskAborted TaskState = "ABORTED"
)

// Terminal reports whether the task has ended.
func (s TaskState) Terminal() bool {
	return s == TaskCompleted || s == TaskRetriesExhausted || s == TaskCancelled || s == TaskAborted
}

// TaskOptions is the retry and liveness policy of a task. Zero fields take
// the defaults (WithDefaults).
type TaskOptions struct {
	// LeaseTTL: a lease without a current-fence heartbeat for this long
	// expires. Default 30 s.
	LeaseTTL time.Duration `json:"lease_ttl,omitempty"`
	// HeartbeatInterval is how often the executor heartbeats. Default
	// LeaseTTL/3, at least MinHeartbeatInterval (100 ms).
	HeartbeatInterval time.Duration `json:"heartbeat_interval,omitempty"`
	// MaxAttempts bounds attempts; then RETRIES_EXHAUSTED. Default 5, at
	// most MaxAttemptsLimit (100).
	MaxAttempts int64 `json:"max_attempts,omitempty"`
	// Backoff between attempts (lease.DefaultBackoff for zero fields).
	Backoff lease.Backoff `json:"backoff,omitzero"`
	// LaunchTimeout bounds the launch activity, including waiting for the
	// agent to pick it up; past it the attempt is launch_failed. Default
	// LeaseTTL.
	LaunchTimeout time.Duration `json:"launch_timeout,omitempty"`
	// SelectInterval is the wait between looks for an eligible worker when
	// none fits. Default 2 s.
	SelectInterval time.Duration `json:"select_interval,omitempty"`
}

// Defaults for TaskOptions.
const (
	DefaultLeaseTTL       = 30 * time.Second
	DefaultMaxAttempts    = 5
	DefaultSelectInterval = 2 * time.Second
)

// Bounds on TaskOptions that keep a task's state and history bounded:
// every attempt adds a lease and a directive to the carried ledger, and
// every heartbeat is a signal in the history.
const (
	// MaxAttemptsLimit is the largest max_attempts a task may ask for.
	MaxAttemptsLimit = 100
	// MinHeartbeatInterval is the shortest heartbeat_interval.
	MinHeartbeatInterval = 100 * time.Millisecond
	// MaxLeaseTTL is the longest lease_ttl: a dead holder keeps its lease
	// (and its worker's slot) for at most this long.
	MaxLeaseTTL = 7 * 24 * time.Hour
)

// WithDefaults fills zero fields.
func (o TaskOptions) WithDefaults() TaskOptions {
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = o.LeaseTTL / 3
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	o.Backoff = o.Backoff.WithDefaults()
	if o.LaunchTimeout == 0 {
		o.LaunchTimeout = o.LeaseTTL
	}
	if o.SelectInterval == 0 {
		o.SelectInterval = DefaultSelectInterval
	}
	return o
}

// Validate names the first bad field (after WithDefaults).
func (o TaskOptions) Validate() error {
	switch {
	case o.LeaseTTL < time.Second || o.LeaseTTL > MaxLeaseTTL:
		return fieldErr("lease_ttl", "must be between 1s and %s (got %s)", MaxLeaseTTL, o.LeaseTTL)
	case o.HeartbeatInterval <= 0 || o.HeartbeatInterval >= o.LeaseTTL:
		return fieldErr("heartbeat_interval", "must be positive and below lease_ttl %s (got %s)", o.LeaseTTL, o.HeartbeatInterval)
	case o.HeartbeatInterval < MinHeartbeatInterval:
		return fieldErr("heartbeat_interval", "must be at least %s (got %s)", MinHeartbeatInterval, o.HeartbeatInterval)
	case o.MaxAttempts < 1 || o.MaxAttempts > MaxAttemptsLimit:
		return fieldErr("max_attempts", "must be between 1 and %d (got %d)", MaxAttemptsLimit, o.MaxAttempts)
	case o.LaunchTimeout < time.Second:
		return fieldErr("launch_timeout", "must be at least 1s (got %s)", o.LaunchTimeout)
	case o.SelectInterval < 100*time.Millisecond:
		return fieldErr("select_interval", "must be at least 100ms (got %s)", o.SelectInterval)
	}
	return o.Backoff.Validate()
}

// TaskInput starts (or continues) a WdcTask.
type TaskInput struct {
	Envelope envelope.Envelope `json:"envelope"`
	// EnvelopeDigest is Envelope.Digest(); the workflow checks it.
	EnvelopeDigest string      `json:"envelope_digest"`
	Options        TaskOptions `json:"options"`
	// Authority is the submitter's signature over TaskAuthorityOf(Envelope,
	// EnvelopeDigest) (kind TaskAuthorityKind). The task verifies it when
	// it starts and hands it to every launch; with identity on, a task
	// without one runs nothing.
	Authority *identity.Proof `json:"authority,omitempty"`
	// Carry is nil on the first run; continue-as-new carries the state.
	Carry *TaskCarry `json:"carry,omitempty"`
}

// TaskAuthority is what a submitter signs for each task it submits: this
// envelope, as this task of this run. It is what lets work start: the run
// admits, the task runs and an agent launches only work its submitter
// signed (identity.Verifier.Authority).
type TaskAuthority struct {
	RunID          string `json:"run_id"`
	TaskID         string `json:"task_id"`
	EnvelopeDigest string `json:"envelope_digest"`
}

// TaskAuthorityOf is the authority a submitter signs for env, whose
// digest is digest.
func TaskAuthorityOf(env envelope.Envelope, digest string) TaskAuthority {
	return TaskAuthority{RunID: env.RunID, TaskID: env.TaskID, EnvelopeDigest: digest}
}

// TaskCarry is the task state continue-as-new carries forward, so attempt
// and fence keep growing and the lease history is kept.
type TaskCarry struct {
	Ledger     lease.Ledger           `json:"ledger"`
	Directives []lease.RetryDirective `json:"directives,omitempty"`
	Stats      TaskStats              `json:"stats"`
	Cancelled  bool                   `json:"cancelled,omitempty"`
	// CancelReason is the reason given with the cancel.
	CancelReason string `json:"cancel_reason,omitempty"`
	// Pending is a retry directive whose backoff has not yet been waited.
	Pending *lease.RetryDirective `json:"pending,omitempty"`
	// AttemptDir is the ACTIVE lease's task directory, once launched.
	AttemptDir string `json:"attempt_dir,omitempty"`
	// AfterReset says a reset started this run or one it continues, and
	// no lease was granted since (SelectWorkerInput.Reset).
	AfterReset bool `json:"after_reset,omitempty"`
}

// TaskStats counts messages the task ignored or refused.
type TaskStats struct {
	// HeartbeatsAccepted counts current-fence lease heartbeats.
	HeartbeatsAccepted int64 `json:"heartbeats_accepted"`
	// HeartbeatsRejected counts heartbeats that failed the fence check, by
	// reason.
	HeartbeatsRejected map[string]int64 `json:"heartbeats_rejected,omitempty"`
	// TimersStarted counts lease timers (one per TTL window).
	TimersStarted int64 `json:"timers_started"`
	// ContinuedAsNew counts continue-as-new generations.
	ContinuedAsNew int64 `json:"continued_as_new"`
}

// Artifact is one output file of an attempt.
type Artifact struct {
	// Name is the path under outputs/ (envelope.ValidateRelativePath).
	Name string `json:"name"`
	// Digest is "sha256:<hex>" of its bytes.
	Digest string `json:"digest"`
	// SizeBytes is its size in bytes.
	SizeBytes int64 `json:"size_bytes"`
}

// SubmitResultInput is an attempt's result. The executor staged each
// artifact under <data-dir>/staging/<task>/<attempt>-<fence>/ first.
type SubmitResultInput struct {
	Claim
	// ExitCode is the command's exit code (the task's own outcome); 128 +
	// the signal's number when a signal killed it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the command (its own crash:
	// "SIGSEGV", "SIGABRT", ...), if one did.
	Signal string `json:"signal,omitempty"`
	// TimedOut is set when the command was killed at the envelope's
	// timeouts.execution_seconds (ExitCode 124).
	TimedOut bool `json:"timed_out,omitempty"`
	// Artifacts are the files of outputs/, hashed.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Logs are the command's stdout.log and stderr.log (at most the last
	// MaxLogBytes of each), staged beside the outputs.
	Logs []Artifact `json:"logs,omitempty"`
	// OutputError is set when outputs/ broke the output rules (a symlink, a
	// file over the size cap, ...); no artifact is then ingested.
	OutputError string `json:"output_error,omitempty"`
	// StartedAt and FinishedAt bound the command's run (executor clock).
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// HeartbeatSeq is the sequence number of the last lease heartbeat the
	// attempt sent before it submitted (heartbeat signals and heartbeats
	// by ID alike, counted from 1): how many it sent. Informational, for
	// pricing heartbeats (`wdc bench`); the task does not judge it.
	HeartbeatSeq int64 `json:"heartbeat_seq,omitempty"`
	// Proof is the attempt's signature over the rest of the input, by the
	// key its worker delegated to it (identity.Verifier.Attempt).
	Proof *identity.Proof `json:"proof,omitempty"`
}

// SubmitResultResult answers an accepted submission once ingested.
type SubmitResultResult struct {
	Accepted bool `json:"accepted"`
	// Result is the task's result as the parent received it.
	Result TaskResult `json:"result"`
}

// TaskResult is an accepted attempt's result after parent ingest.
type TaskResult struct {
	TaskID         string `json:"task_id"`
	RunID          string `json:"run_id"`
	WorkerID       string `json:"worker_id"`
	Attempt        int64  `json:"attempt"`
	Fence          int64  `json:"fence"`
	EnvelopeDigest string `json:"envelope_digest"`
	ExitCode       int    `json:"exit_code"`
	// Signal names the signal that killed the command, if one did
	// (SubmitResultInput.Signal).
	Signal      string     `json:"signal,omitempty"`
	TimedOut    bool       `json:"timed_out,omitempty"`
	OutputError string     `json:"output_error,omitempty"`
	Artifacts   []Artifact `json:"artifacts,omitempty"`
	// Logs are the command's stdout.log and stderr.log in the blob store.
	Logs       []Artifact `json:"logs,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt time.Time  `json:"finished_at"`
}

// AttemptFailedSignal reports that an attempt ended without a result.
type AttemptFailedSignal struct {
	Claim
	// Reason is infra_killed, oom_killed or launch_failed.
	Reason lease.RetryReason `json:"reason"`
	Detail string            `json:"detail,omitempty"`
	// Proof is the attempt's signature over the rest of the signal, by the
	// key its worker delegated to it (identity.Verifier.Attempt).
	Proof *identity.Proof `json:"proof,omitempty"`
}

// LeaseHeartbeatSignal renews a lease. Seq increases per attempt.
type LeaseHeartbeatSignal struct {
	Claim
	Seq int64 `json:"seq"`
	// Proof is the attempt's signature over the rest of the signal, by the
	// key its worker delegated to it (identity.Verifier.Attempt); a
	// heartbeat by ID goes to Temporal and carries none.
	Proof *identity.Proof `json:"proof,omitempty"`
}

// WorkerLostSignal tells a task that the worker holding its reservation
// under Fence is gone.
type WorkerLostSignal struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
	TaskID      string `json:"task_id"`
	Fence       int64  `json:"fence"`
	// State is the worker's new state (STALE, OFFLINE, DEREGISTERED) or
	// "REREGISTERED".
	State string `json:"state"`
	// LivenessFenced is the worker's registration's (fleet.Registration):
	// its attempts are dead by the time it went STALE, so the task needs
	// no lock-delay before the next attempt.
	LivenessFenced bool `json:"liveness_fenced,omitempty"`
}

// WorkerReregistered is WorkerLostSignal.State for reservations of an
// incarnation that a new registration of the worker replaced.
const WorkerReregistered = "REREGISTERED"

// WorkerRevoked is WorkerLostSignal.State for reservations of an
// incarnation whose identity was revoked (UpdateRevoke).
const WorkerRevoked = "REVOKED"

// CancelTaskInput cancels a task.
type CancelTaskInput struct {
	Reason string `json:"reason,omitempty"`
	// Proof is the submitter's signature over the rest of the input
	// (identity.Verifier.Submitter).
	Proof *identity.Proof `json:"proof,omitempty"`
}

// TaskView is the lease query's answer.
type TaskView struct {
	TaskID         string    `json:"task_id"`
	RunID          string    `json:"run_id"`
	State          TaskState `json:"state"`
	EnvelopeDigest string    `json:"envelope_digest"`
	// Lease is the current (latest) lease; nil before the first grant.
	Lease *lease.Lease `json:"lease"`
	// Leases is every lease granted, oldest first.
	Leases []lease.Lease `json:"leases"`
	// Directives are the retry directives issued, oldest first.
	Directives []lease.RetryDirective `json:"directives"`
	Options    TaskOptions            `json:"options"`
	Stats      TaskStats              `json:"stats"`
	// Result is set once COMPLETED.
	Result *TaskResult `json:"result,omitempty"`
	// CancelReason is the reason given with a cancel.
	CancelReason string `json:"cancel_reason,omitempty"`
	// AttemptDir is the current attempt's task directory once launched.
	AttemptDir string `json:"attempt_dir,omitempty"`
	// Waiting says what the task waits for, e.g. "no eligible worker:
	// worker-a: insufficient_capacity: ...".
	Waiting string `json:"waiting,omitempty"`
	// Phase is where the lease loop is: Selecting, Launching, Running,
	// Ingesting, Backoff, ContinuingAsNew or Ended.
	Phase string `json:"phase,omitempty"`
	// LeaseActivity is the ID of the lease activity (LeaseActivityID)
	// holding the current lease, "" when none is pending. While one is,
	// Temporal keeps the lease's time: heartbeats by ID renew it without
	// reaching the task. The task's query leaves Lease.RenewedAt and
	// Lease.ExpiresAt as the last heartbeat signal left them; the client's
	// view (Client.Task) moves them to the last heartbeat Temporal
	// recorded.
	LeaseActivity string `json:"lease_activity,omitempty"`
	// ClosedAs is the Temporal close status (TERMINATED, FAILED,
	// TIMED_OUT, CANCELED) of a task workflow that closed without an
	// outcome; State is then ABORTED. Set by the client, which reads it
	// from the workflow's description: the workflow's own query answers
	// with its last state.
	ClosedAs string `json:"closed_as,omitempty"`
}

// TaskOutcome is what WdcTask returns and reports to its run.
type TaskOutcome struct {
	TaskID string    `json:"task_id"`
	RunID  string    `json:"run_id"`
	State  TaskState `json:"state"`
	// Attempts is the number of attempts made.
	Attempts int64 `json:"attempts"`
	// Result is set for COMPLETED in the workflow's own result.
	Result *TaskResult `json:"result,omitempty"`
	// Ref is the compact reference to the accepted result that the
	// task-ended signal carries instead of Result, so a run of many tasks
	// receives small signals.
	Ref *ResultRef `json:"result_ref,omitempty"`
}

// ---- WdcRun ----

// RunInput starts (or continues) a WdcRun.
type RunInput struct {
	RunID   string `json:"run_id"`
	WorldID string `json:"world_id"`
	// CloseWhenDone closes the run as soon as every task has ended.
	CloseWhenDone bool `json:"close_when_done,omitempty"`
	// Carry is nil on the first run.
	Carry *RunState `json:"carry,omitempty"`
}

// RunStatus summarises a run.
type RunStatus string

const (
	// RunRunning: some task has not ended (or none was added yet).
	RunRunning RunStatus = "RUNNING"
	// RunCompleted: every task ended COMPLETED.
	RunCompleted RunStatus = "COMPLETED"
	// RunIncomplete: every task ended, some not COMPLETED.
	RunIncomplete RunStatus = "INCOMPLETE"
)

// AddTaskInput adds a task to a run.
type AddTaskInput struct {
	Envelope       envelope.Envelope `json:"envelope"`
	EnvelopeDigest string            `json:"envelope_digest"`
	Options        TaskOptions       `json:"options"`
	// Authority is the submitter's signature over the task's
	// TaskAuthority, which the run hands to the task (TaskInput.Authority).
	Authority *identity.Proof `json:"authority,omitempty"`
	// Proof is the submitter's signature over the rest of the input
	// (identity.Verifier.Submitter); in an AddTasksInput, the batch's
	// proof covers its tasks instead.
	Proof *identity.Proof `json:"proof,omitempty"`
}

// AddTasksInput adds several tasks to one run (the add-tasks update).
// Tasks holds at most MaxTasksPerBatch entries.
type AddTasksInput struct {
	Tasks []AddTaskInput `json:"tasks"`
	// Proof is the submitter's signature over the rest of the input.
	Proof *identity.Proof `json:"proof,omitempty"`
}

// AddTasksResult has one entry per input task, in input order: Results[i]
// when task i was added (or already there), Errors[i] (non-empty) when its
// workflow could not be started — e.g. its task ID was used before by
// another run. Tasks that fail to start are not in the run.
type AddTasksResult struct {
	Results []AddTaskResult `json:"results"`
	Errors  []string        `json:"errors"`
}

// MaxTasksPerBatch bounds one add-tasks update. The update's request
// must also stay inside Temporal's 2 MiB payload limit: callers with large
// envelopes split by bytes too (`tasks submit --batch` sends at most
// 512 KiB of envelopes per update).
const MaxTasksPerBatch = 200

// AddTaskResult confirms the task's child workflow started (or already
// existed with the same envelope digest: adding is idempotent).
type AddTaskResult struct {
	TaskID         string `json:"task_id"`
	WorkflowID     string `json:"workflow_id"`
	EnvelopeDigest string `json:"envelope_digest"`
	// Existing is true when the task was already in the run.
	Existing bool `json:"existing"`
}

// TaskEndedSignal is a task's outcome, sent to its run.
type TaskEndedSignal = TaskOutcome

// RunTask is a task's entry in the run.
type RunTask struct {
	TaskID         string    `json:"task_id"`
	EnvelopeDigest string    `json:"envelope_digest"`
	State          TaskState `json:"state"`
	Attempts       int64     `json:"attempts"`
	// EndDetail says how a task that ended without reporting ended (e.g.
	// "workflow TERMINATED"); empty otherwise.
	EndDetail string `json:"end_detail,omitempty"`
	// WorkerID is the worker holding the task's current lease. The run
	// itself does not track it: `wdc runs status` fills it, with the live
	// State and Attempts of a task that has not ended, from visibility.
	WorkerID string `json:"worker_id,omitempty"`
}

// Event is an entry of the run's event log.
type Event struct {
	// Seq numbers events from 1.
	Seq int64 `json:"seq"`
	// Type is EventWorkerResult or EventCommit.
	Type string `json:"type"`
	// Time is the workflow time it was appended.
	Time time.Time `json:"time"`
	// Result is set for worker_result: a compact reference to the accepted
	// result (the full result, with every artifact, is the task's; see
	// `wdc tasks result`), so a run's state stays small.
	Result *ResultRef `json:"result,omitempty"`
	// Commit is set for commit events.
	Commit *CommitRecord `json:"commit,omitempty"`
	// Committed is true once a commit took this worker_result as evidence.
	Committed bool `json:"committed,omitempty"`
}

// ResultRef is a run's record of an accepted result.
type ResultRef struct {
	TaskID         string `json:"task_id"`
	WorkerID       string `json:"worker_id"`
	Attempt        int64  `json:"attempt"`
	Fence          int64  `json:"fence"`
	EnvelopeDigest string `json:"envelope_digest"`
	ExitCode       int    `json:"exit_code"`
	// OutputError is the result's output error, cut to
	// MaxRefOutputErrorBytes (the full text is in the task's result).
	OutputError string `json:"output_error,omitempty"`
	// Artifacts and Bytes count the result's artifacts and their size.
	Artifacts int   `json:"artifacts"`
	Bytes     int64 `json:"bytes"`
	// ResultDigest is "sha256:" of the canonical JSON of the full
	// TaskResult: it pins every artifact digest into the run's TCD chain.
	ResultDigest string `json:"result_digest"`
}

// ResultRefOf is the run's compact record of an accepted result: counts
// and sizes instead of the artifact list, the output error cut to
// MaxRefOutputErrorBytes, and ResultDigest pinning the whole result.
// Errors: the result cannot be encoded as JSON.
func ResultRefOf(r TaskResult) (ResultRef, error) {
	digest, err := envelope.DigestOf(r)
	if err != nil {
		return ResultRef{}, err
	}
	ref := ResultRef{
		TaskID: r.TaskID, WorkerID: r.WorkerID, Attempt: r.Attempt, Fence: r.Fence,
		EnvelopeDigest: r.EnvelopeDigest, ExitCode: r.ExitCode, OutputError: r.OutputError,
		Artifacts: len(r.Artifacts), ResultDigest: digest,
	}
	if len(ref.OutputError) > MaxRefOutputErrorBytes {
		ref.OutputError = ref.OutputError[:MaxRefOutputErrorBytes]
	}
	for _, a := range r.Artifacts {
		ref.Bytes += a.SizeBytes
	}
	return ref, nil
}

// Limits that keep a run's state (its query answer and continue-as-new
// input) well inside Temporal's 2 MiB payload limit, however many tasks
// the run has had. A run carries its pending state — the tasks that have
// not ended and the worker_result events not yet committed — in full;
// what has ended or been committed leaves the state when the run
// continues as new, except the most recent RunListedEndedTasks and
// RunListedCommittedEvents (the rest stay counted in TaskCounts,
// EndedNotListed and EventsNotListed, and the task workflows themselves
// are listed by `wdc tasks list --run`).
const (
	// MaxRunPendingBytes bounds a run's pending state: PendingTaskBytes for
	// each task that has not ended plus the JSON size of each uncommitted
	// worker_result event. Adding tasks past it is refused with
	// ErrTypeRunFull.
	MaxRunPendingBytes = 1280 << 10
	// RunListedEndedTasks is how many ended tasks a run keeps listed in
	// its state across continue-as-new (the most recent ones).
	RunListedEndedTasks = 1000
	// RunListedCommittedEvents is how many committed worker_result events
	// a run keeps listed across continue-as-new (the most recent ones).
	RunListedCommittedEvents = 200
	// RunListedCommits is how many commit records a run keeps listed
	// across continue-as-new (the most recent ones; each lists the seqs
	// it committed).
	RunListedCommits = 20
	// MaxNoteBytes caps a commit note.
	MaxNoteBytes = 1024
	// MaxRefOutputErrorBytes caps the output error a run keeps per result.
	MaxRefOutputErrorBytes = 128
)

// Event types.
const (
	EventWorkerResult = "worker_result"
	EventCommit       = "commit"
)

// CommitInput commits worker results as evidence. ExpectedParentTime must
// equal the run's parent_time (optimistic concurrency).
type CommitInput struct {
	ExpectedParentTime int64 `json:"expected_parent_time"`
	// EventSeqs are the worker_result events to commit, each at most once.
	EventSeqs []int64 `json:"event_seqs"`
	// Note is kept with the commit.
	Note string `json:"note,omitempty"`
	// Proof is the submitter's signature over the rest of the input
	// (identity.Verifier.Submitter).
	Proof *identity.Proof `json:"proof,omitempty"`
}

// CommitRecord is what a commit did.
type CommitRecord struct {
	EventSeqs  []int64 `json:"event_seqs"`
	ParentTime int64   `json:"parent_time"`
	Evidence   int64   `json:"evidence"`
	TCDDigest  string  `json:"tcd_digest"`
	Note       string  `json:"note,omitempty"`
	// CommittedBy is the SPIFFE ID of the submitter that signed the commit
	// (verified unless the control plane's identity is off); "" unsigned.
	CommittedBy string `json:"committed_by,omitempty"`
}

// CommitResult is the run's authority state after a commit.
type CommitResult = CommitRecord

// CloseRunInput closes a run.
type CloseRunInput struct {
	// Proof is the submitter's signature (identity.Verifier.Submitter).
	Proof *identity.Proof `json:"proof,omitempty"`
}

// RunState is the run's whole state (the run query's answer and the
// continue-as-new carry).
type RunState struct {
	RunID   string    `json:"run_id"`
	WorldID string    `json:"world_id"`
	Status  RunStatus `json:"status"`
	// Closed: no more tasks; the workflow ends when every task has ended.
	Closed        bool `json:"closed"`
	CloseWhenDone bool `json:"close_when_done,omitempty"`
	// Tasks lists the tasks that have not ended and the most recent ended
	// ones (all of them until the run first continues as new with more
	// than RunListedEndedTasks ended), in the order they were added.
	Tasks []RunTask `json:"tasks"`
	// Events lists every uncommitted worker_result event and the most
	// recent committed events and commit records, by Seq.
	Events []Event `json:"events"`
	// Evidence counts worker results committed as evidence.
	Evidence int64 `json:"evidence"`
	// ParentTime is the run's logical clock; +1 per commit.
	ParentTime int64 `json:"parent_time"`
	// TCDDigest chains every commit: sha256 of the JCS of the previous
	// digest, the new parent_time and the committed results.
	TCDDigest string `json:"tcd_digest"`
	// WorkerResultEvents counts worker_result events.
	WorkerResultEvents int64 `json:"worker_result_events"`
	// TaskCounts counts every task of the run by state.
	TaskCounts RunTaskCounts `json:"task_counts"`
	// EndedNotListed counts ended tasks no longer listed in Tasks (the
	// run continued as new past RunListedEndedTasks ended tasks).
	EndedNotListed int64 `json:"ended_not_listed,omitempty"`
	// EventsNotListed counts committed worker_result events and commit
	// records no longer listed in Events; Events keep their Seq.
	EventsNotListed int64 `json:"events_not_listed,omitempty"`
	// LastSeq is the Seq of the run's latest event (0: none yet).
	LastSeq int64 `json:"last_seq"`
	// PendingBytes is the run's pending state against MaxRunPendingBytes.
	PendingBytes int64 `json:"pending_bytes"`
	// ContinuedAsNew counts continue-as-new generations.
	ContinuedAsNew int64 `json:"continued_as_new"`
	// Reported are the tasks a task-ended signal named whose outcome the
	// run had not yet read from the task itself, carried into a
	// continue-as-new (empty in a query's answer).
	Reported []string `json:"reported,omitempty"`
}

// RunView is the run query's answer.
type RunView = RunState

// RunTaskCounts counts a run's tasks by state, all of them (listed in
// RunState.Tasks or not).
type RunTaskCounts struct {
	// Total is every task ever added (and started).
	Total int64 `json:"total"`
	// Open have not ended.
	Open             int64 `json:"open"`
	Completed        int64 `json:"completed"`
	RetriesExhausted int64 `json:"retries_exhausted"`
	Cancelled        int64 `json:"cancelled"`
	Aborted          int64 `json:"aborted"`
}

// PendingTaskBytes is what a task that has not ended counts against
// MaxRunPendingBytes, in bytes of JSON: its RunTask entry and the
// worker_result event its result can become (worker ID at its 63-byte
// limit, output error at MaxRefOutputErrorBytes). At a few hundred bytes
// a task, the budget holds about 1,700 open tasks with short IDs.
func PendingTaskBytes(taskID string) int64 {
	return int64(2*len(taskID)) + 750
}

// Caps on a result's artifact list, which travels in Temporal payloads
// (2 MB each at most): at most MaxArtifacts entries whose
// ArtifactManifestBytes sum to at most MaxManifestBytes.
const (
	MaxArtifacts     = 10000
	MaxManifestBytes = 512 << 10
)

// ArtifactManifestBytes is what one artifact named name costs in a result's
// payload (its name, digest and size as JSON), for the MaxManifestBytes cap.
func ArtifactManifestBytes(name string) int { return len(name) + 120 }

// MaxLogBytes caps each of an attempt's logs kept with its result: the
// last 16 MiB of stdout and of stderr.
const MaxLogBytes = 16 << 20

// Log names, the only names a result's Logs may have.
const (
	LogStdout = "stdout.log"
	LogStderr = "stderr.log"
)

// Validate checks a result's shape — artifact count and manifest size
// (MaxArtifacts, MaxManifestBytes), artifact names (relative, unique) and
// digests, and the logs (LogStdout or LogStderr, at most MaxLogBytes) —
// not its claim, which is the fence check's (lease.Check). Errors name the
// field.
func (in SubmitResultInput) Validate() error {
	if len(in.Artifacts) > MaxArtifacts {
		return fieldErr("artifacts", "at most %d (got %d)", MaxArtifacts, len(in.Artifacts))
	}
	manifest := 0
	for _, a := range in.Artifacts {
		manifest += ArtifactManifestBytes(a.Name)
	}
	if manifest > MaxManifestBytes {
		return fieldErr("artifacts", "the list takes %d bytes, over the %d-byte cap", manifest, MaxManifestBytes)
	}
	names := make(map[string]bool, len(in.Artifacts))
	for i, a := range in.Artifacts {
		field := fmt.Sprintf("artifacts[%d]", i)
		if err := envelope.ValidateRelativePath(a.Name); err != nil {
			return fieldErr(field+".name", "%v", err)
		}
		if names[a.Name] {
			return fieldErr(field+".name", "duplicate %q", a.Name)
		}
		names[a.Name] = true
		if !envelope.DigestPattern.MatchString(a.Digest) {
			return fieldErr(field+".digest", "%q is not sha256:<hex>", a.Digest)
		}
		if a.SizeBytes < 0 {
			return fieldErr(field+".size_bytes", "negative")
		}
	}
	for i, l := range in.Logs {
		if (l.Name != LogStdout && l.Name != LogStderr) || !envelope.DigestPattern.MatchString(l.Digest) || l.SizeBytes < 0 || l.SizeBytes > MaxLogBytes {
			return fieldErr(fmt.Sprintf("logs[%d]", i), "want %s or %s, a sha256 digest and at most %d bytes", LogStdout, LogStderr, MaxLogBytes)
		}
	}
	return nil
}
