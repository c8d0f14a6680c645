package testsuite

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/devserver"
	s3test "github.com/wdc-runtime/wdc/internal/testenv/s3"
	"github.com/wdc-runtime/wdc/resource"
	"github.com/wdc-runtime/wdc/worker"
)

// envRunCLI makes this test binary behave as the wdc binary (for agents
// that run as real subprocesses).
const envRunCLI = "WDC_TESTSUITE_RUN_CLI"

// envBlobs=s3 runs the whole suite with its artifact store in a bucket of
// the embedded S3 server (internal/testenv/s3) instead of the data dir: agents
// (in-process and subprocesses), the control plane and the CLI all reach
// it by --blob-url's environment variable and the AWS default chain.
const envBlobs = "WDC_TESTSUITE_BLOBS"

var updateHistories = flag.Bool("update-histories", false, "rewrite the replay histories in testdata/ from a fresh demo run")

// Namespaces of the suite server where the suite's control plane does not
// run (it polls "default"): nsNoControlPlane has no poller on wdc-control
// at all; nsMuteControlPlane has one that takes workflow tasks and never
// answers (TestAControlPlaneThatNeverAnswersIsBounded).
const (
	nsNoControlPlane   = "no-control-plane"
	nsMuteControlPlane = "mute-control-plane"
)

// suite is the shared state of the system tests.
var suite struct {
	srv     *devserver.Server
	client  client.Client
	wdc     *wdcclient.Client
	dataDir string
	blobURL string // "" for the data dir's store
	blobs   *blobstore.Store
}

// cliGetenv is the environment the in-process CLI sees: nothing but the
// suite's blob URL.
func cliGetenv(k string) string {
	if k == "WDC_BLOB_URL" {
		return suite.blobURL
	}
	return ""
}

func TestMain(m *testing.M) {
	if os.Getenv(envRunCLI) == "1" {
		os.Exit(cmd.Main(cmd.Deps{StartDevServer: devserver.StartServer}, os.Args[1:]))
	}
	flag.Parse()
	if testing.Short() {
		fmt.Println("testsuite: system tests skipped in -short mode")
		os.Exit(0)
	}
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctx := context.Background()
	srv, err := devserver.Start(ctx, devserver.Options{
		SearchAttributes: api.SearchAttributes(),
		// The soak tests continue workflows as new every few hundred events
		// in a namespace of their own; two more namespaces have no working
		// control plane.
		Namespaces:                []string{soakNamespace, nsNoControlPlane, nsMuteControlPlane, nsScale, nsS3Demo, nsS3Big, nsS3Outage, nsIngestOutage, nsMetricsDemo, nsTelemetry, nsK8s, nsDeployment, nsIdentity, nsSPIRE},
		SuggestContinueAsNewAfter: map[string]int{soakNamespace: soakContinueAsNewAfter},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start server:", err)
		return 1
	}
	defer srv.Stop()
	suite.srv = srv
	c, err := client.Dial(client.Options{HostPort: srv.FrontendHostPort(), Logger: quietLogger{}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		return 1
	}
	defer c.Close()
	suite.client = c
	suite.wdc = &wdcclient.Client{C: c}
	dir, err := os.MkdirTemp("", "wdc-testsuite-")
	if err != nil {
		return 1
	}
	defer os.RemoveAll(dir)
	suite.dataDir = dir
	switch os.Getenv(envBlobs) {
	case "", "file":
		suite.blobs, err = blobstore.OpenDir(ctx, dir)
	case "s3":
		var s3 *s3test.Server
		if s3, err = s3test.Start(); err != nil {
			break
		}
		var bucket string
		if bucket, err = s3.NewBucket("testsuite"); err != nil {
			break
		}
		suite.blobURL = s3.URL(bucket)
		for k, v := range s3.Env() {
			os.Setenv(k, v)
		}
		os.Setenv("WDC_BLOB_URL", suite.blobURL) // for subprocess agents
		suite.blobs, err = blobstore.Open(ctx, suite.blobURL)
	default:
		err = fmt.Errorf("%s=%q: want file or s3", envBlobs, os.Getenv(envBlobs))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "blob store:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "blob store:", suite.blobs)
	cp := worker.NewControlPlane(c, suite.blobs)
	if err := cp.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "control plane:", err)
		return 1
	}
	defer cp.Stop()
	return m.Run()
}

// cli runs the wdc CLI in-process against the shared server.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	args = append(args, "--address", suite.srv.FrontendHostPort())
	code = cmd.Main(cmd.Deps{Stdout: &out, Stderr: &errb, Getenv: cliGetenv}, args)
	return code, out.String(), errb.String()
}

// startAgent runs an in-process agent labelled for this test only.
func startAgent(t *testing.T, id string, opts ...func(*worker.AgentOptions)) *worker.Agent {
	t.Helper()
	return startAgentOn(t, suite.client, id, opts...)
}

// startAgentOn is startAgent on c's namespace.
func startAgentOn(t *testing.T, c client.Client, id string, opts ...func(*worker.AgentOptions)) *worker.Agent {
	t.Helper()
	o := worker.AgentOptions{
		Registration: fleet.Registration{
			WorkerID: id, Capacity: resource.List{CPUMillis: 2000, MemoryBytes: 1 << 30},
			Labels: map[string]string{"suite-test": testLabel(t)},
		},
		WorkDir: filepath.Join(suite.dataDir, "work", id), Blobs: suite.blobs,
	}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := worker.StartAgent(ctx, c, o)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		a.Stop(ctx)
	})
	return a
}

// spawnAgent runs an agent as a real subprocess (this binary as wdc) with
// extra environment variables; its output goes to a log in the test's
// temp dir.
func spawnAgent(t *testing.T, id string, env ...string) *exec.Cmd {
	t.Helper()
	return spawnAgentVia(t, id, suite.srv.FrontendHostPort(), env...)
}

// spawnAgentVia is spawnAgent with the agent dialling the frontend at
// address (e.g. a tcpProxy's).
func spawnAgentVia(t *testing.T, id, address string, env ...string) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), id+".log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	c := exec.Command(os.Args[0], "agent", "--identity", "off", "--worker-id", id, "--cpu", "1", "--memory", "1Gi",
		"--label", "suite-test="+testLabel(t), "--data-dir", suite.dataDir,
		"--address", address, "--log-level", "info")
	c.Env = append(append(os.Environ(), envRunCLI+"=1"), env...)
	c.Stdout, c.Stderr = logFile, logFile
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, c.Start())
	t.Cleanup(func() {
		_ = c.Process.Kill()
		_, _ = c.Process.Wait()
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("agent %s log:\n%s", id, b)
		}
	})
	return c
}

// testLabel is a label value unique to the test, used as a selector so
// tasks only land on the test's own workers.
func testLabel(t *testing.T) string {
	name := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	if len(name) > 50 {
		name = name[:50]
	}
	return strings.Trim(strings.ToLower(name), "-.")
}

// waitFor polls cond every 50 ms until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitWorkersActive waits until visibility lists the workers as ACTIVE.
func waitWorkersActive(t *testing.T, ids ...string) {
	t.Helper()
	waitFor(t, 10*time.Second, "workers ACTIVE in visibility", func() bool {
		views, err := suite.wdc.ListWorkers(context.Background(), string(fleet.Active))
		if err != nil {
			return false
		}
		found := 0
		for _, v := range views {
			for _, id := range ids {
				if v.WorkerID == id {
					found++
				}
			}
		}
		return found == len(ids)
	})
}

type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}
