package testsuite

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/lease"
)

// nsIngestOutage is the namespace of the ingest-outage test: its control
// plane reaches the bucket through a proxy the test cuts.
const nsIngestOutage = "wdc-ingest-outage"

// A store outage longer than the ingest's retries (15 s) while attempt 1's
// result is ingested: the task abandons that result, attempt 2 completes
// once the store is back, and the run records attempt 2's result, the one
// `wdc tasks result` shows — its one worker_result, the task's own outcome.
// The control plane is a `wdc control-plane` process whose bucket is
// behind a TCP proxy; the agent reaches the bucket directly.
func TestStoreOutageDuringIngestLeavesTheRunOnTheKeptResult(t *testing.T) {
	s := newS3Setup(t, nsIngestOutage)
	u, err := url.Parse(s.url)
	require.NoError(t, err)
	q := u.Query()
	endpoint, err := url.Parse(q.Get("endpoint"))
	require.NoError(t, err)
	proxy := startTCPProxy(t, endpoint.Host)
	endpoint.Host = proxy.Addr()
	q.Set("endpoint", endpoint.String())
	u.RawQuery = q.Encode()
	s.spawn(t, "control-plane", "control-plane", "--identity", "off", "--data-dir", s.cpDir, "--blob-url", u.String())
	waitFor(t, 20*time.Second, "the control plane polling wdc-control", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.wc.RequirePoller(ctx, api.ControlTaskQueue) == nil
	})
	s.startS3Agent(t, "ingout-a", s.url)

	env := taskEnvelope(t, "ingout-task", `if [ "$WDC_ATTEMPT" = 1 ]; then sleep 2; fi
echo "attempt $WDC_ATTEMPT" > outputs/out.txt`)
	ctx := context.Background()
	_, err = s.wc.SubmitTask(ctx, env, api.TaskOptions{LeaseTTL: 5 * time.Second, Backoff: lease.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	require.NoError(t, err)
	waitFor(t, 15*time.Second, "attempt 1 running", func() bool {
		v, err := s.wc.Task(ctx, env.TaskID)
		return err == nil && v.AttemptDir != "" && v.Lease != nil && v.Lease.Attempt == 1
	})
	proxy.Cut() // the control plane's store is down
	// Read from the history, not a query: attempt 2's ingest may hold the
	// task's workflow task (the store is still down) until the heal.
	waitFor(t, 60*time.Second, "attempt 1's result abandoned and attempt 2 launched", func() bool {
		return launchesIn(t, s.wc.C, api.TaskWorkflowID(env.TaskID)) >= 2
	})
	proxy.Heal()

	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	out, err := s.wc.WaitTask(wctx, env.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, out.State)
	view, err := s.wc.Task(ctx, env.TaskID) // what `wdc tasks result` shows
	require.NoError(t, err)
	require.NotNil(t, view.Result)
	assert.Equal(t, int64(2), view.Result.Attempt)
	store, err := blobstore.Open(ctx, s.url)
	require.NoError(t, err)
	defer store.Close()
	assert.Equal(t, "attempt 2\n", readArtifactFrom(t, store, view.Result, "out.txt"))
	require.Len(t, view.Leases, 2)
	assert.Equal(t, lease.Expired, view.Leases[0].State, "attempt 1's result abandoned: its lease expired")

	want, err := api.ResultRefOf(*view.Result)
	require.NoError(t, err)
	var run api.RunView
	waitFor(t, 10*time.Second, "the run has the task's outcome", func() bool {
		run, err = s.wc.Run(ctx, env.RunID)
		return err == nil && len(run.Tasks) == 1 && run.Tasks[0].State.Terminal()
	})
	assert.Equal(t, api.TaskCompleted, run.Tasks[0].State)
	assert.Equal(t, int64(2), run.Tasks[0].Attempts)
	require.Equal(t, int64(1), run.WorkerResultEvents)
	require.Len(t, run.Events, 1)
	assert.Equal(t, &want, run.Events[0].Result, "the run's result is the task's")
}

// launchesIn counts the LaunchAttempt activities a workflow scheduled.
func launchesIn(t *testing.T, c client.Client, wfID string) int {
	t.Helper()
	return countMatching(t, c, wfID, func(ev *historypb.HistoryEvent) bool {
		a := ev.GetActivityTaskScheduledEventAttributes()
		return a != nil && a.GetActivityType().GetName() == "LaunchAttempt"
	})
}
