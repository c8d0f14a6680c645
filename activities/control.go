package activities

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

// Control are the control-plane activities. Client reaches the Temporal
// namespace; Blobs is the parent blob store (its data dir holds staging).
// Now reads the wall clock for worker freshness in SelectWorker; nil means
// time.Now (tests set it).
type Control struct {
	Client client.Client
	Blobs  *blobstore.Store
	Now    func() time.Time

	// fleet is the shared list of workers selections draw from.
	fleet fleetView
	// loads holds the workers' records as selections asked for them.
	loads loadCache
	// pacer spaces the looks of tasks that wait for room.
	pacer waitPacer
}

// releaseTimeout bounds one release signal sent after an ambiguous reserve;
// it is sent even when the activity's own context has ended.
const releaseTimeout = 5 * time.Second

// localReleaseMargin is how long before its deadline a local SelectWorker
// stops selecting, so that its releases (concurrent, each within
// releaseTimeout) are done before the SDK retries it.
const localReleaseMargin = releaseTimeout + 2*time.Second

// selectProgress is SelectWorker's activity heartbeat details: every worker
// a reserve for (TaskID, Fence) was sent to, in order. A reserve whose
// answer was lost (a timeout, a crash, an activity retry) may still have
// reserved, so a retry of the activity releases the reservation on each of
// these workers except the one it reserves on.
type selectProgress struct {
	TaskID string   `json:"task_id"`
	Fence  int64    `json:"fence"`
	Tried  []string `json:"tried"`
}

