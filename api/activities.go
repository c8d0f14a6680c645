package api

import (
	"time"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
)

// SelectWorkerInput asks the control plane to pick a worker for a task's
// next lease and reserve capacity on it under Fence.
type SelectWorkerInput struct {
	TaskID       string             `json:"task_id"`
	Fence        int64              `json:"fence"`
	Requirements fleet.Requirements `json:"requirements"`
	// AvoidWorkers are the workers that lost a lease of this task (expired,
	// worker_lost, launch_failed, infra_killed), oldest first. None of them
	// is chosen while another eligible worker exists.
	AvoidWorkers []string `json:"avoid_workers,omitempty"`
	// LeaseTTL is the TTL the task grants its leases with: the least
	// lock-delay after an earlier run of the task closed (LockDelayUntil).
	LeaseTTL time.Duration `json:"lease_ttl,omitempty"`
	// Reset says the task's run, or one it continues, was started by an
	// operator's reset (its workflow.Info.OriginalRunID names another run)
	// and has granted no lease since: the reset's base runs are then read
	// from its history too, since visibility may not list them yet.
	Reset bool `json:"reset,omitempty"`
}

// SelectWorkerResult is the reserved worker, or (WorkerID empty) why no
// worker could take the task now. No eligible worker is a normal state of a
// task, not an activity failure.
type SelectWorkerResult struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
	// IdentityIssuedAt is the reserve's (api.ReserveResult): the lease
	// records it (lease.Lease.IdentityIssuedAt).
	IdentityIssuedAt time.Time `json:"identity_issued_at,omitzero"`
	// Fence is the fence the reservation was made under: the input's, or
	// higher when an earlier run of the task's workflow (one an operator
	// reset away) granted that fence already (invariant 8). The task
	// grants exactly this fence.
	Fence int64 `json:"fence,omitempty"`
	// Waiting explains an empty WorkerID, naming up to three workers and
	// why each was passed over.
	Waiting string `json:"waiting,omitempty"`
	// PassedOver lists every worker that was considered and why it could
	// not take the task.
	PassedOver []fleet.Ineligible `json:"passed_over,omitempty"`
	// RetryAfter, with an empty WorkerID, is the least wait before the
	// task looks again (nanoseconds in JSON): the control plane spaces
	// the looks of its waiting tasks by how many wait (at most a minute,
	// spread ±50 %); the task waits at least its select_interval.
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	// LockDelayUntil, with an empty WorkerID, is when the lock-delay after
	// an earlier run of the task ends: that run (one an operator
	// terminated or reset away) granted a fence whose command may still
	// run until a lease TTL after the run closed, so no fence is granted
	// before (README guarantee 9).
	LockDelayUntil time.Time `json:"lock_delay_until,omitzero"`
}

// LaunchInput starts one attempt. The task cancels the launch activity in
// the workflow task that ends its lease, so the agent judges whether the
// lease is current from the launch activity itself (a heartbeat the
// Temporal server answers alone).
type LaunchInput struct {
	Envelope envelope.Envelope `json:"envelope"`
	// Lease is the attempt's lease (claim, TTL).
	Lease lease.Lease `json:"lease"`
	// HeartbeatInterval is how often the executor heartbeats the lease.
	HeartbeatInterval time.Duration `json:"heartbeat_interval"`
	// Incarnation is the worker incarnation the reservation was made
	// under (SelectWorkerResult.Incarnation); an agent of another
	// incarnation starts nothing. 0: not known (no check).
	Incarnation int64 `json:"incarnation,omitempty"`
	// Authority is the task's submitter's signature over
	// TaskAuthorityOf(Envelope, Lease.EnvelopeDigest): an agent with
	// identity on launches nothing without it (Agent.LaunchAttempt).
	Authority *identity.Proof `json:"authority,omitempty"`
}

// LaunchFailure is the detail of a launch_failed error of the launch
// activity (Agent.LaunchAttempt): the attempt it did not start, signed
// by the worker's SVID (identity.Verifier.Worker, kind
// LaunchFailedReport). A task believes that the command did not start
// only from a signed one; anyone may fail an activity by its ID.
type LaunchFailure struct {
	Claim
	Detail string `json:"detail"`
	// Proof is the worker's signature over the rest of the failure.
	Proof *identity.Proof `json:"proof,omitempty"`
}

// WorkerLossCheck is what a worker's registry entry says of a
// worker-lost signal (Control.CheckWorkerLoss), which anyone may send: a
// task revokes a lease only on a loss the entry does not refute, and
// skips the lock-delay only when the entry agrees.
type WorkerLossCheck struct {
	// Refuted: the entry is ACTIVE or DRAINING in the signal's
	// incarnation and holds its reservation, or never had that
	// incarnation.
	Refuted bool `json:"refuted,omitempty"`
	// State is the entry's state (api.WorkerReregistered when a later
	// incarnation replaced the signal's, "" when the entry is gone), and
	// LivenessFenced its registration's.
	State          string `json:"state,omitempty"`
	LivenessFenced bool   `json:"liveness_fenced,omitempty"`
}

// LaunchResult says where the attempt runs.
type LaunchResult struct {
	// TaskDir is <work-dir>/<task>/<attempt>-<fence> on the worker.
	TaskDir string `json:"task_dir"`
	// PID is the command's process (group) ID for Local attempts.
	PID int `json:"pid,omitempty"`
}

