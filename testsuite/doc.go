// Package testsuite holds wdc's system tests: the real Temporal server
// embedded in-process (one per test binary, shared by the tests), the real
// control plane, agents as in-process workers or as real subprocesses of
// this test binary (re-executed as the wdc CLI), real commands and files.
// It is, with internal/devserver, the only package that links
// go.temporal.io/server. `go test -short` skips it.
//
// Replay tests of checked-in histories live in testsuite/replay (no server).
package testsuite
