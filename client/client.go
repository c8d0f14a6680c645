package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
)

// Client wraps a Temporal client with wdc's calls. Only C is required; the
// zero values of the other fields keep calls unbounded and messages without
// the server's address (as the agent and the control activities use it).
type Client struct {
	// C is the connection to Temporal.
	C client.Client
	// Address and Namespace name the server in *UnavailableError messages
	// (e.g. "127.0.0.1:7233", "default"); informational only.
	Address   string
	Namespace string
	// CallTimeout bounds each update and query that waits on the control
	// plane (register, drain, undrain, deregister, worker, submit, task,
	// cancel, start run, run, commit, close); past it the call returns an
	// *UnavailableError. Zero (the default) waits as long as ctx allows.
	CallTimeout time.Duration
	// Signer, when set, signs the submitter's commands that change a run
	// or a task (Commit, CloseRun, CancelTask) with its SVID
	// (spiffe://<td>/wdc/submitter/<name>); a control plane with identity
	// required refuses them unsigned.
	Signer *identity.Signer

	// pollerGrace replaces PollerGrace when set (tests).
	pollerGrace time.Duration
}

// Error is a refusal by a wdc workflow: Type is an api.ErrType* or a
// lease.RejectReason string; Message says why and names the field.
type Error struct {
	Type    string
	Message string
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// IsRunFull reports whether err is a run's refusal of tasks it has no
// room for (api.ErrTypeRunFull): nothing was added, and the same request
// succeeds once the run's tasks end or its results are committed.
func IsRunFull(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Type == api.ErrTypeRunFull
}

// ErrNotFound: the workflow (worker, task or run) does not exist.
var ErrNotFound = errors.New("not found")

// wrap converts Temporal errors: application errors become *Error,
// NotFound becomes ErrNotFound (wrapped with what was looked for); an
// *UnavailableError is returned as is (it names what was being done).
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	var unavailable *UnavailableError
	if errors.As(err, &unavailable) {
		return err
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return &Error{Type: appErr.Type(), Message: appErr.Message()}
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// ---- workers ----

// RegisterWorker registers (or re-registers) a fleet worker with
// UpdateWithStart: the WdcWorker workflow is started when absent. It
// returns the new incarnation.
func (c *Client) RegisterWorker(ctx context.Context, reg api.RegisterInput) (api.RegisterResult, error) {
	var res api.RegisterResult
	if err := reg.Validate(); err != nil {
		return res, &Error{Type: api.ErrTypeInvalidArgument, Message: err.Error()}
	}
	floor, err := c.previousIncarnation(ctx, reg.WorkerID)
	if err != nil {
		return res, err
	}
	start := c.C.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       api.WorkerWorkflowID(reg.WorkerID),
		TaskQueue:                api.RegistryTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			api.SAKind.ValueSet(api.KindWorker), api.SAWorkerID.ValueSet(reg.WorkerID),
		),
		// The registration that starts the entry names it; a later one
		// with another capacity does not change it (current details do).
		StaticSummary: api.WorkerSummary(reg),
	}, api.WorkerWorkflowType, api.WorkerInput{WorkerID: reg.WorkerID, IncarnationFloor: floor})
	op := "register worker " + reg.WorkerID
	err = c.within(ctx, op, func(ctx context.Context) error {
		handle, err := c.C.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: start,
			UpdateOptions: client.UpdateWorkflowOptions{
				UpdateName: api.UpdateRegister, UpdateID: registerUpdateID(reg), Args: []any{reg}, WaitForStage: client.WorkflowUpdateStageCompleted,
			},
		})
		if err == nil {
			err = handle.Get(ctx, &res)
		}
		return err
	})
	return res, wrap(op, err)
}

// sign returns message's proof by c.Signer (nil without one); message
// must not carry its proof yet.
func (c *Client) sign(kind string, message any) (*identity.Proof, error) {
	if c.Signer == nil {
		return nil, nil
	}
	p, err := c.Signer.Sign(kind, message, time.Now())
	if err != nil {
		return nil, fmt.Errorf("sign %s: %w", kind, err)
	}
	return p, nil
}

