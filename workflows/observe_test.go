package workflows

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/telemetry"
)

// metricsSuite runs task scenarios with the real metrics handler
// (telemetry's tally scope over a Prometheus registry) and reads the
// counters the task workflow emitted.
type metricsSuite struct {
	taskSuite
	m *telemetry.Metrics
}

func TestTaskMetrics(t *testing.T) { suite.Run(t, new(metricsSuite)) }

func (s *metricsSuite) SetupTest() {
	s.m = telemetry.NewMetrics(nil)
	s.SetMetricsHandler(s.m.Handler)
	s.taskSuite.SetupTest()
}

// counter sums the Prometheus counter name over the series carrying the
// label reason (every series when reason is "").
func (s *metricsSuite) counter(name, reason string) float64 {
	s.Require().NoError(s.m.Close()) // reports what is pending
	fams, err := s.m.Registry.Gather()
	s.Require().NoError(err)
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if reason == "" || label(m, api.MetricTagReason) == reason {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// An expired lease and the validator's refusal of attempt 1's late result
// (task still open): one expiry, two grants, one stale_fence, one accepted.
func (s *metricsSuite) TestExpiryAndStaleResult() {
	s.submit(40*time.Second, "t1/2/2", s.claim("worker-b", 2))
	s.submit(35*time.Second, "t1/1/1", s.claim("worker-a", 1))
	s.execute(api.TaskOptions{})
	s.Equal(2.0, s.counter("wdc_leases_granted_total", ""))
	s.Equal(1.0, s.counter("wdc_leases_expired_total", ""))
	s.Equal(1.0, s.counter("wdc_results_rejected_total", "stale_fence"))
	s.Equal(1.0, s.counter("wdc_results_rejected_total", ""))
	s.Equal(1.0, s.counter("wdc_results_accepted_total", ""))
	s.Equal(0.0, s.counter("wdc_leases_revoked_total", ""))
}

// Refusals are counted by reason: the fence check's, and invalid input.
func (s *metricsSuite) TestRejectionsByReason() {
	s.submit(time.Second, "x1", s.claim("worker-b", 1))
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateSubmitResult, "x2", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, api.SubmitResultInput{Claim: s.claim("worker-a", 1), Artifacts: []api.Artifact{{Name: "../x", Digest: testArtifactDigest}}})
	}, 2*time.Second)
	s.submit(3*time.Second, "t1/1/1", s.claim("worker-a", 1))
	s.execute(api.TaskOptions{})
	s.Equal(1.0, s.counter("wdc_results_rejected_total", "wrong_worker"))
	s.Equal(1.0, s.counter("wdc_results_rejected_total", api.ErrTypeInvalidArgument))
	s.Equal(1.0, s.counter("wdc_results_accepted_total", ""))
}

// A revoked lease is counted with its retry reason.
func (s *metricsSuite) TestRevokedByReason() {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(api.SignalWorkerLost, api.WorkerLostSignal{WorkerID: "worker-a", TaskID: "t1", Fence: 1, State: "STALE", LivenessFenced: true})
	}, 2*time.Second)
	s.submit(10*time.Second, "t1/2/2", s.claim("worker-b", 2))
	s.execute(api.TaskOptions{LeaseTTL: time.Hour})
	s.Equal(1.0, s.counter("wdc_leases_revoked_total", "worker_lost"))
	s.Equal(0.0, s.counter("wdc_leases_expired_total", ""))
}