// SelectWorker picks a worker for a task's next lease and reserves capacity
// on it under the given fence, at a cost that does not grow with the
// fleet. The workers' states and profiles come from one visibility list
// shared by the control plane's selections (fleetView, at most
// FleetViewMaxAge old); fleet.Probe rules out the workers that could not
// take the task even when idle and draws fleet.DefaultProbes of the rest
// in an order that differs per selection, so concurrent tasks ask
// different workers instead of herding onto one. The drawn workers are
// asked for their record (query "worker") unless this control plane
// asked less than LoadCacheMaxAge ago and that record, kept current with
// the reservations and releases it made since, says the worker can take
// the task (loadCache); fleet.Place orders the
// eligible answers: workers that lost a lease of the task (AvoidWorkers)
// last, workers whose heartbeat is late (judged
// at the wall clock) after fresh ones, least loaded first, and equally
// good ones in an order seeded by the task and fence
// (fleet.SelectionSeed). They are tried in that order through the reserve
// update, whose validator re-checks on the worker itself, so two tasks
// racing for the last slot cannot both win. When none accepts, a second
// round draws other workers (MaxSelectionRounds), and a list older than
// the selection is refreshed once.
//
// A reserve is never leaked by a lost answer: when one fails with anything
// but a clean rejection (an ApplicationError: the validator or handler
// refused), a release signal for (task, fence) is sent to that worker
// before the next is tried. Every worker sent a reserve is recorded in the
// heartbeat details (selectProgress) first; a retry of the activity
// releases (task, fence) on each worker an earlier attempt tried except
// the one it reserves on (Worker.Reserve is idempotent per task and fence,
// so reserving again where an earlier attempt succeeded is harmless).
// Run as a local activity (as WdcTask runs it) it has no heartbeat
// details, so an attempt that fails releases (task, fence) on every
// worker it sent a reserve to before it returns, and stops selecting early
// enough (localReleaseMargin) for the releases to be done before the SDK
// retries it. What it cannot release — a control plane that dies
// mid-selection, or a workflow task that fails after the selection and
// runs it again, leaving the first one's reservation unclaimed — the
// registry's reservation check releases (a reservation never confirmed by
// a grant).
//
// When no worker can take the task it returns a result with an empty
// WorkerID and Waiting saying why (not an error: waiting is normal), and
// RetryAfter, the least wait before the task looks again: the more tasks
// wait for room on this control plane, the longer each waits, so that
// together they look a bounded number of times a second (waitPacer).
// Errors are transport failures, which are retried.
func (c *Control) SelectWorker(ctx context.Context, in api.SelectWorkerInput) (api.SelectWorkerResult, error) {
	defer observeSince(ctx, api.MetricWorkerSelection, time.Now())
	// Fences never repeat for a task: a run that an operator reset away
	// or terminated may have granted in.Fence already, and its command
	// may run until a TTL after that run closed.
	wc := &wdcclient.Client{C: c.Client}
	self := activity.GetInfo(ctx).WorkflowExecution.RunID
	var bases []string
	if in.Reset {
		var err error
		if bases, err = wc.ResetBases(ctx, in.TaskID, self); err != nil {
			return api.SelectWorkerResult{}, err
		}
	}
	past, err := wc.FenceFloor(ctx, in.TaskID, self, in.Fence, bases...)
	if err != nil {
		return api.SelectWorkerResult{}, err
	}
	if past.Fence >= in.Fence {
		activity.GetLogger(ctx).Warn("an earlier run of the task granted this fence; selecting under a higher one", "task", in.TaskID, "fence", in.Fence, "floor", past.Fence)
		in.Fence = past.Fence + 1
		if res, wait := c.lockDelay(past, in); wait {
			return res, nil
		}
	}
	progress := selectProgress{TaskID: in.TaskID, Fence: in.Fence}
	if activity.HasHeartbeatDetails(ctx) {
		var prev selectProgress
		if err := activity.GetHeartbeatDetails(ctx, &prev); err == nil && prev.TaskID == in.TaskID && prev.Fence == in.Fence {
			progress.Tried = prev.Tried
		}
	}
	earlier := append([]string(nil), progress.Tried...)
	info := activity.GetInfo(ctx)
	sctx := ctx
	if info.IsLocalActivity && !info.Deadline.IsZero() {
		// The releases below must be done before the local activity's
		// deadline, when the SDK starts the retry, which may reserve the
		// same (task, fence) on one of these workers.
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(ctx, info.Deadline.Add(-localReleaseMargin))
		defer cancel()
	}
	res, err := c.selectWorker(sctx, in, &progress)
	if err != nil && info.IsLocalActivity {
		// A local activity has no heartbeat details to tell its retry
		// what it tried: release it all now, concurrently, each within
		// releaseTimeout (a crash before this is left to the registry's
		// reservation check).
		var wg sync.WaitGroup
		for _, id := range progress.Tried {
			wg.Add(1)
			go func() { defer wg.Done(); c.release(ctx, id, in) }()
		}
		wg.Wait()
		return res, err
	}
	if err != nil {
		return res, err // the retry releases what this attempt tried
	}
	if res.WorkerID == "" {
		// Spread over half to one and a half times the pace: tasks that
		// found no room together do not all look again together.
		d, waiting := c.pacer.waited(in.TaskID, time.Now())
		res.RetryAfter = d/2 + rand.N(d+1)
		if res.RetryAfter >= time.Second {
			res.Waiting += fmt.Sprintf("; %d tasks wait for room here: next look in %s", waiting, res.RetryAfter.Round(time.Second))
		}
	} else {
		c.pacer.granted(in.TaskID, time.Now())
		res.Fence = in.Fence
	}
	for _, id := range earlier {
		if id != res.WorkerID {
			c.release(ctx, id, in)
		}
	}
	return res, nil
}

// Selection bounds: a selection asks at most MaxSelectionRounds ×
// fleet.DefaultProbes workers for their record and sends at most as many
// reserves, and lists the fleet at most twice (usually not at all: the
// list is shared, see FleetViewMaxAge) — whatever the fleet's size.
const MaxSelectionRounds = 2

// maxPassedOver bounds the passed-over workers a selection result carries
// into the task's history (the most relevant first); the waiting message
// counts all of them.
const maxPassedOver = 20