// registerUpdateID is a signed registration's update ID, from its
// signature, so a retry of the same signed bytes is the same update rather
// than a replay the registry refuses; "" (a new ID) for an unsigned one.
func registerUpdateID(reg api.RegisterInput) string {
	if reg.Proof == nil {
		return ""
	}
	sum := sha256.Sum256(reg.Proof.Signature)
	return "register/" + hex.EncodeToString(sum[:16])
}

// previousIncarnation is the last incarnation of the worker's closed
// registry entry, so a new entry continues above it: a deregistered
// entry's result, else (terminated, failed, timed out) the incarnation its
// memo last published (api.MemoWorkerProfile). 0 when the entry is
// running, never existed, or is not a WdcWorker.
func (c *Client) previousIncarnation(ctx context.Context, workerID string) (int64, error) {
	desc, err := c.C.DescribeWorkflowExecution(ctx, api.WorkerWorkflowID(workerID), "")
	var nf *serviceerror.NotFound
	info := desc.GetWorkflowExecutionInfo()
	switch {
	case errors.As(err, &nf):
		return 0, nil
	case err != nil:
		return 0, wrap("worker "+workerID, err)
	case info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, info.GetType().GetName() != api.WorkerWorkflowType:
		return 0, nil
	}
	var last api.WorkerView
	if err := c.C.GetWorkflow(ctx, api.WorkerWorkflowID(workerID), "").Get(ctx, &last); err == nil {
		return last.Incarnation, nil
	}
	if p := profile(info.GetMemo()); p != nil {
		return p.Incarnation, nil
	}
	return 0, nil
}

// Heartbeat delivers one worker heartbeat as an agent does: on the registry
// entry's liveness activity when it holds one for hb's incarnation
// (LivenessHeartbeat, no workflow task), else as a heartbeat signal
// (WorkerHeartbeat), which brings a STALE worker back. signalled reports
// the latter. Errors: the signal's (ErrNotFound, wrapped, when no entry
// exists) or a transport error of either.
func (c *Client) Heartbeat(ctx context.Context, hb api.WorkerHeartbeatSignal) (signalled bool, err error) {
	err = c.LivenessHeartbeat(ctx, hb.WorkerID, hb.Incarnation, hb.Seq)
	if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrLivenessCancelled) {
		return false, err
	}
	return true, c.WorkerHeartbeat(ctx, hb)
}

// WorkerHeartbeat signals worker-heartbeat.
func (c *Client) WorkerHeartbeat(ctx context.Context, hb api.WorkerHeartbeatSignal) error {
	return wrap("worker "+hb.WorkerID, c.C.SignalWorkflow(ctx, api.WorkerWorkflowID(hb.WorkerID), "", api.SignalWorkerHeartbeat, hb))
}

// ErrLivenessCancelled is returned by LivenessHeartbeat when the registry
// entry cancelled the incarnation's liveness activity: another agent
// registered the worker since (a newer incarnation), so this one should
// find out whether it was taken over (WorkerHeartbeat and DescribeWorker).
var ErrLivenessCancelled = errors.New("the registry entry cancelled this incarnation's liveness")

// LivenessHeartbeat records one heartbeat of a worker incarnation on its
// registry entry's liveness activity (api.LivenessActivityID), by ID: one
// RPC that the Temporal server answers alone, with no workflow task and no
// history event. seq goes into the activity's heartbeat details (shown by
// `temporal workflow describe`). Errors: ErrNotFound when the entry holds
// no started liveness activity for this incarnation (it is STALE or
// OFFLINE, between two runs, not yet started by the control plane, taken
// over, or predates liveness activities): send WorkerHeartbeat instead;
// ErrLivenessCancelled; otherwise a transport error.
func (c *Client) LivenessHeartbeat(ctx context.Context, workerID string, incarnation, seq int64) error {
	return c.heartbeatByID(ctx, api.WorkerWorkflowID(workerID), api.LivenessActivityID(incarnation), seq, ErrLivenessCancelled, "worker "+workerID)
}

