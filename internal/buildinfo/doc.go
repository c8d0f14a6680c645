// Package buildinfo reads what the Go toolchain recorded in the running
// binary (runtime/debug.ReadBuildInfo): wdc's module version and VCS
// commit, the Go version, and the Temporal SDK and server modules it
// links. 'wdc version' prints it; the control plane's default build ID
// (worker.DefaultBuildID) is derived from it.
package buildinfo
