package workflows

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/lease"
)

// The task's current details list the last detailsRows leases and count
// the earlier ones in one line.
func TestTaskDetailsCapTheLeaseTable(t *testing.T) {
	tw := newTaskWorkflow(api.TaskInput{Envelope: envelope.Envelope{TaskID: "t"}, EnvelopeDigest: "d"})
	tw.phase, tw.state = phaseBackoff, api.TaskBackoff
	for i := int64(1); i <= 12; i++ {
		tw.ledger.Leases = append(tw.ledger.Leases, lease.Lease{Attempt: i, Fence: i, WorkerID: fmt.Sprintf("w%d", i%3), State: lease.Expired, EndReason: string(lease.ReasonLeaseExpired)})
	}
	d := tw.details()
	assert.True(t, strings.HasPrefix(d, "**Backoff** · BACKOFF · attempt 12 · fence 12 → w0\n"), d)
	assert.Contains(t, d, "| … 2 earlier | | | | |\n| 3 | 3 | w0 | EXPIRED | lease_expired |\n")
	assert.NotContains(t, d, "| 2 | 2 |")
	assert.Equal(t, detailsRows+3, strings.Count(d, "\n|"), "header, rule, the earlier line and ten rows")
}

func TestSummariesOfTheTasksCommands(t *testing.T) {
	l := lease.Lease{Attempt: 2, Fence: 3, WorkerID: "worker-b"}
	assert.Equal(t, "LaunchAttempt attempt 2 · fence 3 → worker-b", launchSummary(l))
	assert.Equal(t, "lease TTL · fence 3", leaseTimerSummary(l))
	assert.Equal(t, "backoff 1.2s after lease_expired", backoffSummary(1234e6, lease.ReasonLeaseExpired))
	assert.Equal(t, "Ingest attempt 2 · 3 artifacts", ingestSummary(api.SubmitResultInput{Claim: lease.Claim{Attempt: 2}, Artifacts: make([]api.Artifact, 3)}))
}
