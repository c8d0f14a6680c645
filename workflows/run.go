package workflows

import (
	"fmt"
	"sort"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/envelope"
	"github.com/wdc-runtime/wdc/internal/fleet"
)

// WdcRun is the parent of a run's tasks (workflow ID api.RunWorkflowID).
// Tasks are added by the add-task update and run as child WdcTask
// workflows (parent-close policy ABANDON, so the run may continue as new
// without touching them); each reports its outcome with the task-ended
// signal. Parent ingest appends one worker_result event per accepted
// result. Evidence, parent_time and the TCD digest change only through the
// commit update (invariant 4).
//
// The run ends once it is closed (close update, or CloseWhenDone) and every
// task has ended.
func WdcRun(ctx workflow.Context, in api.RunInput) (api.RunState, error) {
	r, err := newRunWorkflow(in)
	if err != nil {
		return api.RunState{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrTypeInvalidArgument, nil)
	}
	if err := r.setup(ctx); err != nil {
		return api.RunState{}, err
	}
	return r.run(ctx)
}

type runWorkflow struct {
	st       api.RunState
	wake     workflow.Channel
	endedCh  workflow.ReceiveChannel
	starting int
	saDone   bool
}

// InitialTCD is a run's TCD digest before any commit.
func InitialTCD(runID, worldID string) (string, error) {
	return envelope.DigestOf(struct {
		RunID      string `json:"run_id"`
		WorldID    string `json:"world_id"`
		ParentTime int64  `json:"parent_time"`
	}{runID, worldID, 0})
}

// NextTCD chains a commit onto the previous TCD digest.
func NextTCD(prev string, parentTime int64, committed []api.ResultRef) (string, error) {
	return envelope.DigestOf(struct {
		Previous   string          `json:"previous"`
		ParentTime int64           `json:"parent_time"`
		Committed  []api.ResultRef `json:"committed"`
	}{prev, parentTime, committed})
}

// ResultRefOf is the run's compact record of an accepted result.
func ResultRefOf(r api.TaskResult) (api.ResultRef, error) {
	digest, err := envelope.DigestOf(r)
	if err != nil {
		return api.ResultRef{}, err
	}
	ref := api.ResultRef{
		TaskID: r.TaskID, WorkerID: r.WorkerID, Attempt: r.Attempt, Fence: r.Fence,
		EnvelopeDigest: r.EnvelopeDigest, ExitCode: r.ExitCode, OutputError: r.OutputError,
		Artifacts: len(r.Artifacts), ResultDigest: digest,
	}
	if len(ref.OutputError) > 512 {
		ref.OutputError = ref.OutputError[:512]
	}
	for _, a := range r.Artifacts {
		ref.Bytes += a.SizeBytes
	}
	return ref, nil
}

func newRunWorkflow(in api.RunInput) (*runWorkflow, error) {
	if in.Carry != nil {
		return &runWorkflow{st: *in.Carry}, nil
	}
	if err := fleet.ValidateID("run_id", in.RunID); err != nil {
		return nil, err
	}
	if err := fleet.ValidateID("world_id", in.WorldID); err != nil {
		return nil, err
	}
	tcd, err := InitialTCD(in.RunID, in.WorldID)
	if err != nil {
		return nil, err
	}
	return &runWorkflow{st: api.RunState{
		RunID: in.RunID, WorldID: in.WorldID, Status: api.RunRunning, CloseWhenDone: in.CloseWhenDone,
		Tasks: []api.RunTask{}, Events: []api.Event{}, TCDDigest: tcd,
	}}, nil
}

func (r *runWorkflow) setup(ctx workflow.Context) error {
	r.wake = workflow.NewBufferedChannel(ctx, 1)
	r.endedCh = workflow.GetSignalChannel(ctx, api.SignalTaskEnded)
	if err := workflow.SetQueryHandler(ctx, api.QueryRun, func() (api.RunView, error) { return r.st, nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateAddTask, r.addTask, workflow.UpdateHandlerOptions{Validator: r.validateAddTask}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateCommit, r.commit, workflow.UpdateHandlerOptions{Validator: r.validateCommit}); err != nil {
		return err
	}
	return workflow.SetUpdateHandler(ctx, api.UpdateCloseRun, func(ctx workflow.Context, in api.CloseRunInput) (api.RunView, error) {
		r.st.Closed = true
		r.wake.SendAsync(true)
		return r.st, nil
	})
}

func (r *runWorkflow) run(ctx workflow.Context) (api.RunState, error) {
	r.publish(ctx)
	for {
		r.refreshStatus()
		if r.st.Closed && r.starting == 0 && r.allEnded() {
			if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
				return r.st, err
			}
			r.publish(ctx)
			return r.st, nil
		}
		if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return r.st, r.continueAsNew(ctx)
		}
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(r.endedCh, func(c workflow.ReceiveChannel, _ bool) {
			var out api.TaskEndedSignal
			c.Receive(ctx, &out)
			r.onTaskEnded(ctx, out)
		})
		sel.AddReceive(r.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		sel.Select(ctx)
		if ctx.Err() != nil {
			return r.st, temporal.NewCanceledError("run cancelled")
		}
	}
}

