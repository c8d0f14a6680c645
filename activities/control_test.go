package activities

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

func ingestEnv(t *testing.T) (*testsuite.TestActivityEnvironment, *blobstore.Store) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	store, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	env.RegisterActivity(&Control{Blobs: store})
	return env, store
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
	assert.True(t, store.Has(ctx, a.Digest))
	assert.True(t, store.Has(ctx, l.Digest))
	keys, err := store.List(ctx, "staging/")
	require.NoError(t, err)
	assert.Empty(t, keys, "the attempt's staging is removed")
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
	assert.False(t, store.Has(context.Background(), a.Digest))
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
