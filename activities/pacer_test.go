package activities

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Waiting tasks are spaced so that together they look about
// MinWaitingLooksPerSecond times a second, or twice the recent grant rate
// when that is higher; one task waits at most MaxWaitingRetry, and tasks
// that stopped looking are forgotten.
func TestWaitPacerSpacesLooksByTheQueue(t *testing.T) {
	var p waitPacer
	now := t0
	wait := func(id string, at time.Time) time.Duration { d, _ := p.waited(id, at); return d }
	assert.Equal(t, 50*time.Millisecond, wait("t0", now), "one waiting task: 1/20 s (its select_interval applies)")
	for i := 1; i < 400; i++ {
		wait(fmt.Sprint("t", i), now)
	}
	d, waiting := p.waited("t0", now)
	assert.Equal(t, 20*time.Second, d, "400 waiting: 20 s each")
	assert.Equal(t, 400, waiting)

	// 1,200 grants in the last minute (20/s): looks at 40/s.
	for i := range 1200 {
		p.granted(fmt.Sprint("g", i), now.Add(-time.Duration(1200-i)*40*time.Millisecond))
	}
	assert.Equal(t, 10*time.Second, wait("t0", now))
	// A minute later those grants no longer count.
	later := now.Add(grantWindow + time.Second)
	assert.Equal(t, 20*time.Second, wait("t0", later))

	// A granted task stops counting; so does one that stopped looking.
	p.granted("t1", later)
	_, waiting = p.waited("t0", later)
	assert.Equal(t, 399, waiting)
	assert.Equal(t, 50*time.Millisecond, wait("t0", later.Add(waitingForgetAfter+time.Second)), "the others were forgotten")

	for i := range 5000 {
		wait(fmt.Sprint("q", i), later)
	}
	assert.Equal(t, MaxWaitingRetry, wait("t0", later.Add(waitingForgetAfter+time.Second)))
}
