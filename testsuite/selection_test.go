package testsuite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdktestsuite "go.temporal.io/sdk/testsuite"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/wdc-runtime/wdc/activities"
	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/resource"
)

// nsScale holds the simulated fleet of the selection-cost test (its
// workers must not be offered other tests' tasks).
const nsScale = "wdc-scale"

// rpcCounter counts the gRPC calls a Temporal client makes, by method.
type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (r *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r.mu.Lock()
	r.calls[method[strings.LastIndexByte(method, '/')+1:]]++
	r.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (r *rpcCounter) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = map[string]int{}
	return out
}

// A selection's RPCs do not grow with the fleet: on the real server, with
// W = 10 and then W = 500 registered workers (profiles in their memos),
// one selection makes the same calls — one visibility list, at most
// fleet.DefaultProbes worker queries and one reserve update — not one
// query per worker.
func TestSelectionRPCsDoNotGrowWithTheFleet(t *testing.T) {
	c, err := client.Dial(client.Options{HostPort: suite.srv.FrontendHostPort(), Namespace: nsScale, Logger: quietLogger{}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	startControlPlane(t, c)
	counter := &rpcCounter{calls: map[string]int{}}
	counted, err := client.Dial(client.Options{HostPort: suite.srv.FrontendHostPort(), Namespace: nsScale, Logger: quietLogger{},
		ConnectionOptions: client.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(counter.intercept)}}})
	require.NoError(t, err)
	t.Cleanup(counted.Close)

	selectOnce := func(task string) (api.SelectWorkerResult, map[string]int, time.Duration) {
		var ts sdktestsuite.WorkflowTestSuite
		env := ts.NewTestActivityEnvironment()
		env.RegisterActivity(&activities.Control{Client: counted}) // a new control plane: nothing cached
		counter.take()
		began := time.Now()
		val, err := env.ExecuteActivity("SelectWorker", api.SelectWorkerInput{TaskID: task, Fence: 1, Requirements: fleet.Requirements{Resources: resource.List{CPUMillis: 500}}})
		took := time.Since(began)
		require.NoError(t, err)
		var res api.SelectWorkerResult
		require.NoError(t, val.Get(&res))
		require.NotEmpty(t, res.WorkerID, "waiting: %s", res.Waiting)
		return res, counter.take(), took
	}

	calls := map[int]map[string]int{}
	for _, w := range []int{10, 500} {
		began := time.Now()
		registerFleet(t, c, len(calls)*10, w)
		waitFor(t, 60*time.Second, fmt.Sprintf("visibility lists %d workers with profiles", w), func() bool {
			states, err := wdcClient(c).WorkerStates(context.Background())
			if err != nil || len(states) != w {
				return false
			}
			for _, st := range states {
				if st.Profile == nil || st.State != fleet.Active {
					return false
				}
			}
			return true
		})
		registered := time.Since(began)
		res, n, took := selectOnce(fmt.Sprintf("select-%d", w))
		t.Logf("W=%d: registered in %s; selection chose %s in %s with %v", w, registered.Round(time.Millisecond), res.WorkerID, took.Round(time.Millisecond), n)
		calls[w] = n
		if *updateHistories && w == 10 {
			writeHistoryFrom(t, c, api.WorkerWorkflowID(res.WorkerID), "") // profile in the memo, one reserve
		}
	}
	assert.Equal(t, calls[10], calls[500], "the same calls with 10 and 500 workers")
	// One fleet listing, and the task's fence floor (Client.FenceFloor).
	assert.Equal(t, 2, calls[500]["ListWorkflowExecutions"])
	assert.Equal(t, fleet.DefaultProbes, calls[500]["QueryWorkflow"])
	assert.Equal(t, 1, calls[500]["UpdateWorkflowExecution"])
}

// registerFleet registers workers sim-<from> … sim-<to-1> in parallel,
// ACTIVE for an hour without heartbeats.
func registerFleet(t *testing.T, c client.Client, from, to int) {
	t.Helper()
	wc := &wdcclient.Client{C: c}
	var g errgroup.Group
	g.SetLimit(8)
	for i := from; i < to; i++ {
		g.Go(func() error {
			_, err := wc.RegisterWorker(context.Background(), fleet.Registration{
				WorkerID: fmt.Sprintf("sim-%04d", i), Capacity: resource.List{CPUMillis: 4000, MemoryBytes: 8 << 30},
				StaleAfter: time.Hour, OfflineAfter: 2 * time.Hour,
			})
			return err
		})
	}
	require.NoError(t, g.Wait())
}

func wdcClient(c client.Client) *wdcclient.Client { return &wdcclient.Client{C: c} }
