package activities

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
)

// gatedQuery is a worker query that counts its calls, says when one has
// begun, and answers once open is closed.
type gatedQuery struct {
	calls  atomic.Int32
	began  chan struct{}
	open   chan struct{}
	answer api.WorkerView
}

func newGatedQuery(id string) *gatedQuery {
	return &gatedQuery{began: make(chan struct{}, 16), open: make(chan struct{}),
		answer: api.WorkerView{Worker: fleet.Worker{WorkerID: id}, Registered: true}}
}

// waitBegan waits (5 s at most) until a query has begun.
func (q *gatedQuery) waitBegan(t *testing.T) {
	t.Helper()
	select {
	case <-q.began:
	case <-time.After(5 * time.Second):
		t.Fatal("no query began")
	}
}

func (q *gatedQuery) query(ctx context.Context) (api.WorkerView, error) {
	q.calls.Add(1)
	q.began <- struct{}{}
	select {
	case <-q.open:
		return q.answer, nil
	case <-ctx.Done():
		return api.WorkerView{}, ctx.Err()
	}
}

// Selections that began before a worker's query did share it: one query,
// one record, and a selection that gives up does not fail the others.
func TestRecordFlightsShareAQueryThatBeganAfterTheSelections(t *testing.T) {
	var r recordFlights
	q := newGatedQuery("w")
	since := time.Now()
	first, cancelFirst := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	views := make([]api.WorkerView, 4)
	errs := make([]error, 4)
	wg.Add(1)
	go func() { defer wg.Done(); views[0], _, errs[0] = r.ask(first, "w", since, time.Minute, q.query) }()
	q.waitBegan(t)
	for i := 1; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			views[i], _, errs[i] = r.ask(context.Background(), "w", since, time.Minute, q.query)
		}()
	}
	cancelFirst()
	time.Sleep(50 * time.Millisecond) // the others wait on the query in flight
	close(q.open)
	wg.Wait()
	assert.Equal(t, int32(1), q.calls.Load())
	assert.ErrorIs(t, errs[0], context.Canceled)
	for i := 1; i < 4; i++ {
		require.NoError(t, errs[i])
		assert.Equal(t, "w", views[i].WorkerID)
	}
}

// A selection that began after a worker's query did, in flight or
// answered, asks again: that record may predate what it must see.
func TestRecordFlightsAskAgainForASelectionThatBeganLater(t *testing.T) {
	var r recordFlights
	q := newGatedQuery("w")
	close(q.open)
	_, began, err := r.ask(context.Background(), "w", time.Now(), time.Minute, q.query)
	require.NoError(t, err)
	q.waitBegan(t)
	_, again, err := r.ask(context.Background(), "w", began, time.Minute, q.query)
	require.NoError(t, err)
	assert.Equal(t, int32(1), q.calls.Load(), "answered after the selection began: shared")
	assert.Equal(t, began, again)

	time.Sleep(time.Millisecond)
	_, later, err := r.ask(context.Background(), "w", time.Now(), time.Minute, q.query)
	require.NoError(t, err)
	q.waitBegan(t)
	assert.Equal(t, int32(2), q.calls.Load())
	assert.True(t, later.After(began))

	// Another worker's record is its own.
	_, _, err = r.ask(context.Background(), "v", began, time.Minute, q.query)
	require.NoError(t, err)
	assert.Equal(t, int32(3), q.calls.Load())
}