// ErrLeaseCancelled is returned by LeaseHeartbeat when the task cancelled
// the lease activity of the heartbeat's fence: the task ended that lease
// (revoked, cancelled, or the task is ending), so the attempt no longer
// holds it and must fence itself.
var ErrLeaseCancelled = errors.New("the task cancelled this lease's activity: the lease ended")

// LeaseHeartbeat records one lease heartbeat on the task's lease activity
// for hb's fence (api.LeaseActivityID), by ID: one RPC that the Temporal
// server answers alone, with no workflow task and no history event. hb.Seq
// goes into the activity's heartbeat details. Errors: ErrNotFound when the
// task holds no started lease activity for this fence (none scheduled
// yet, not started by the control plane, timed out, the task predates
// lease activities, or its workflow has ended): send the lease-heartbeat
// signal instead; ErrLeaseCancelled; otherwise a transport error.
func (c *Client) LeaseHeartbeat(ctx context.Context, hb api.LeaseHeartbeatSignal) error {
	return c.heartbeatByID(ctx, api.TaskWorkflowID(hb.TaskID), api.LeaseActivityID(hb.Fence), hb.Seq, ErrLeaseCancelled, "task "+hb.TaskID)
}

// heartbeatByID heartbeats held activity actID of workflow wfID's current
// run with details seq. A heartbeat the server answers with "cancel
// requested" is cancelled; other errors are wrapped as what.
func (c *Client) heartbeatByID(ctx context.Context, wfID, actID string, seq int64, cancelled error, what string) error {
	err := c.C.RecordActivityHeartbeatByID(ctx, "", wfID, "", actID, seq)
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return cancelled
	}
	return wrap(what, err)
}

// DrainWorker stops new reservations on a worker.
func (c *Client) DrainWorker(ctx context.Context, workerID, reason string) (api.WorkerView, error) {
	var v api.WorkerView
	in := api.DrainInput{Reason: reason, WorkerID: workerID}
	var err error
	if in.Proof, err = c.sign(api.UpdateDrain, in); err != nil {
		return v, err
	}
	err = c.update(ctx, api.WorkerWorkflowID(workerID), "", api.UpdateDrain, in, &v)
	return v, wrap("worker "+workerID, err)
}

// UndrainWorker lets a drained worker take reservations again.
func (c *Client) UndrainWorker(ctx context.Context, workerID string) (api.WorkerView, error) {
	var v api.WorkerView
	in := api.UndrainInput{WorkerID: workerID}
	var err error
	if in.Proof, err = c.sign(api.UpdateUndrain, in); err != nil {
		return v, err
	}
	err = c.update(ctx, api.WorkerWorkflowID(workerID), "", api.UpdateUndrain, in, &v)
	return v, wrap("worker "+workerID, err)
}

// DeregisterWorker removes a worker from the registry (its workflow
// completes). Errors: a conflict *Error while it holds leases, unless force.
func (c *Client) DeregisterWorker(ctx context.Context, workerID string, force bool, reason string) (api.WorkerView, error) {
	var v api.WorkerView
	in := api.DeregisterInput{Force: force, Reason: reason, WorkerID: workerID}
	var err error
	if in.Proof, err = c.sign(api.UpdateDeregister, in); err != nil {
		return v, err
	}
	err = c.update(ctx, api.WorkerWorkflowID(workerID), "", api.UpdateDeregister, in, &v)
	return v, wrap("worker "+workerID, err)
}

// RevokeWorker revokes a worker's identity (api.UpdateRevoke), signed by
// c.Signer: its incarnation ends OFFLINE, its leases are lost, and it
// registers again only with a certificate issued after the revoke. Errors: ErrNotFound, a
// conflict *Error when the control plane runs with identity off, or the
// identity check's reason.
func (c *Client) RevokeWorker(ctx context.Context, workerID, reason string) (api.WorkerView, error) {
	var v api.WorkerView
	in := api.RevokeInput{WorkerID: workerID, Reason: reason}
	p, err := c.sign(api.UpdateRevoke, in)
	if err != nil {
		return v, err
	}
	in.Proof = p
	err = c.update(ctx, api.WorkerWorkflowID(workerID), "", api.UpdateRevoke, in, &v)
	return v, wrap("worker "+workerID, err)
}

