package ray

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	raytest "github.com/wdc-runtime/wdc/internal/testenv/ray"
)

// Contract tests of the client against the emulator (internal/testenv/ray):
// one per answer of the Jobs API that the launcher relies on.

func emulator(t *testing.T, opts raytest.Options) (*raytest.Emulator, *Client) {
	t.Helper()
	e, err := raytest.Start(opts)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	c, err := NewClient(ClientOptions{Address: e.URL(), Timeout: 5 * time.Second, Backoff: 10 * time.Millisecond})
	require.NoError(t, err)
	return e, c
}

func waitStatus(t *testing.T, c *Client, id string, want string) JobDetails {
	t.Helper()
	var job JobDetails
	deadline := time.Now().Add(15 * time.Second)
	for {
		var err error
		job, err = c.Job(context.Background(), id)
		require.NoError(t, err)
		if job.Status == want {
			return job
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s, want %s (message %q)", id, job.Status, want, job.Message)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClientVersion(t *testing.T) {
	_, c := emulator(t, raytest.Options{RayVersion: "2.7.1"})
	v, err := c.Version(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "2.7.1", v.RayVersion)
	assert.Equal(t, "4", v.Version)
}

func TestClientSubmitRunsToSuccessWithLogsAndDetails(t *testing.T) {
	_, c := emulator(t, raytest.Options{})
	ctx := context.Background()
	cpus := 0.5
	res, err := c.Submit(ctx, SubmitRequest{Entrypoint: "echo hello; echo $GREETING", SubmissionID: "job-1",
		RuntimeEnv: &RuntimeEnv{EnvVars: map[string]string{"GREETING": "hi there"}}, Metadata: map[string]string{"wdc_task": "t1"},
		EntrypointNumCPUs: &cpus})
	require.NoError(t, err)
	assert.Equal(t, "job-1", res.SubmissionID)
	assert.Equal(t, "job-1", res.JobID, "job_id repeats the submission ID")
	job := waitStatus(t, c, "job-1", StatusSucceeded)
	require.NotNil(t, job.DriverExitCode)
	assert.Equal(t, 0, *job.DriverExitCode)
	assert.Equal(t, "SUBMISSION", job.Type)
	assert.Equal(t, "t1", job.Metadata["wdc_task"])
	assert.Equal(t, "job-1", job.Metadata["job_submission_id"], "Ray adds job_submission_id")
	assert.NotZero(t, job.EndTime)
	logs, err := c.Logs(ctx, "job-1")
	require.NoError(t, err)
	assert.Equal(t, "hello\nhi there\n", logs)
	list, err := c.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "job-1", list[0].SubmissionID)
}

// A failing entrypoint is FAILED with its exit code; a terminal state
// never changes (a stop of it answers stopped=false).
func TestClientFailedJobStaysFailed(t *testing.T) {
	_, c := emulator(t, raytest.Options{})
	ctx := context.Background()
	_, err := c.Submit(ctx, SubmitRequest{Entrypoint: "echo boom >&2; exit 7", SubmissionID: "job-f"})
	require.NoError(t, err)
	job := waitStatus(t, c, "job-f", StatusFailed)
	require.NotNil(t, job.DriverExitCode)
	assert.Equal(t, 7, *job.DriverExitCode)
	assert.Contains(t, job.Message, "exit code 7")
	stopped, err := c.Stop(ctx, "job-f")
	require.NoError(t, err)
	assert.False(t, stopped, "a terminal job is not stopped")
	assert.Equal(t, StatusFailed, waitStatus(t, c, "job-f", StatusFailed).Status)
}

// Error: a duplicate submission_id is HTTP 500 "already exists".
func TestClientDuplicateSubmissionIsAlreadyExists(t *testing.T) {
	_, c := emulator(t, raytest.Options{})
	ctx := context.Background()
	req := SubmitRequest{Entrypoint: "sleep 30", SubmissionID: "dup"}
	_, err := c.Submit(ctx, req)
	require.NoError(t, err)
	_, err = c.Submit(ctx, req)
	require.Error(t, err)
	assert.True(t, IsAlreadyExists(err), "%v", err)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusInternalServerError, ae.StatusCode)
	assert.Contains(t, err.Error(), "Job with submission_id dup already exists")
	assert.Contains(t, err.Error(), "HTTP 500")
}

// Error: an unknown ID is 404 with Ray's text, for status, stop, delete
// and logs alike.
func TestClientUnknownJobIsNotFound(t *testing.T) {
	_, c := emulator(t, raytest.Options{})
	ctx := context.Background()
	_, err := c.Job(ctx, "nope")
	assert.True(t, IsNotFound(err), "%v", err)
	assert.Contains(t, err.Error(), "Job nope does not exist")
	_, err = c.Stop(ctx, "nope")
	assert.True(t, IsNotFound(err), "%v", err)
	assert.True(t, IsNotFound(c.Delete(ctx, "nope")))
	_, err = c.Logs(ctx, "nope")
	assert.True(t, IsNotFound(err), "%v", err)
}

// Error: a field the cluster's Ray version does not know is HTTP 400 —
// which is why the launcher applies the version's field set.
func TestClientUnknownFieldIsBadRequest(t *testing.T) {
	_, c := emulator(t, raytest.Options{RayVersion: "2.5.0"})
	mem := int64(1 << 20)
	req := SubmitRequest{Entrypoint: "true", SubmissionID: "mem", EntrypointMemory: &mem}
	_, err := c.Submit(context.Background(), req)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusBadRequest, ae.StatusCode)
	assert.Contains(t, ae.Message, "entrypoint_memory")

	fields, err := FieldsFor("2.5.0")
	require.NoError(t, err)
	assert.Equal(t, []string{"entrypoint_memory"}, fields.Apply(&req))
	_, err = c.Submit(context.Background(), req)
	require.NoError(t, err, "without the field Ray 2.5 takes it")
}

