package testsuite

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/devserver"
	"github.com/wdc-runtime/wdc/lease"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// When the Temporal server is down past a lease's deadline, the lease
// expires promptly once the server is back: the control plane's workflow
// task must not wait on a sticky queue its worker no longer polls.
// Control plane and agent stay up in this process across the outage; the
// server restarts on the same port and database file.
func TestLeaseExpiresPromptlyAfterAServerOutage(t *testing.T) {
	db := filepath.Join(t.TempDir(), "wdc.db")
	port := freeTCPPort(t)
	blobs, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	startServer := func() *devserver.Server {
		srv, err := devserver.Start(context.Background(), devserver.Options{DBFilename: db, Port: port, SearchAttributes: api.SearchAttributes()})
		require.NoError(t, err)
		return srv
	}
	srv := startServer()
	c, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: quietLogger{},
		ConnectionOptions: client.ConnectionOptions{DialOptions: worker.DialOptions()}}) // as wdc control-plane and wdc agent dial
	require.NoError(t, err)
	cp := worker.NewControlPlane(c, blobs)
	require.NoError(t, cp.Start())
	wc := &wdcclient.Client{C: c}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	agent, err := worker.StartAgent(ctx, c, worker.AgentOptions{
		Registration: fleet.Registration{WorkerID: "outage-a", Capacity: resource.List{CPUMillis: 2000}, Labels: map[string]string{"suite-test": testLabel(t)},
			StaleAfter: 30 * time.Second, OfflineAfter: 5 * time.Minute},
		WorkDir: t.TempDir(), Blobs: blobs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	cancel()
	require.NoError(t, err)
	defer func() { // agent and control plane first, the server last
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		agent.Stop(ctx)
		cp.Stop()
		c.Close()
		require.NoError(t, srv.Stop())
	}()

	env := taskEnvelope(t, "outage-task", "exec sleep 120")
	ttl := 3 * time.Second
	_, err = wc.SubmitTask(context.Background(), env, api.TaskOptions{LeaseTTL: ttl, MaxAttempts: 1})
	require.NoError(t, err)
	waitFor(t, 15*time.Second, "attempt 1 running", func() bool {
		v, err := wc.Task(context.Background(), env.TaskID)
		return err == nil && v.AttemptDir != ""
	})

	require.NoError(t, srv.Stop())
	time.Sleep(2 * ttl) // the lease's deadline passes while the server is down
	srv = startServer()
	back := time.Now()

	var first lease.Lease
	waitFor(t, 30*time.Second, "attempt 1's lease ended", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		v, err := wc.Task(ctx, env.TaskID)
		if err != nil || len(v.Leases) == 0 || v.Leases[0].State == lease.Active {
			return false
		}
		first = v.Leases[0]
		return true
	})
	took := first.EndedAt.Sub(back)
	if took >= 2*time.Second {
		it := c.GetWorkflowHistory(context.Background(), api.TaskWorkflowID(env.TaskID), "", false, 0)
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			t.Logf("%6d %-40s %+.3fs", ev.EventId, ev.EventType, ev.EventTime.AsTime().Sub(back).Seconds())
		}
	}
	t.Logf("lease ended %s (%s) %s after the server was back", first.State, first.EndReason, took.Round(time.Millisecond))
	require.Equal(t, lease.Expired, first.State)
	require.Less(t, took, 2*time.Second, "the lease expired late after the outage")
}
