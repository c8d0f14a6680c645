// Package envelope defines the task envelope — the immutable description of
// one logical task (IDs, command, inputs, resources, capabilities, selector,
// explicit environment, timeouts) — its strict JSON decoding, and its digest:
// "sha256:" + hex SHA-256 of the envelope's RFC 8785 (JCS) canonical JSON,
// computed with github.com/gowebpki/jcs. The same envelope gives the same
// digest on every machine regardless of key order or whitespace; every
// attempt of a task carries that digest (invariant 3 in
// docs/architecture.md, "Invariants").
//
// Pure Go with no Temporal import.
package envelope
