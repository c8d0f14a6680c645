package cmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testProfiles = `
[profile.default]
address = "default.example:7233"

[profile.prod]
address = "prod.example:7233"
namespace = "prod-ns"
api_key = "secret-key"

[profile.mtls]
address = "mtls.example:7233"
[profile.mtls.tls]
client_cert_path = "/etc/wdc/client.pem"
client_key_path = "/etc/wdc/client.key"
server_name = "temporal.internal"

[profile.codec]
address = "codec.example:7233"
[profile.codec.codec]
endpoint = "https://codec.example"
`

// profileOptions parses args as the global flags and applies the profile
// from a config file holding testProfiles.
func profileOptions(t *testing.T, env map[string]string, args ...string) (globalOptions, error) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(file, []byte(testProfiles), 0o600))
	getenv := func(k string) string {
		if k == "TEMPORAL_CONFIG_FILE" {
			return file
		}
		return env[k]
	}
	var g globalOptions
	root := &cobra.Command{}
	g.bind(root, getenv)
	require.NoError(t, root.PersistentFlags().Parse(args))
	err := g.applyProfile(root.PersistentFlags(), getenv)
	return g, err
}

func TestProfilePrecedence(t *testing.T) {
	g, err := profileOptions(t, nil)
	require.NoError(t, err)
	assert.Equal(t, "default.example:7233", g.address, "the file's default profile without --profile")
	assert.Equal(t, "default", g.namespace, "wdc's default where the profile is silent")
	assert.False(t, g.tls)

	g, err = profileOptions(t, nil, "--profile", "prod")
	require.NoError(t, err)
	assert.Equal(t, "prod.example:7233", g.address)
	assert.Equal(t, "prod-ns", g.namespace)
	assert.Equal(t, "secret-key", g.apiKey)
	assert.True(t, g.tls, "an api_key without a tls section turns TLS on, as in the Temporal CLI")
	assert.True(t, g.addressFromProfile)

	g, err = profileOptions(t, map[string]string{"TEMPORAL_PROFILE": "prod", "TEMPORAL_NAMESPACE": "env-ns"}, "--address", "flag.example:7233")
	require.NoError(t, err)
	assert.Equal(t, "flag.example:7233", g.address, "a flag beats the profile")
	assert.Equal(t, "env-ns", g.namespace, "a TEMPORAL_* variable beats the profile")
	assert.Equal(t, "secret-key", g.apiKey, "TEMPORAL_PROFILE picks the profile")
	assert.False(t, g.addressFromProfile)

	g, err = profileOptions(t, nil, "--profile", "mtls")
	require.NoError(t, err)
	assert.True(t, g.tls)
	assert.Equal(t, "/etc/wdc/client.pem", g.tlsCertPath)
	assert.Equal(t, "/etc/wdc/client.key", g.tlsKeyPath)
	assert.Equal(t, "temporal.internal", g.tlsServerName)
}

func TestProfileRejections(t *testing.T) {
	_, err := profileOptions(t, nil, "--profile", "staging")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--profile "staging"`)
	assert.Contains(t, err.Error(), "unable to find profile staging")
	assert.Equal(t, ExitUsage, exitCode(err))

	_, err = profileOptions(t, nil, "--profile", "codec")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "remote codec")

	bad := filepath.Join(t.TempDir(), "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[profile.x\naddress ="), 0o600))
	_, err = profileOptions(t, nil, "--config-file", bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--config-file \""+bad+"\"")
	assert.Contains(t, err.Error(), "failed parsing config")
}
