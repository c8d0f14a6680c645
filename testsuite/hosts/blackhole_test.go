package hosts

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/lease"
)

// cutAfterJitter waits up to 2 s (a worker heartbeat interval) so that
// cuts fall at different points of the heartbeat cycles.
func cutAfterJitter() { time.Sleep(time.Duration(rand.Int64N(int64(2 * time.Second)))) }

// The lease holder's host blackholed for half the lease TTL (5 s of 10 s):
// a heartbeat renews the lease within a lease heartbeat interval of the
// heal, and the task completes on attempt 1 with no retry. The agents'
// stale window is 12 s (heartbeats every 3 s), so the cut stays inside the
// partition a worker rides out (stale window − 2 heartbeat intervals); with
// the default 8 s its executor may rightly self-fence at the liveness
// deadline.
func TestBlackholeOfHalfTheTTLCostsNoLease(t *testing.T) {
	c := newCluster(t)
	ttl := 10 * time.Second
	for i := range runs(t) {
		r := c.startRound(t, fmt.Sprintf("half-%d", i), "--stale-after", "12s")
		id := "half-ttl-" + r.label
		_, stop := r.submit(t, id, ttl)
		holder, worker := r.waitHolder(t, id, 1)
		cutAfterJitter()
		holder.cut(t)
		time.Sleep(ttl / 2)
		holder.heal(t)
		healed := time.Now()
		var v api.TaskView
		waitFor(t, ttl, "a lease heartbeat after the heal", func() (bool, error) {
			var err error
			v, err = c.status(id)
			return err == nil && v.Lease != nil && (v.Lease.State != lease.Active || v.Lease.RenewedAt.After(healed)), err
		})
		require.Equal(t, lease.Active, v.Lease.State, "run %d: the lease ended: %s", i+1, v.Lease.EndReason)
		// The dead connection was abandoned during the cut (keepalive):
		// the executor's next retry goes out on a new one.
		assert.Less(t, v.Lease.RenewedAt.Sub(healed), ttl/3, "run %d: renewed more than a lease heartbeat interval after the heal", i+1)
		require.NoError(t, os.WriteFile(stop, nil, 0o644))
		v = c.waitEnded(t, id, time.Minute)
		require.Equal(t, api.TaskCompleted, v.State, "run %d", i+1)
		assert.Len(t, v.Leases, 1, "run %d: no retry", i+1)
		assert.Empty(t, v.Directives, "run %d", i+1)
		require.NotNil(t, v.Result)
		assert.Equal(t, int64(1), v.Result.Attempt)
		t.Logf("run %d: %s (host %s) cut for %s; lease renewed %s after the heal", i+1, worker, holder.name, ttl/2,
			v.Lease.RenewedAt.Sub(healed).Round(time.Millisecond))
		r.stop()
	}
}

// The lease holder's host blackholed for twice the lease TTL (12 s of
// 6 s): its executor kills the command (self_fenced) before the control
// plane ends the lease, the retry runs on the other host, and the old
// command ended before the new one started.
func TestBlackholeOfTwiceTheTTLSelfFencesBeforeExpiry(t *testing.T) {
	c := newCluster(t)
	ttl := 6 * time.Second
	for i := range runs(t) {
		r := c.startRound(t, fmt.Sprintf("twice-%d", i))
		id := "twice-ttl-" + r.label
		trace, _ := r.submit(t, id, ttl)
		holder, worker := r.waitHolder(t, id, 1)
		cutAfterJitter()
		holder.cut(t)
		cutAt := time.Now()
		time.Sleep(2 * ttl)
		holder.heal(t)
		v := c.waitEnded(t, id, time.Minute)
		require.Equal(t, api.TaskCompleted, v.State, "run %d", i+1)
		require.Len(t, v.Leases, 2, "run %d", i+1)
		first, second := v.Leases[0], v.Leases[1]
		assert.Equal(t, worker, first.WorkerID)
		assert.Contains(t, []lease.State{lease.Expired, lease.Revoked}, first.State)
		require.NotEqual(t, worker, second.WorkerID, "run %d: the retry runs on the other host", i+1)
		old := readReport(t, holder, worker, id, first.Attempt, first.Fence, 30*time.Second)
		retry := readReport(t, r.agents[second.WorkerID], second.WorkerID, id, second.Attempt, second.Fence, 30*time.Second)
		assert.Equal(t, "self_fenced", old.Outcome, "run %d: %+v", i+1, old)
		assert.True(t, old.FinishedAt.Before(first.EndedAt), "run %d: the old command ended %s after its lease (%s)",
			i+1, old.FinishedAt.Sub(first.EndedAt), first.EndReason)
		overlap := old.FinishedAt.Sub(retry.StartedAt)
		lines := readTrace(t, trace)
		t.Logf("run %d: %s (host %s) cut at 0 for %s: old command ended at %s, lease ended (%s) at %s, retry started at %s: overlap %.3f s (trace: %s)",
			i+1, worker, holder.name, 2*ttl, old.FinishedAt.Sub(cutAt).Round(time.Millisecond), first.EndReason,
			first.EndedAt.Sub(cutAt).Round(time.Millisecond), retry.StartedAt.Sub(cutAt).Round(time.Millisecond),
			overlap.Seconds(), traceOverlap(lines))
		assert.Negative(t, overlap, "run %d: the old command still ran %s after the retry's started", i+1, overlap)
		r.stop()
	}
}

