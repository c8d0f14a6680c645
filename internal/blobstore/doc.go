// Package blobstore is wdc's content-addressed artifact store and the
// per-attempt staging area beside it, on gocloud.dev/blob behind a URL
// (--blob-url): file://<data-dir>/blobs by default, s3://bucket?endpoint=…
// for S3 and S3-compatible servers.
//
//	sha256/<64 hex>                              immutable, content-addressed blobs
//	staging/<task>/<attempt>-<fence>/<name>      an attempt's outputs
//	staging/<task>/<attempt>-<fence>.logs/<name> its stdout.log and stderr.log
//	tmp/<random>                                 uploads of unknown digest (Put)
//
// Every object becomes visible whole or not at all (the file backend
// renames a complete temp file; S3 publishes an object when its upload
// completes). Promote re-hashes a staged object while streaming it into
// sha256/<hex> and aborts the write unless the hash matches the declared
// digest (parent ingest; see docs/architecture.md, "Blob store and task
// directories"). Nothing holds a whole object in memory.
//
// Credentials for s3:// come from the provider's default chain (for AWS:
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, shared config, instance
// roles); they are never part of the URL wdc logs or puts in an error.
package blobstore
