package testsuite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/worker"
	"github.com/wdc-runtime/wdc/workflows"
)

// attackerLaunchType is a workflow of the attacker's own that schedules
// the agent's LaunchAttempt activity with an input of its choosing.
const attackerLaunchType = "AttackerLaunch"

func attackerLaunch(ctx workflow.Context, in api.LaunchInput) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: api.AgentTaskQueue(in.Lease.WorkerID), StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	return workflow.ExecuteActivity(ctx, "LaunchAttempt", in).Get(ctx, nil)
}

// lookAlikeTaskType is registered on the attacker's queue under the
// task's own type name: it answers with a crafted outcome.
func lookAlikeTask(ctx workflow.Context, out api.TaskOutcome) (api.TaskOutcome, error) {
	return out, nil
}

// refusalType is the type of the application error at the root of a
// workflow's failure ("" when there is none).
func refusalType(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Type()
	}
	return ""
}

// Issue #41, doors 1 to 3, through the SDK client any namespace member
// has, against a control plane with identity required and an agent that
// checks launches: work reaches a command only with its submitter's
// signature over the task, and a retry's or cron run's input is no
// carried state. A refused door starts no process, creates no directory
// and leaves the work's own execution failed with the typed reason; the
// submitter's own task runs as before.
func TestDoorsLetInOnlySignedWork(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain)
	iss, err := identity.NewIssuer(td)
	require.NoError(t, err)
	v, err := identity.NewVerifier(identity.ModeRequired, td, iss.Bundle())
	require.NoError(t, err)
	c := dialNamespace(t, nsIdentity)
	cp := worker.NewControlPlaneWith(c, suite.blobs, worker.ControlPlaneOptions{Identity: v})
	require.NoError(t, cp.Start())
	t.Cleanup(cp.Stop)
	aliceID, err := identity.SubmitterID(td, "alice")
	require.NoError(t, err)
	aliceSVID, err := iss.Issue(aliceID, time.Hour)
	require.NoError(t, err)
	alice, err := identity.NewSigner(aliceSVID)
	require.NoError(t, err)
	sub := &wdcclient.Client{C: c, Signer: alice}
	wc := &wdcclient.Client{C: c}

	const workerID = "door-a"
	workDir := filepath.Join(t.TempDir(), "work")
	startAgentOn(t, c, workerID, func(o *worker.AgentOptions) {
		o.Identity, o.Verifier, o.WorkDir = issueSigner(t, iss, workerID), v, workDir
		o.Registration.ReservationCheckAfter = fleet.MinReservationCheckAfter // door 4: the check comes soon
	})
	label := testLabel(t)
	marker := filepath.Join(t.TempDir(), "pwned")
	crafted := func(taskID string) (envelope.Envelope, string) {
		env := envelope.Envelope{TaskID: taskID, RunID: "door-run", WorldID: "doors",
			Command:  []string{"/bin/sh", "-c", "touch " + marker + "; echo ok > outputs/out.txt"},
			Env:      map[string]string{"PATH": "/usr/bin:/bin"},
			Selector: map[string]string{"suite-test": label}}
		env.Normalize()
		d, err := env.Digest()
		require.NoError(t, err)
		return env, d
	}
	nothingRan := func(t *testing.T, taskID string) {
		t.Helper()
		assert.NoFileExists(t, marker, "the crafted command never ran")
		assert.NoDirExists(t, filepath.Join(workDir, taskID), "no task directory was made")
		_, err := os.Stat(filepath.Join(filepath.Dir(workDir), "privdir"))
		assert.True(t, os.IsNotExist(err), "nothing was made outside the work dir")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("the submitter's own task runs", func(t *testing.T) {
		env, _ := crafted("door-signed")
		env.Command = []string{"/bin/sh", "-c", "echo ok > outputs/out.txt"}
		_, err := sub.SubmitTask(ctx, env, api.TaskOptions{})
		require.NoError(t, err)
		out, err := wc.WaitTask(ctx, env.TaskID)
		require.NoError(t, err)
		require.Equal(t, api.TaskCompleted, out.State)
		require.NotNil(t, out.Result)
		assert.Equal(t, workerID, out.Result.WorkerID)

		// The task judged its input once, as a validator does: replayed
		// under a control plane that would now refuse it (another trust
		// bundle), its history replays unchanged.
		other, err := identity.NewIssuer(td)
		require.NoError(t, err)
		strict, err := identity.NewVerifier(identity.ModeRequired, td, other.Bundle())
		require.NoError(t, err)
		var h historypb.History
		iter := c.GetWorkflowHistory(ctx, api.TaskWorkflowID(env.TaskID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			ev, err := iter.Next()
			require.NoError(t, err)
			h.Events = append(h.Events, ev)
		}
		r, err := sdkworker.NewWorkflowReplayerWithOptions(sdkworker.WorkflowReplayerOptions{Interceptors: []interceptor.WorkerInterceptor{workflows.Interceptor(strict)}})
		require.NoError(t, err)
		worker.RegisterWorkflows(r)
		require.NoError(t, r.ReplayWorkflowHistory(nil, &h))
	})

	t.Run("door 1: a task workflow started directly", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			taskID string
			sign   bool // with the submitter's signature over another envelope
			want   lease.RejectReason
		}{
			{"unsigned", "door-direct", false, lease.RejectUnauthenticated},
			{"a submitter's signature moved to another command", "door-moved", true, lease.RejectUnauthenticated},
			{"a task ID that climbs out of the work dir", "../privdir", false, lease.RejectInvalidInput},
		} {
			t.Run(tc.name, func(t *testing.T) {
				env, digest := crafted(tc.taskID)
				in := api.TaskInput{Envelope: env, EnvelopeDigest: digest, Options: api.TaskOptions{}.WithDefaults()}
				if tc.sign {
					other := env
					other.Command = []string{"/bin/true"}
					od, _ := other.Digest()
					in.Authority, err = alice.Sign(api.TaskAuthorityKind, api.TaskAuthorityOf(other, od), time.Now())
					require.NoError(t, err)
				}
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: api.TaskWorkflowID(tc.taskID), TaskQueue: api.ControlTaskQueue},
					api.TaskWorkflowType, in)
				require.NoError(t, err, "any namespace client can start it")
				err = run.Get(ctx, nil)
				require.Error(t, err)
				assert.Equal(t, string(tc.want), refusalType(err), "%v", err)
				nothingRan(t, tc.taskID)
			})
		}
	})

	t.Run("door 2: a launch scheduled by another workflow", func(t *testing.T) {
		queue := "attacker-" + label
		w := sdkworker.New(c, queue, sdkworker.Options{})
		w.RegisterWorkflowWithOptions(attackerLaunch, workflow.RegisterOptions{Name: attackerLaunchType})
		require.NoError(t, w.Start())
		defer w.Stop()
		env, digest := crafted("door-launch")
		in := api.LaunchInput{Envelope: env, HeartbeatInterval: 5 * time.Second,
			Lease: lease.Lease{TaskID: env.TaskID, EnvelopeDigest: digest, WorkerID: workerID, Attempt: 1, Fence: 1,
				State: lease.Active, TTL: 30 * time.Second, GrantedAt: time.Now()}}
		for _, tc := range []struct {
			name string
			sign func(*api.LaunchInput)
			want string
		}{
			{"unsigned", func(*api.LaunchInput) {}, "unauthenticated"},
			{"signed by the worker itself", func(in *api.LaunchInput) {
				in.Authority, err = issueSigner(t, iss, workerID).Sign(api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, digest), time.Now())
				require.NoError(t, err)
			}, "wrong_identity"},
			{"signed by the submitter, scheduled by another workflow", func(in *api.LaunchInput) {
				in.Authority, err = alice.Sign(api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, digest), time.Now())
				require.NoError(t, err)
			}, "wrong_task"},
			{"an input named outside the task directory", func(in *api.LaunchInput) {
				in.Envelope.Inputs = []envelope.Input{{Name: "../../escape", Digest: digest}}
				in.Lease.EnvelopeDigest, _ = in.Envelope.Digest()
			}, "invalid_input"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				in := in
				tc.sign(&in)
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, attackerLaunchType, in)
				require.NoError(t, err)
				err = run.Get(ctx, nil)
				require.Error(t, err)
				assert.Equal(t, api.ErrTypeLaunchFailed, refusalType(err), "%v", err)
				assert.Contains(t, err.Error(), tc.want)
				nothingRan(t, env.TaskID)
			})
		}
		t.Run("signed, scheduled by a look-alike under the task's ID", func(t *testing.T) {
			lw := sdkworker.New(c, queue+"-task", sdkworker.Options{})
			lw.RegisterWorkflowWithOptions(attackerLaunch, workflow.RegisterOptions{Name: api.TaskWorkflowType})
			require.NoError(t, lw.Start())
			defer lw.Stop()
			in := in
			in.Authority, err = alice.Sign(api.TaskAuthorityKind, api.TaskAuthorityOf(in.Envelope, digest), time.Now())
			require.NoError(t, err)
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: api.TaskWorkflowID(env.TaskID), TaskQueue: queue + "-task"}, api.TaskWorkflowType, in)
			require.NoError(t, err)
			err = run.Get(ctx, nil)
			require.Error(t, err)
			assert.Equal(t, api.ErrTypeLaunchFailed, refusalType(err), "%v", err)
			assert.Contains(t, err.Error(), "look-alike")
			nothingRan(t, env.TaskID)
		})
	})

	t.Run("door 4: a look-alike under a task's ID", func(t *testing.T) {
		gate := filepath.Join(t.TempDir(), "gate")
		env, _ := crafted("door-victim")
		env.RunID = "door-victim-run"
		env.Command = []string{"/bin/sh", "-c", `while [ ! -e "$GATE" ]; do sleep 0.05; done`}
		env.Env["GATE"] = gate
		_, err := sub.SubmitTask(ctx, env, api.TaskOptions{})
		require.NoError(t, err)
		waitLaunched(t, wc, env.TaskID, 1)
		wfID := api.TaskWorkflowID(env.TaskID)
		require.NoError(t, c.TerminateWorkflow(ctx, wfID, "", "attacker"))

		queue := "lookalike-" + label
		w := sdkworker.New(c, queue, sdkworker.Options{})
		w.RegisterWorkflowWithOptions(lookAlikeTask, workflow.RegisterOptions{Name: api.TaskWorkflowType})
		require.NoError(t, w.Start())
		defer w.Stop()
		forged := api.TaskOutcome{TaskID: env.TaskID, RunID: env.RunID, State: api.TaskCompleted, Attempts: 1,
			Result: &api.TaskResult{WorkerID: workerID, Attempt: 1, Fence: 1, Artifacts: []api.Artifact{{Name: "out.txt", Digest: "sha256:" + strings.Repeat("e", 64), SizeBytes: 1}}}}
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wfID, TaskQueue: queue}, api.TaskWorkflowType, forged)
		require.NoError(t, err)
		require.NoError(t, run.Get(ctx, nil))
		require.NoError(t, c.SignalWorkflow(ctx, api.RunWorkflowID(env.RunID), "", api.SignalTaskEnded, forged))
		var rv api.RunView
		waitFor(t, 60*time.Second, "the run recorded the victim ended", func() bool {
			rv, err = wc.Run(ctx, env.RunID)
			return err == nil && len(rv.Tasks) == 1 && rv.Tasks[0].State.Terminal()
		})
		assert.Equal(t, api.TaskAborted, rv.Tasks[0].State, "the look-alike's COMPLETED is not the task's")
		assert.Contains(t, rv.Tasks[0].EndDetail, "NOT_A_WDC_TASK")
		assert.Zero(t, rv.WorkerResultEvents, "no worker_result from the look-alike")
		waitFor(t, 60*time.Second, "the victim's reservation released", func() bool {
			wv, err := wc.Worker(ctx, workerID)
			for _, r := range wv.Reservations {
				if r.TaskID == env.TaskID {
					return false
				}
			}
			return err == nil
		})
	})

	t.Run("door 3: a retry's input is no carried state", func(t *testing.T) {
		retry := &temporal.RetryPolicy{MaximumAttempts: 3}
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: api.RunWorkflowID("door-carried"), TaskQueue: api.RunTaskQueue, RetryPolicy: retry,
			WorkflowRunTimeout: time.Minute}, api.RunWorkflowType,
			api.RunInput{RunID: "door-carried", WorldID: "doors", Carry: &api.RunState{RunID: "door-carried", WorldID: "doors", Evidence: 1}})
		require.NoError(t, err)
		err = run.Get(ctx, nil)
		assert.Equal(t, string(lease.RejectInvalidInput), refusalType(err), "%v", err)
		_, err = wc.Run(ctx, "door-carried")
		assert.Error(t, err, "the run holds no state to show")

		ghost := fleet.Worker{WorkerID: "door-ghost", State: fleet.Active, Incarnation: 7}
		run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: api.WorkerWorkflowID("door-ghost"), TaskQueue: api.RegistryTaskQueue, RetryPolicy: retry},
			api.WorkerWorkflowType, api.WorkerInput{WorkerID: "door-ghost", State: &ghost})
		require.NoError(t, err)
		err = run.Get(ctx, nil)
		assert.Equal(t, string(lease.RejectInvalidInput), refusalType(err), "%v", err)
		_, err = wc.Worker(ctx, "door-ghost")
		assert.Error(t, err, "no ghost worker is in the registry")
	})
}
