package testsuite

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/devserver"
)

// start-dev --tls serves the frontend with TLS and requires a client
// certificate of its own issuer (kept beside the database): plain gRPC, a
// client without a certificate and one of another root are refused; an
// agent enrolled by `workers enroll` connects with its SVID alone
// (--svid-dir --tls) and runs a task, the control plane with its
// enrolled certificate, identity required.
func TestStartDevTLSRequiresACertificateOfItsIssuer(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "dev.db")
	srv := startDevProcess(t, "--db-filename", db, "--no-s3", "--tls", "-o", "json")
	info := srv.readJSON(t)
	var address string
	require.NoError(t, json.Unmarshal(info["address"], &address))
	var tlsInfo struct {
		CADir string `json:"ca_dir"`
		CA    string `json:"ca"`
	}
	require.NoError(t, json.Unmarshal(info["tls"], &tlsInfo), "%s", info)
	caDir := db + ".ca"
	require.Equal(t, caDir, tlsInfo.CADir)
	require.Equal(t, filepath.Join(caDir, "ca.pem"), tlsInfo.CA)
	st, err := os.Stat(filepath.Join(caDir, "ca.key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the root key")

	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := cmd.Main(cmd.Deps{Stdout: &out, Stderr: &errb, Getenv: cliGetenv}, append(args, "--address", address))
		return code, out.String() + errb.String()
	}
	for _, enroll := range [][]string{{"--worker-id", "tls-a"}, {"--control-plane"}, {"--submitter", "me"}} {
		code, out := run(append([]string{"workers", "enroll", "--ca-dir", caDir}, enroll...)...)
		require.Equal(t, cmd.ExitOK, code, out)
	}
	other := t.TempDir()
	code, out := run("workers", "enroll", "--ca-dir", other, "--submitter", "me")
	require.Equal(t, cmd.ExitOK, code, out)
	me := filepath.Join(caDir, "submitters", "me")
	creds := func(svidDir string) []string {
		return []string{"--tls-cert-path", filepath.Join(svidDir, "svid.pem"), "--tls-key-path", filepath.Join(svidDir, "svid.key"), "--tls-ca-path", tlsInfo.CA}
	}

	for name, args := range map[string][]string{
		"plain gRPC":                {"workers", "list"},
		"no client certificate":     {"workers", "list", "--tls-ca-path", tlsInfo.CA},
		"another root's SVID":       append([]string{"workers", "list"}, creds(filepath.Join(other, "submitters", "me"))...),
		"the server's root unknown": append([]string{"workers", "list"}, creds(me)[:4]...), // a client certificate, but the system's roots only
	} {
		code, out := run(args...)
		assert.NotEqual(t, cmd.ExitOK, code, "%s: %s", name, out)
		assert.Contains(t, out, "connect to Temporal at "+address, name)
	}
	code, out = run(append([]string{"workers", "list"}, creds(me)...)...)
	require.Equal(t, cmd.ExitOK, code, out)

	data := filepath.Join(dir, "data")
	spawnTLS := func(name string, args ...string) {
		spawnWDC(t, name, nil, append(args, "--address", address, "--data-dir", data)...)
	}
	spawnTLS("control-plane", append([]string{"control-plane", "--trust-bundle", tlsInfo.CA}, creds(filepath.Join(caDir, "control-plane"))...)...)
	spawnTLS("agent", "agent", "--worker-id", "tls-a", "--svid-dir", filepath.Join(caDir, "workers", "tls-a"), "--tls",
		"--cpu", "1", "--memory", "1Gi")

	cfg, err := devserver.ClientTLS(filepath.Join(me, "svid.pem"), filepath.Join(me, "svid.key"), tlsInfo.CA)
	require.NoError(t, err)
	c, err := client.Dial(client.Options{HostPort: address, Logger: quietLogger{}, ConnectionOptions: client.ConnectionOptions{TLS: cfg}})
	require.NoError(t, err)
	defer c.Close()
	src, err := identity.NewDirSource(me)
	require.NoError(t, err)
	wc := &wdcclient.Client{C: c, Signer: identity.NewSignerFrom(src)} // submitter "me"
	waitFor(t, 30*time.Second, "tls-a ACTIVE", func() bool {
		v, err := wc.Worker(context.Background(), "tls-a")
		return err == nil && v.State == fleet.Active
	})
	e := taskEnvelope(t, "tls-task", `echo over tls > outputs/out.txt`)
	e.Selector = nil
	_, err = wc.SubmitTask(context.Background(), e, api.TaskOptions{LeaseTTL: 20 * time.Second})
	require.NoError(t, err)
	outcome, err := waitTaskIn(t, wc, e.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, outcome.State)
	v, err := wc.Task(context.Background(), e.TaskID)
	require.NoError(t, err)
	assert.Equal(t, "tls-a", v.Result.WorkerID, "the result was signed by tls-a's attempt key")
}