func (r *runWorkflow) validateAddTask(ctx workflow.Context, in api.AddTaskInput) error {
	bad := func(format string, args ...any) error {
		return temporal.NewApplicationError(fmt.Sprintf(format, args...), api.ErrTypeInvalidArgument)
	}
	if err := in.Envelope.Validate(true); err != nil {
		return bad("%v", err)
	}
	digest, err := in.Envelope.Digest()
	if err != nil {
		return bad("%v", err)
	}
	if digest != in.EnvelopeDigest {
		return bad("envelope_digest: %s does not match the envelope (%s)", in.EnvelopeDigest, digest)
	}
	if err := api.CheckLauncher(in.Envelope.Launcher); err != nil {
		return bad("%v", err)
	}
	if in.Envelope.RunID != r.st.RunID {
		return bad("envelope.run_id: %q, this is run %q", in.Envelope.RunID, r.st.RunID)
	}
	if in.Envelope.WorldID != r.st.WorldID {
		return temporal.NewApplicationError(fmt.Sprintf("envelope.world_id: %q, but run %s is in world %q", in.Envelope.WorldID, r.st.RunID, r.st.WorldID), api.ErrTypeConflict)
	}
	if err := in.Options.WithDefaults().Validate(); err != nil {
		return bad("options.%v", err)
	}
	if t := r.task(in.Envelope.TaskID); t != nil {
		if t.EnvelopeDigest != digest {
			return temporal.NewApplicationError(fmt.Sprintf("task_id %q is already in run %s with envelope %s", t.TaskID, r.st.RunID, t.EnvelopeDigest), api.ErrTypeConflict)
		}
		return nil // idempotent re-add
	}
	if r.st.Closed {
		return temporal.NewApplicationError(fmt.Sprintf("run %s is closed", r.st.RunID), api.ErrTypeConflict)
	}
	if len(r.st.Tasks) >= api.MaxTasksPerRun {
		return temporal.NewApplicationError(fmt.Sprintf("run %s has %d tasks, the most a run takes; start another run", r.st.RunID, len(r.st.Tasks)), api.ErrTypeConflict)
	}
	return nil
}

// addTask starts the task as a child and returns once it has started.
func (r *runWorkflow) addTask(ctx workflow.Context, in api.AddTaskInput) (api.AddTaskResult, error) {
	res := api.AddTaskResult{TaskID: in.Envelope.TaskID, WorkflowID: api.TaskWorkflowID(in.Envelope.TaskID), EnvelopeDigest: in.EnvelopeDigest}
	if r.task(in.Envelope.TaskID) != nil {
		res.Existing = true
		return res, nil
	}
	r.st.Tasks = append(r.st.Tasks, api.RunTask{TaskID: in.Envelope.TaskID, EnvelopeDigest: in.EnvelopeDigest, State: api.TaskPending})
	r.starting++
	defer func() { r.starting--; r.wake.SendAsync(true) }()
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            res.WorkflowID,
		TaskQueue:             api.ControlTaskQueue,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			api.SAKind.ValueSet(api.KindTask),
			api.SARunID.ValueSet(r.st.RunID),
			api.SATaskState.ValueSet(string(api.TaskPending)),
		),
	})
	child := workflow.ExecuteChildWorkflow(cctx, WdcTask, api.TaskInput{
		Envelope: in.Envelope, EnvelopeDigest: in.EnvelopeDigest, Options: in.Options,
	})
	if err := child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		r.removeTask(in.Envelope.TaskID)
		return api.AddTaskResult{}, temporal.NewApplicationError(
			fmt.Sprintf("start task %s: %v (task IDs cannot be reused)", in.Envelope.TaskID, err), api.ErrTypeConflict)
	}
	r.refreshStatus()
	r.publish(ctx)
	return res, nil
}

// onTaskEnded is parent ingest's last step: the task's outcome is recorded
// and an accepted result becomes one worker_result event. Reports for
// unknown tasks and repeated reports are ignored.
func (r *runWorkflow) onTaskEnded(ctx workflow.Context, out api.TaskEndedSignal) {
	t := r.task(out.TaskID)
	if t == nil || t.State.Terminal() || !out.State.Terminal() {
		return
	}
	t.State = out.State
	t.Attempts = out.Attempts
	if out.State == api.TaskCompleted && out.Result != nil {
		ref, err := ResultRefOf(*out.Result)
		if err != nil {
			workflow.GetLogger(ctx).Error("result reference", "task", out.TaskID, "error", err)
		} else {
			r.st.Events = append(r.st.Events, api.Event{
				Seq: int64(len(r.st.Events)) + 1, Type: api.EventWorkerResult, Time: workflow.Now(ctx), Result: &ref,
			})
			r.st.WorkerResultEvents++
		}
	}
	if r.st.CloseWhenDone && r.allEnded() {
		r.st.Closed = true
	}
	r.refreshStatus()
	r.publish(ctx)
}

