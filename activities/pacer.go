package activities

import (
	"sync"
	"time"
)

// Pacing of waiting tasks. A task whose selection finds no room looks
// again later; with thousands of tasks waiting for a few hundred slots,
// looking every few seconds each would cost the control plane hundreds of
// selections a second, all but a few of them in vain. The control plane
// therefore spaces the looks so that all its waiting tasks together look
// about max(MinWaitingLooksPerSecond, 2 × the rate at which it granted
// workers over the last minute) times a second: a slot that frees up is
// still taken within a fraction of a second, at a cost that does not grow
// with the queue. A task waits at most MaxWaitingRetry between looks;
// when few tasks wait, their own select_interval applies.
const (
	// MinWaitingLooksPerSecond is the least rate at which the waiting
	// tasks of one control plane look for room, together.
	MinWaitingLooksPerSecond = 20
	// MaxWaitingRetry bounds the wait between one task's looks.
	MaxWaitingRetry = time.Minute
	// waitingForgetAfter forgets a task that has not looked for this
	// long (it was cancelled, or another control plane runs it now).
	waitingForgetAfter = 2 * MaxWaitingRetry
	// grantWindow is the span over which grants are counted.
	grantWindow = time.Minute
)

// waitPacer counts the tasks waiting for room and the recent grants of
// one control plane (SelectWorker's RetryAfter).
type waitPacer struct {
	mu      sync.Mutex
	waiting map[string]time.Time // task ID → its last look that found no room
	grants  []time.Time          // within grantWindow, oldest first
	pruned  time.Time
}

// waited records that taskID found no room at now and returns how long
// it should wait before it looks again — the number of waiting tasks
// over the looks per second the control plane affords them, at most
// MaxWaitingRetry — and that number.
func (p *waitPacer) waited(taskID string, now time.Time) (wait time.Duration, waiting int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiting == nil {
		p.waiting = map[string]time.Time{}
	}
	p.waiting[taskID] = now
	p.prune(now)
	rate := max(float64(MinWaitingLooksPerSecond), 2*float64(len(p.grants))/grantWindow.Seconds())
	d := time.Duration(float64(len(p.waiting)) / rate * float64(time.Second))
	return min(d, MaxWaitingRetry), len(p.waiting)
}

// granted records that taskID was granted a worker at now.
func (p *waitPacer) granted(taskID string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.waiting, taskID)
	p.grants = append(p.grants, now)
	p.prune(now)
}

// prune forgets grants older than grantWindow and, at most once a second,
// waiting tasks that have not looked for waitingForgetAfter.
func (p *waitPacer) prune(now time.Time) {
	i := 0
	for i < len(p.grants) && now.Sub(p.grants[i]) > grantWindow {
		i++
	}
	p.grants = p.grants[i:]
	if now.Sub(p.pruned) < time.Second {
		return
	}
	p.pruned = now
	for id, at := range p.waiting {
		if now.Sub(at) > waitingForgetAfter {
			delete(p.waiting, id)
		}
	}
}
