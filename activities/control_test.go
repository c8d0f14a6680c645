package activities

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

func ingestEnv(t *testing.T) (*testsuite.TestActivityEnvironment, *blobstore.Store) {
	env, store, _ := ingestEnvSignals(t)
	return env, store
}

// ingestEnvSignals is ingestEnv with the signals the ingest sent.
func ingestEnvSignals(t *testing.T) (*testsuite.TestActivityEnvironment, *blobstore.Store, *signalLog) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	store, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	sent := &signalLog{}
	env.RegisterActivity(&Control{Blobs: store, Client: sent})
	return env, store, sent
}

// signalLog is a client.Client that records the signals sent through it;
// any other call panics (the embedded interface is nil).
type signalLog struct {
	client.Client
	mu   sync.Mutex
	sent []sentSignal
	// refuse, when set, fails every signal of that name (not recorded).
	refuse string
}

type sentSignal struct {
	workflowID, name string
	arg              any
}

func (s *signalLog) SignalWorkflow(_ context.Context, workflowID, _, name string, arg any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == s.refuse {
		return errors.New("unavailable")
	}
	s.sent = append(s.sent, sentSignal{workflowID, name, arg})
	return nil
}

// Asked to (IngestInput.Report), the ingest sends the task's report to
// its run once the result is stored, and says whether it reached it; a
// report that could not be sent fails nothing and says Reported false.
func TestIngestSendsTheReportItWasGiven(t *testing.T) {
	env, store, sent := ingestEnvSignals(t)
	a := stage(t, store, blobstore.StagingPrefix("t1", 2, 3), "r.csv", []byte("1,2\n"))
	report := api.TaskEndedSignal{TaskID: "t1", RunID: "r1", State: api.TaskCompleted, Attempts: 2}
	in := api.IngestInput{Claim: claim, Artifacts: []api.Artifact{a}, Report: &report}
	val, err := env.ExecuteActivity("Ingest", in)
	require.NoError(t, err)
	var res api.IngestResult
	require.NoError(t, val.Get(&res))
	assert.True(t, res.Reported)
	release := sentSignal{api.WorkerWorkflowID("w"), api.SignalRelease, api.ReleaseSignal{TaskID: "t1", Fence: 3}}
	assert.Equal(t, []sentSignal{release, {api.RunWorkflowID("r1"), api.SignalTaskEnded, report}}, sent.sent, "released, then reported")

	sent.sent, sent.refuse = nil, api.SignalTaskEnded
	val, err = env.ExecuteActivity("Ingest", in) // a repeat: already stored
	require.NoError(t, err, "a report that did not go fails no ingest")
	var again api.IngestResult
	require.NoError(t, val.Get(&again))
	assert.False(t, again.Reported, "the task then reports itself")
	assert.Equal(t, []api.Artifact{a}, again.Artifacts)
}

// The ingest releases the holder's reservation once the result is stored,
// and tells the run nothing unless asked (IngestInput.Report); a
// repeat of a finished ingest releases again and returns the same
// artifacts.
func TestIngestReleasesTheHolderAndReportsNothingToTheRun(t *testing.T) {
	env, store, sent := ingestEnvSignals(t)
	a := stage(t, store, blobstore.StagingPrefix("t1", 2, 3), "r.csv", []byte("1,2\n"))
	in := api.IngestInput{Claim: claim, Artifacts: []api.Artifact{a}}
	release := sentSignal{api.WorkerWorkflowID("w"), api.SignalRelease, api.ReleaseSignal{TaskID: "t1", Fence: 3}}
	for _, try := range []string{"first", "repeat"} {
		val, err := env.ExecuteActivity("Ingest", in)
		require.NoError(t, err, try)
		var res api.IngestResult
		require.NoError(t, val.Get(&res))
		assert.Equal(t, []api.Artifact{a}, res.Artifacts, try)
	}
	assert.Equal(t, []sentSignal{release, release}, sent.sent, "a release per ingest, no task-ended")
}

