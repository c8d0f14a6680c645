// Package identity is who may speak for a fleet worker and for an attempt:
// SPIFFE IDs in X.509-SVIDs (go-spiffe), the signatures wdc's messages
// carry (Proof), the key an agent delegates to each attempt's executor
// (Delegation), and Verifier, the one check a validator runs beside the
// fence check (lease.Check).
//
// Verification is pure: callers pass "now" (workflow.Now inside
// workflows) and it reads no clock, network or file, so workflow
// validators call it. OpenWorkloadAPI is the one part that talks to a
// SPIRE agent: its source rotates SVIDs and bundles. Issuer is the zero-setup certificate
// authority of `wdc server start-dev`, the demo and the tests; in
// production the SVIDs come from SPIRE and only the trust bundle is shared.
package identity
