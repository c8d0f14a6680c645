package testsuite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/cmd"
)

// hostileScript is a task's command that hunts for its executor's
// credentials: the executor's (and its parent's) environment and memory
// through /proc, and every file under the data dir (the blob store, the
// agent's state), writing whatever it could read to outputs/found.txt and
// each try's exit status to outputs/tries.txt.
const hostileScript = `id -u > outputs/uid.txt
try() { name=$1; shift; "$@" >> outputs/found.txt 2>/dev/null; echo "$name:$?" >> outputs/tries.txt; }
touch outputs/found.txt
try environ cat /proc/$PPID/environ
try mem head -c 4096 /proc/$PPID/mem
try fd ls -l /proc/$PPID/fd/
GP=$(awk '/^PPid:/ {print $2}' /proc/$PPID/status)
try parent-environ cat /proc/$GP/environ
try data-dir find "$HOSTILE_DATA_DIR" -type f -exec cat {} +
true`

// hostileEnvelopeEnv is the hostile task's environment: where to look.
func hostileEnvelopeEnv() map[string]string {
	return map[string]string{"PATH": "/usr/bin:/bin", "HOSTILE_DATA_DIR": suite.dataDir}
}

// secretEnv puts a secret in a process's environment: the S3 mode's real
// AWS key, or a made-up one; it returns the variable and the secret.
func secretEnv() ([]string, string) {
	if s := os.Getenv("AWS_SECRET_ACCESS_KEY"); s != "" {
		return nil, s
	}
	return []string{"AWS_SECRET_ACCESS_KEY=hunter2-hostile", "AWS_ACCESS_KEY_ID=AKIAHOSTILE"}, "hunter2-hostile"
}

// assertFoundNothing checks the hostile task's outputs: it ran as nobody,
// every hunt failed and nothing it found holds the secret.
func assertFoundNothing(t *testing.T, res *api.TaskResult, secret string) {
	t.Helper()
	assert.Equal(t, "65534", strings.TrimSpace(readArtifact(t, res, "uid.txt")), "the command runs as nobody")
	tries := readArtifact(t, res, "tries.txt")
	for _, what := range []string{"environ", "mem", "fd", "parent-environ"} {
		assert.Contains(t, tries, what+":", "the hunt ran")
		assert.NotContains(t, tries, what+":0\n", "the command could read /proc/<executor>/%s: %s", what, tries)
	}
	found := readArtifact(t, res, "found.txt")
	assert.NotContains(t, found, secret, "the command found the executor's secret")
	assert.NotContains(t, found, "AWS_SECRET_ACCESS_KEY")
}

// publicWorkDir is a work root the command's user can enter (the suite's
// data dir is private to root, as an agent's should be).
func publicWorkDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wdc-hostile-work-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	return dir
}

// A task whose command hunts for its agent's credentials, on a Local
// agent run as root with --run-as-user nobody and an AWS secret in its
// environment: the attempt is accepted and nothing it read holds the
// secret.
func TestAHostileCommandOnALocalAgentFindsNoCredential(t *testing.T) {
	require.NoError(t, os.Chmod(suite.dataDir, 0o700))
	env, secret := secretEnv()
	spawnAgentEnvArgs(t, "hostile-local", env, "--work-dir", filepath.Join(publicWorkDir(t), "w"), "--run-as-user", "nobody")
	waitWorkersActive(t, "hostile-local")

	e := taskEnvelope(t, "hostile-local-task", hostileScript)
	e.Env = hostileEnvelopeEnv()
	submit(t, e, api.TaskOptions{LeaseTTL: 20 * time.Second})
	out, view := waitOutcome(t, e.TaskID)
	require.Equal(t, api.TaskCompleted, out.State, "%+v", view)
	assert.Equal(t, "hostile-local", view.Result.WorkerID)
	assertFoundNothing(t, view.Result, secret)
}

// The same hunt through `wdc exec --run-as-user nobody`, run with secrets
// in its environment (hostileEnv).
func TestAHostileCommandUnderWdcExecFindsNoCredential(t *testing.T) {
	require.NoError(t, os.Chmod(suite.dataDir, 0o700))
	handOffAgent(t, "hostile-ext")
	e := taskEnvelope(t, "hostile-ext-task", hostileScript)
	e.Env = hostileEnvelopeEnv()
	submit(t, e, api.TaskOptions{LeaseTTL: 20 * time.Second})
	c := spooled(t, e.TaskID, 1)

	p := startExec(t, c.Argv, "--run-as-user", "nobody")
	require.Equal(t, cmd.ExitOK, p.wait(t, 30*time.Second), "stderr: %s", p.stderr)
	out, view := waitOutcome(t, e.TaskID)
	require.Equal(t, api.TaskCompleted, out.State)
	secret := "hunter2"
	if s := os.Getenv("AWS_SECRET_ACCESS_KEY"); s != "" {
		secret = s
	}
	assertFoundNothing(t, view.Result, secret)
	assert.NotContains(t, readArtifact(t, view.Result, "found.txt"), "swordfish")
}
