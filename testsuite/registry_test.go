package testsuite

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/devserver"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

func listWorkersJSON(t *testing.T, extra ...string) map[string]api.WorkerView {
	t.Helper()
	code, out, errOut := cli(t, append([]string{"workers", "list", "-o", "json"}, extra...)...)
	require.Equal(t, 0, code, errOut)
	var views []api.WorkerView
	require.NoError(t, json.Unmarshal([]byte(out), &views), out)
	byID := map[string]api.WorkerView{}
	for _, v := range views {
		byID[v.WorkerID] = v
	}
	return byID
}

// Two workers registered through the CLI are ACTIVE; the one whose
// heartbeats stop is STALE within stale-after + 2 s, the other stays
// ACTIVE. Bad input registers nothing.
func TestRegistryThroughTheCLI(t *testing.T) {
	a, b := "reg-cli-a", "reg-cli-b"
	for _, id := range []string{a, b} {
		code, out, errOut := cli(t, "workers", "register", "--worker-id", id, "--cpu", "2", "--memory", "4Gi",
			"--label", "zone=eu-1", "--capability", "docker", "--stale-after", "2s", "--offline-after", "30s", "-o", "json")
		require.Equal(t, 0, code, errOut)
		var res api.RegisterResult
		require.NoError(t, json.Unmarshal([]byte(out), &res))
		assert.Equal(t, int64(1), res.Incarnation)
	}
	code, _, errOut := cli(t, "workers", "register", "--worker-id", "reg-cli-bad", "--cpu", "-1")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--cpu")
	code, _, errOut = cli(t, "workers", "register", "--worker-id", "reg-cli-bad", "--label", "no-equals-sign")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "KEY=VALUE")

	var views map[string]api.WorkerView
	waitFor(t, 5*time.Second, "both workers listed ACTIVE", func() bool {
		views = listWorkersJSON(t, "--state", "ACTIVE")
		return views[a].State == fleet.Active && views[b].State == fleet.Active
	})
	assert.Equal(t, int64(2000), views[a].Capacity.CPUMillis)
	assert.Equal(t, int64(4<<30), views[a].Capacity.MemoryBytes)
	assert.Equal(t, map[string]string{"zone": "eu-1"}, views[a].Labels)
	_, err := suite.wdc.Worker(context.Background(), "reg-cli-bad")
	assert.ErrorIs(t, err, wdcclient.ErrNotFound, "bad input registered nothing")

	// a keeps heartbeating through the CLI; b falls silent.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			cli(t, "workers", "heartbeat", "--worker-id", a)
			time.Sleep(400 * time.Millisecond)
		}
	}()
	silentSince := time.Now()
	waitFor(t, 2*time.Second+2*time.Second, "b STALE within stale-after + 2 s", func() bool {
		return listWorkersJSON(t)[b].State == fleet.Stale
	})
	t.Logf("b went STALE %.1fs after its last heartbeat (stale-after 2s)", time.Since(silentSince).Seconds())
	views = listWorkersJSON(t)
	assert.Equal(t, fleet.Active, views[a].State, "a heartbeats and stays ACTIVE")
	assert.WithinDuration(t, time.Now(), views[a].LastHeartbeatAt, 2*time.Second, "its last heartbeat, as Temporal recorded it on the liveness activity")
	// The --state filter is a visibility query, which indexes the state
	// after the registry published it.
	waitFor(t, 5*time.Second, "b listed under --state STALE", func() bool {
		_, ok := listWorkersJSON(t, "--state", "STALE")[b]
		return ok
	})
	assert.NotContains(t, listWorkersJSON(t, "--state", "STALE"), a)

	// Drain: no new reservations; sweep runs.
	code, _, errOut = cli(t, "workers", "drain", "--worker-id", a)
	require.Equal(t, 0, code, errOut)
	code, out, _ := cli(t, "workers", "sweep")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "swept")
	_, err = updateReserve(a, "some-task", 1, resource.List{CPUMillis: 1})
	assert.ErrorContains(t, err, "DRAINING")
}