// Worker returns one worker's record. Errors: ErrNotFound.
func (c *Client) Worker(ctx context.Context, workerID string) (api.WorkerView, error) {
	var v api.WorkerView
	err := c.within(ctx, "query worker "+workerID, func(ctx context.Context) error {
		resp, err := c.C.QueryWorkflow(ctx, api.WorkerWorkflowID(workerID), "", api.QueryWorker)
		if err == nil {
			err = resp.Get(&v)
		}
		return err
	})
	return v, wrap("worker "+workerID, err)
}

// WorkersQuery is the visibility query for workers, optionally in one state.
func WorkersQuery(state string) string {
	q := fmt.Sprintf(`%s = %q AND ExecutionStatus = "Running"`, api.SAKind.GetName(), api.KindWorker)
	if state != "" {
		q += fmt.Sprintf(` AND %s = %q`, api.SAWorkerState.GetName(), state)
	}
	return q
}

// ListWorkers lists workers through visibility (optionally one state) and
// asks each for its record, sorted by worker ID. A worker whose query is not
// answered within 3 s (the control plane is down) is listed with its
// visibility state and QueryError set, rather than hanging or vanishing;
// after one such timeout the remaining workers are not asked.
func (c *Client) ListWorkers(ctx context.Context, state string) ([]api.WorkerView, error) {
	states, err := c.workerStates(ctx, WorkersQuery(state))
	if err != nil {
		return nil, err
	}
	return c.Views(ctx, states)
}

// Views asks each listed worker for its record, in order, as ListWorkers
// does after its visibility list; a worker whose heartbeats go to a
// liveness activity gets its LastHeartbeatAt from Temporal's description
// of that activity. Errors: ctx ended.
func (c *Client) Views(ctx context.Context, states []WorkerState) ([]api.WorkerView, error) {
	views := make([]api.WorkerView, 0, len(states))
	unanswered := "" // after one query times out, do not wait on the rest
	for _, ws := range states {
		var v api.WorkerView
		err := errors.New(unanswered)
		if unanswered == "" {
			qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			v, err = c.Worker(qctx, ws.WorkerID)
			cancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, context.DeadlineExceeded) {
				unanswered = err.Error()
			}
		}
		if err != nil {
			v = api.WorkerView{QueryError: err.Error()}
			v.WorkerID, v.State = ws.WorkerID, ws.State
		}
		if v.LivenessActivity != "" {
			// Heartbeats on the liveness activity are Temporal's to
			// record, not the entry's: read the last one from there.
			if e, derr := c.DescribeWorker(ctx, ws.WorkerID); derr == nil && e.LastHeartbeatAt.After(v.LastHeartbeatAt) {
				v.LastHeartbeatAt = e.LastHeartbeatAt
			}
		}
		views = append(views, v)
	}
	return views, nil
}

// WorkerState is a worker's state as visibility records it (no query),
// with the profile its registry entry publishes in its memo.
type WorkerState struct {
	WorkerID string      `json:"worker_id"`
	State    fleet.State `json:"state"`
	// Profile is nil when the entry has not published one (records older
	// than published profiles) or it cannot be decoded.
	Profile *fleet.Profile `json:"profile,omitempty"`
}

// Listed is ws as fleet.Probe takes it.
func (ws WorkerState) Listed() fleet.Listed {
	return fleet.Listed{WorkerID: ws.WorkerID, State: ws.State, Profile: ws.Profile}
}

// WorkerStates lists every running registry entry with its state from the
// WdcWorkerState search attribute, without asking the workers.
func (c *Client) WorkerStates(ctx context.Context) ([]WorkerState, error) {
	return c.workerStates(ctx, WorkersQuery(""))
}

// WorkerStatesIn lists the running registry entries whose visibility state
// is state, as WorkerStates does; a watch for a few states of a large
// fleet reads only those.
func (c *Client) WorkerStatesIn(ctx context.Context, state fleet.State) ([]WorkerState, error) {
	return c.workerStates(ctx, WorkersQuery(string(state)))
}

