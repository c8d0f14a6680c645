package blobstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/envelope"
)

func sealedEnvelope(t *testing.T) envelope.Envelope {
	t.Helper()
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"/bin/true"},
		Env: map[string]string{"B": "2", "A": "1"}}
	env.Normalize()
	require.NoError(t, env.Validate(true))
	return env
}

// The blob of an envelope is named by the envelope digest, and reading it
// back gives the same envelope.
func TestEnvelopeRoundTripIsNamedByTheEnvelopeDigest(t *testing.T) {
	ctx := context.Background()
	s, err := OpenDir(ctx, t.TempDir())
	require.NoError(t, err)
	env := sealedEnvelope(t)
	want, err := env.Digest()
	require.NoError(t, err)
	got, err := s.PutEnvelope(ctx, env)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	again, err := s.PutEnvelope(ctx, env)
	require.NoError(t, err, "storing it again is a no-op")
	assert.Equal(t, want, again)
	canon, err := env.CanonicalJSON()
	require.NoError(t, err)
	key, _ := ContentKey(want)
	b, err := os.ReadFile(filepath.Join(s.LocalDir(), key))
	require.NoError(t, err)
	assert.Equal(t, string(canon), string(b), "the blob is exactly the canonical JSON")

	back, err := s.Envelope(ctx, want)
	require.NoError(t, err)
	assert.Equal(t, env, back)
}

func TestEnvelopeRefusesMissingCorruptAndNonCanonicalBlobs(t *testing.T) {
	ctx := context.Background()
	s, err := OpenDir(ctx, t.TempDir())
	require.NoError(t, err)

	_, err = s.Envelope(ctx, "sha256:"+strings.Repeat("0", 64))
	assert.True(t, errors.Is(err, ErrNotFound), "missing: %v", err)

	// The same envelope, not in canonical form: its bytes have another
	// digest than the envelope's, so it is not the envelope they name.
	env := sealedEnvelope(t)
	pretty := `{"task_id": "t1", "run_id": "r1", "world_id": "w1", "command": ["/bin/true"], "env": {"A": "1", "B": "2"}, "launcher": "local"}`
	d, _, err := s.Put(ctx, strings.NewReader(pretty))
	require.NoError(t, err)
	_, err = s.Envelope(ctx, d)
	assert.True(t, errors.Is(err, ErrDigestMismatch), "non-canonical: %v", err)

	// Not an envelope at all: the decoder names the field.
	d, _, err = s.Put(ctx, strings.NewReader(`{"task_id":"t1","comand":["x"]}`))
	require.NoError(t, err)
	_, err = s.Envelope(ctx, d)
	assert.ErrorContains(t, err, "comand")

	// Unsealed (an input by path): refused by the strict sealed decoding.
	d, _, err = s.Put(ctx, strings.NewReader(`{"command":["/bin/true"],"inputs":[{"name":"a","path":"a"}],"launcher":"local","run_id":"r1","task_id":"t1","world_id":"w1"}`))
	require.NoError(t, err)
	_, err = s.Envelope(ctx, d)
	assert.ErrorContains(t, err, "inputs[0]")

	// Corrupted after storing: the bytes no longer hash to their name.
	good, err := s.PutEnvelope(ctx, env)
	require.NoError(t, err)
	key, _ := ContentKey(good)
	require.NoError(t, os.WriteFile(filepath.Join(s.LocalDir(), key), []byte(`{"task_id":"evil"}`), 0o644))
	_, err = s.Envelope(ctx, good)
	assert.True(t, errors.Is(err, ErrDigestMismatch), "corrupted: %v", err)
}
