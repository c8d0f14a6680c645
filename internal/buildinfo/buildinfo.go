package buildinfo

import (
	"runtime/debug"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// Module paths looked up among the binary's dependencies.
const (
	SDKModule    = "go.temporal.io/sdk"
	ServerModule = "go.temporal.io/server"
)

// DevBuildID is the build ID of a binary that records neither a module
// version nor a VCS commit (a plain `go build` with -buildvcs=false, or
// a `go run`): every such build shares it.
const DevBuildID = "dev"

// commitLen is how many hex digits of the VCS commit a build ID keeps
// (git's default abbreviation, well above its collision length).
const commitLen = 12

// Info is what a binary records about its build. Empty strings are
// unknown (or, for TemporalServer, not linked into this binary).
type Info struct {
	// Version is wdc's module version: a release tag (v1.2.0), a
	// pseudo-version (v0.0.0-20261201120000-abcdef123456, +dirty when the
	// tree was modified), or "(devel)" when the toolchain recorded none.
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from (vcs.revision).
	Commit string `json:"commit,omitempty"`
	// Modified is true when the work tree had uncommitted changes
	// (vcs.modified).
	Modified bool `json:"modified,omitempty"`
	// Go is the toolchain that built the binary, e.g. go1.26.8.
	Go string `json:"go"`
	// TemporalSDK is the version of go.temporal.io/sdk linked in (from
	// the recorded dependencies, else the SDK's own SDKVersion).
	TemporalSDK string `json:"temporal_sdk"`
	// TemporalServer is the version of go.temporal.io/server linked in
	// (the wdc binary embeds it for 'wdc server start-dev'); empty when
	// this binary does not link it.
	TemporalServer string `json:"temporal_server,omitempty"`
	// BuildID is the control plane's default --build-id (see From).
	BuildID string `json:"build_id"`
}

// Read returns the running binary's Info; a binary without build
// information (not built in module mode) gets Version "" and BuildID
// DevBuildID.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{BuildID: DevBuildID}
	}
	return From(bi)
}

// From extracts Info from recorded build information. The build ID is,
// in order: the module version when the toolchain recorded one (not
// "(devel)"); else the first 12 digits of the VCS commit, with "-dirty"
// when the tree was modified; else DevBuildID. It depends on nothing but
// the binary, so every process of one binary derives the same one.
func From(bi *debug.BuildInfo) Info {
	info := Info{Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		switch m.Path {
		case SDKModule:
			info.TemporalSDK = m.Version
		case ServerModule:
			info.TemporalServer = m.Version
		}
	}
	if info.TemporalSDK == "" {
		// Test binaries record no dependencies; the SDK knows its own.
		info.TemporalSDK = "v" + temporal.SDKVersion
	}
	info.BuildID = buildID(info)
	return info
}

func buildID(info Info) string {
	if v := info.Version; v != "" && v != "(devel)" {
		return v
	}
	if c := info.Commit; c != "" {
		if len(c) > commitLen {
			c = c[:commitLen]
		}
		if info.Modified {
			c += "-dirty"
		}
		return strings.ToLower(c)
	}
	return DevBuildID
}
