package activities

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/fleet"
	"github.com/wdc-runtime/wdc/internal/wdcclient"
)

// Control are the control-plane activities. Client reaches the Temporal
// namespace; Blobs is the parent blob store (its data dir holds staging).
type Control struct {
	Client client.Client
	Blobs  *blobstore.Store
}

// SelectWorker picks a worker for a task's next lease and reserves capacity
// on it under the given fence. Candidates are the ACTIVE workers in
// visibility; each is asked for its record (query "worker"), and
// fleet.Rank keeps the eligible ones in preference order (not the last
// holder first, then most free capacity). They are tried in that order
// through the reserve update, whose validator re-checks on the worker
// itself, so two tasks racing for the last slot cannot both win.
//
// When no worker can take the task it returns a result with an empty
// WorkerID and Waiting saying why (not an error: waiting is normal). Errors
// are transport failures, which are retried.
func (c *Control) SelectWorker(ctx context.Context, in api.SelectWorkerInput) (api.SelectWorkerResult, error) {
	wc := &wdcclient.Client{C: c.Client}
	views, err := wc.ListWorkers(ctx, string(fleet.Active))
	if err != nil {
		return api.SelectWorkerResult{}, err
	}
	workers := make([]fleet.Worker, 0, len(views))
	var passed []fleet.Ineligible
	for _, v := range views {
		switch {
		case v.QueryError != "":
			passed = append(passed, fleet.Ineligible{WorkerID: v.WorkerID, Reason: "unreachable", Detail: v.QueryError})
		case v.Registered:
			workers = append(workers, v.Worker)
		}
	}
	ranked, rankPassed := fleet.Rank(workers, in.Requirements, in.AvoidWorker)
	passed = append(rankPassed, passed...)
	for _, w := range ranked {
		var res api.ReserveResult
		handle, err := c.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID:   api.WorkerWorkflowID(w.WorkerID),
			UpdateName:   api.UpdateReserve,
			Args:         []any{api.ReserveInput{TaskID: in.TaskID, Fence: in.Fence, Requirements: in.Requirements}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = handle.Get(ctx, &res)
		}
		if err == nil {
			return api.SelectWorkerResult{WorkerID: res.WorkerID, Incarnation: res.Incarnation}, nil
		}
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			passed = append(passed, fleet.Ineligible{WorkerID: w.WorkerID, Reason: "reserve_rejected", Detail: appErr.Message()})
			continue
		}
		if ctx.Err() != nil {
			return api.SelectWorkerResult{}, ctx.Err()
		}
		passed = append(passed, fleet.Ineligible{WorkerID: w.WorkerID, Reason: "unreachable", Detail: err.Error()})
		activity.GetLogger(ctx).Warn("reserve failed", "worker", w.WorkerID, "error", err)
	}
	if len(workers) == 0 {
		// Say which workers exist in other states (from visibility alone).
		others, err := wc.WorkerStates(ctx)
		if err == nil {
			for _, o := range others {
				passed = append(passed, fleet.Ineligible{WorkerID: o.WorkerID, Reason: fleet.IneligibleState, Detail: "state is " + string(o.State)})
			}
		}
	}
	fleet.SortByRelevance(passed)
	return api.SelectWorkerResult{Waiting: WaitingMessage(len(workers), passed), PassedOver: passed}, nil
}

// WaitingMessage says why no worker could take a task, naming up to three.
func WaitingMessage(active int, passed []fleet.Ineligible) string {
	msg := fmt.Sprintf("none of %d ACTIVE workers can take the task", active)
	switch {
	case active == 0 && len(passed) == 0:
		return "no worker is registered"
	case active == 0:
		msg = "no ACTIVE worker"
	}
	for i, r := range passed {
		if i == 3 {
			msg += fmt.Sprintf("; and %d more", len(passed)-3)
			break
		}
		msg += "; " + r.WorkerID + ": " + r.Reason + " (" + r.Detail + ")"
	}
	return msg
}

// Ingest is parent ingest: each declared artifact is re-hashed from the
// attempt's staging directory while it is copied into the blob store, and
// promoted only when the hash matches. The staging directory is removed
// afterwards.
//
// Errors: a non-retryable artifact_mismatch ApplicationError when a file is
// missing, not regular, or hashes differently; nothing of that result is
// then kept in the store under a wrong name (content-addressed blobs that
// did verify may stay: they are valid content).
func (c *Control) Ingest(ctx context.Context, in api.IngestInput) (api.IngestResult, error) {
	arts, err := c.promoteAll(ctx, c.Blobs.StagingDir(in.TaskID, in.Attempt, in.Fence), in.Artifacts)
	if err != nil {
		return api.IngestResult{}, err
	}
	logs, err := c.promoteAll(ctx, c.Blobs.LogStagingDir(in.TaskID, in.Attempt, in.Fence), in.Logs)
	if err != nil {
		return api.IngestResult{}, err
	}
	if err := c.Blobs.RemoveStaging(in.TaskID, in.Attempt, in.Fence); err != nil {
		activity.GetLogger(ctx).Warn("remove staging", "error", err)
	}
	return api.IngestResult{Artifacts: arts, Logs: logs}, nil
}

// promoteAll re-hashes each staged file of dir into the blob store.
func (c *Control) promoteAll(ctx context.Context, dir string, files []api.Artifact) ([]api.Artifact, error) {
	if len(files) == 0 {
		return nil, nil
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		// Not this result's fault: this control plane does not see the
		// agents' data dir. Retry (another control plane may) and say so.
		return nil, fmt.Errorf("staging directory %s not found on this control plane (data dir %s): agents and control planes must share --data-dir", dir, c.Blobs.Root())
	}
	out := make([]api.Artifact, 0, len(files))
	for _, a := range files {
		src, err := stagedPath(dir, a.Name)
		if err != nil {
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeArtifactMismatch, nil)
		}
		size, err := c.Blobs.Promote(src, a.Digest)
		if err != nil {
			if errors.Is(err, blobstore.ErrDigestMismatch) || errors.Is(err, blobstore.ErrNotFound) {
				return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("artifact %s: %v", a.Name, err), api.ErrTypeArtifactMismatch, nil)
			}
			return nil, fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		if size != a.SizeBytes {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("artifact %s: declared %d bytes, staged %d", a.Name, a.SizeBytes, size), api.ErrTypeArtifactMismatch, nil)
		}
		out = append(out, a)
		activity.RecordHeartbeat(ctx, len(out))
	}
	return out, nil
}

// CleanupStaging removes every attempt's staging of an ended task, so a
// stale attempt's outputs never linger (they are never promoted).
func (c *Control) CleanupStaging(ctx context.Context, in api.CleanupInput) error {
	return c.Blobs.RemoveTaskStaging(in.TaskID)
}
