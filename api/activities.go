package api

import (
	"time"

	"github.com/wdc-runtime/wdc/internal/envelope"
	"github.com/wdc-runtime/wdc/internal/fleet"
	"github.com/wdc-runtime/wdc/internal/lease"
)

// SelectWorkerInput asks the control plane to pick a worker for a task's
// next lease and reserve capacity on it under Fence.
type SelectWorkerInput struct {
	TaskID       string             `json:"task_id"`
	Fence        int64              `json:"fence"`
	Requirements fleet.Requirements `json:"requirements"`
	// AvoidWorker is the last holder; it is chosen only if no other fits.
	// Kept for histories written before AvoidWorkers existed.
	AvoidWorker string `json:"avoid_worker,omitempty"`
	// AvoidWorkers are the workers that lost a lease of this task (expired,
	// worker_lost, launch_failed, infra_killed), oldest first. None of them
	// is chosen while another eligible worker exists.
	AvoidWorkers []string `json:"avoid_workers,omitempty"`
}

// SelectWorkerResult is the reserved worker, or (WorkerID empty) why no
// worker could take the task now. No eligible worker is a normal state of a
// task, not an activity failure.
type SelectWorkerResult struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
	// Waiting explains an empty WorkerID, naming up to three workers and
	// why each was passed over.
	Waiting string `json:"waiting,omitempty"`
	// PassedOver lists every worker that was considered and why it could
	// not take the task.
	PassedOver []fleet.Ineligible `json:"passed_over,omitempty"`
}

// LaunchInput starts one attempt.
type LaunchInput struct {
	Envelope envelope.Envelope `json:"envelope"`
	// Lease is the attempt's lease (claim, TTL).
	Lease lease.Lease `json:"lease"`
	// HeartbeatInterval is how often the executor heartbeats the lease.
	HeartbeatInterval time.Duration `json:"heartbeat_interval"`
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
// artifacts into the blob store.
type IngestInput struct {
	Claim
	Artifacts []Artifact `json:"artifacts"`
	// Logs are staged in the attempt's log staging dir.
	Logs []Artifact `json:"logs,omitempty"`
}

// IngestResult lists the artifacts and logs now in the blob store.
type IngestResult struct {
	Artifacts []Artifact `json:"artifacts"`
	Logs      []Artifact `json:"logs,omitempty"`
}

// CleanupInput removes a task's staging area once the task has ended.
type CleanupInput struct {
	TaskID string `json:"task_id"`
}
