package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/temporal"
)

func TestFrom(t *testing.T) {
	deps := []*debug.Module{
		{Path: "go.temporal.io/api", Version: "v1.63.5"},
		{Path: SDKModule, Version: "v1.50.0"},
		{Path: ServerModule, Version: "v1.32.0", Replace: &debug.Module{Path: ServerModule, Version: "v1.32.1"}},
	}
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "false"}}
	dirty := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "true"}}
	tests := []struct {
		name string
		bi   debug.BuildInfo
		want Info
	}{
		{"release", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}, Deps: deps, Settings: vcs},
			Info{Version: "v1.4.0", Commit: "0123456789abcdef0123456789abcdef01234567", Go: "go1.26.8", TemporalSDK: "v1.50.0", TemporalServer: "v1.32.1", BuildID: "v1.4.0"}},
		{"pseudo-version", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201120000-0123456789ab+dirty"}, Deps: deps, Settings: dirty},
			Info{Version: "v0.0.0-20261201120000-0123456789ab+dirty", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true, TemporalSDK: "v1.50.0", TemporalServer: "v1.32.1", BuildID: "v0.0.0-20261201120000-0123456789ab+dirty"}},
		{"commit only", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Deps: deps, Settings: vcs},
			Info{Version: "(devel)", Commit: "0123456789abcdef0123456789abcdef01234567", TemporalSDK: "v1.50.0", TemporalServer: "v1.32.1", BuildID: "0123456789ab"}},
		{"dirty commit", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Deps: deps, Settings: dirty},
			Info{Version: "(devel)", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true, TemporalSDK: "v1.50.0", TemporalServer: "v1.32.1", BuildID: "0123456789ab-dirty"}},
		{"no dependencies recorded (a test binary)", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			Info{Version: "(devel)", TemporalSDK: "v" + temporal.SDKVersion, BuildID: DevBuildID}},
		{"nothing recorded", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Deps: deps[:2]},
			Info{Version: "(devel)", Go: "go1.26.8", TemporalSDK: "v1.50.0", BuildID: DevBuildID}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, From(&tc.bi))
		})
	}
}

// Two reads in one binary agree: control planes of one binary share a
// build ID.
func TestReadIsStable(t *testing.T) {
	a, b := Read(), Read()
	if a != b || a.BuildID == "" {
		t.Fatalf("Read: %+v then %+v", a, b)
	}
}
