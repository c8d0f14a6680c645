package workflows

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
)

// requireIdentity installs a control plane's identity check (required)
// on the suite's environment and returns the issuer its bundle trusts.
func (s *workerSuite) requireIdentity() *identity.Issuer {
	iss, err := identity.NewIssuer(spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	s.Require().NoError(err)
	v, err := identity.NewVerifier(identity.ModeRequired, iss.TrustDomain(), iss.Bundle())
	s.Require().NoError(err)
	s.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{Interceptor(v)}})
	return iss
}

func (s *workerSuite) signer(iss *identity.Issuer, id string) *identity.Signer {
	svid, err := iss.IssueWorker(id, time.Hour)
	s.Require().NoError(err)
	sg, err := identity.NewSigner(svid)
	s.Require().NoError(err)
	return sg
}

// A heartbeat signal, which anyone with namespace access can send, renews
// the worker only when its own key signed it, once.
func (s *workerSuite) TestHeartbeatSignalIsBelievedOnlyFromTheWorkersOwnKeyOnce() {
	iss := s.requireIdentity()
	own, other := s.signer(iss, "w1"), s.signer(iss, "w2")
	reg := testRegistration("w1")
	p, err := own.Sign(api.UpdateRegister, reg, time.Now())
	s.Require().NoError(err)
	reg.Proof = p
	registered := s.update(0, api.UpdateRegister, reg)

	beat := func(seq int64, by *identity.Signer) api.WorkerHeartbeatSignal {
		hb := api.WorkerHeartbeatSignal{WorkerID: "w1", Incarnation: 1, Seq: seq}
		if by != nil {
			p, err := by.Sign(api.SignalWorkerHeartbeat, hb, time.Now())
			s.Require().NoError(err)
			hb.Proof = p
		}
		return hb
	}
	signed := beat(5, own)
	moved := signed
	moved.Seq = 6 // the signature covers seq
	for i, hb := range []api.WorkerHeartbeatSignal{beat(5, nil), beat(5, other), moved, signed, signed} {
		s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalWorkerHeartbeat, hb) }, time.Duration(i+1)*time.Second)
	}
	var before, forged, accepted, replayed api.WorkerView
	s.query(500*time.Millisecond, &before)
	s.query(3500*time.Millisecond, &forged)
	s.query(4500*time.Millisecond, &accepted)
	s.query(5500*time.Millisecond, &replayed)
	s.run(6 * time.Second)

	s.Require().NoError(registered.err)
	s.Equal(before.HeartbeatsAccepted, forged.HeartbeatsAccepted, "unsigned, another worker's and a moved signature renew nothing")
	s.Zero(forged.HeartbeatSeq)
	s.Equal(before.HeartbeatsAccepted+1, accepted.HeartbeatsAccepted, "its own signed heartbeat")
	s.Equal(int64(5), accepted.HeartbeatSeq)
	s.Equal(accepted.HeartbeatsAccepted, replayed.HeartbeatsAccepted, "the same signed heartbeat again is a replay")
}

// A signed incarnation's liveness activity lives
// SignedLivenessActivityLifetime; the next one waits for the agent's next
// heartbeat signal signed by the worker (heartbeats by ID are not), and
// without one the worker goes STALE a window after the lifetime's end.
func TestSignedIncarnationsLivenessWaitsForASignedSignalAfterItsLifetime(t *testing.T) {
	for _, signal := range []bool{true, false} {
		t.Run(fmt.Sprintf("signal=%t", signal), func(t *testing.T) {
			l := newLivenessEnv(t)
			iss, err := identity.NewIssuer(spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
			require.NoError(t, err)
			v, err := identity.NewVerifier(identity.ModeRequired, iss.TrustDomain(), iss.Bundle())
			require.NoError(t, err)
			l.env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{Interceptor(v)}})
			svid, err := iss.IssueWorker("w1", time.Hour)
			require.NoError(t, err)
			own, err := identity.NewSigner(svid)
			require.NoError(t, err)
			sign := func(kind string, msg any) *identity.Proof {
				p, err := own.Sign(kind, msg, time.Now())
				require.NoError(t, err)
				return p
			}
			reg := testRegistration("w1")
			reg.Proof = sign(api.UpdateRegister, reg)
			l.update(0, api.UpdateRegister, reg)
			l.end(time.Minute, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil))
			unsigned := api.WorkerHeartbeatSignal{WorkerID: "w1", Incarnation: 1, Seq: 1}
			l.at(time.Minute+2*time.Second, func() { l.env.SignalWorkflow(api.SignalWorkerHeartbeat, unsigned) })
			var waiting, after api.WorkerView
			l.view(time.Minute+3*time.Second, &waiting)
			if signal {
				signed := unsigned
				signed.Proof = sign(api.SignalWorkerHeartbeat, unsigned)
				l.at(time.Minute+5*time.Second, func() { l.env.SignalWorkflow(api.SignalWorkerHeartbeat, signed) })
			}
			l.view(time.Minute+20*time.Second, &after)
			l.run(2 * time.Minute)

			require.NotEmpty(t, l.held)
			require.InDelta(t, float64(SignedLivenessActivityLifetime), float64(l.held[0].lifetime), float64(time.Second), "not LivenessActivityLifetime")
			require.Empty(t, waiting.LivenessActivity, "not replaced before a signed heartbeat signal")
			require.Equal(t, fleet.Active, waiting.State)
			if signal {
				require.Len(t, l.held, 2)
				require.Equal(t, "liveness-1", after.LivenessActivity)
				require.Equal(t, fleet.Active, after.State)
			} else {
				require.Len(t, l.held, 1)
				require.Equal(t, fleet.Stale, after.State, "a window after the lifetime's end")
			}
		})
	}
}

// A signed incarnation's entry that continues as new while its liveness
// activity is held carries "awaits a signal": the next run schedules none
// until the agent's next signed heartbeat signal, so continuing as new
// grants heartbeats by ID no fresh lifetime.
func TestSignedIncarnationContinuesAsNewAwaitingASignal(t *testing.T) {
	l := newLivenessEnv(t)
	iss, err := identity.NewIssuer(spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain))
	require.NoError(t, err)
	svid, err := iss.IssueWorker("w1", time.Hour)
	require.NoError(t, err)
	own, err := identity.NewSigner(svid)
	require.NoError(t, err)
	reg := testRegistration("w1")
	reg.Proof, err = own.Sign(api.UpdateRegister, reg, time.Now())
	require.NoError(t, err)
	l.update(0, api.UpdateRegister, reg)
	l.at(time.Minute, func() { l.env.SetContinueAsNewSuggested(true) })
	l.at(time.Minute+time.Second, func() { l.env.SignalWorkflow(api.SignalSweep, nil) })
	l.env.ExecuteWorkflow(api.WorkerWorkflowType, api.WorkerInput{WorkerID: "w1"})
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(l.env.GetWorkflowError(), &can), "want continue-as-new, got %v", l.env.GetWorkflowError())
	require.Len(t, l.held, 1, "the liveness activity was held")
	var next api.WorkerInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.NotNil(t, next.State)
	require.True(t, next.State.LivenessAwaitsSignal)
	require.Equal(t, fleet.Active, next.State.State)
}
