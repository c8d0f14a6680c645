package activities

import (
	"context"
	"sync"
	"time"

	"github.com/wdc-runtime/wdc/api"
)

// recordFlights shares the worker queries of concurrent selections. A
// selection takes a worker's record from a query that began no earlier
// than the selection itself — one in flight or just answered — since that
// record is as fresh as the one it would ask for. So a burst of tasks
// looking for room costs each worker's registry entry one query at a time,
// not one per task, which is what overloads the entry (its queries wait
// behind its reserve updates) when thousands of tasks wait.
type recordFlights struct {
	mu   sync.Mutex
	last map[string]*recordFlight // by worker ID: the latest query
}

// recordFlight is one query of a worker's record; view and err are set
// before done is closed.
type recordFlight struct {
	began time.Time
	done  chan struct{}
	view  api.WorkerView
	err   error
}

// ask returns workerID's record from a query that began at or after
// since, starting one through query (under its own timeout, so that one
// selection giving up does not fail the others) when there is none. began
// is when the query whose record it is began; err is that query's, or
// ctx's when ctx ends first.
func (r *recordFlights) ask(ctx context.Context, workerID string, since time.Time, timeout time.Duration,
	query func(context.Context) (api.WorkerView, error)) (view api.WorkerView, began time.Time, err error) {
	r.mu.Lock()
	f := r.last[workerID]
	if f == nil || f.began.Before(since) {
		f = &recordFlight{began: time.Now(), done: make(chan struct{})}
		if r.last == nil {
			r.last = map[string]*recordFlight{}
		}
		r.last[workerID] = f
		go func() {
			qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			f.view, f.err = query(qctx)
			close(f.done)
		}()
	}
	r.mu.Unlock()
	select {
	case <-f.done:
		return f.view, f.began, f.err
	case <-ctx.Done():
		return api.WorkerView{}, f.began, ctx.Err()
	}
}