// Error: deleting a job that is not terminal is HTTP 500; stop ends it
// STOPPED (SIGTERM, then SIGKILL after the stop wait: this entrypoint
// ignores SIGTERM) and then delete works.
func TestClientDeleteOfARunningJobFailsUntilStopped(t *testing.T) {
	_, c := emulator(t, raytest.Options{StopWait: 500 * time.Millisecond})
	ctx := context.Background()
	_, err := c.Submit(ctx, SubmitRequest{Entrypoint: `trap "" TERM; echo started; while :; do sleep 0.05; done`, SubmissionID: "run"})
	require.NoError(t, err)
	waitStatus(t, c, "run", StatusRunning)
	require.Eventually(t, func() bool { l, _ := c.Logs(ctx, "run"); return l == "started\n" }, 10*time.Second, 10*time.Millisecond, "the trap is set")
	err = c.Delete(ctx, "run")
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusInternalServerError, ae.StatusCode)
	assert.Contains(t, ae.Message, "non-terminal")
	stopped, err := c.Stop(ctx, "run")
	require.NoError(t, err)
	assert.True(t, stopped)
	start := time.Now()
	waitStatus(t, c, "run", StatusStopped)
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "SIGTERM was ignored; SIGKILL came after the stop wait")
	require.NoError(t, c.Delete(ctx, "run"))
	_, err = c.Job(ctx, "run")
	assert.True(t, IsNotFound(err), "deleted")
}

// Error: the submit route has a trailing slash; without it there is no
// route (404).
func TestSubmitRouteNeedsTheTrailingSlash(t *testing.T) {
	e, _ := emulator(t, raytest.Options{})
	resp, err := http.Post(e.URL()+"/api/jobs", "application/json", strings.NewReader(`{"entrypoint":"true"}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Zero(t, e.Submits())
}

// Error: a submit whose answer is cut is a TransportError and is not
// retried by the client (the job exists, as a GET shows).
func TestClientSubmitWithACutAnswerIsNotRetried(t *testing.T) {
	e, c := emulator(t, raytest.Options{DropSubmitResponse: func(string) bool { return true }})
	ctx := context.Background()
	_, err := c.Submit(ctx, SubmitRequest{Entrypoint: "sleep 30", SubmissionID: "cut"})
	require.Error(t, err)
	assert.True(t, IsTransport(err), "%v", err)
	assert.Equal(t, 1, e.Submits(), "sent once")
	_, err = c.Job(ctx, "cut")
	require.NoError(t, err, "the job was created")
}

// Error: requests other than submit are retried on transport errors only,
// a bounded number of times; an HTTP error answer is not retried.
func TestClientRetriesTransportErrorsOnly(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		if r.URL.Path == "/api/jobs/x" {
			http.Error(w, "Job x does not exist", http.StatusNotFound)
			return
		}
		if n < 3 { // cut the first two connections
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		_ = json.NewEncoder(w).Encode(VersionInfo{RayVersion: "2.9.0"})
	}))
	defer srv.Close()
	c, err := NewClient(ClientOptions{Address: srv.URL, Retries: 2, Backoff: time.Millisecond})
	require.NoError(t, err)
	v, err := c.Version(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "2.9.0", v.RayVersion)
	assert.Equal(t, int32(3), hits.Load(), "two retries")

	hits.Store(0)
	_, err = c.Job(context.Background(), "x")
	assert.True(t, IsNotFound(err))
	assert.Equal(t, int32(1), hits.Load(), "an HTTP answer is not retried")

	hits.Store(-10) // every connection is cut
	_, err = c.Version(context.Background())
	var te *TransportError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, 3, te.Tries)
}

// Error: a request that hangs is bounded by the timeout.
func TestClientTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() { // accept and never answer
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
		}
	}()
	c, err := NewClient(ClientOptions{Address: "http://" + ln.Addr().String(), Timeout: 200 * time.Millisecond, Retries: -1})
	require.NoError(t, err)
	start := time.Now()
	_, err = c.Version(context.Background())
	assert.True(t, IsTransport(err), "%v", err)
	assert.Less(t, time.Since(start), 3*time.Second)
}

func TestNewClientRejectsABadAddress(t *testing.T) {
	for _, a := range []string{"", "head:8265", "ftp://head:8265", "http://"} {
		_, err := NewClient(ClientOptions{Address: a})
		assert.ErrorContains(t, err, "want http://HOST:PORT", a)
	}
}

// The node's environment reaches the entrypoint; runtime_env.env_vars
// override it, and ${VAR} expands the node's value.
func TestEmulatorEntrypointEnvironment(t *testing.T) {
	e, c := emulator(t, raytest.Options{NodeEnv: []string{"PATH=/usr/bin:/bin", "NODE_ONLY=n", "BOTH=node"}})
	_, err := c.Submit(context.Background(), SubmitRequest{Entrypoint: "env", SubmissionID: "env",
		RuntimeEnv: &RuntimeEnv{EnvVars: map[string]string{"BOTH": "job", "EXPANDED": "${NODE_ONLY}-x"}}})
	require.NoError(t, err)
	waitStatus(t, c, "env", StatusSucceeded)
	job, ok := e.Job("env")
	require.True(t, ok)
	logs := job.Logs()
	for _, kv := range []string{"NODE_ONLY=n", "BOTH=job", "EXPANDED=n-x", "PYTHONUNBUFFERED=1", "RAY_ADDRESS=" + e.URL()} {
		assert.Contains(t, logs, kv+"\n")
	}
}
