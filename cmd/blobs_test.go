package cmd

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The store is --blob-url, else $WDC_BLOB_URL, else file://<data-dir>/blobs;
// a bad URL is refused naming it without its secrets.
func TestOpenStorePrecedence(t *testing.T) {
	ctx := context.Background()
	env := map[string]string{}
	a := &app{deps: Deps{Getenv: func(k string) string { return env[k] }}}
	dataDir := t.TempDir()
	s, err := a.openStore(ctx, dataDir, "")
	require.NoError(t, err)
	assert.Equal(t, "file://"+filepath.Join(dataDir, "blobs"), s.String())
	s.Close()

	other := t.TempDir()
	env["WDC_BLOB_URL"] = "file://" + other
	s, err = a.openStore(ctx, dataDir, "")
	require.NoError(t, err)
	assert.Equal(t, "file://"+other, s.String())
	s.Close()

	flag := t.TempDir()
	s, err = a.openStore(ctx, dataDir, "file://"+flag)
	require.NoError(t, err)
	assert.Equal(t, "file://"+flag, s.String())
	s.Close()

	_, err = a.openStore(ctx, dataDir, "nosuch://me:hunter2@bucket?secret_access_key=hunter2")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
	assert.Contains(t, err.Error(), "nosuch://bucket")
}

func TestBlobURLFlagOnEveryStoreCommand(t *testing.T) {
	for _, args := range [][]string{
		{"agent"}, {"control-plane"}, {"tasks", "submit"}, {"tasks", "result"}, {"tasks", "logs"},
		{"runs", "start"}, {"demo", "worker-leases"}, {"exec"}, {"workers", "render-launch"},
	} {
		code, stdout, _ := run(t, append(args, "--help")...)
		assert.Equal(t, ExitOK, code, "%v", args)
		assert.Contains(t, stdout, "--blob-url", "%v", args)
		assert.Contains(t, stdout, "WDC_BLOB_URL", "%v", args)
	}
}