// spawnWDC runs this binary as `wdc ARGS… --log-level info` with extra
// environment variables, its output in a log kept with a failed test; it
// returns the log's path.
func spawnWDC(t *testing.T, name string, env []string, args ...string) string {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	c := exec.Command(os.Args[0], append(args, "--log-level", "info")...)
	c.Env = append(append(os.Environ(), envRunCLI+"=1"), env...)
	c.Stdout, c.Stderr = logFile, logFile
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, c.Start())
	stopAtCleanup(t, c, 10*time.Second, func() {
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return logPath
}

// start-dev runs its own issuer beside the database and says so: with
// WDC_CA_DIR set to it, and no other identity flag, the control plane
// requires signed messages, an agent enrolls itself and signs its
// registration and results, and `runs commit` signs as a submitter; the
// same commit without WDC_CA_DIR is refused. The quickstart's one step.
func TestStartDevIdentityNeedsOnlyItsCADir(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "dev.db")
	srv := startDevProcess(t, "--db-filename", db, "--no-s3", "-o", "json")
	info := srv.readJSON(t)
	var address string
	require.NoError(t, json.Unmarshal(info["address"], &address))
	var id struct {
		CADir string            `json:"ca_dir"`
		Env   map[string]string `json:"env"`
	}
	require.NoError(t, json.Unmarshal(info["identity"], &id), "%s", info)
	require.Equal(t, db+".ca", id.CADir)
	require.Equal(t, id.CADir, id.Env["WDC_CA_DIR"])
	st, err := os.Stat(filepath.Join(id.CADir, "ca.key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the root key")

	env := []string{"WDC_CA_DIR=" + id.CADir}
	data := filepath.Join(dir, "data")
	cpLog := spawnWDC(t, "control-plane", env, "control-plane", "--address", address, "--data-dir", data)
	spawnWDC(t, "agent", env, "agent", "--worker-id", "zs-a", "--cpu", "1", "--memory", "1Gi", "--address", address, "--data-dir", data)
	waitFor(t, 30*time.Second, "the control plane says identity is required", func() bool {
		b, _ := os.ReadFile(cpLog)
		return strings.Contains(string(b), "identity required (trust domain wdc.local, trust bundle "+filepath.Join(id.CADir, "ca.pem"))
	})

	c, err := client.Dial(client.Options{HostPort: address, Logger: quietLogger{}})
	require.NoError(t, err)
	defer c.Close()
	wc := &wdcclient.Client{C: c}
	var w api.WorkerView
	waitFor(t, 30*time.Second, "zs-a ACTIVE", func() bool {
		w, err = wc.Worker(context.Background(), "zs-a")
		return err == nil && w.State == fleet.Active
	})
	assert.Equal(t, "spiffe://wdc.local/wdc/worker/zs-a", w.Identity, "a signed registration")
	_, err = wc.RegisterWorker(context.Background(), fleet.Registration{WorkerID: "zs-unsigned", Capacity: w.Capacity})
	require.ErrorContains(t, err, "not signed")

	e := taskEnvelope(t, "zs-task", `echo signed > outputs/out.txt`)
	e.Selector = nil
	_, err = wc.SubmitTask(context.Background(), e, api.TaskOptions{LeaseTTL: 20 * time.Second})
	require.ErrorContains(t, err, "not signed", "an unsigned submission")
	envFile := filepath.Join(dir, "zs-task.json")
	b, err := json.Marshal(e)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(envFile, b, 0o644))
	withCADir := func(k string) string {
		if k == "WDC_CA_DIR" {
			return id.CADir
		}
		return cliGetenv(k)
	}
	var sout, serr bytes.Buffer
	code := cmd.Main(cmd.Deps{Stdout: &sout, Stderr: &serr, Getenv: withCADir},
		[]string{"tasks", "submit", envFile, "--lease-ttl", "20s", "--address", address, "--data-dir", data})
	require.Equal(t, cmd.ExitOK, code, "the CLI signs as submitter $USER from WDC_CA_DIR: %s%s", sout.String(), serr.String())
	e2 := e
	e2.TaskID, e2.RunID = "zs-task-2", "zs-run-2"
	b, err = json.Marshal(e2)
	require.NoError(t, err)
	env2File := filepath.Join(dir, "zs-task-2.json")
	require.NoError(t, os.WriteFile(env2File, b, 0o644))
	sout.Reset()
	serr.Reset()
	code = cmd.Main(cmd.Deps{Stdout: &sout, Stderr: &serr, Getenv: withCADir},
		[]string{"runs", "start", e2.RunID, "--world-id", e2.WorldID, env2File, "--address", address, "--data-dir", data})
	require.Equal(t, cmd.ExitOK, code, "runs start signs its tasks too: %s%s", sout.String(), serr.String())
	e3 := e
	e3.TaskID = "zs-task-3"
	b, err = json.Marshal(e3)
	require.NoError(t, err)
	batchFile := filepath.Join(dir, "batch.jsonl")
	require.NoError(t, os.WriteFile(batchFile, append(b, '\n'), 0o644))
	sout.Reset()
	serr.Reset()
	code = cmd.Main(cmd.Deps{Stdout: &sout, Stderr: &serr, Getenv: cliGetenv},
		[]string{"tasks", "submit", "--batch", batchFile, "--address", address, "--data-dir", data})
	require.NotEqual(t, cmd.ExitOK, code, "an unsigned batch: %s%s", sout.String(), serr.String())
	require.Contains(t, serr.String(), "nothing was submitted")
	require.Contains(t, serr.String(), "not signed")
	outcome, err := waitTaskIn(t, wc, e.TaskID)
	require.NoError(t, err)
	require.Equal(t, api.TaskCompleted, outcome.State, "the agent's signed result was accepted")
	require.Equal(t, int64(1), runWithEndedTasks(t, wc, e.RunID).WorkerResultEvents, "the run has the result to commit")

	commit := func(getenv func(string) string) (int, string) {
		var out, errb bytes.Buffer
		code := cmd.Main(cmd.Deps{Stdout: &out, Stderr: &errb, Getenv: getenv},
			[]string{"runs", "commit", e.RunID, "--expected-parent-time", "0", "--event", "1", "--address", address})
		return code, out.String() + errb.String()
	}
	code, out := commit(cliGetenv)
	require.NotEqual(t, cmd.ExitOK, code, "unsigned: %s", out)
	require.Contains(t, out, "not signed")
	code, out = commit(func(k string) string {
		if k == "WDC_CA_DIR" {
			return id.CADir
		}
		return cliGetenv(k)
	})
	require.Equal(t, cmd.ExitOK, code, out)
	require.Contains(t, out, "committed events [1]")
}