func updateReserve(workerID, taskID string, fence int64, res resource.List) (api.ReserveResult, error) {
	var out api.ReserveResult
	h, err := suite.client.UpdateWorkflow(context.Background(), client.UpdateWorkflowOptions{
		WorkflowID: api.WorkerWorkflowID(workerID), UpdateName: api.UpdateReserve,
		Args:         []any{api.ReserveInput{TaskID: taskID, Fence: fence, Requirements: fleet.Requirements{Resources: res}}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(context.Background(), &out)
	}
	return out, err
}

func historyLength(t *testing.T, wfID string) int {
	t.Helper()
	return historyLengthIn(t, suite.client, wfID)
}

// historyLengthIn counts the events of a workflow's current run reached
// through c.
func historyLengthIn(t *testing.T, c client.Client, wfID string) int {
	t.Helper()
	iter := c.GetWorkflowHistory(context.Background(), wfID, "", false, 0)
	n := 0
	for iter.HasNext() {
		_, err := iter.Next()
		require.NoError(t, err)
		n++
	}
	return n
}

// A reservation beyond capacity is refused by the update validator and the
// worker's history gains no event; one that fits is recorded.
func TestReserveBeyondCapacityWritesNoHistory(t *testing.T) {
	id := "reserve-hist"
	_, err := suite.wdc.RegisterWorker(context.Background(), fleet.Registration{WorkerID: id, Capacity: resource.List{CPUMillis: 1000, MemoryBytes: 1 << 20}})
	require.NoError(t, err)
	// Measured from after a first accepted reserve: the server persists
	// the first (speculative) workflow task after the one that published
	// the worker's profile in the memo, even for a rejected update.
	before := historyLength(t, api.WorkerWorkflowID(id))
	_, err = updateReserve(id, "t-small", 1, resource.List{CPUMillis: 600})
	require.NoError(t, err)
	// Once the entry is quiet: a workflow task that follows the accepted
	// one is not the rejected updates' doing.
	accepted := historyLength(t, api.WorkerWorkflowID(id))
	for settled := time.Now().Add(time.Second); time.Now().Before(settled); time.Sleep(100 * time.Millisecond) {
		if n := historyLength(t, api.WorkerWorkflowID(id)); n != accepted {
			accepted, settled = n, time.Now().Add(time.Second)
		}
	}
	assert.Greater(t, accepted, before, "an accepted reserve is recorded")

	_, err = updateReserve(id, "t-big", 1, resource.List{CPUMillis: 1500})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "cpu_millis: need 1500, free 400", "reserved capacity counts")
	_, err = updateReserve(id, "t-second", 1, resource.List{CPUMillis: 600})
	assert.ErrorContains(t, err, "free 400")
	assert.Equal(t, accepted, historyLength(t, api.WorkerWorkflowID(id)), "a rejected update writes nothing")
}

// Restarting the server on the same database file keeps the registry.
func TestServerRestartKeepsTheRegistry(t *testing.T) {
	db := filepath.Join(t.TempDir(), "wdc.db")
	dataDir := t.TempDir()
	blobs, err := blobstore.OpenDir(context.Background(), dataDir)
	require.NoError(t, err)
	start := func() (*devserver.Server, client.Client, func()) {
		srv, err := devserver.Start(context.Background(), devserver.Options{DBFilename: db, SearchAttributes: api.SearchAttributes()})
		require.NoError(t, err)
		c, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: quietLogger{}})
		require.NoError(t, err)
		cp := worker.NewControlPlane(c, blobs)
		require.NoError(t, cp.Start())
		return srv, c, func() { cp.Stop(); c.Close(); require.NoError(t, srv.Stop()) }
	}
	srv, c, stop := start()
	wc := &wdcclient.Client{C: c}
	_, err = wc.RegisterWorker(context.Background(), fleet.Registration{WorkerID: "survivor", Capacity: resource.List{CPUMillis: 3000}})
	require.NoError(t, err)
	_, err = wc.RegisterWorker(context.Background(), fleet.Registration{WorkerID: "survivor", Capacity: resource.List{CPUMillis: 3000}})
	require.NoError(t, err)
	_ = srv
	stop()

	_, c2, stop2 := start()
	defer stop2()
	wc2 := &wdcclient.Client{C: c2}
	var v api.WorkerView
	waitFor(t, 20*time.Second, "the registry answers after the restart", func() bool {
		v, err = wc2.Worker(context.Background(), "survivor")
		return err == nil
	})
	assert.Equal(t, int64(2), v.Incarnation, "the incarnation survives the restart")
	assert.Equal(t, int64(3000), v.Capacity.CPUMillis)
	var views []api.WorkerView
	waitFor(t, 10*time.Second, "the worker in visibility after the restart", func() bool {
		views, err = wc2.ListWorkers(context.Background(), "")
		return err == nil && len(views) >= 1
	})
	require.Len(t, views, 1)
	assert.Equal(t, "survivor", views[0].WorkerID)
}

