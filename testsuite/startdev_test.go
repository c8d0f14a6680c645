package testsuite

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

// devS3 is start-dev's "s3" JSON object.
type devS3 struct {
	Endpoint   string            `json:"endpoint"`
	Bucket     string            `json:"bucket"`
	BlobURL    string            `json:"blob_url"`
	Region     string            `json:"region"`
	Dir        string            `json:"dir"`
	Persistent bool              `json:"persistent"`
	Env        map[string]string `json:"env"`
}

// devServer is a `wdc server start-dev` process (this binary as wdc: its
// embedded S3 gateway must be the only one in its process).
type devServer struct {
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr *syncBuffer
	exited chan struct{}
}

// freeTCPPort is a port nothing listens on right now.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startDevProcess runs `wdc server start-dev ARGS… --port P --headless`
// on free ports, with no AWS or wdc variables in its environment.
func startDevProcess(t *testing.T, args ...string) *devServer {
	t.Helper()
	args = append([]string{"server", "start-dev", "--port", strconv.Itoa(freeTCPPort(t)), "--headless"}, args...)
	c := exec.Command(os.Args[0], args...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !strings.HasPrefix(k, "AWS_") && !strings.HasPrefix(k, "WDC_") {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, envRunCLI+"=1")
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	d := &devServer{cmd: c, stdout: bufio.NewReader(out), stderr: &syncBuffer{}, exited: make(chan struct{})}
	c.Stderr = d.stderr
	require.NoError(t, c.Start())
	go func() { _ = c.Wait(); close(d.exited) }()
	t.Cleanup(func() { d.stop(t) })
	return d
}

// stop sends SIGINT and waits for the exit; it returns the exit code.
func (d *devServer) stop(t *testing.T) int {
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-d.exited:
	case <-time.After(20 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		t.Errorf("start-dev did not stop within 20s of SIGINT")
	}
	return d.cmd.ProcessState.ExitCode()
}

// readJSON decodes start-dev's -o json report.
func (d *devServer) readJSON(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	var info map[string]json.RawMessage
	done := make(chan error, 1)
	go func() { done <- json.NewDecoder(d.stdout).Decode(&info) }()
	select {
	case err := <-done:
		require.NoError(t, err, "stderr: %s", d.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("start-dev printed nothing within 60s; stderr: %s", d.stderr.String())
	}
	return info
}

func s3Of(t *testing.T, info map[string]json.RawMessage) devS3 {
	t.Helper()
	raw, ok := info["s3"]
	require.True(t, ok, "no s3 in %v", info)
	var s devS3
	require.NoError(t, json.Unmarshal(raw, &s))
	return s
}

// useCredentials puts what start-dev said to export into this process's
// environment (the AWS default chain reads it).
func useCredentials(t *testing.T, s devS3) {
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} {
		require.NotEmpty(t, s.Env[k], k)
		t.Setenv(k, s.Env[k])
	}
}

func portServes(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// start-dev with --db-filename serves S3 on --s3-port with bucket "wdc",
// prints the blob URL and the credentials, and a blob store can put and
// get through it. A restart on the same file keeps the objects and the
// credentials (generated once, kept 0600 beside the database).
func TestStartDevServesS3BesideTemporal(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "dev.db")
	port := freeTCPPort(t)
	srv := startDevProcess(t, "--db-filename", db, "--s3-port", strconv.Itoa(port), "-o", "json")
	var raw bytes.Buffer
	srv.stdout = bufio.NewReader(io.TeeReader(srv.stdout, &raw))
	s := s3Of(t, srv.readJSON(t))
	assert.Contains(t, raw.String(), `"blob_url": "s3://wdc?endpoint=http://127.0.0.1:`, "the URL is printed as it is, copyable")
	assert.NotContains(t, raw.String(), `\u0026`)
	wantURL := "s3://wdc?endpoint=http://127.0.0.1:" + strconv.Itoa(port) + "&use_path_style=true&region=us-east-1&disable_https=true"
	assert.Equal(t, wantURL, s.BlobURL)
	assert.Equal(t, wantURL, s.Env["WDC_BLOB_URL"])
	assert.Equal(t, "wdc", s.Bucket)
	assert.Equal(t, "us-east-1", s.Region)
	assert.Equal(t, db+".s3", s.Dir)
	assert.True(t, s.Persistent)
	fi, err := os.Stat(filepath.Join(db+".s3", "credentials"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "credentials readable by their owner only")

	useCredentials(t, s)
	ctx := context.Background()
	store, err := blobstore.Open(ctx, s.BlobURL)
	require.NoError(t, err)
	d, n, err := store.Put(ctx, strings.NewReader("through start-dev's S3\n"))
	require.NoError(t, err)
	assert.Equal(t, int64(23), n)
	r, err := store.Open(ctx, d)
	require.NoError(t, err)
	b, err := io.ReadAll(r)
	r.Close()
	require.NoError(t, err)
	assert.Equal(t, "through start-dev's S3\n", string(b))
	store.Close()
	assert.Equal(t, 0, srv.stop(t), srv.stderr.String())
	assert.False(t, portServes(port), "the S3 port is released at exit")

	again := startDevProcess(t, "--db-filename", db, "--s3-port", strconv.Itoa(port), "-o", "json")
	s2 := s3Of(t, again.readJSON(t))
	assert.Equal(t, s.Env, s2.Env, "the same credentials after a restart")
	store, err = blobstore.Open(ctx, s2.BlobURL)
	require.NoError(t, err)
	defer store.Close()
	ok, err := store.Has(ctx, d)
	require.NoError(t, err)
	assert.True(t, ok, "the object survives the restart")
}

// In memory mode (no --db-filename) the S3 data lives in a temporary
// directory removed at exit; the text output names the bucket
// (--s3-bucket) and the exact exports.
func TestStartDevInMemoryS3IsRemovedAtExit(t *testing.T) {
	port := freeTCPPort(t)
	srv := startDevProcess(t, "--s3-port", strconv.Itoa(port), "--s3-bucket", "artifacts")
	var text bytes.Buffer
	for !strings.Contains(text.String(), "Stop with Ctrl-C.") {
		line, err := srv.stdout.ReadString('\n')
		require.NoError(t, err, "stdout so far: %s; stderr: %s", text.String(), srv.stderr.String())
		text.WriteString(line)
	}
	out := text.String()
	wantURL := "s3://artifacts?endpoint=http://127.0.0.1:" + strconv.Itoa(port) + "&use_path_style=true&region=us-east-1&disable_https=true"
	assert.Contains(t, out, "export WDC_BLOB_URL='"+wantURL+"'\n")
	assert.Contains(t, out, "export AWS_ACCESS_KEY_ID='")
	var s devS3
	s.Env = map[string]string{"AWS_REGION": "us-east-1"}
	for _, f := range strings.Fields(out[strings.Index(out, "export AWS_ACCESS_KEY_ID="):]) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "AWS_") {
			s.Env[k] = strings.Trim(v, "'")
		}
	}
	i := strings.Index(out, "files in ")
	require.Positive(t, i, out)
	dir := strings.TrimSuffix(strings.Fields(out[i+len("files in "):])[0], ")")
	require.DirExists(t, filepath.Join(dir, "buckets", "artifacts"))

	useCredentials(t, s)
	store, err := blobstore.Open(context.Background(), wantURL)
	require.NoError(t, err)
	_, _, err = store.Put(context.Background(), strings.NewReader("gone at exit\n"))
	require.NoError(t, err)
	store.Close()
	assert.Equal(t, 0, srv.stop(t), srv.stderr.String())
	assert.NoDirExists(t, dir, "the temporary S3 directory is removed at exit")
}

