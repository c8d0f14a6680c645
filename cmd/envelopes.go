package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

// readEnvelopeFile decodes a task file strictly ("-" is stdin) and seals it
// by hashing input files (relative paths are relative to the file's
// directory) without storing them. Errors are usage errors naming the file
// and field.
func readEnvelopeFile(path string) (envelope.Envelope, error) {
	env, base, err := decodeEnvelopeFile(path)
	if err != nil {
		return env, err
	}
	sealed, err := sealEnvelope(env, base, blobstore.HashFile)
	if err != nil {
		return sealed, fmt.Errorf("%s: %w", path, err)
	}
	return sealed, nil
}

func decodeEnvelopeFile(path string) (envelope.Envelope, string, error) {
	var r io.Reader
	base := "."
	if path == "-" {
		r = os.Stdin
	} else {
		fi, err := os.Stat(path)
		if err != nil {
			return envelope.Envelope{}, "", usagef("%s: %v", path, err)
		}
		if !fi.Mode().IsRegular() {
			return envelope.Envelope{}, "", usagef("%s: not a regular file (%s); use - to read stdin", path, fi.Mode().Type())
		}
		f, err := os.Open(path)
		if err != nil {
			return envelope.Envelope{}, "", usagef("%s: %v", path, err)
		}
		defer f.Close()
		r = f
		base = filepath.Dir(path)
	}
	env, err := envelope.Decode(r, false)
	if err != nil {
		return envelope.Envelope{}, "", usagef("%s: %v", path, err)
	}
	return env, base, nil
}

// sealEnvelope replaces every input path by its content digest, using put
// to store (or just hash) the file.
func sealEnvelope(env envelope.Envelope, base string, put func(string) (string, int64, error)) (envelope.Envelope, error) {
	inputs := make([]envelope.Input, len(env.Inputs))
	for i, in := range env.Inputs {
		inputs[i] = in
		if in.Path == "" {
			continue
		}
		p, err := inputPath(base, i, in)
		if err != nil {
			return env, usageError{err}
		}
		digest, size, err := put(p)
		if err != nil {
			return env, fmt.Errorf("inputs[%d].path %s: %w", i, p, err)
		}
		inputs[i] = envelope.Input{Name: in.Name, Digest: digest, SizeBytes: size}
	}
	env.Inputs = inputs
	if err := env.Validate(true); err != nil {
		return env, usageError{err}
	}
	return env, nil
}

// storeEnvelope puts the sealed envelope into store, beside the inputs
// sealing stored there, so that `wdc exec` can read it by its digest
// (the launch paths store it again). A nil store (no inputs to store) is
// left alone.
func storeEnvelope(ctx context.Context, store *blobstore.Store, sealed envelope.Envelope) error {
	if store == nil {
		return nil
	}
	_, err := store.PutEnvelope(ctx, sealed)
	return err
}

// inputPath resolves input i's path (relative to base) and checks that it
// names a regular file; errors name inputs[i].path.
func inputPath(base string, i int, in envelope.Input) (string, error) {
	p := in.Path
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("inputs[%d].path: %w", i, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("inputs[%d].path: %s is not a regular file", i, p)
	}
	return p, nil
}