func (c *Control) selectWorker(ctx context.Context, in api.SelectWorkerInput, progress *selectProgress) (api.SelectWorkerResult, error) {
	wc := &wdcclient.Client{C: c.Client}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	began := time.Now()
	place := fleet.Placement{Avoid: in.AvoidWorkers, Now: now(), Seed: fleet.SelectionSeed(in.TaskID, in.Fence)}
	// The draw of workers to ask varies per selection, so a task that
	// waits asks other workers next time.
	draw := place
	draw.Now, draw.Seed = time.Time{}, place.Seed+"/"+strconv.FormatUint(rand.Uint64(), 36)

	asked := map[string]bool{}
	var probed []fleet.Ineligible // why asked workers were passed over
	newerThan := began.Add(-FleetViewMaxAge)
	retry := len(place.Avoid) > 0
	if retry {
		// A retry moves away from the worker that lost the lease, to
		// workers that may have registered only since: it waits for a
		// list at most RetryFleetViewMaxAge old (shared, like any list,
		// by the selections that need one).
		newerThan = began.Add(-RetryFleetViewMaxAge)
	}
	relisted := false
	for rounds := 0; ; {
		states, fetched, err := c.fleet.get(ctx, wc, newerThan, !relisted && !retry)
		if err != nil {
			return api.SelectWorkerResult{}, err
		}
		listed := make([]fleet.Listed, len(states))
		active := 0
		for i, st := range states {
			listed[i] = st.Listed()
			if st.State == fleet.Active {
				active++
			}
		}
		drawn, possible, passed := fleet.Probe(listed, in.Requirements, draw, fleet.DefaultProbes, asked)
		if len(drawn) > 0 && rounds < MaxSelectionRounds {
			rounds++
			res, ok, passedHere, err := c.tryWorkers(ctx, wc, drawn, in, place, progress)
			if err != nil || ok {
				return res, err
			}
			for _, id := range drawn {
				asked[id] = true
			}
			probed = append(probed, passedHere...)
			if rounds < MaxSelectionRounds && possible > len(asked) {
				continue // more workers could take it: ask the next ones
			}
		}
		if !relisted && fetched.Before(began) && rounds < MaxSelectionRounds {
			// A shared list from before this selection: a worker may have
			// registered or freed up since; list once more.
			relisted, newerThan = true, fetched
			continue
		}
		passed = append(passed, probed...)
		fleet.SortByRelevance(passed)
		msg := WaitingMessage(active, passed)
		if unasked := possible - len(asked); unasked > 0 {
			msg += fmt.Sprintf(" (%d more that could fit were not asked this time)", unasked)
		}
		return api.SelectWorkerResult{Waiting: msg, PassedOver: passed[:min(len(passed), maxPassedOver)]}, nil
	}
}

