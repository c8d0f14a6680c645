package testsuite

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	raytest "github.com/wdc-runtime/wdc/internal/testenv/ray"
	"github.com/wdc-runtime/wdc/launchers/external"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// nsIdentity is the namespace of TestIdentityRequired: its control plane
// requires signed registrations and results.
const nsIdentity = "wdc-identity"

// issueSigner enrolls worker id with iss and returns its signer.
func issueSigner(t *testing.T, iss *identity.Issuer, id string) *identity.Signer {
	t.Helper()
	svid, err := iss.IssueWorker(id, time.Hour)
	require.NoError(t, err)
	s, err := identity.NewSigner(svid)
	require.NoError(t, err)
	return s
}

// requireRefused asserts that err is an update refusal of type reason,
// as the SDK or wdc's client returns it.
func requireRefused(t *testing.T, err error, reason lease.RejectReason) {
	t.Helper()
	var ae *temporal.ApplicationError
	var we *wdcclient.Error
	switch {
	case errors.As(err, &ae):
		require.Equal(t, string(reason), ae.Type(), "%v", err)
	case errors.As(err, &we):
		require.Equal(t, string(reason), we.Type, "%v", err)
	default:
		t.Fatalf("want a refusal %s, got %v", reason, err)
	}
}

// countEventsIn counts the events of type et in a workflow's current run.
func countEventsIn(t *testing.T, c client.Client, wfID string, et enumspb.EventType) int {
	t.Helper()
	return countMatching(t, c, wfID, func(ev *historypb.HistoryEvent) bool { return ev.GetEventType() == et })
}