func stage(t *testing.T, store *blobstore.Store, prefix, name string, content []byte) api.Artifact {
	_, _, err := store.Stage(context.Background(), prefix+name, strings.NewReader(string(content)))
	require.NoError(t, err)
	return api.Artifact{Name: name, Digest: blobstore.DigestBytes(content), SizeBytes: int64(len(content))}
}

var claim = api.Claim{TaskID: "t1", WorkerID: "w", Attempt: 2, Fence: 3, EnvelopeDigest: "sha256:x"}

func TestIngestPromotesVerifiedArtifactsAndCleansStaging(t *testing.T) {
	env, store := ingestEnv(t)
	a := stage(t, store, blobstore.StagingPrefix("t1", 2, 3), "deep/result.csv", []byte("a,b\n"))
	l := stage(t, store, blobstore.LogStagingPrefix("t1", 2, 3), api.LogStdout, []byte("hello\n"))
	val, err := env.ExecuteActivity("Ingest", api.IngestInput{Claim: claim, Artifacts: []api.Artifact{a}, Logs: []api.Artifact{l}})
	require.NoError(t, err)
	var res api.IngestResult
	require.NoError(t, val.Get(&res))
	assert.Equal(t, []api.Artifact{a}, res.Artifacts)
	assert.Equal(t, []api.Artifact{l}, res.Logs)
	ctx := context.Background()
	assert.True(t, has(t, store, a.Digest))
	assert.True(t, has(t, store, l.Digest))
	keys, err := store.List(ctx, "staging/")
	require.NoError(t, err)
	assert.Empty(t, keys, "the attempt's staging is removed")
}

