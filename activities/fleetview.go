package activities

import (
	"context"
	"sync"
	"time"

	wdcclient "github.com/wdc-runtime/wdc/client"
)

// FleetViewMaxAge is how old the control plane's list of workers (states
// and profiles from one visibility list) may be before a selection lists
// again. Selections in between share it, so a burst of selections costs
// one list, not one each. A selection that finds no worker in a list it
// did not fetch itself lists again at once (a worker may have registered
// meanwhile).
const FleetViewMaxAge = time.Second

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
// Errors are the list's (the next call lists again).
func (v *fleetView) get(ctx context.Context, wc *wdcclient.Client, newerThan time.Time) (states []wdcclient.WorkerState, fetched time.Time, err error) {
	for {
		v.mu.Lock()
		if v.fetched.After(newerThan) {
			states, fetched := v.states, v.fetched
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
		done := make(chan struct{})
		v.fetching = done
		v.mu.Unlock()

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
}
