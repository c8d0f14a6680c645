package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/launchers"
)

// A command that swaps its logs for symlinks to a secret (the agent's SVID
// key, say) gets back only what it wrote: the executor reads the logs
// through the files it opened before the command started.
func TestLogsAreReadFromWhatTheExecutorOpened(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "svid.key")
	require.NoError(t, os.WriteFile(secret, []byte("PRIVATE KEY"), 0o600))
	f := newFixture(t, `echo written; echo oops >&2; rm -f stdout.log stderr.log; ln -s "$SECRET" stdout.log; ln -s "$SECRET" stderr.log`, nil)
	f.env.Env["SECRET"] = secret
	d, err := f.env.Digest()
	require.NoError(t, err)
	f.lease.EnvelopeDigest = d
	f.ctl.lease.EnvelopeDigest = d
	rep := f.wait(f.start(nil))
	require.Equal(t, 0, rep.ExitCode)
	f.ctl.mu.Lock()
	require.Len(t, f.ctl.submitted, 1)
	logs := f.ctl.submitted[0].Logs
	f.ctl.mu.Unlock()
	require.Len(t, logs, 2)
	want := map[string]string{api.LogStdout: "written\n", api.LogStderr: "oops\n"}
	for _, a := range logs {
		sum := sha256.Sum256([]byte(want[a.Name]))
		assert.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), a.Digest, "%s holds only what the command wrote", a.Name)
		assert.Equal(t, int64(len(want[a.Name])), a.SizeBytes, a.Name)
	}
}

// An attempt whose envelope or lease would reach outside the work root
// (a task ID of "../x", an input named "../x") is refused before any
// directory is made, so an existing directory's mode is never changed.
func TestCheckAttemptRefusesBeforeAnythingIsMade(t *testing.T) {
	f := newFixture(t, `true`, nil)
	priv := filepath.Join(filepath.Dir(f.root), "privdir")
	require.NoError(t, os.Mkdir(priv, 0o700))
	for _, tc := range []struct {
		name   string
		change func(*launchers.Attempt)
		want   string
	}{
		{"a task ID that climbs", func(a *launchers.Attempt) {
			a.Envelope.TaskID, a.Lease.TaskID = "../privdir", "../privdir"
		}, "task_id"},
		{"a lease of another task", func(a *launchers.Attempt) { a.Lease.TaskID = "t2" }, "lease.task_id"},
		{"an input named outside", func(a *launchers.Attempt) {
			a.Envelope.Inputs = []envelope.Input{{Name: "../../x", Digest: "sha256:" + strings.Repeat("a", 64)}}
		}, "inputs[0].name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := launchers.Attempt{Envelope: f.env, Lease: f.lease, HeartbeatInterval: 100 * time.Millisecond}
			tc.change(&a)
			if d, err := a.Envelope.Digest(); err == nil {
				a.Lease.EnvelopeDigest = d
			}
			_, err := Start(Options{Attempt: a, Root: f.root, Blobs: f.blobs, Control: f.ctl})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			entries, _ := os.ReadDir(f.root)
			assert.Empty(t, entries, "nothing made under the root")
			fi, err := os.Stat(priv)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the neighbour's mode is untouched")
		})
	}
}
