package external

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

func TestRenderGivesArgvAndEnvButNeverSecrets(t *testing.T) {
	c := lease.Claim{TaskID: "t1", WorkerID: "w1", Attempt: 2, Fence: 3, EnvelopeDigest: "sha256:ab"}
	cmd := Render(Target{Binary: "/opt/wdc", Address: "tmp:7233", Namespace: "prod", BlobURL: "s3://b?region=r", TLS: true, TLSCAPath: "/ca.pem", APIKey: true}, c)
	assert.Equal(t, []string{"/opt/wdc", "exec", "--task-id", "t1", "--attempt", "2", "--fence", "3", "--worker-id", "w1",
		"--envelope-digest", "sha256:ab", "--address", "tmp:7233", "--namespace", "prod", "--blob-url", "s3://b?region=r",
		"--tls-ca-path", "/ca.pem", "--tls"}, cmd.Argv)
	assert.Equal(t, []string{"TEMPORAL_ADDRESS=tmp:7233", "TEMPORAL_NAMESPACE=prod", "TEMPORAL_TLS=true", "TEMPORAL_TLS_CA=/ca.pem",
		"WDC_BLOB_URL=s3://b?region=r", "WDC_EXEC_ATTEMPT=2", "WDC_EXEC_ENVELOPE_DIGEST=sha256:ab", "WDC_EXEC_FENCE=3",
		"WDC_EXEC_TASK_ID=t1", "WDC_EXEC_WORKER_ID=w1"}, cmd.Env)
	assert.Equal(t, []string{"TEMPORAL_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, cmd.SecretEnv)
	assert.Equal(t, "/opt/wdc exec --task-id t1 --attempt 2 --fence 3 --worker-id w1 --envelope-digest sha256:ab --address tmp:7233 --namespace prod --blob-url 's3://b?region=r' --tls-ca-path /ca.pem --tls", cmd.String())

	plain := Render(Target{Address: "a:1", BlobURL: "file:///d"}, c)
	assert.Equal(t, "wdc", plain.Argv[0], "default binary")
	assert.Empty(t, plain.SecretEnv, "a file store and no API key need no credentials")
	assert.Equal(t, `'it'\''s' x`, ShellQuote([]string{"it's", "x"}))
}

func newLauncher(t *testing.T) (*Launcher, *blobstore.Store, launchers.Attempt, *[]string) {
	t.Helper()
	blobs, err := blobstore.OpenDir(context.Background(), t.TempDir())
	require.NoError(t, err)
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w", Command: []string{"/bin/true"}}
	env.Normalize()
	d, err := env.Digest()
	require.NoError(t, err)
	var handed []string
	l, err := New(Options{WorkerID: "w1", SpoolDir: filepath.Join(t.TempDir(), "spool"), Blobs: blobs,
		Target:    Target{Binary: "wdc", Address: "a:1", BlobURL: "file:///x"},
		OnHandOff: func(c Command, path string) { handed = append(handed, path) }})
	require.NoError(t, err)
	a := launchers.Attempt{Envelope: env, Lease: lease.Lease{TaskID: "t1", WorkerID: "w1", Attempt: 1, Fence: 1, EnvelopeDigest: d, State: lease.Active, TTL: time.Second}}
	return l, blobs, a, &handed
}

func TestSubmitStoresTheEnvelopeAndSpoolsTheCommand(t *testing.T) {
	ctx := context.Background()
	l, blobs, a, handed := newLauncher(t)
	sub, err := l.Submit(ctx, a)
	require.NoError(t, err)
	path := SpoolFile(l.opts.SpoolDir, a.Claim())
	assert.Equal(t, launchers.Submission{TaskDir: path}, sub)
	assert.Equal(t, []string{path}, *handed)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var cmd Command
	require.NoError(t, json.Unmarshal(b, &cmd))
	assert.Equal(t, Render(l.opts.Target, a.Claim()), cmd)
	got, err := blobs.Envelope(ctx, a.Lease.EnvelopeDigest)
	require.NoError(t, err, "the sealed envelope is in the store under its digest")
	assert.Equal(t, a.Envelope, got)

	st, err := l.Status(ctx, a.Claim())
	require.NoError(t, err)
	assert.Equal(t, launchers.PhaseRunning, st.Phase)
	require.NoError(t, l.Cancel(ctx, a.Claim(), "lease ended"))
	assert.NoFileExists(t, path)
	_, err = l.Status(ctx, a.Claim())
	assert.ErrorIs(t, err, launchers.ErrUnknownAttempt)
	require.NoError(t, l.Cancel(ctx, a.Claim(), "again"), "cancelling an unknown attempt is not an error")
}

func TestSubmitRefusalsSpoolNothing(t *testing.T) {
	l, _, a, handed := newLauncher(t)
	other := a
	other.Lease.WorkerID = "w2"
	_, err := l.Submit(context.Background(), other)
	assert.ErrorContains(t, err, `for worker "w2"`)

	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = l.Submit(expired, a)
	assert.True(t, errors.Is(err, launchers.ErrLaunchExpired), "%v", err)

	wrong := a
	wrong.Lease.EnvelopeDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	_, err = l.Submit(context.Background(), wrong)
	assert.ErrorContains(t, err, "does not match the lease's")

	entries, err := os.ReadDir(l.opts.SpoolDir)
	require.NoError(t, err)
	assert.Empty(t, entries)
	assert.Empty(t, *handed)

	_, err = New(Options{WorkerID: "w1", Blobs: l.opts.Blobs})
	assert.ErrorContains(t, err, "spool dir is required")
}
