package activities

import (
	"sync"
	"time"

	"github.com/wdc-runtime/wdc/fleet"
)

// LoadCacheMaxAge is how long a worker's record, as a selection asked for
// it, stands in for asking again. Within it the control plane keeps the
// record current with what it did itself — a reservation it made is
// added, a release it sent is removed — and a selection that draws the
// worker reads the record instead of sending a worker query and a
// describe of its liveness activity. Reservations and releases made
// through other control planes (or released by a task's own workflow) are
// not seen until the record is asked for again, which is at most this
// old.
const LoadCacheMaxAge = 2 * time.Second

// loadCache is the control plane's cache of worker records for selection
// (LoadCacheMaxAge). It can only make a selection try a worker sooner: a
// record that says the worker can take a task is used as asked for; one
// that says it cannot is not trusted (the worker is asked again), and a
// reserve the worker refuses drops its record. The reserve validator on
// the worker stays the authority either way.
type loadCache struct {
	mu      sync.Mutex
	entries map[string]loadEntry
}

type loadEntry struct {
	w fleet.Worker
	// asked is when the record was asked for (the wall clock, not the
	// selection's Now, which tests set).
	asked time.Time
}

// fits returns the cached record of workerID when it is younger than
// LoadCacheMaxAge and fleet.Eligible accepts it, without taskID's own
// reservations (fleet.Worker.ForTask), for req; ok is false
// otherwise (ask the worker).
func (c *loadCache) fits(workerID, taskID string, req fleet.Requirements, now time.Time) (w fleet.Worker, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.entries[workerID]
	if !found || now.Sub(e.asked) >= LoadCacheMaxAge {
		return fleet.Worker{}, false
	}
	w = e.w.ForTask(taskID)
	if fleet.Eligible(&w, req) != nil {
		return fleet.Worker{}, false
	}
	return w, true
}

// asked records a worker's record as a query returned it at now.
func (c *loadCache) asked(w fleet.Worker, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]loadEntry{}
	}
	w.Reservations = append([]fleet.Reservation(nil), w.Reservations...)
	c.entries[w.WorkerID] = loadEntry{w: w, asked: now}
}

// reserved adds the reservation the worker confirmed to its record (if
// cached), as fleet.Worker.Reserve did on the worker; at is the record's
// clock for ReservedAt.
func (c *loadCache) reserved(workerID, taskID string, fence int64, req fleet.Requirements, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[workerID]; ok {
		if e.w.Reserve(taskID, fence, req, at) != nil {
			delete(c.entries, workerID) // the record was wrong: ask next time
			return
		}
		c.entries[workerID] = e
	}
}

// released removes a reservation this control plane released.
func (c *loadCache) released(workerID, taskID string, fence int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[workerID]; ok {
		e.w.Release(taskID, fence)
		c.entries[workerID] = e
	}
}

// forget drops a worker's record (its reserve was refused or failed).
func (c *loadCache) forget(workerID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, workerID)
}
