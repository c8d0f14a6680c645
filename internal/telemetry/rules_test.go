package telemetry

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The shipped rules load in Prometheus's own checker, and every alert
// fires, and does not fire, when deploy/prometheus/wdc-rules.test.yml says:
// promtool evaluates them over the series given there. promtool comes with
// Debian's prometheus package (.ci/run installs it); without it this
// test fails, naming it.
func TestAlertRulesFireWhenTheirTestsSay(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool not found: install Debian's prometheus package (apt-get install prometheus), as .ci/run does")
	dir := filepath.Join(deployDir, "prometheus")
	out, err := exec.Command(promtool, "check", "rules", filepath.Join(dir, "wdc-rules.yml")).CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)
	cmd := exec.Command(promtool, "test", "rules", "wdc-rules.test.yml")
	cmd.Dir = dir
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)
	t.Logf("%s", out)
}