// An ingest repeated after it finished (its completion, or the workflow
// task that recorded a local ingest, was lost) finds the staging gone and
// every file in the store: it succeeds with the same result instead of
// failing on missing staging.
func TestIngestRepeatedAfterItFinishedSucceeds(t *testing.T) {
	env, store := ingestEnv(t)
	a := stage(t, store, blobstore.StagingPrefix("t1", 2, 3), "r.csv", []byte("1,2\n"))
	l := stage(t, store, blobstore.LogStagingPrefix("t1", 2, 3), api.LogStderr, []byte("warn\n"))
	in := api.IngestInput{Claim: claim, Artifacts: []api.Artifact{a}, Logs: []api.Artifact{l}}
	_, err := env.ExecuteActivity("Ingest", in)
	require.NoError(t, err)
	val, err := env.ExecuteActivity("Ingest", in)
	require.NoError(t, err, "the repeat")
	var res api.IngestResult
	require.NoError(t, val.Get(&res))
	assert.Equal(t, []api.Artifact{a}, res.Artifacts)
	assert.Equal(t, []api.Artifact{l}, res.Logs)

	// Not when a file it names never reached the store.
	missing := api.Artifact{Name: "other.csv", Digest: blobstore.DigestBytes([]byte("never staged")), SizeBytes: 12}
	_, err = env.ExecuteActivity("Ingest", api.IngestInput{Claim: claim, Artifacts: []api.Artifact{a, missing}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must share --blob-url")
}

func TestIngestRefusesATamperedArtifact(t *testing.T) {
	env, store := ingestEnv(t)
	a := stage(t, store, blobstore.StagingPrefix("t1", 2, 3), "r.txt", []byte("declared"))
	stage(t, store, blobstore.StagingPrefix("t1", 2, 3), "r.txt", []byte("swapped!"))
	_, err := env.ExecuteActivity("Ingest", api.IngestInput{Claim: claim, Artifacts: []api.Artifact{a}})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Equal(t, api.ErrTypeArtifactMismatch, appErr.Type())
	assert.True(t, appErr.NonRetryable())
	assert.False(t, has(t, store, a.Digest))
}

func TestIngestRefusesPathEscapes(t *testing.T) {
	env, store := ingestEnv(t)
	stage(t, store, blobstore.StagingPrefix("t1", 2, 3), "x", nil)
	_, err := env.ExecuteActivity("Ingest", api.IngestInput{Claim: claim, Artifacts: []api.Artifact{{Name: "../../../etc/passwd", Digest: blobstore.DigestBytes(nil)}}})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	assert.Equal(t, api.ErrTypeArtifactMismatch, appErr.Type())
	assert.Contains(t, appErr.Message(), "..")
}

// A control plane that does not share the agents' blob store finds no
// staging: that is retried (another control plane may), with a message
// that says what is wrong.
func TestIngestWithoutStagingIsRetryable(t *testing.T) {
	env, _ := ingestEnv(t)
	_, err := env.ExecuteActivity("Ingest", api.IngestInput{Claim: claim, Artifacts: []api.Artifact{{Name: "x", Digest: blobstore.DigestBytes(nil)}}})
	require.Error(t, err)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		assert.False(t, appErr.NonRetryable())
	}
	assert.Contains(t, err.Error(), "must share --blob-url")
}

// Ingest heartbeats while bytes flow through one large artifact, not only
// between artifacts: a big artifact on a slow store must not run into the
// activity's heartbeat timeout.
func TestIngestHeartbeatsByBytes(t *testing.T) {
	defer func(d time.Duration, r func(context.Context, ...any)) {
		ingestHeartbeatEvery, recordHeartbeat = d, r
	}(ingestHeartbeatEvery, recordHeartbeat)
	ingestHeartbeatEvery = 0 // every read, so a fast local store shows it
	var mu sync.Mutex
	var beats []api.IngestProgress
	recordHeartbeat = func(ctx context.Context, details ...any) {
		mu.Lock()
		beats = append(beats, details[0].(api.IngestProgress))
		mu.Unlock()
		activity.RecordHeartbeat(ctx, details...)
	}
	env, store := ingestEnv(t)
	big := stage(t, store, blobstore.StagingPrefix("t1", 2, 3), "big.bin", bytes.Repeat([]byte("0123456789abcdef"), 5<<16)) // 5 MiB
	_, err := env.ExecuteActivity("Ingest", api.IngestInput{Claim: claim, Artifacts: []api.Artifact{big}})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	var during []int64
	for _, b := range beats {
		if b.Artifact == 0 && b.Bytes > 0 {
			during = append(during, b.Bytes)
		}
	}
	require.GreaterOrEqual(t, len(during), 2, "heartbeats while the artifact streams: %+v", beats)
	assert.True(t, slices.IsSorted(during), "bytes only grow")
	assert.Equal(t, big.SizeBytes, during[len(during)-1], "up to the whole artifact")
	assert.Equal(t, api.IngestProgress{Artifact: 1}, beats[len(beats)-1], "and once the artifact is promoted")
}

// A store that cannot be reached is infrastructure trouble: Ingest fails
// retryably, naming the store, and promotes nothing.
func TestIngestOnAnUnreachableStoreIsRetryable(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "unused")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "unused-secret")
	url := "s3://gone?endpoint=http://127.0.0.1:1&use_path_style=true&region=us-east-1&disable_https=true"
	store, err := blobstore.Open(context.Background(), url)
	require.NoError(t, err)
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(&Control{Blobs: store, Client: &signalLog{}})
	_, err = env.ExecuteActivity("Ingest", api.IngestInput{Claim: claim, Artifacts: []api.Artifact{{Name: "x", Digest: blobstore.DigestBytes(nil)}}})
	require.Error(t, err)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		assert.False(t, appErr.NonRetryable(), "retried, not the result's fault: %v", err)
		assert.NotEqual(t, api.ErrTypeArtifactMismatch, appErr.Type())
	}
	assert.Contains(t, err.Error(), "s3://gone?endpoint=")
	assert.NotContains(t, err.Error(), "unused-secret")
}

// has is Has for a store that must answer.
func has(t testing.TB, s *blobstore.Store, digest string) bool {
	t.Helper()
	ok, err := s.Has(context.Background(), digest)
	require.NoError(t, err)
	return ok
}
