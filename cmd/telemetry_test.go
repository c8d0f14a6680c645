package cmd

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTelemetryFlagsAreChecked(t *testing.T) {
	code, _, stderr := run(t, "workers", "list", "--log-format", "yaml")
	assert.Equal(t, ExitUsage, code)
	assert.Equal(t, "wdc: --log-format \"yaml\": want text or json\n", stderr)

	// A taken port stops the control plane before it dials, naming the flag.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	code, _, stderr = run(t, "control-plane", "--identity", "off", "--metrics-address", ln.Addr().String())
	assert.Equal(t, ExitUsage, code)
	assert.Contains(t, stderr, "--metrics-address "+ln.Addr().String())

	// With --log-format json the exit error is a JSON log line too.
	code, _, stderr = run(t, "control-plane", "--identity", "off", "--metrics-address", ln.Addr().String(), "--log-format", "json")
	assert.Equal(t, ExitUsage, code)
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(stderr)), &line), stderr)
	assert.Equal(t, "ERROR", line["level"])
	assert.Contains(t, line["msg"], "--metrics-address")
}