// --no-s3 serves nothing on --s3-port and reports no S3 endpoint.
func TestStartDevNoS3ServesNothing(t *testing.T) {
	port := freeTCPPort(t)
	srv := startDevProcess(t, "--no-s3", "--s3-port", strconv.Itoa(port), "-o", "json")
	info := srv.readJSON(t)
	assert.NotContains(t, info, "s3")
	assert.Contains(t, info, "address")
	assert.False(t, portServes(port), "nothing listens on the S3 port")
}

// An S3 port already in use is refused before anything starts, in one line
// naming the flag; so is a bucket name S3 would refuse.
func TestStartDevS3RefusalsNameTheFlag(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"port in use", []string{"--s3-port", strconv.Itoa(busy)}, 1, []string{"wdc: --s3-port " + strconv.Itoa(busy) + ": cannot listen on 127.0.0.1:" + strconv.Itoa(busy) + " (already in use?)"}},
		{"frontend port in use", []string{"--port", strconv.Itoa(busy), "--s3-port", strconv.Itoa(freeTCPPort(t))}, 1, []string{"wdc: --port " + strconv.Itoa(busy) + ": cannot listen on"}},
		{"bad bucket", []string{"--s3-port", strconv.Itoa(freeTCPPort(t)), "--s3-bucket", "UPPER"}, 2, []string{`wdc: --s3-bucket "UPPER"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startDevProcess(t, tc.args...)
			select {
			case <-srv.exited:
			case <-time.After(30 * time.Second):
				t.Fatal("start-dev kept running")
			}
			assert.Equal(t, tc.code, srv.cmd.ProcessState.ExitCode())
			for _, w := range tc.want {
				assert.Contains(t, srv.stderr.String(), w)
			}
			assert.Equal(t, 1, strings.Count(srv.stderr.String(), "\n"), "one line: %q", srv.stderr.String())
		})
	}
}

// The two-machine steps on a fresh machine: --db-filename in a directory
// that does not exist yet is created; with --ip set to one address (here
// 127.0.0.2, not 127.0.0.1) start-dev prints the --address other
// commands need, and a command given it reaches the server.
func TestStartDevOnOneAddressPrintsTheAddressToUse(t *testing.T) {
	db := filepath.Join(t.TempDir(), "var", "lib", "wdc", "dev.db")
	srv := startDevProcess(t, "--ip", "127.0.0.2", "--db-filename", db, "--no-s3")
	var out strings.Builder
	done := make(chan error, 1)
	go func() {
		for {
			line, err := srv.stdout.ReadString('\n')
			out.WriteString(line)
			if err != nil || strings.HasPrefix(line, "Stop with Ctrl-C") {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		require.NoError(t, err, "stdout: %s\nstderr: %s", out.String(), srv.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("start-dev not ready within 60s; stderr: %s", srv.stderr.String())
	}
	assert.FileExists(t, db, "the database's directory was created")
	m := regexp.MustCompile(`--address (127\.0\.0\.2:\d+)\n  export TEMPORAL_ADDRESS=127\.0\.0\.2:\d+\n`).FindStringSubmatch(out.String())
	require.NotNil(t, m, "start-dev names the --address to use:\n%s", out.String())

	var stdout, stderr bytes.Buffer
	code := cmd.Main(cmd.Deps{Stdout: &stdout, Stderr: &stderr, Getenv: cliGetenv}, []string{"workers", "list", "--address", m[1]})
	assert.Equal(t, cmd.ExitOK, code, "%s%s", stdout.String(), stderr.String())
	assert.Equal(t, 0, srv.stop(t), srv.stderr.String())
}
