package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/wdc-runtime/wdc/identity"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// launchOf is a well-formed launch of task t1 (run r1) on worker at
// attempt and fence, reserved under incarnation (0: none named).
func launchOf(t *testing.T, worker string, attempt, fence, incarnation int64) api.LaunchInput {
	t.Helper()
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"true"}}
	env.Normalize()
	digest, err := env.Digest()
	require.NoError(t, err)
	return api.LaunchInput{
		Envelope: env, Incarnation: incarnation, HeartbeatInterval: time.Second,
		Lease: lease.Lease{TaskID: "t1", EnvelopeDigest: digest, WorkerID: worker, Attempt: attempt, Fence: fence, State: lease.Active, TTL: 4 * time.Second},
	}
}

// recordingLauncher records submissions and starts nothing.
type recordingLauncher struct{ submitted int }

func (l *recordingLauncher) Submit(context.Context, launchers.Attempt) (launchers.Submission, error) {
	l.submitted++
	return launchers.Submission{TaskDir: "/nowhere", PID: 1}, nil
}

func (l *recordingLauncher) Status(context.Context, lease.Claim) (launchers.Status, error) {
	return launchers.Status{}, launchers.ErrUnknownAttempt
}

func (l *recordingLauncher) Cancel(context.Context, lease.Claim, string) error { return nil }

// A launch delivered after its schedule-to-close deadline (to an agent
// that was frozen, say) never reaches the launcher: it fails as a
// non-retryable launch_failed. (The SDK's test environment refuses to run
// an activity past its deadline, so the activity gets a context that is.)
func TestLaunchAttemptPastItsDeadlineStartsNothing(t *testing.T) {
	launcher := &recordingLauncher{}
	agent := &Agent{WorkerID: "w-a", Launcher: launcher}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-1500*time.Millisecond))
	defer cancel()
	_, err := agent.LaunchAttempt(ctx, launchOf(t, "w-a", 2, 2, 0))
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Equal(t, api.ErrTypeLaunchFailed, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.Contains(t, appErr.Message(), "attempt 2 (fence 2) not started")
	assert.Zero(t, launcher.submitted, "nothing was submitted to the launcher")
}

// A launch within its deadline goes to the launcher.
func TestLaunchAttemptInTimeIsSubmitted(t *testing.T) {
	launcher := &recordingLauncher{}
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(&Agent{WorkerID: "w-a", Launcher: launcher})
	_, err := env.ExecuteActivity((&Agent{}).LaunchAttempt, launchOf(t, "w-a", 2, 2, 0))
	require.NoError(t, err)
	assert.Equal(t, 1, launcher.submitted)
}

// failingLauncher refuses every submission, as a Ray dashboard answering
// HTTP 500 would.
type failingLauncher struct{ recordingLauncher }

func (l *failingLauncher) Submit(context.Context, launchers.Attempt) (launchers.Submission, error) {
	return launchers.Submission{}, errors.New("ray: POST /api/jobs/: HTTP 500")
}

// A launch the launcher refuses is launch_failed, and the agent logs one
// line that names the attempt as wdc does: task, worker, attempt, fence.
func TestLaunchAttemptRefusedByTheLauncherIsLoggedWithTheAttempt(t *testing.T) {
	var buf bytes.Buffer
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(log.NewStructuredLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(&Agent{WorkerID: "w-a", Launcher: &failingLauncher{}})
	_, err := env.ExecuteActivity((&Agent{}).LaunchAttempt, launchOf(t, "w-a", 3, 4, 0))
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Equal(t, api.ErrTypeLaunchFailed, appErr.Type())
	var line map[string]any
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"launch failed"`) {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.NotNil(t, line, "a launch failed line in:\n%s", buf.String())
	assert.Equal(t, "t1", line["task"])
	assert.Equal(t, "w-a", line["worker"])
	assert.EqualValues(t, 3, line["attempt"])
	assert.EqualValues(t, 4, line["fence"])
	assert.Contains(t, line["error"], "HTTP 500")
}

// A launch reserved under an earlier incarnation of the worker (queued for
// an agent that restarted since, or taken before the new one registered)
// never reaches the launcher: the registration reported its reservation
// lost, and the task retries it on a new attempt.
func TestLaunchAttemptOfAnotherIncarnationStartsNothing(t *testing.T) {
	for _, c := range []struct {
		name        string
		mine        int64
		reserved    int64
		wantStarted bool
	}{
		{"an earlier incarnation", 4, 3, false},
		{"before the agent registered", 0, 3, false},
		{"its own incarnation", 3, 3, true},
		{"a later one, registered meanwhile", 2, 3, true},
		{"a launch that names none", 3, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			launcher := &recordingLauncher{}
			calls := 0
			agent := &Agent{WorkerID: "w-a", Launcher: launcher, Incarnation: func() int64 {
				calls++
				if c.name == "a later one, registered meanwhile" && calls > 2 {
					return c.reserved // the registration's answer arrived
				}
				if c.name == "before the agent registered" && calls > 2 {
					return c.reserved + 1 // it registered a newer incarnation
				}
				return c.mine
			}}
			_, err := agent.LaunchAttempt(context.Background(), launchOf(t, "w-a", 2, 5, c.reserved))
			if c.wantStarted {
				require.NoError(t, err)
				assert.Equal(t, 1, launcher.submitted)
				return
			}
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(err, &appErr), "got %v", err)
			assert.Equal(t, api.ErrTypeLaunchFailed, appErr.Type())
			assert.True(t, appErr.NonRetryable())
			assert.Contains(t, appErr.Message(), "reserved for incarnation 3 of worker w-a")
			assert.Zero(t, launcher.submitted, "nothing was submitted to the launcher")
		})
	}
}

// A launch the agent refuses to vouch for (unsigned, here) fails with an
// unsigned LaunchFailure: a signed one for the claim, taken to the task's
// genuine launch, would let the task skip its lock-delay. A launch that
// passes and then fails to start is signed, as before.
func TestARefusedLaunchFailsUnsigned(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString(identity.DefaultTrustDomain)
	iss, err := identity.NewIssuer(td)
	require.NoError(t, err)
	svid, err := iss.IssueWorker("w-a", time.Hour)
	require.NoError(t, err)
	signer, err := identity.NewSigner(svid)
	require.NoError(t, err)
	v, err := identity.NewVerifier(identity.ModeRequired, td, iss.Bundle())
	require.NoError(t, err)
	launcher := &recordingLauncher{}
	agent := &Agent{WorkerID: "w-a", Launcher: launcher, Signer: signer, Verifier: v}
	_, err = agent.LaunchAttempt(context.Background(), launchOf(t, "w-a", 1, 1, 0))
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Contains(t, appErr.Message(), "unauthenticated")
	var f api.LaunchFailure
	require.NoError(t, appErr.Details(&f))
	assert.Nil(t, f.Proof, "the refusal is not signed")
	assert.Zero(t, launcher.submitted)

	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = (&Agent{WorkerID: "w-a", Launcher: launcher, Signer: signer}).LaunchAttempt(past, launchOf(t, "w-a", 1, 1, 0))
	require.True(t, errors.As(err, &appErr), "got %v", err)
	require.NoError(t, appErr.Details(&f))
	assert.NotNil(t, f.Proof, "a launch the agent vouches for fails signed")
}