// Two agents started with the same worker ID do not fight: the older one
// sees a newer incarnation and stops, instead of both re-registering in
// turn (and revoking each other's leases). The task of an attempt it ran
// runs again on the new incarnation.
func TestSecondAgentWithTheSameIDTakesOver(t *testing.T) {
	fast := func(o *worker.AgentOptions) {
		o.Registration.StaleAfter, o.Registration.OfflineAfter = 3*time.Second, 30*time.Second
	}
	first := startAgent(t, "dup-a", fast, func(o *worker.AgentOptions) { o.WorkDir = filepath.Join(t.TempDir(), "first") })
	env := taskEnvelope(t, "dup-a-task", `if [ "$WDC_ATTEMPT" = 1 ]; then exec sleep 60; fi; echo ok > outputs/ok`)
	submit(t, env, api.TaskOptions{})
	waitFor(t, 20*time.Second, "the first agent runs the attempt", func() bool { return first.Launcher().Running() == 1 })
	second := startAgent(t, "dup-a", fast, func(o *worker.AgentOptions) { o.WorkDir = filepath.Join(t.TempDir(), "second") })
	assert.Equal(t, int64(2), second.Incarnation())
	select {
	case <-first.Lost():
		assert.ErrorContains(t, first.LostErr(), "another agent registered worker dup-a (incarnation 2")
	case <-time.After(10 * time.Second):
		t.Fatal("the first agent did not give way")
	}
	out, _ := waitOutcome(t, env.TaskID)
	assert.Equal(t, api.TaskCompleted, out.State)
	assert.Equal(t, int64(2), out.Attempts)
	time.Sleep(2 * time.Second)
	v, err := suite.wdc.Worker(context.Background(), "dup-a")
	require.NoError(t, err)
	assert.Equal(t, int64(2), v.Incarnation, "no registration ping-pong")
	assert.Equal(t, fleet.Active, v.State)
	assert.Nil(t, second.LostErr())
}

// With the control plane down, listing workers neither hangs nor hides
// them: states come from visibility, marked as unanswered, and only one
// query is waited for.
func TestListWorkersWithoutAControlPlane(t *testing.T) {
	srv, err := devserver.Start(context.Background(), devserver.Options{SearchAttributes: api.SearchAttributes()})
	require.NoError(t, err)
	defer srv.Stop()
	c, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: quietLogger{}})
	require.NoError(t, err)
	defer c.Close()
	blobs, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	cp := worker.NewControlPlane(c, blobs)
	require.NoError(t, cp.Start())
	wc := &wdcclient.Client{C: c}
	for _, id := range []string{"down-a", "down-b", "down-c"} {
		_, err := wc.RegisterWorker(context.Background(), fleet.Registration{WorkerID: id, Capacity: resource.List{CPUMillis: 1000}})
		require.NoError(t, err)
	}
	// Visibility is written asynchronously: wait until it records the
	// three states before the control plane goes away.
	waitFor(t, 10*time.Second, "visibility records the workers ACTIVE", func() bool {
		states, err := wc.WorkerStates(context.Background())
		if err != nil || len(states) != 3 {
			return false
		}
		for _, st := range states {
			if st.State != fleet.Active {
				return false
			}
		}
		return true
	})
	cp.Stop()

	began := time.Now()
	views, err := wc.ListWorkers(context.Background(), "")
	require.NoError(t, err)
	assert.Less(t, time.Since(began), 8*time.Second, "one 3 s query timeout, not one per worker")
	require.Len(t, views, 3)
	for _, v := range views {
		assert.NotEmpty(t, v.QueryError, v.WorkerID)
		assert.Equal(t, fleet.Active, v.State, "state from visibility")
	}
}

