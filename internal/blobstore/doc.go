// Package blobstore is wdc's content-addressed store on local disk and the
// per-attempt staging area next to it:
//
//	<data-dir>/blobs/sha256/<2 hex>/<64 hex>    immutable blobs
//	<data-dir>/staging/<task>/<attempt>-<fence>/  an attempt's outputs
//	<data-dir>/tmp/                               temp files (same filesystem)
//
// Every write is atomic: a temp file, fsync, rename, fsync of the directory,
// so a crash leaves either the whole blob or nothing. Promote re-hashes a
// staged file while copying it and keeps it only when the hash matches the
// declared digest (parent ingest; see docs/architecture.md, "Blob store and
// task directories").
package blobstore
