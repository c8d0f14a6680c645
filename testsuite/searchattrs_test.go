package testsuite

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/internal/devserver"
)

// On a Temporal server whose namespace lacks wdc's search attributes (not a
// wdc dev server), the control plane refuses to start and says how to fix
// it; --register-search-attributes (CheckSearchAttributes with register)
// adds them.
func TestControlPlaneNeedsSearchAttributes(t *testing.T) {
	srv, err := devserver.Start(context.Background(), devserver.Options{})
	require.NoError(t, err)
	defer srv.Stop()

	var out, errb bytes.Buffer
	code := cmd.Main(cmd.Deps{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }},
		[]string{"control-plane", "--identity", "off", "--address", srv.FrontendHostPort(), "--data-dir", t.TempDir()})
	assert.Equal(t, 1, code)
	assert.Contains(t, errb.String(), "lacks wdc's search attributes")
	assert.Contains(t, errb.String(), "temporal operator search-attribute create --namespace default --name WdcAttempt --type Int")
	assert.Contains(t, errb.String(), "--register-search-attributes")

	c, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: quietLogger{}})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, wdcclient.CheckSearchAttributes(ctx, c, "default", true))
	waitFor(t, 20*time.Second, "the attributes registered", func() bool {
		return wdcclient.CheckSearchAttributes(ctx, c, "default", false) == nil
	})
}
