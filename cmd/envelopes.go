package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
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

// sealEnvelope is client.Seal with its refusals as usage errors (exit 2).
func sealEnvelope(env envelope.Envelope, base string, put func(string) (string, int64, error)) (envelope.Envelope, error) {
	sealed, err := wdcclient.Seal(env, base, put)
	return sealed, inputUsage(err)
}

// inputUsage turns the client's refusal of a task file's inputs into a
// usage error carrying its message alone ("inputs[0].path: ..."; exit 2).
func inputUsage(err error) error {
	var we *wdcclient.Error
	if errors.As(err, &we) && we.Type == api.ErrTypeInvalidArgument {
		return usageError{errors.New(we.Message)}
	}
	return err
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
