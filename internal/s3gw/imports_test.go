package s3gw

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Only this package imports VersityGW, and only internal/devserver imports
// the Temporal server (tests aside): both are heavy to link, and the
// gateway allows one instance per process.
func TestOnlyTheseImportTheHeavyServers(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "github.com/wdc-runtime/wdc/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	allowed := map[string]string{
		"github.com/versity/versitygw/": "github.com/wdc-runtime/wdc/internal/s3gw",
		"go.temporal.io/server/":        "github.com/wdc-runtime/wdc/internal/devserver",
	}
	pkgs := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkgs++
		for _, imp := range fields[1:] {
			for prefix, only := range allowed {
				if strings.HasPrefix(imp, prefix) && fields[0] != only {
					t.Errorf("%s imports %s; only %s may", fields[0], imp, only)
				}
			}
		}
	}
	require.Greater(t, pkgs, 10, "go list saw the module")
}