// CancelAttemptInput stops an attempt whose lease ended (best effort).
type CancelAttemptInput struct {
	Claim
	Reason string `json:"reason"`
}

// IngestInput asks parent ingest to verify and promote a result's staged
// artifacts into the blob store. The ingest also releases the holder's
// reservation (Claim's worker and fence); the task, once it keeps the
// result, is the one that reports it to the run.
type IngestInput struct {
	Claim
	Artifacts []Artifact `json:"artifacts"`
	// Logs are staged in the attempt's log staging dir.
	Logs []Artifact `json:"logs,omitempty"`
	// Report, when set, is sent to the run (signal task-ended) once the
	// ingest kept every artifact and log: the task's report for when it
	// keeps the result in the workflow task running this ingest.
	Report *TaskEndedSignal `json:"report,omitempty"`
}

// IngestResult lists the artifacts and logs now in the blob store.
type IngestResult struct {
	Artifacts []Artifact `json:"artifacts"`
	Logs      []Artifact `json:"logs,omitempty"`
	// Reported says IngestInput.Report reached the run.
	Reported bool `json:"reported,omitempty"`
}

// IngestProgress is the Ingest activity's heartbeat detail: artifacts
// promoted so far, or while one streams, its index (0-based, artifacts
// then logs) and the bytes re-hashed so far. Informational only: a retried
// Ingest starts over.
type IngestProgress struct {
	Artifact int   `json:"artifact"`
	Bytes    int64 `json:"bytes"`
}

// CleanupInput removes a task's staging area once the task has ended.
type CleanupInput struct {
	TaskID string `json:"task_id"`
}

// ReconcileTasksInput names tasks of a run that have not reported an
// outcome and that the run does not watch (TaskIDs: describe each), or
// asks for every task of the run closed without an outcome (ListClosed).
type ReconcileTasksInput struct {
	RunID   string   `json:"run_id"`
	TaskIDs []string `json:"task_ids"`
	// ListClosed finds the run's tasks with one visibility query instead
	// of describing TaskIDs (activities.Control.ReconcileTasks).
	ListClosed bool `json:"list_closed,omitempty"`
	// Reported says each of TaskIDs was named by a task-ended signal: a
	// task whose workflow still runs is returned too once its own lease
	// query answers with a terminal state (the signal itself is not
	// trusted).
	Reported bool `json:"reported,omitempty"`
}

// ReconciledTask is a task whose workflow was found closed, or (Reported)
// running with a terminal state.
type ReconciledTask struct {
	TaskID string `json:"task_id"`
	// Status is the Temporal execution status, e.g. "TERMINATED",
	// "COMPLETED", "RUNNING" or "NOT_FOUND".
	Status string `json:"status"`
	// Outcome is the task's own outcome when its workflow COMPLETED (the
	// task-ended signal may have been lost) or, RUNNING, when its lease
	// query says it ended, with the compact Ref instead of the full
	// Result; nil otherwise.
	Outcome *TaskOutcome `json:"outcome,omitempty"`
}

// ReconcileTasksResult lists the named (or found) tasks whose workflow is
// closed; running ones are left out.
type ReconcileTasksResult struct {
	Closed []ReconciledTask `json:"closed,omitempty"`
}

// StartTasksInput is a batch of tasks a run admitted, for the StartTasks
// activity to start as top-level WdcTask workflows.
type StartTasksInput struct {
	RunID string      `json:"run_id"`
	Tasks []StartTask `json:"tasks"`
}

// StartTask is one task to start: its input as the run built it
// (workflows.TaskStart) and whether it restarts an ABORTED task (a
// terminated execution's workflow ID may then be used again).
type StartTask struct {
	Input TaskInput `json:"input"`
	Rerun bool      `json:"rerun,omitempty"`
}

// StartTasksResult has one entry per task: Errors[i] is empty when task i
// runs (started now, or by an earlier try of the same activity), else why
// it could not start (its workflow ID belongs to another run).
type StartTasksResult struct {
	Errors []string `json:"errors"`
}

// ReservationRef names one reservation a worker holds.
type ReservationRef struct {
	TaskID string `json:"task_id"`
	Fence  int64  `json:"fence"`
}

// LivenessInput names the worker incarnation a liveness activity stands
// for (see activities.Control.HoldLiveness).
type LivenessInput struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
}

// LeaseHoldInput names the lease a lease activity stands for (see
// activities.Control.HoldLease).
type LeaseHoldInput struct {
	TaskID   string `json:"task_id"`
	WorkerID string `json:"worker_id"`
	Attempt  int64  `json:"attempt"`
	Fence    int64  `json:"fence"`
}

// CheckReservationsInput asks the control plane which of a worker's
// reservations no longer match their task's current lease.
type CheckReservationsInput struct {
	WorkerID     string           `json:"worker_id"`
	Reservations []ReservationRef `json:"reservations"`
}

// StaleReservation is a reservation to release and why.
type StaleReservation struct {
	ReservationRef
	// Why is a human-readable cause, e.g. "task's current lease is fence 3
	// on worker-b".
	Why string `json:"why"`
}

// CheckReservationsResult lists the reservations to release; the others
// still belong to their task's selection or current lease.
type CheckReservationsResult struct {
	Stale []StaleReservation `json:"stale,omitempty"`
}