// tryWorkers asks the drawn workers for their record (concurrently), ranks
// the answers with fleet.Place and reserves on the first that accepts. ok
// is false when none did; passed says why each was passed over.
func (c *Control) tryWorkers(ctx context.Context, wc *wdcclient.Client, drawn []string, in api.SelectWorkerInput, place fleet.Placement, progress *selectProgress) (res api.SelectWorkerResult, ok bool, passed []fleet.Ineligible, err error) {
	views := make([]api.WorkerView, len(drawn))
	errs := make([]error, len(drawn))
	var wg sync.WaitGroup
	for i, id := range drawn {
		if w, ok := c.loads.fits(id, in.TaskID, in.Requirements, time.Now()); ok {
			views[i] = api.WorkerView{Worker: w, Registered: true}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			qctx, cancel := context.WithTimeout(ctx, workerQueryTimeout)
			defer cancel()
			asked := time.Now()
			views[i], errs[i] = wc.Worker(qctx, id)
			if errs[i] == nil && views[i].LivenessActivity != "" {
				// Its heartbeats are Temporal's to record: the last one
				// says whether it is late (fleet.Worker.Fresh).
				if e, err := wc.DescribeWorker(qctx, id); err == nil && e.LastHeartbeatAt.After(views[i].LastHeartbeatAt) {
					views[i].LastHeartbeatAt = e.LastHeartbeatAt
				}
			}
			if errs[i] == nil && views[i].Registered {
				c.loads.asked(views[i].Worker, asked)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return res, false, nil, ctx.Err()
	}
	workers := make([]fleet.Worker, 0, len(views))
	for i, v := range views {
		switch {
		case errs[i] != nil:
			passed = append(passed, fleet.Ineligible{WorkerID: drawn[i], Reason: "unreachable", Detail: errs[i].Error()})
		case v.Registered:
			workers = append(workers, v.Worker.ForTask(in.TaskID))
		default:
			passed = append(passed, fleet.Ineligible{WorkerID: drawn[i], Reason: fleet.IneligibleState, Detail: "not registered"})
		}
	}
	ranked, rankPassed := fleet.Place(workers, in.Requirements, place)
	passed = append(passed, rankPassed...)
	for _, w := range ranked {
		if !slices.Contains(progress.Tried, w.WorkerID) {
			progress.Tried = append(progress.Tried, w.WorkerID)
		}
		activity.RecordHeartbeat(ctx, *progress)
		var rr api.ReserveResult
		handle, err := c.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID:   api.WorkerWorkflowID(w.WorkerID),
			UpdateName:   api.UpdateReserve,
			Args:         []any{api.ReserveInput{TaskID: in.TaskID, Fence: in.Fence, Requirements: in.Requirements}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = handle.Get(ctx, &rr)
		}
		if err == nil {
			c.loads.reserved(w.WorkerID, in.TaskID, in.Fence, in.Requirements, place.Now)
			return api.SelectWorkerResult{WorkerID: rr.WorkerID, Incarnation: rr.Incarnation, IdentityIssuedAt: rr.IdentityIssuedAt}, true, nil, nil
		}
		c.loads.forget(w.WorkerID)
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) {
			passed = append(passed, fleet.Ineligible{WorkerID: w.WorkerID, Reason: "reserve_rejected", Detail: appErr.Message()})
			continue
		}
		// The reserve may or may not have happened: undo it before moving on.
		activity.GetLogger(ctx).Warn("reserve failed; releasing", "worker", w.WorkerID, "error", err)
		c.release(ctx, w.WorkerID, in)
		if ctx.Err() != nil {
			return res, false, nil, ctx.Err()
		}
		passed = append(passed, fleet.Ineligible{WorkerID: w.WorkerID, Reason: "unreachable", Detail: err.Error()})
	}
	return res, false, passed, nil
}

// workerQueryTimeout bounds one worker query during selection: a worker
// whose registry entry does not answer (the control plane is overloaded)
// is passed over as unreachable.
const workerQueryTimeout = 3 * time.Second

// release sends the release signal for the task's fence to a worker, best
// effort: a worker that holds no such reservation ignores it, and a
// failure is only logged (a retry of the activity releases again).
func (c *Control) release(ctx context.Context, workerID string, in api.SelectWorkerInput) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := c.Client.SignalWorkflow(rctx, api.WorkerWorkflowID(workerID), "", api.SignalRelease, api.ReleaseSignal{TaskID: in.TaskID, Fence: in.Fence})
	c.loads.released(workerID, in.TaskID, in.Fence) // sent or not: the next reserve tells
	if err != nil {
		activity.GetLogger(ctx).Warn("release failed", "worker", workerID, "task", in.TaskID, "fence", in.Fence, "error", err)
	}
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
// attempt's staging keys while it is streamed into the blob store, and
// promoted only when the hash matches. The attempt's staging is removed
// afterwards and the holder's reservation released, and in.Report, if
// any, sent to the run (reportIngested). A repeat of an ingest that
// finished returns the same artifacts (alreadyIngested).
//
// Errors: a non-retryable artifact_mismatch ApplicationError when an
// object is missing or hashes differently; nothing of that result is then
// kept in the store under a wrong name (content-addressed blobs that did
// verify may stay: they are valid content).
func (c *Control) Ingest(ctx context.Context, in api.IngestInput) (api.IngestResult, error) {
	defer observeSince(ctx, api.MetricIngest, time.Now())
	if done, err := c.alreadyIngested(ctx, in); err != nil {
		return api.IngestResult{}, err
	} else if done {
		// A repeat of an ingest that finished (its completion, or the
		// workflow task that recorded a local ingest, was lost): the
		// result is in the store already, and the release is idempotent.
		activity.GetLogger(ctx).Info("ingest already done", "task", in.TaskID, "attempt", in.Attempt, "fence", in.Fence)
		c.releaseHolder(ctx, in)
		return api.IngestResult{Artifacts: in.Artifacts, Logs: in.Logs, Reported: c.reportIngested(ctx, in)}, nil
	}
	arts, err := c.promoteAll(ctx, blobstore.StagingPrefix(in.TaskID, in.Attempt, in.Fence), in.Artifacts)
	if err != nil {
		return api.IngestResult{}, err
	}
	logs, err := c.promoteAll(ctx, blobstore.LogStagingPrefix(in.TaskID, in.Attempt, in.Fence), in.Logs)
	if err != nil {
		return api.IngestResult{}, err
	}
	if err := c.Blobs.RemoveStaging(ctx, in.TaskID, in.Attempt, in.Fence); err != nil {
		activity.GetLogger(ctx).Warn("remove staging", "error", err)
	}
	countIngested(ctx, arts, logs)
	c.releaseHolder(ctx, in)
	return api.IngestResult{Artifacts: arts, Logs: logs, Reported: c.reportIngested(ctx, in)}, nil
}

// reportIngested sends in.Report, if any, to its run (signal
// task-ended), best effort: false when there is none or it did not reach
// the run (the task then reports by itself). The run takes a report as a
// hint and reads the outcome from the task.
func (c *Control) reportIngested(ctx context.Context, in api.IngestInput) bool {
	if in.Report == nil {
		return false
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err := c.Client.SignalWorkflow(rctx, api.RunWorkflowID(in.Report.RunID), "", api.SignalTaskEnded, *in.Report)
	if err != nil {
		activity.GetLogger(ctx).Warn("report with the ingest failed", "task", in.TaskID, "run", in.Report.RunID, "error", err)
		return false
	}
	return true
}

// alreadyIngested reports whether an ingest of in finished before: the
// attempt's staging is gone and every artifact and log it names is in the
// store under its digest (the store is content-addressed). A result with
// nothing to ingest is never "already" ingested. Errors: the store's.
func (c *Control) alreadyIngested(ctx context.Context, in api.IngestInput) (bool, error) {
	files := append(append([]api.Artifact(nil), in.Artifacts...), in.Logs...)
	if len(files) == 0 {
		return false, nil
	}
	for _, prefix := range []string{blobstore.StagingPrefix(in.TaskID, in.Attempt, in.Fence), blobstore.LogStagingPrefix(in.TaskID, in.Attempt, in.Fence)} {
		keys, err := c.Blobs.List(ctx, prefix)
		if err != nil || len(keys) > 0 {
			return false, err
		}
	}
	for _, f := range files {
		ok, err := c.Blobs.Has(ctx, f.Digest)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// releaseHolder releases the holder's reservation once its result is in
// the store, so the task's history records no release signal. Best
// effort, for at most releaseTimeout: it never fails the ingest, which
// cannot be repeated once the staging is gone; the registry's reservation
// check releases a reservation whose task ended. A result the task then
// abandons leaves its lease ACTIVE, and that lease's end releases again
// (a release is idempotent).
func (c *Control) releaseHolder(ctx context.Context, in api.IngestInput) {
	c.release(ctx, in.WorkerID, api.SelectWorkerInput{TaskID: in.TaskID, Fence: in.Fence})
}

// promoteAll re-hashes each staged object under prefix into the blob store.
func (c *Control) promoteAll(ctx context.Context, prefix string, files []api.Artifact) ([]api.Artifact, error) {
	if len(files) == 0 {
		return nil, nil
	}
	out := make([]api.Artifact, 0, len(files))
	hb := &ingestHeartbeat{ctx: ctx}
	for i, a := range files {
		src, err := blobstore.StagedKey(prefix, a.Name)
		if err != nil {
			return nil, temporal.NewNonRetryableApplicationError("artifact name: "+err.Error(), api.ErrTypeArtifactMismatch, nil)
		}
		size, err := c.Blobs.PromoteWithProgress(ctx, src, a.Digest, hb.bytes(i))
		if i == 0 && errors.Is(err, blobstore.ErrNotFound) {
			if keys, lerr := c.Blobs.List(ctx, prefix); lerr == nil && len(keys) == 0 {
				// Not this result's fault: nothing at all is staged where
				// this control plane looks. Retry (another control plane
				// may see it) and say so.
				return nil, fmt.Errorf("nothing staged under %s in blob store %s: agents and control planes must share --blob-url (or --data-dir)", prefix, c.Blobs)
			}
		}
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
		hb.record(api.IngestProgress{Artifact: len(out), Bytes: 0}, true)
	}
	return out, nil
}

// ingestHeartbeatEvery is how often promotion heartbeats while it streams
// one artifact: by bytes, so a large artifact on a slow store does not run
// into the Ingest activity's heartbeat timeout.
var ingestHeartbeatEvery = time.Second

// ingestHeartbeat heartbeats the Ingest activity at most every
// ingestHeartbeatEvery while bytes flow, and after every artifact.
type ingestHeartbeat struct {
	ctx  context.Context
	last time.Time
}

// bytes returns the progress callback for artifact i (0-based).
func (h *ingestHeartbeat) bytes(i int) func(int64) {
	return func(n int64) { h.record(api.IngestProgress{Artifact: i, Bytes: n}, false) }
}

func (h *ingestHeartbeat) record(p api.IngestProgress, force bool) {
	if now := time.Now(); force || now.Sub(h.last) >= ingestHeartbeatEvery {
		h.last = now
		recordHeartbeat(h.ctx, p)
	}
}

// recordHeartbeat is activity.RecordHeartbeat (tests watch the calls: the
// SDK throttles what it sends).
var recordHeartbeat = activity.RecordHeartbeat

// CleanupStaging removes every attempt's staging of an ended task, so a
// stale attempt's outputs never linger (they are never promoted).
func (c *Control) CleanupStaging(ctx context.Context, in api.CleanupInput) error {
	return c.Blobs.RemoveTaskStaging(ctx, in.TaskID)
}

// lockDelay is the waiting result while an earlier run's fence may still
// be held: until the latest close of a run that granted one (now, for a
// run visibility still lists as running), plus the longer of its lease TTL
// and in's. No fence is granted before, as after a lost worker (README
// guarantee 9): that run's heartbeats are refused from its close, so its
// command dies by then.
func (c *Control) lockDelay(earlier wdcclient.EarlierFences, in api.SelectWorkerInput) (api.SelectWorkerResult, bool) {
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	closed := earlier.ClosedAt
	if earlier.Open {
		closed = now
	}
	if closed.IsZero() {
		return api.SelectWorkerResult{}, false
	}
	until := closed.Add(max(earlier.LeaseTTL, in.LeaseTTL))
	if !now.Before(until) {
		return api.SelectWorkerResult{}, false
	}
	how := "closed " + closed.UTC().Format(time.RFC3339)
	if earlier.Open {
		how = "closing now"
	}
	return api.SelectWorkerResult{
		Fence:          in.Fence,
		Waiting:        fmt.Sprintf("fence %d of an earlier run of the task (%s) may be held until %s", in.Fence-1, how, until.UTC().Format(time.RFC3339)),
		RetryAfter:     until.Sub(now),
		LockDelayUntil: until,
	}, true
}

// CheckWorkerLoss reads the registry entry of a worker-lost signal's
// worker (query worker) and says whether it refutes the loss or agrees,
// with its state and liveness fencing (api.WorkerLossCheck). An entry
// that is gone agrees with State "". Errors: the entry could not be read
// (the task then revokes with a lock-delay).
func (c *Control) CheckWorkerLoss(ctx context.Context, lost api.WorkerLostSignal) (api.WorkerLossCheck, error) {
	v, err := (&wdcclient.Client{C: c.Client}).Worker(ctx, lost.WorkerID)
	switch {
	case errors.Is(err, wdcclient.ErrNotFound):
		return api.WorkerLossCheck{}, nil
	case err != nil:
		return api.WorkerLossCheck{}, err
	case !v.Registered || v.Incarnation < lost.Incarnation:
		return api.WorkerLossCheck{Refuted: true}, nil
	case v.Incarnation > lost.Incarnation:
		return api.WorkerLossCheck{State: api.WorkerReregistered, LivenessFenced: v.LivenessFenced}, nil
	}
	if v.State == fleet.Active || v.State == fleet.Draining {
		for _, r := range v.Reservations {
			if r.TaskID == lost.TaskID && r.Fence == lost.Fence {
				return api.WorkerLossCheck{Refuted: true}, nil
			}
		}
	}
	return api.WorkerLossCheck{State: string(v.State), LivenessFenced: v.LivenessFenced}, nil
}
