package blobstore

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/wdc-runtime/wdc/envelope"
)

// PutEnvelope stores the sealed envelope's RFC 8785 canonical JSON as a
// content-addressed blob and returns its digest, which is the envelope
// digest (envelope.Envelope.Digest hashes exactly these bytes): the blob
// sha256/<hex> of an envelope is named by the digest its leases carry.
// Storing an envelope that is already there is a no-op. Errors: the
// envelope cannot be canonicalized, or the store cannot be written.
func (s *Store) PutEnvelope(ctx context.Context, env envelope.Envelope) (digest string, err error) {
	canon, err := env.CanonicalJSON()
	if err != nil {
		return "", err
	}
	digest = DigestBytes(canon)
	if ok, err := s.Has(ctx, digest); err != nil {
		return "", err
	} else if ok {
		return digest, nil
	}
	if _, _, err := s.Put(ctx, bytes.NewReader(canon)); err != nil {
		return "", fmt.Errorf("store envelope %s: %w", digest, err)
	}
	return digest, nil
}

// Envelope reads the envelope stored under digest (PutEnvelope), checks
// that its bytes hash to digest, and decodes it strictly as a sealed
// envelope (envelope.Decode with sealed=true; inputs must be digests). The
// decoded envelope's own digest is checked again, so what is returned is
// exactly the envelope the digest names. Errors: ErrNotFound (wrapped)
// when no blob has that digest; ErrDigestMismatch (wrapped) when the
// stored bytes or the decoded envelope hash to something else; a decoding
// error naming the field at fault; store errors.
func (s *Store) Envelope(ctx context.Context, digest string) (envelope.Envelope, error) {
	r, err := s.Open(ctx, digest)
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("envelope %s: %w", digest, err)
	}
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, envelope.MaxEnvelopeBytes+1))
	if err != nil {
		return envelope.Envelope{}, s.fail("read", digest, err)
	}
	if got := DigestBytes(raw); got != digest {
		return envelope.Envelope{}, fmt.Errorf("envelope %s: %w: the stored bytes hash to %s", digest, ErrDigestMismatch, got)
	}
	env, err := envelope.Decode(bytes.NewReader(raw), true)
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("envelope %s: %w", digest, err)
	}
	if got, err := env.Digest(); err != nil || got != digest {
		return envelope.Envelope{}, fmt.Errorf("envelope %s: %w: decoded, it hashes to %s (not in canonical form?)", digest, ErrDigestMismatch, got)
	}
	return env, nil
}
