package activities

import (
	"context"
	"sync"
	"time"

	wdcclient "github.com/wdc-runtime/wdc/client"
)

// FleetViewMaxAge is how old the control plane's list of workers (states
// and profiles from one visibility list) may be before it is listed again.
// Selections share the list, so a burst of selections costs one list, not
// one each, and a selection that finds the list older than this still uses
// it while a new one is listed in the background: listing a large fleet
// never delays a selection. A selection that finds no worker in a list it
// did not fetch itself lists again and waits for it (a worker may have
// registered or freed up meanwhile).
const FleetViewMaxAge = 5 * time.Second

// RetryFleetViewMaxAge is how old a list the selection for a retry (a
// task that lost a lease, so it has workers to avoid) takes: it waits for
// a newer one rather than use the cached list, since the worker it should
// move to may have registered only since.
const RetryFleetViewMaxAge = time.Second

// fleetListTimeout bounds a background listing.
const fleetListTimeout = 30 * time.Second

// fleetView is the control plane's cached list of workers. The list is
// only a guide to which workers to ask; each asked worker's own record
// and its reserve validator decide.
type fleetView struct {
	mu      sync.Mutex
	states  []wdcclient.WorkerState
	fetched time.Time // when the listing of states began
	// fetching is closed when the list in flight arrives (nil when none
	// is): concurrent selections wait for one list instead of each
	// listing.
	fetching chan struct{}
}

// get returns a list whose listing began after newerThan, listing through
// wc when the cached one is older; fetched is when that listing began.
// With stale set, a cached list that is older is returned at once and a
// new one is listed in the background (unless one is in flight); only
// without any cached list does the caller wait. Errors are the list's
// (the next call lists again).
func (v *fleetView) get(ctx context.Context, wc *wdcclient.Client, newerThan time.Time, stale bool) (states []wdcclient.WorkerState, fetched time.Time, err error) {
	for {
		v.mu.Lock()
		if v.fetched.After(newerThan) || (stale && !v.fetched.IsZero()) {
			states, fetched := v.states, v.fetched
			if !v.fetched.After(newerThan) && v.fetching == nil {
				done := v.startListing()
				go func() {
					lctx, cancel := context.WithTimeout(context.Background(), fleetListTimeout)
					defer cancel()
					_, _, _ = v.list(lctx, wc, done)
				}()
			}
			v.mu.Unlock()
			return states, fetched, nil
		}
		if wait := v.fetching; wait != nil {
			v.mu.Unlock()
			select {
			case <-wait:
				continue // take it if new enough, else list
			case <-ctx.Done():
				return nil, time.Time{}, ctx.Err()
			}
		}
		done := v.startListing()
		v.mu.Unlock()
		return v.list(ctx, wc, done)
	}
}

// startListing marks a listing in flight; v.mu is held.
func (v *fleetView) startListing() chan struct{} {
	done := make(chan struct{})
	v.fetching = done
	return done
}

// list lists the fleet, keeps the list when it is newer than the cached
// one, and closes done.
func (v *fleetView) list(ctx context.Context, wc *wdcclient.Client, done chan struct{}) ([]wdcclient.WorkerState, time.Time, error) {
	began := time.Now()
	states, err := wc.WorkerStates(ctx)
	v.mu.Lock()
	v.fetching = nil
	if err == nil && began.After(v.fetched) {
		v.states, v.fetched = states, began
	}
	v.mu.Unlock()
	close(done)
	if err != nil {
		return nil, time.Time{}, err
	}
	return states, began, nil
}