func (r *runWorkflow) validateCommit(ctx workflow.Context, in api.CommitInput) error {
	if len(in.Note) > api.MaxNoteBytes {
		return temporal.NewApplicationError(fmt.Sprintf("note: at most %d bytes (got %d)", api.MaxNoteBytes, len(in.Note)), api.ErrTypeInvalidArgument)
	}
	if in.ExpectedParentTime != r.st.ParentTime {
		return temporal.NewApplicationError(fmt.Sprintf("expected_parent_time: %d, the run is at %d", in.ExpectedParentTime, r.st.ParentTime), api.ErrTypeConflict)
	}
	if len(in.EventSeqs) == 0 {
		return temporal.NewApplicationError("event_seqs: name at least one worker_result event", api.ErrTypeInvalidArgument)
	}
	seen := map[int64]bool{}
	for i, seq := range in.EventSeqs {
		if seq < 1 || seq > int64(len(r.st.Events)) {
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: no event %d", i, seq), api.ErrTypeInvalidArgument)
		}
		ev := r.st.Events[seq-1]
		switch {
		case ev.Type != api.EventWorkerResult:
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: event %d is a %s, not a worker_result", i, seq, ev.Type), api.ErrTypeInvalidArgument)
		case ev.Committed:
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: event %d is already committed", i, seq), api.ErrTypeConflict)
		case seen[seq]:
			return temporal.NewApplicationError(fmt.Sprintf("event_seqs[%d]: event %d named twice", i, seq), api.ErrTypeInvalidArgument)
		}
		seen[seq] = true
	}
	return nil
}

// commit is the parent's own commit: the only code that changes evidence,
// parent_time and the TCD digest.
func (r *runWorkflow) commit(ctx workflow.Context, in api.CommitInput) (api.CommitResult, error) {
	seqs := append([]int64{}, in.EventSeqs...)
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	committed := make([]api.ResultRef, 0, len(seqs))
	for _, seq := range seqs {
		r.st.Events[seq-1].Committed = true
		committed = append(committed, *r.st.Events[seq-1].Result)
	}
	parentTime := r.st.ParentTime + 1
	tcd, err := NextTCD(r.st.TCDDigest, parentTime, committed)
	if err != nil {
		return api.CommitResult{}, err
	}
	r.st.ParentTime = parentTime
	r.st.Evidence += int64(len(committed))
	r.st.TCDDigest = tcd
	rec := api.CommitRecord{EventSeqs: seqs, ParentTime: parentTime, Evidence: r.st.Evidence, TCDDigest: tcd, Note: in.Note}
	r.st.Events = append(r.st.Events, api.Event{Seq: int64(len(r.st.Events)) + 1, Type: api.EventCommit, Time: workflow.Now(ctx), Commit: &rec})
	return rec, nil
}

func (r *runWorkflow) task(id string) *api.RunTask {
	for i := range r.st.Tasks {
		if r.st.Tasks[i].TaskID == id {
			return &r.st.Tasks[i]
		}
	}
	return nil
}

func (r *runWorkflow) removeTask(id string) {
	for i := range r.st.Tasks {
		if r.st.Tasks[i].TaskID == id {
			r.st.Tasks = append(r.st.Tasks[:i], r.st.Tasks[i+1:]...)
			return
		}
	}
}

func (r *runWorkflow) allEnded() bool {
	for _, t := range r.st.Tasks {
		if !t.State.Terminal() {
			return false
		}
	}
	return true
}

func (r *runWorkflow) refreshStatus() {
	switch {
	case len(r.st.Tasks) == 0 || !r.allEnded():
		r.st.Status = api.RunRunning
	default:
		r.st.Status = api.RunCompleted
		for _, t := range r.st.Tasks {
			if t.State != api.TaskCompleted {
				r.st.Status = api.RunIncomplete
			}
		}
	}
}

func (r *runWorkflow) publish(ctx workflow.Context) {
	if r.saDone {
		return
	}
	r.saDone = true
	if err := workflow.UpsertTypedSearchAttributes(ctx, api.SAKind.ValueSet(api.KindRun), api.SARunID.ValueSet(r.st.RunID)); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}

// continueAsNew applies buffered task-ended signals and carries the state.
func (r *runWorkflow) continueAsNew(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	for {
		var out api.TaskEndedSignal
		if !r.endedCh.ReceiveAsync(&out) {
			break
		}
		r.onTaskEnded(ctx, out)
	}
	r.st.ContinuedAsNew++
	st := r.st
	return workflow.NewContinueAsNewError(ctx, WdcRun, api.RunInput{RunID: st.RunID, WorldID: st.WorldID, CloseWhenDone: st.CloseWhenDone, Carry: &st})
}
