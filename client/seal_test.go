package client_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

// SealInputs uploads inputs named by path (relative to base), names them
// by digest and stores the sealed envelope beside them: what a program
// needs before SubmitTask. A bad path is an invalid_argument *Error naming
// inputs[i].path, and nothing is stored for it.
func TestSealInputsUploadsAndNamesByDigest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n1,2\n"), 0o644))
	storeURL := "file://" + filepath.Join(dir, "blobs")
	env := envelope.Envelope{TaskID: "t1", RunID: "r1", WorldID: "w1", Command: []string{"true"},
		Inputs: []envelope.Input{{Name: "data.csv", Path: "data.csv"}}}

	sealed, err := client.SealInputs(ctx, storeURL, env, dir)
	require.NoError(t, err)
	require.Len(t, sealed.Inputs, 1)
	in := sealed.Inputs[0]
	assert.Empty(t, in.Path, "named by digest only")
	want, size, err := blobstore.HashFile(filepath.Join(dir, "data.csv"))
	require.NoError(t, err)
	assert.Equal(t, want, in.Digest)
	assert.Equal(t, size, in.SizeBytes)
	require.NoError(t, sealed.Validate(true), "sealed: what SubmitTask takes")

	store, err := blobstore.Open(ctx, storeURL)
	require.NoError(t, err)
	defer store.Close()
	has, err := store.Has(ctx, in.Digest)
	require.NoError(t, err)
	assert.True(t, has, "the input is in the store")
	digest, err := sealed.Digest()
	require.NoError(t, err)
	stored, err := store.Envelope(ctx, digest)
	require.NoError(t, err)
	assert.Equal(t, sealed.TaskID, stored.TaskID, "the sealed envelope is in the store under its digest")

	env.Inputs[0].Path = "missing.csv"
	_, err = client.SealInputs(ctx, storeURL, env, dir)
	var we *client.Error
	require.True(t, errors.As(err, &we), "%v", err)
	assert.Equal(t, api.ErrTypeInvalidArgument, we.Type)
	assert.Contains(t, we.Message, "inputs[0].path")

	_, err = client.SealInputs(ctx, "not a url", env, dir)
	assert.ErrorContains(t, err, "not a URL")
}