// No overlap across hosts: the lease holder's host blackholed for 35 s
// with lease TTLs of 10 s and 30 s and the default stale window (8 s):
// the old command's end (its executor's result.json) precedes the retry's
// start on the other host.
func TestNoOverlapAcrossHosts(t *testing.T) {
	for _, ttl := range []time.Duration{10 * time.Second, 30 * time.Second} {
		t.Run(fmt.Sprintf("ttl-%s", ttl), func(t *testing.T) {
			c := newCluster(t)
			const cutFor = 35 * time.Second
			for i := range runs(t) {
				r := c.startRound(t, fmt.Sprintf("overlap-%d-%d", int(ttl.Seconds()), i))
				id := "no-overlap-" + r.label
				trace, _ := r.submit(t, id, ttl)
				holder, worker := r.waitHolder(t, id, 1)
				cutAfterJitter()
				holder.cut(t)
				cutAt := time.Now()
				time.Sleep(cutFor)
				holder.heal(t)
				v := c.waitEnded(t, id, time.Minute)
				require.Equal(t, api.TaskCompleted, v.State, "run %d", i+1)
				require.Len(t, v.Leases, 2, "run %d", i+1)
				first, second := v.Leases[0], v.Leases[1]
				require.NotEqual(t, worker, second.WorkerID, "run %d: the retry runs on the other host", i+1)
				old := readReport(t, holder, worker, id, first.Attempt, first.Fence, 30*time.Second)
				retry := readReport(t, r.agents[second.WorkerID], second.WorkerID, id, second.Attempt, second.Fence, 30*time.Second)
				overlap := old.FinishedAt.Sub(retry.StartedAt)
				t.Logf("run %d: TTL %s, %s (host %s) cut at 0 for %s: lease ended (%s) at %s, retry started at %s, old command ended (%s) at %s: overlap %.3f s (trace: %s)",
					i+1, ttl, worker, holder.name, cutFor, first.EndReason, first.EndedAt.Sub(cutAt).Round(time.Millisecond),
					retry.StartedAt.Sub(cutAt).Round(time.Millisecond), old.Outcome, old.FinishedAt.Sub(cutAt).Round(time.Millisecond),
					overlap.Seconds(), traceOverlap(readTrace(t, trace)))
				assert.Negative(t, overlap, "run %d: TTL %s: the old command still ran %.3f s after the retry's started", i+1, ttl, overlap.Seconds())
				r.stop()
			}
		})
	}
}

// traceOverlap says how long attempt 1's last trace line came after
// attempt 2's first (negative: a gap), from the commands' own clocks.
func traceOverlap(lines map[int64][]time.Time) string {
	one, two := lines[1], lines[2]
	if len(one) == 0 || len(two) == 0 {
		return fmt.Sprintf("%d lines of attempt 1, %d of attempt 2", len(one), len(two))
	}
	return fmt.Sprintf("attempt 1's last line %.3f s after attempt 2's first", one[len(one)-1].Sub(two[0]).Seconds())
}
