package client

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

// SealInputs makes a task file's envelope submittable: every input it
// names by path (relative to base, e.g. the task file's directory) is
// uploaded to the artifact store at blobURL — the store the control plane
// and the agents share (s3://bucket?..., file:///dir) — and named by its
// content digest instead; the sealed envelope is stored there too, so an
// executor elsewhere (`wdc exec`) can read it by digest. It returns the
// sealed envelope (normalized, as SubmitTask digests it), which SubmitTask
// and SubmitTasks take. This is what
// `wdc tasks submit FILE` does first.
//
// Errors: an *Error of type api.ErrTypeInvalidArgument naming
// inputs[i].path when a path is missing or not a regular file, or when
// the sealed envelope is invalid; the store's errors (a bad URL, missing
// credentials, an unreachable endpoint), wrapped with the input they
// concern.
func SealInputs(ctx context.Context, blobURL string, env envelope.Envelope, base string) (envelope.Envelope, error) {
	store, err := blobstore.Open(ctx, blobURL)
	if err != nil {
		return env, err
	}
	defer store.Close()
	sealed, err := Seal(env, base, func(path string) (string, int64, error) { return store.PutFile(ctx, path) })
	if err != nil {
		return env, err
	}
	// Stored as SubmitTask will digest it, so the lease's digest finds it.
	sealed.Normalize()
	if _, err := store.PutEnvelope(ctx, sealed); err != nil {
		return env, fmt.Errorf("store the sealed envelope: %w", err)
	}
	return sealed, nil
}

// Seal replaces every input path of env (relative to base) by the content
// digest and size put returns for the file: put stores it (SealInputs) or
// only hashes it. Inputs already named by digest are kept. Errors: as
// SealInputs; put's errors name inputs[i].path.
func Seal(env envelope.Envelope, base string, put func(path string) (digest string, size int64, err error)) (envelope.Envelope, error) {
	inputs := make([]envelope.Input, len(env.Inputs))
	for i, in := range env.Inputs {
		inputs[i] = in
		if in.Path == "" {
			continue
		}
		p, err := InputPath(base, i, in)
		if err != nil {
			return env, err
		}
		digest, size, err := put(p)
		if err != nil {
			return env, fmt.Errorf("inputs[%d].path %s: %w", i, p, err)
		}
		inputs[i] = envelope.Input{Name: in.Name, Digest: digest, SizeBytes: size}
	}
	env.Inputs = inputs
	if err := env.Validate(true); err != nil {
		return env, &Error{Type: api.ErrTypeInvalidArgument, Message: err.Error()}
	}
	return env, nil
}

// InputPath resolves input i's path (relative to base) and checks that it
// names a regular file. Errors: an *Error of type
// api.ErrTypeInvalidArgument naming inputs[i].path.
func InputPath(base string, i int, in envelope.Input) (string, error) {
	p := in.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", &Error{Type: api.ErrTypeInvalidArgument, Message: fmt.Sprintf("inputs[%d].path: %v", i, err)}
	}
	if !fi.Mode().IsRegular() {
		return "", &Error{Type: api.ErrTypeInvalidArgument, Message: fmt.Sprintf("inputs[%d].path: %s is not a regular file", i, p)}
	}
	return p, nil
}