// Issue #20, attacks 2 and 3, through the SDK client any namespace member
// has, against a control plane with identity required: a result for a
// running attempt's claim (copied from its lease query) unsigned, signed
// under another worker, with another attempt's key, with a signature
// moved from other content, or under a root the bundle does not hold, is
// refused with its typed reason and leaves no event; the attempt's own
// signed result is then accepted. A registration for the running agent's
// worker ID that is unsigned, signed by another worker, or a replay is
// refused, and the agent keeps its incarnation and keeps running.
func TestIdentityRequired(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain)
	iss, err := identity.NewIssuer(td)
	require.NoError(t, err)
	impostor, err := identity.NewIssuer(td) // same trust domain, a root nobody trusts
	require.NoError(t, err)
	v, err := identity.NewVerifier(identity.ModeRequired, iss.TrustDomain(), iss.Bundle())
	require.NoError(t, err)
	revocations := filepath.Join(t.TempDir(), "revoked.jsonl")
	require.NoError(t, os.WriteFile(revocations, nil, 0o644))
	list, err := identity.OpenRevocationFile(revocations)
	require.NoError(t, err)
	v.Revocations = list
	watchCtx, stopWatch := context.WithCancel(context.Background())
	t.Cleanup(stopWatch)
	go list.Watch(watchCtx, 50*time.Millisecond, func(err error) {
		if err != nil {
			t.Errorf("revocation list: %v", err)
		}
	})
	c := dialNamespace(t, nsIdentity)
	cp := worker.NewControlPlaneWith(c, suite.blobs, worker.ControlPlaneOptions{Identity: v})
	require.NoError(t, cp.Start())
	t.Cleanup(cp.Stop)
	wc := &wdcclient.Client{C: c}
	sweeperID, err := identity.SubmitterID(iss.TrustDomain(), "sweeper")
	require.NoError(t, err)
	sweeperSVID, err := iss.Issue(sweeperID, time.Hour)
	require.NoError(t, err)
	sweeper, err := identity.NewSigner(sweeperSVID)
	require.NoError(t, err)
	sub := &wdcclient.Client{C: c, Signer: sweeper} // submits every task below

	signerA, signerB := issueSigner(t, iss, "id-a"), issueSigner(t, iss, "id-b")

	t.Run("a submission is believed only from a submitter", func(t *testing.T) {
		// Believed, a forged task would join the run and its result could
		// be committed as the run's evidence.
		ctx := context.Background()
		forged := envelope.Envelope{TaskID: "id-forged", RunID: "id-forged-run", WorldID: "identity", Command: []string{"/bin/true"}}
		_, err := wc.SubmitTask(ctx, forged, api.TaskOptions{})
		requireRefused(t, err, lease.RejectUnauthenticated)
		_, err = wc.SubmitTasks(ctx, []envelope.Envelope{forged}, api.TaskOptions{})
		requireRefused(t, err, lease.RejectUnauthenticated)
		_, err = (&wdcclient.Client{C: c, Signer: signerA}).SubmitTask(ctx, forged, api.TaskOptions{})
		requireRefused(t, err, lease.RejectWrongIdentity)
		_, err = wc.Task(ctx, forged.TaskID)
		require.ErrorIs(t, err, wdcclient.ErrNotFound, "no task was started")
	})
	regA := fleet.Registration{WorkerID: "id-a", Capacity: resource.List{CPUMillis: 2000, MemoryBytes: 1 << 30}}
	stale, err := signerA.Sign(api.UpdateRegister, regA, time.Now())
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond) // the agent's registration is signed later
	agent := startAgentOn(t, c, "id-a", func(o *worker.AgentOptions) { o.Identity = signerA })
	require.Equal(t, int64(1), agent.Incarnation())

	label := testLabel(t)
	gate := filepath.Join(t.TempDir(), "gate")
	env := envelope.Envelope{TaskID: "id-task", RunID: "id-run", WorldID: "identity",
		Command:  []string{"/bin/sh", "-c", `while [ ! -e "$GATE" ]; do sleep 0.05; done; echo signed > outputs/out.txt`},
		Env:      map[string]string{"PATH": "/usr/bin:/bin", "GATE": gate},
		Selector: map[string]string{"suite-test": label}}
	_, err = sub.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: time.Minute})
	require.NoError(t, err)
	claim := waitLaunched(t, wc, env.TaskID, 1)
	require.Equal(t, "id-a", claim.WorkerID)
	taskWF := api.TaskWorkflowID(env.TaskID)
	accepted := func() int { return countEventsIn(t, c, taskWF, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED) }
	events := historyLengthIn(t, c, taskWF)

	forged := api.SubmitResultInput{Claim: claim, ExitCode: 0}
	signedBy := func(k *identity.AttemptKey, content api.SubmitResultInput) api.SubmitResultInput {
		p, err := k.Sign(api.UpdateSubmitResult, content, time.Now())
		require.NoError(t, err)
		forged := forged
		forged.Proof = p
		return forged
	}
	keyB, err := signerB.Delegate(func() lease.Claim { c := claim; c.WorkerID = "id-b"; return c }(), time.Time{})
	require.NoError(t, err)
	keyB2, err := signerB.Delegate(claim, time.Time{})
	require.NoError(t, err)
	next := claim
	next.Attempt, next.Fence = claim.Attempt+1, claim.Fence+1
	keyNext, err := signerA.Delegate(next, time.Time{})
	require.NoError(t, err)
	keyA, err := signerA.Delegate(claim, time.Time{})
	require.NoError(t, err)
	other := forged
	other.ExitCode = 1
	moved := signedBy(keyA, other)
	moved.ExitCode = 0
	keyImpostor, err := issueSigner(t, impostor, "id-a").Delegate(claim, time.Time{})
	require.NoError(t, err)

	for _, tc := range []struct {
		name string
		in   api.SubmitResultInput
		want lease.RejectReason
	}{
		{"a copied claim, unsigned", forged, lease.RejectUnauthenticated},
		{"another worker's key", signedBy(keyB, forged), lease.RejectWrongIdentity},
		{"another worker delegating this claim", signedBy(keyB2, forged), lease.RejectWrongIdentity},
		{"another attempt's key", signedBy(keyNext, forged), lease.RejectWrongIdentity},
		{"a signature moved from other content", moved, lease.RejectUnauthenticated},
		{"a root the bundle does not hold", signedBy(keyImpostor, forged), lease.RejectUnauthenticated},
	} {
		t.Run("submit-result/"+tc.name, func(t *testing.T) {
			_, err := submitAs(t, c, "forged/"+tc.name, tc.in)
			requireRefused(t, err, tc.want)
		})
	}
	require.Zero(t, accepted(), "no forged result was accepted")
	require.Equal(t, events, historyLengthIn(t, c, taskWF), "the refusals wrote no event")

	t.Run("register takeover", func(t *testing.T) {
		unsigned := regA
		_, err := wc.RegisterWorker(context.Background(), unsigned)
		requireRefused(t, err, lease.RejectUnauthenticated)
		asB := regA
		asB.Proof, err = signerB.Sign(api.UpdateRegister, regA, time.Now())
		require.NoError(t, err)
		_, err = wc.RegisterWorker(context.Background(), asB)
		requireRefused(t, err, lease.RejectWrongIdentity)
		replay := regA
		replay.Proof = stale
		_, err = wc.RegisterWorker(context.Background(), replay)
		requireRefused(t, err, lease.RejectReplayed)

		wv, err := wc.Worker(context.Background(), "id-a")
		require.NoError(t, err)
		require.Equal(t, int64(1), wv.Incarnation, "the real agent keeps its incarnation")
		require.Equal(t, "spiffe://wdc.local/wdc/worker/id-a", wv.Identity)
		require.NoError(t, agent.LostErr(), "the real agent did not give way")
	})

	t.Run("a forged attempt-failed is ignored", func(t *testing.T) {
		// Applied, it would revoke the lease with no lock-delay while the
		// command still runs (invariant 9).
		markers := func() int { return countEventsIn(t, c, taskWF, enumspb.EVENT_TYPE_MARKER_RECORDED) }
		before := markers()
		forged := api.AttemptFailedSignal{Claim: claim, Reason: lease.ReasonInfraKilled, Detail: "forged"}
		require.NoError(t, c.SignalWorkflow(context.Background(), taskWF, "", api.SignalAttemptFailed, forged))
		waitFor(t, 30*time.Second, "the task recorded its verdict on the signal", func() bool { return markers() > before })
		v, err := wc.Task(context.Background(), env.TaskID)
		require.NoError(t, err)
		require.Equal(t, lease.Active, v.Lease.State, "the lease was not revoked")
		require.Equal(t, claim.Fence, v.Lease.Fence)
		require.Empty(t, v.Directives)
	})

	t.Run("a forged worker-lost the registry refutes revokes nothing", func(t *testing.T) {
		// Believed, it would revoke the lease with no lock-delay (a
		// liveness-fenced STALE worker) while the command still runs.
		markers := func() int { return countEventsIn(t, c, taskWF, enumspb.EVENT_TYPE_MARKER_RECORDED) }
		before := markers()
		forged := api.WorkerLostSignal{WorkerID: "id-a", Incarnation: agent.Incarnation(), TaskID: env.TaskID, Fence: claim.Fence,
			State: string(fleet.Stale), LivenessFenced: true}
		require.NoError(t, c.SignalWorkflow(context.Background(), taskWF, "", api.SignalWorkerLost, forged))
		waitFor(t, 30*time.Second, "the task asked the registry", func() bool { return markers() > before })
		v, err := wc.Task(context.Background(), env.TaskID)
		require.NoError(t, err)
		require.Equal(t, lease.Active, v.Lease.State, "the lease was not revoked")
		require.Equal(t, claim.Fence, v.Lease.Fence)
		require.Empty(t, v.Directives)
	})

	t.Run("a forged lease heartbeat renews nothing", func(t *testing.T) {
		// Believed, it would keep a dead attempt's lease from expiring.
		// The executor's own first heartbeat is a signal, signed.
		waitFor(t, 30*time.Second, "the executor's signed heartbeat signal", func() bool {
			v, err := wc.Task(context.Background(), env.TaskID)
			return err == nil && v.Stats.HeartbeatsAccepted > 0
		})
		markers := func() int { return countEventsIn(t, c, taskWF, enumspb.EVENT_TYPE_MARKER_RECORDED) }
		before := markers()
		const far = 1 << 40
		beat := func(k *identity.AttemptKey) api.LeaseHeartbeatSignal {
			hb := api.LeaseHeartbeatSignal{Claim: claim, Seq: far}
			if k != nil {
				p, err := k.Sign(api.SignalLeaseHeartbeat, hb, time.Now())
				require.NoError(t, err)
				hb.Proof = p
			}
			return hb
		}
		for _, hb := range []api.LeaseHeartbeatSignal{beat(nil), beat(keyB2), beat(keyNext), beat(keyImpostor)} {
			require.NoError(t, c.SignalWorkflow(context.Background(), taskWF, "", api.SignalLeaseHeartbeat, hb))
		}
		waitFor(t, 30*time.Second, "the task recorded its verdicts", func() bool { return markers() >= before+4 })
		v, err := wc.Task(context.Background(), env.TaskID)
		require.NoError(t, err)
		require.Less(t, v.Lease.HeartbeatSeq, int64(far), "no forged heartbeat renewed the lease")
		require.Equal(t, map[string]int64{string(lease.RejectUnauthenticated): 2, string(lease.RejectWrongIdentity): 2}, v.Stats.HeartbeatsRejected)
	})

	require.NoError(t, os.WriteFile(gate, []byte("go"), 0o644))
	out, err := waitTaskIn(t, wc, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, out.State)
	require.Equal(t, 1, accepted(), "the attempt's own signed result")
	view, err := wc.Task(context.Background(), env.TaskID)
	require.NoError(t, err)
	require.Equal(t, "id-a", view.Result.WorkerID)
	require.Len(t, view.Result.Artifacts, 1)

	t.Run("drain, undrain and deregister are believed only from a submitter or the worker", func(t *testing.T) {
		// Believed unsigned, deregister --force would revoke every lease
		// the worker holds and kill its commands (worker_lost).
		ctx := context.Background()
		_, err := wc.DrainWorker(ctx, "id-a", "forged")
		requireRefused(t, err, lease.RejectUnauthenticated)
		_, err = wc.DeregisterWorker(ctx, "id-a", true, "forged")
		requireRefused(t, err, lease.RejectUnauthenticated)
		_, err = (&wdcclient.Client{C: c, Signer: signerB}).DrainWorker(ctx, "id-a", "another worker")
		requireRefused(t, err, lease.RejectWrongIdentity)
		// A submitter's drain of id-b, moved to id-a's entry.
		moved := api.DrainInput{WorkerID: "id-b", Reason: "for id-b"}
		moved.Proof, err = sweeper.Sign(api.UpdateDrain, moved, time.Now())
		require.NoError(t, err)
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: api.WorkerWorkflowID("id-a"), UpdateName: api.UpdateDrain,
			Args: []any{moved}, WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		requireRefused(t, err, lease.RejectWrongIdentity)
		v, err := wc.Worker(ctx, "id-a")
		require.NoError(t, err)
		require.Equal(t, fleet.Active, v.State, "no forged command moved the entry")

		v, err = (&wdcclient.Client{C: c, Signer: signerA}).DrainWorker(ctx, "id-a", "the agent's own")
		require.NoError(t, err)
		require.Equal(t, fleet.Draining, v.State)
		v, err = sub.UndrainWorker(ctx, "id-a")
		require.NoError(t, err)
		require.Equal(t, fleet.Active, v.State)
	})

	t.Run("the agent's signed launch failure is believed without a lock-delay", func(t *testing.T) {
		// Anyone may fail a launch activity by its ID; an unsigned failure
		// would hold the next attempt back a TTL (the command may run).
		env := envelope.Envelope{TaskID: "id-nolaunch", RunID: "id-run", WorldID: "identity",
			Command:  []string{"/nonexistent/wdc-command"},
			Selector: map[string]string{"suite-test": label}}
		_, err := sub.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: 10 * time.Minute, MaxAttempts: 1})
		require.NoError(t, err)
		out, err := waitTaskIn(t, wc, env.TaskID)
		require.NoError(t, err)
		require.Equal(t, api.TaskRetriesExhausted, out.State)
		v, err := wc.Task(context.Background(), env.TaskID)
		require.NoError(t, err)
		require.Len(t, v.Directives, 1)
		require.Equal(t, lease.ReasonLaunchFailed, v.Directives[0].Reason, "%+v", v.Directives[0])
		require.Zero(t, v.Directives[0].LockDelayUntil, "the worker's signature was believed")
	})

	t.Run("a stopped agent's signed infra_killed report is believed", func(t *testing.T) {
		agentB := startAgentOn(t, c, "id-b", func(o *worker.AgentOptions) {
			o.Identity = signerB
			o.Registration.Labels = map[string]string{"suite-test": label}
		})
		env := envelope.Envelope{TaskID: "id-stop", RunID: "id-run", WorldID: "identity",
			Command:  []string{"/bin/sh", "-c", `if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 60; fi; echo ok > outputs/ok`},
			Env:      map[string]string{"PATH": "/usr/bin:/bin"},
			Selector: map[string]string{"suite-test": label}}
		_, err := sub.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: 5 * time.Minute,
			Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
		require.NoError(t, err)
		first := waitLaunched(t, wc, env.TaskID, 1)
		victim, survivor := agent, "id-b"
		if first.WorkerID == "id-b" {
			victim, survivor = agentB, "id-a"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		victim.Stop(ctx)
		cancel()
		out, err := waitTaskIn(t, wc, env.TaskID)
		require.NoError(t, err)
		require.Equal(t, api.TaskCompleted, out.State)
		v, err := wc.Task(context.Background(), env.TaskID)
		require.NoError(t, err)
		require.Len(t, v.Directives, 1)
		require.Equal(t, lease.ReasonInfraKilled, v.Directives[0].Reason, "the signed report, not the worker's loss, ended attempt 1")
		require.Equal(t, survivor, v.Result.WorkerID)
	})

	t.Run("wdc exec signs with the key spooled for it", func(t *testing.T) {
		svidDir := filepath.Join(t.TempDir(), "id-ext")
		svid, err := iss.IssueWorker("id-ext", time.Hour)
		require.NoError(t, err)
		require.NoError(t, identity.WriteSVID(svidDir, svid, iss.Bundle()))
		spool := filepath.Join(t.TempDir(), "spool")
		spawnAgentArgs(t, "id-ext", "--namespace", nsIdentity, "--launcher", "external", "--spool-dir", spool,
			"--exec-binary", os.Args[0], "--svid-dir", svidDir)
		waitFor(t, 30*time.Second, "id-ext registered", func() bool {
			wv, err := wc.Worker(context.Background(), "id-ext")
			return err == nil && wv.State == fleet.Active
		})
		keyPath := external.KeyFile(spool, lease.Claim{TaskID: "id-ext-task", Attempt: 1, Fence: 1})
		env := envelope.Envelope{TaskID: "id-ext-task", RunID: "id-run", WorldID: "identity",
			// A hostile command: it looks for the attempt's key file.
			Command:  []string{"/bin/sh", "-c", `cat "$KEY" > outputs/stolen.txt 2>&1; echo ok > outputs/done.txt`},
			Env:      map[string]string{"PATH": "/usr/bin:/bin", "KEY": keyPath},
			Selector: map[string]string{"suite-test": testLabel(t)}}
		_, err = sub.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: time.Minute})
		require.NoError(t, err)
		claim := waitLaunched(t, wc, env.TaskID, 1)
		b, err := os.ReadFile(external.SpoolFile(spool, claim))
		require.NoError(t, err)
		var spooled external.Command
		require.NoError(t, json.Unmarshal(b, &spooled))
		require.Contains(t, spooled.Argv, keyPath)
		st, err := os.Stat(keyPath)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

		p := startExec(t, spooled.Argv)
		require.Equal(t, 0, p.wait(t, 60*time.Second), "stderr: %s", p.stderr)
		require.NoFileExists(t, keyPath, "wdc exec removed the key before the command ran")
		out, err := waitTaskIn(t, wc, env.TaskID)
		require.NoError(t, err)
		require.Equal(t, api.TaskCompleted, out.State, "the signed result was accepted")
		view, err := wc.Task(context.Background(), env.TaskID)
		require.NoError(t, err)
		stolen := readArtifactFrom(t, suite.blobs, view.Result, "stolen.txt")
		require.Contains(t, stolen, "No such file", "the command did not find the key")
		require.NotContains(t, stolen, "delegation")
	})

	// A Ray worker's jobs carry their attempt's key: the result is
	// accepted with identity required, and the task's command never sees
	// the key.
	t.Run("a Ray job signs with the key delegated to its attempt", func(t *testing.T) {
		const id = "id-ray"
		dir := filepath.Join(t.TempDir(), id)
		svid, err := iss.IssueWorker(id, time.Hour)
		require.NoError(t, err)
		require.NoError(t, identity.WriteSVID(dir, svid, iss.Bundle()))
		emu := startRay(t, raytest.Options{})
		spawnAgentArgs(t, id, "--namespace", nsIdentity, "--svid-dir", dir, "--launcher", "ray", "--ray-address", emu.URL(),
			"--exec-binary", os.Args[0], "--ray-poll-interval", "200ms")
		waitFor(t, 30*time.Second, id+" registered", func() bool {
			wv, err := wc.Worker(context.Background(), id)
			return err == nil && wv.State == fleet.Active
		})
		env := envelope.Envelope{TaskID: "id-ray-task", RunID: "id-run", WorldID: "identity", Launcher: envelope.LauncherRay,
			Command:  []string{"/bin/sh", "-c", `env | sort > outputs/env.txt`},
			Env:      map[string]string{"PATH": "/usr/bin:/bin"},
			Selector: map[string]string{"suite-test": testLabel(t)}}
		_, err = sub.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: 20 * time.Second})
		require.NoError(t, err)
		out, err := waitTaskIn(t, wc, env.TaskID)
		require.NoError(t, err)
		require.Equal(t, api.TaskCompleted, out.State, "the signed result was accepted")
		view, err := wc.Task(context.Background(), env.TaskID)
		require.NoError(t, err)
		require.Equal(t, id, view.Result.WorkerID)
		require.NotContains(t, readArtifactFrom(t, suite.blobs, view.Result, "env.txt"), external.EnvAttemptKeyData)
	})

	t.Run("enrolling again in place rotates the SVID under running attempts", func(t *testing.T) {
		ctx := context.Background()
		const id = "id-rot"
		dir := filepath.Join(t.TempDir(), id)
		first, err := iss.IssueWorker(id, 20*time.Second)
		require.NoError(t, err)
		require.NoError(t, identity.WriteSVID(dir, first, iss.Bundle()))
		spawnAgentArgs(t, id, "--namespace", nsIdentity, "--svid-dir", dir)
		gate := filepath.Join(t.TempDir(), "gate")
		task := func(taskID string) envelope.Envelope {
			return envelope.Envelope{TaskID: taskID, RunID: "id-rot-run", WorldID: "identity",
				Command:  []string{"/bin/sh", "-c", `while [ ! -e "$GATE" ]; do sleep 0.05; done; echo ok > outputs/ok.txt`},
				Env:      map[string]string{"PATH": "/usr/bin:/bin", "GATE": gate},
				Selector: map[string]string{"suite-test": testLabel(t)}}
		}
		inFlight := task("id-rot-1")
		_, err = sub.SubmitTask(ctx, inFlight, api.TaskOptions{LeaseTTL: 6 * time.Second})
		require.NoError(t, err)
		require.Equal(t, id, waitLaunched(t, wc, inFlight.TaskID, 1).WorkerID)

		// `workers enroll` again, into the same directory; then the first
		// certificate expires while the attempt runs.
		second, err := iss.IssueWorker(id, time.Hour)
		require.NoError(t, err)
		require.NoError(t, identity.WriteSVID(dir, second, iss.Bundle()))
		time.Sleep(time.Until(first.Certificates[0].NotAfter) + time.Second)
		require.NoError(t, os.WriteFile(gate, nil, 0o644))
		after := task("id-rot-2")
		_, err = sub.SubmitTask(ctx, after, api.TaskOptions{LeaseTTL: 6 * time.Second})
		require.NoError(t, err)
		for _, env := range []envelope.Envelope{inFlight, after} {
			out, err := waitTaskIn(t, wc, env.TaskID)
			require.NoError(t, err)
			require.Equal(t, api.TaskCompleted, out.State, env.TaskID)
			view, err := wc.Task(ctx, env.TaskID)
			require.NoError(t, err)
			require.Len(t, view.Leases, 1, "%s: no lease lost to the rotation", env.TaskID)
			require.Equal(t, id, view.Result.WorkerID)
		}
	})

	t.Run("a revoked worker loses its leases and cannot register", func(t *testing.T) {
		ctx := context.Background()
		enroll := func(id string) string {
			dir := filepath.Join(t.TempDir(), id)
			svid, err := iss.IssueWorker(id, time.Hour)
			require.NoError(t, err)
			require.NoError(t, identity.WriteSVID(dir, svid, iss.Bundle()))
			return dir
		}
		active := func(id string) fleet.Worker {
			var wv api.WorkerView
			waitFor(t, 30*time.Second, id+" registered", func() bool {
				var err error
				wv, err = wc.Worker(ctx, id)
				return err == nil && wv.State == fleet.Active
			})
			return wv.Worker
		}
		victim, survivor := "id-rv-a", "id-rv-b"
		agentA := spawnAgentArgs(t, victim, "--namespace", nsIdentity, "--svid-dir", enroll(victim))
		before := active(victim)
		gate := filepath.Join(t.TempDir(), "gate")
		env := envelope.Envelope{TaskID: "id-rv-task", RunID: "id-rv-run", WorldID: "identity",
			Command:  []string{"/bin/sh", "-c", `while [ ! -e "$GATE" ]; do sleep 0.05; done; echo "$WDC_ATTEMPT" > outputs/attempt.txt`},
			Env:      map[string]string{"PATH": "/usr/bin:/bin", "GATE": gate},
			Selector: map[string]string{"suite-test": testLabel(t)}}
		_, err := sub.SubmitTask(ctx, env, api.TaskOptions{LeaseTTL: 6 * time.Second})
		require.NoError(t, err)
		require.Equal(t, victim, waitLaunched(t, wc, env.TaskID, 1).WorkerID)
		spawnAgentArgs(t, survivor, "--namespace", nsIdentity, "--svid-dir", enroll(survivor))
		active(survivor)

		// A certificate the agent could have rotated to without
		// registering again: revoked too.
		rotated := issueSigner(t, iss, victim)

		// Only a submitter may revoke.
		_, err = wc.RevokeWorker(ctx, victim, "unsigned")
		requireRefused(t, err, lease.RejectUnauthenticated)
		_, err = (&wdcclient.Client{C: c, Signer: signerA}).RevokeWorker(ctx, victim, "by a worker")
		requireRefused(t, err, lease.RejectWrongIdentity)
		subID, err := identity.SubmitterID(iss.TrustDomain(), "ops")
		require.NoError(t, err)
		svid, err := iss.Issue(subID, time.Hour)
		require.NoError(t, err)
		ops, err := identity.NewSigner(svid)
		require.NoError(t, err)
		// A revoke signed for one worker does not speak for another.
		other := api.RevokeInput{WorkerID: survivor, Reason: "moved"}
		other.Proof, err = ops.Sign(api.UpdateRevoke, other, time.Now())
		require.NoError(t, err)
		h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: api.WorkerWorkflowID(victim), UpdateName: api.UpdateRevoke,
			Args: []any{other}, WaitForStage: client.WorkflowUpdateStageCompleted})
		require.NoError(t, err)
		require.ErrorContains(t, h.Get(ctx, nil), "does not match")
		rv, err := (&wdcclient.Client{C: c, Signer: ops}).RevokeWorker(ctx, victim, "key leaked")
		require.NoError(t, err)
		require.Equal(t, fleet.Offline, rv.State)
		require.Empty(t, rv.Reservations)
		require.False(t, rv.RevokedThrough.Before(before.IdentityIssuedAt), "certificates through the registered one are refused")
		regRotated := fleet.Registration{WorkerID: victim, Capacity: resource.List{CPUMillis: 1000, MemoryBytes: 1 << 30}}
		regRotated.Proof, err = rotated.Sign(api.UpdateRegister, regRotated, time.Now())
		require.NoError(t, err)
		_, err = wc.RegisterWorker(ctx, regRotated)
		requireRefused(t, err, lease.RejectUnauthenticated)
		require.ErrorContains(t, err, "was revoked")

		_, err = sub.DeregisterWorker(ctx, victim, true, "forget it")
		require.ErrorContains(t, err, "keeps the revocation", "a new entry would not know the revocation")

		// The victim's agent finds itself OFFLINE, and its registration
		// with the revoked certificate is refused.
		agentLog := agentA.Stdout.(*os.File).Name()
		waitFor(t, 30*time.Second, "the revoked agent's registration refused", func() bool {
			return countLogLines(t, agentLog, "was revoked at") > 0
		})
		wv, err := wc.Worker(ctx, victim)
		require.NoError(t, err)
		require.Equal(t, fleet.Offline, wv.State)
		require.Equal(t, before.Incarnation, wv.Incarnation, "no new incarnation")

		// Its task moves to the survivor.
		require.Equal(t, survivor, waitLaunched(t, wc, env.TaskID, 2).WorkerID)
		require.NoError(t, os.WriteFile(gate, nil, 0o644))
		out, err := waitTaskIn(t, wc, env.TaskID)
		require.NoError(t, err)
		require.Equal(t, api.TaskCompleted, out.State)
		view, err := wc.Task(ctx, env.TaskID)
		require.NoError(t, err)
		require.Equal(t, survivor, view.Result.WorkerID)
		require.Equal(t, string(lease.ReasonWorkerLost), view.Leases[0].EndReason)
		require.Equal(t, "2\n", readArtifactFrom(t, suite.blobs, view.Result, "attempt.txt"))

		// Enrolled again (a newer certificate), it registers.
		_ = agentA.Process.Kill()
		_, _ = agentA.Process.Wait()
		time.Sleep(time.Second) // certificate times have whole seconds
		spawnAgentArgs(t, victim, "--namespace", nsIdentity, "--svid-dir", enroll(victim), "--label", "rv=victim")
		after := active(victim)
		require.Equal(t, before.Incarnation+1, after.Incarnation)
		require.True(t, after.IdentityIssuedAt.After(after.RevokedThrough))

		// The leaked certificate cannot speak for the re-enrolled worker's
		// new attempts: it delegates, but under a certificate older than
		// the one the worker registered with.
		gate2 := filepath.Join(t.TempDir(), "gate")
		env2 := env
		env2.TaskID, env2.Env = "id-rv-task-2", map[string]string{"PATH": "/usr/bin:/bin", "GATE": gate2}
		env2.Selector = map[string]string{"suite-test": testLabel(t), "rv": "victim"}
		_, err = sub.SubmitTask(ctx, env2, api.TaskOptions{LeaseTTL: 6 * time.Second})
		require.NoError(t, err)
		claim2 := waitLaunched(t, wc, env2.TaskID, 1)
		require.Equal(t, victim, claim2.WorkerID)
		leaked, err := rotated.Delegate(claim2, time.Time{})
		require.NoError(t, err)
		stolen := api.SubmitResultInput{Claim: claim2, ExitCode: 0}
		stolen.Proof, err = leaked.Sign(api.UpdateSubmitResult, stolen, time.Now())
		require.NoError(t, err)
		_, err = submitAs(t, c, "revoked/leaked", stolen)
		requireRefused(t, err, lease.RejectUnauthenticated)
		require.ErrorContains(t, err, "revoked or rotated away")
		require.NoError(t, os.WriteFile(gate2, nil, 0o644))
		out2, err := waitTaskIn(t, wc, env2.TaskID)
		require.NoError(t, err)
		require.Equal(t, api.TaskCompleted, out2.State, "the worker's own attempt is accepted")
	})

	// An operator (or an attacker with namespace access) terminates a
	// revoked worker's registry entry: the entry's revocation is gone, but
	// the control plane's revocation list still refuses the certificate.
	t.Run("a listed revocation outlives the registry entry's termination", func(t *testing.T) {
		ctx := context.Background()
		const id = "id-crl"
		leaked := issueSigner(t, iss, id)
		register := func(s *identity.Signer) error {
			reg := fleet.Registration{WorkerID: id, Capacity: resource.List{CPUMillis: 1000, MemoryBytes: 1 << 30}}
			var err error
			reg.Proof, err = s.Sign(api.UpdateRegister, reg, time.Now())
			require.NoError(t, err)
			_, err = wc.RegisterWorker(ctx, reg)
			return err
		}
		require.NoError(t, register(leaked))
		subID, err := identity.SubmitterID(iss.TrustDomain(), "ops")
		require.NoError(t, err)
		svid, err := iss.Issue(subID, time.Hour)
		require.NoError(t, err)
		opsDir := filepath.Join(t.TempDir(), "ops")
		require.NoError(t, identity.WriteSVID(opsDir, svid, iss.Bundle()))
		// The operator's command: the registry's revocation, and a line
		// on the list the control plane reads.
		code, stdout, stderr := cli(t, "workers", "revoke", id, "--reason", "key leaked", "-n", nsIdentity,
			"--svid-dir", opsDir, "--revocations", revocations)
		require.Equal(t, cmd.ExitOK, code, "%s%s", stdout, stderr)
		written, err := os.ReadFile(revocations)
		require.NoError(t, err)
		parsed, err := identity.ParseRevocations(written)
		require.NoError(t, err)
		sid, err := identity.WorkerID(iss.TrustDomain(), id)
		require.NoError(t, err)
		require.Contains(t, parsed, sid, "%s", written)
		require.Equal(t, "key leaked", parsed[sid].Reason)

		require.NoError(t, c.TerminateWorkflow(ctx, api.WorkerWorkflowID(id), "", "operator: terminate the revoked entry"))
		waitFor(t, 5*time.Second, "the control plane's list read again", func() bool { _, ok := list.Revoked(sid); return ok })
		err = register(leaked)
		requireRefused(t, err, lease.RejectUnauthenticated)
		require.ErrorContains(t, err, "revocation list")
		wv, err := wc.Worker(ctx, id)
		if err == nil {
			require.NotEqual(t, fleet.Active, wv.State, "the leaked certificate registered nothing")
		}

		time.Sleep(time.Second) // certificate times have whole seconds
		require.NoError(t, register(issueSigner(t, iss, id)), "enrolled again, it registers")
	})

	t.Run("commit and close are believed only from a submitter", func(t *testing.T) {
		ctx := context.Background()
		var rv api.RunView
		waitFor(t, 30*time.Second, "the run recorded its results", func() bool {
			rv, err = wc.Run(ctx, "id-run")
			return err == nil && rv.WorkerResultEvents >= 1
		})
		in := api.CommitInput{ExpectedParentTime: rv.ParentTime, EventSeqs: []int64{rv.Events[0].Seq}}
		_, err := wc.Commit(ctx, "id-run", in)
		requireRefused(t, err, lease.RejectUnauthenticated)
		_, err = (&wdcclient.Client{C: c, Signer: signerA}).Commit(ctx, "id-run", in)
		requireRefused(t, err, lease.RejectWrongIdentity)
		_, err = wc.CloseRun(ctx, "id-run")
		requireRefused(t, err, lease.RejectUnauthenticated)

		subID, err := identity.SubmitterID(iss.TrustDomain(), "alice")
		require.NoError(t, err)
		svid, err := iss.Issue(subID, time.Hour)
		require.NoError(t, err)
		alice, err := identity.NewSigner(svid)
		require.NoError(t, err)
		as := &wdcclient.Client{C: c, Signer: alice}
		rec, err := as.Commit(ctx, "id-run", in)
		require.NoError(t, err)
		require.Equal(t, "spiffe://wdc.local/wdc/submitter/alice", rec.CommittedBy)
		require.Equal(t, rv.ParentTime+1, rec.ParentTime)
		_, err = as.CloseRun(ctx, "id-run")
		require.NoError(t, err)
	})
}