// A live worker's heartbeats are recorded by Temporal on its entry's
// liveness activity: they add nothing to the entry's history and need no
// control plane, so a control plane that is away for longer than the
// offline window leaves a heartbeating worker ACTIVE. A worker whose
// heartbeats stop goes STALE when the server times the activity out; a
// heartbeat signal brings it back with a new liveness activity.
func TestWorkerHeartbeatsCostTheEntryNoHistory(t *testing.T) {
	c, err := client.Dial(client.Options{HostPort: suite.srv.FrontendHostPort(), Namespace: soakNamespace, Logger: quietLogger{}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	wc := &wdcclient.Client{C: c}
	cp := startControlPlane(t, c)
	var sick atomic.Bool
	h, err := worker.StartHeartbeater(context.Background(), c, worker.HeartbeaterOptions{
		Registration: fleet.Registration{WorkerID: "liveness-hb", Capacity: resource.List{CPUMillis: 1000}, StaleAfter: 2 * time.Second, OfflineAfter: 10 * time.Second},
		Interval:     250 * time.Millisecond,
		Healthy: func(context.Context) error {
			if sick.Load() {
				return errors.New("made sick by the test")
			}
			return nil
		},
	})
	require.NoError(t, err)
	t.Cleanup(h.Stop)
	waitFor(t, 10*time.Second, "heartbeats recorded on the liveness activity", func() bool { return h.Stats().ByActivity >= 4 })
	wfID := api.WorkerWorkflowID("liveness-hb")
	before := historyLengthIn(t, c, wfID)
	by := h.Stats().ByActivity
	waitFor(t, 10*time.Second, "12 more heartbeats", func() bool { return h.Stats().ByActivity >= by+12 })
	assert.Equal(t, before, historyLengthIn(t, c, wfID), "heartbeats added no event to the entry's history")
	e, err := wc.DescribeWorker(context.Background(), "liveness-hb")
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), e.LastHeartbeatAt, 2*time.Second, "Temporal records the heartbeats")

	// The control plane away for longer than the offline window.
	cp.Stop()
	time.Sleep(12 * time.Second)
	cp = startControlPlane(t, c)
	waitFor(t, 10*time.Second, "the entry answers again", func() bool {
		_, err := wc.Worker(context.Background(), "liveness-hb")
		return err == nil
	})
	v, err := wc.Worker(context.Background(), "liveness-hb")
	require.NoError(t, err)
	assert.Equal(t, fleet.Active, v.State, "heartbeats kept it live while no control plane ran")
	assert.Equal(t, int64(1), h.Stats().Registrations)

	// Heartbeats stop: STALE within the stale window plus slack.
	sick.Store(true)
	quiet := time.Now()
	waitFor(t, 6*time.Second, "STALE after the heartbeats stopped", func() bool {
		v, err := wc.Worker(context.Background(), "liveness-hb")
		return err == nil && v.State == fleet.Stale
	})
	t.Logf("STALE %.1fs after the last heartbeat (stale-after 2s)", time.Since(quiet).Seconds())
	// and back: the heartbeat signal revives it, then Temporal holds its
	// heartbeats again.
	sick.Store(false)
	by = h.Stats().ByActivity
	waitFor(t, 10*time.Second, "ACTIVE again, heartbeats on a new liveness activity", func() bool {
		v, err := wc.Worker(context.Background(), "liveness-hb")
		return err == nil && v.State == fleet.Active && v.LivenessActivity != "" && h.Stats().ByActivity > by+2
	})
	assert.Equal(t, int64(1), h.Stats().Registrations, "revived, not registered again")
	if *updateHistories {
		writeHistoryFrom(t, c, wfID, "")
	}
}

// An operator's terminate of a registry entry (the Web UI's Terminate,
// `temporal workflow terminate`) does not restart the worker's
// incarnations at 1: the next registration continues above the one the
// terminated entry last published, so a launch queued for an earlier
// incarnation is never taken for the new one's.
func TestRegistrationAfterATerminateContinuesTheIncarnation(t *testing.T) {
	ctx := context.Background()
	const id = "reg-terminated"
	reg := fleet.Registration{WorkerID: id, Capacity: resource.List{CPUMillis: 1000}}
	for want := int64(1); want <= 2; want++ {
		res, err := suite.wdc.RegisterWorker(ctx, reg)
		require.NoError(t, err)
		require.Equal(t, want, res.Incarnation)
	}
	require.NoError(t, suite.client.TerminateWorkflow(ctx, api.WorkerWorkflowID(id), "", "operator test"))
	res, err := suite.wdc.RegisterWorker(ctx, reg)
	require.NoError(t, err)
	assert.Equal(t, int64(3), res.Incarnation, "the incarnation continues above the terminated entry's 2")
	v, err := suite.wdc.Worker(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, fleet.Active, v.State)
	_, err = suite.wdc.DeregisterWorker(ctx, id, true, "test done")
	require.NoError(t, err)
}
