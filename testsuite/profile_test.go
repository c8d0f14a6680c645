package testsuite

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/cmd"
)

// One profile of the Temporal CLI's config file serves wdc: with
// --profile (or TEMPORAL_PROFILE) and no --address, wdc reaches the
// profile's server and namespace.
func TestTemporalCLIProfileServesWdc(t *testing.T) {
	file := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(file, []byte(`[profile.suite]
address = "`+suite.srv.FrontendHostPort()+`"
namespace = "`+nsNoControlPlane+`"
`), 0o600))
	for _, how := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"flags", []string{"--profile", "suite", "--config-file", file}, nil},
		{"environment", nil, map[string]string{"TEMPORAL_PROFILE": "suite", "TEMPORAL_CONFIG_FILE": file}},
	} {
		t.Run(how.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := cmd.Main(cmd.Deps{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return how.env[k] }},
				append([]string{"workers", "list"}, how.args...))
			assert.Equal(t, cmd.ExitOK, code, errb.String())
			assert.Contains(t, errb.String(), "no control plane is polling wdc-control on "+suite.srv.FrontendHostPort()+" (namespace "+nsNoControlPlane+")",
				"the profile's server and namespace")
			assert.Contains(t, out.String(), "no workers")
		})
	}
}