func (c *Client) workerStates(ctx context.Context, query string) ([]WorkerState, error) {
	var out []WorkerState
	var token []byte
	for {
		resp, err := c.C.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 1000})
		if err != nil {
			return nil, wrap("list workers", err)
		}
		for _, ex := range resp.GetExecutions() {
			id := api.WorkerIDFromWorkflowID(ex.GetExecution().GetWorkflowId())
			if id != "" {
				out = append(out, WorkerState{WorkerID: id, State: fleet.State(keyword(ex.GetSearchAttributes(), api.SAWorkerState.GetName())), Profile: profile(ex.GetMemo())})
			}
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			sort.Slice(out, func(i, j int) bool { return out[i].WorkerID < out[j].WorkerID })
			return out, nil
		}
	}
}

// Sweep signals every running worker workflow to re-evaluate liveness now
// and returns how many were signalled.
func (c *Client) Sweep(ctx context.Context) (int, error) {
	ids, err := c.listIDs(ctx, WorkersQuery(""))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if err := c.C.SignalWorkflow(ctx, id, "", api.SignalSweep, api.SweepSignal{}); err == nil {
			n++
		}
	}
	return n, nil
}

// listIDs returns the workflow IDs matching a visibility query.
func (c *Client) listIDs(ctx context.Context, query string) ([]string, error) {
	var ids []string
	var token []byte
	for {
		resp, err := c.C.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 1000})
		if err != nil {
			return nil, wrap("list workflows", err)
		}
		for _, ex := range resp.GetExecutions() {
			ids = append(ids, ex.GetExecution().GetWorkflowId())
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return ids, nil
		}
	}
}

// update sends update name to workflow wfID and waits for its outcome,
// within CallTimeout.
func (c *Client) update(ctx context.Context, wfID, updateID, name string, arg, out any) error {
	return c.within(ctx, name+" "+wfID, func(ctx context.Context) error {
		handle, err := c.C.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: wfID, UpdateID: updateID, UpdateName: name, Args: []any{arg},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		return handle.Get(ctx, out)
	})
}

// WorkerEntry is a registry entry as Temporal itself describes it
// (DescribeWorkflowExecution): no control plane takes part, so reading it
// costs the control plane nothing.
type WorkerEntry struct {
	WorkerState
	// Unprocessed is how long the entry's oldest pending workflow task has
	// waited without being picked up (0 when none waits): messages sent to
	// it (heartbeats) are not being applied, e.g. no control plane polls
	// its task queue.
	Unprocessed time.Duration
	// LastHeartbeatAt is when Temporal last recorded a heartbeat on the
	// entry's pending liveness activity (api.LivenessActivityID) of
	// Incarnation (zero when it holds none, or none was recorded yet).
	LastHeartbeatAt time.Time
}

// DescribeWorker reads worker workerID's entry: its state (the
// WdcWorkerState search attribute), its published profile (with the
// current incarnation) and whether its messages are being processed.
// Errors: ErrNotFound (wrapped) when no entry exists; Temporal's error
// otherwise.
func (c *Client) DescribeWorker(ctx context.Context, workerID string) (WorkerEntry, error) {
	resp, err := c.C.DescribeWorkflowExecution(ctx, api.WorkerWorkflowID(workerID), "")
	if err != nil {
		return WorkerEntry{}, wrap("worker "+workerID, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	e := WorkerEntry{
		WorkerState: WorkerState{
			WorkerID: workerID,
			State:    fleet.State(keyword(info.GetSearchAttributes(), api.SAWorkerState.GetName())),
			Profile:  profile(info.GetMemo()),
		},
	}
	if wft := resp.GetPendingWorkflowTask(); wft != nil && wft.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED {
		at := wft.GetOriginalScheduledTime()
		if at == nil {
			at = wft.GetScheduledTime()
		}
		if at != nil {
			e.Unprocessed = max(0, time.Since(at.AsTime()))
		}
	}
	if e.Profile != nil {
		id := api.LivenessActivityID(e.Profile.Incarnation)
		for _, a := range resp.GetPendingActivities() {
			if a.GetActivityId() == id && a.GetLastHeartbeatTime() != nil {
				e.LastHeartbeatAt = a.GetLastHeartbeatTime().AsTime()
			}
		}
	}
	return e, nil
}
