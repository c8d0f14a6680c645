package cmd

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/internal/buildinfo"
)

// 'wdc version' and 'wdc --version' print what the binary recorded; with
// -o json as an object with the same fields.
func TestVersionPrintsTheBuild(t *testing.T) {
	want := buildinfo.Read()
	require.NotEmpty(t, want.TemporalSDK)
	require.NotEmpty(t, want.BuildID)

	code, stdout, stderr := run(t, "version", "-o", "json")
	require.Equal(t, ExitOK, code, stderr)
	var got buildinfo.Info
	require.NoError(t, json.Unmarshal([]byte(stdout), &got), stdout)
	assert.Equal(t, want, got)

	code, stdout, stderr = run(t, "--version")
	require.Equal(t, ExitOK, code, stderr)
	var text bytes.Buffer
	require.NoError(t, writeVersion(&text, want))
	assert.Equal(t, text.String(), stdout)
	assert.Contains(t, stdout, "temporal sdk     "+want.TemporalSDK+"\n")
	assert.Contains(t, stdout, "go               "+want.Go+"\n")

	code, _, stderr = run(t, "--version", "extra")
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, "--version takes no arguments")
}

func TestWriteVersion(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeVersion(&b, buildinfo.Info{
		Version: "v1.4.0", Commit: "0123456789abcdef", Modified: true, Go: "go1.26.8",
		TemporalSDK: "v1.50.0", TemporalServer: "v1.32.1", BuildID: "v1.4.0",
	}))
	assert.Equal(t, `wdc              v1.4.0
commit           0123456789abcdef (modified)
go               go1.26.8
temporal sdk     v1.50.0
temporal server  v1.32.1
build id         v1.4.0
`, b.String())
	b.Reset()
	require.NoError(t, writeVersion(&b, buildinfo.Info{Version: "(devel)", Go: "go1.26.8", TemporalSDK: "v1.50.0", BuildID: "dev"}))
	assert.Contains(t, b.String(), "commit           unknown (built without VCS information)\n")
	assert.Contains(t, b.String(), "temporal server  not linked into this binary\n")
}
