package raytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Job states, as Ray names them.
const (
	Pending   = "PENDING"
	Running   = "RUNNING"
	Stopped   = "STOPPED"
	Succeeded = "SUCCEEDED"
	Failed    = "FAILED"
)

// Terminal reports whether a state never changes again.
func Terminal(status string) bool {
	return status == Stopped || status == Succeeded || status == Failed
}

// Options configures an Emulator.
type Options struct {
	// RayVersion is what /api/version reports as ray_version and decides
	// the submit fields the emulator knows (default "2.9.3").
	RayVersion string
	// NodeEnv is the environment of the emulated node where `ray start`
	// ran (KEY=VALUE); every entrypoint inherits it. Default: none.
	NodeEnv []string
	// StartTimeout is how long a job may stay PENDING before it FAILED
	// (RAY_JOB_START_TIMEOUT_SECONDS; default 900 s).
	StartTimeout time.Duration
	// StopWait is the time between SIGTERM and SIGKILL on stop
	// (RAY_JOB_STOP_WAIT_TIME_S; default 3 s).
	StopWait time.Duration
	// HoldPending, when set and true for a submission ID, keeps that job
	// PENDING (its entrypoint never starts): no node has the resources.
	HoldPending func(submissionID string) bool
	// DropSubmitResponse, when set and true for a submission ID, creates
	// the job and then closes the connection without an HTTP response.
	DropSubmitResponse func(submissionID string) bool
	// WorkDir is where each job gets its working directory (default: a
	// new temporary directory, removed by Close).
	WorkDir string
}

// Job is the emulator's record of one job.
type Job struct {
	SubmissionID string
	Status       string
	Message      string
	Entrypoint   string
	// Body is the submit request body as received.
	Body map[string]any
	// Env is the entrypoint's whole environment (sorted KEY=VALUE).
	Env      []string
	ExitCode *int
	// Deleted: the job was deleted (the API no longer knows it).
	Deleted   bool
	StartTime time.Time
	EndTime   time.Time
	Metadata  map[string]string

	pgid     int
	logs     bytes.Buffer
	stopping bool
	done     chan struct{}
}

// Emulator is a running emulated dashboard.
type Emulator struct {
	opts Options
	srv  *httptest.Server

	mu      sync.Mutex
	jobs    map[string]*Job
	gone    map[string]*Job // deleted, kept for tests to inspect
	order   []string
	submits int
	seq     int
	ownDir  bool
	closed  bool
	quit    chan struct{}
}

// Start starts an emulator on a 127.0.0.1 port. Close stops it and kills
// every job's processes.
func Start(opts Options) (*Emulator, error) {
	if opts.RayVersion == "" {
		opts.RayVersion = "2.9.3"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 900 * time.Second
	}
	if opts.StopWait == 0 {
		opts.StopWait = 3 * time.Second
	}
	e := &Emulator{opts: opts, jobs: map[string]*Job{}, gone: map[string]*Job{}, quit: make(chan struct{})}
	if e.opts.WorkDir == "" {
		d, err := os.MkdirTemp("", "raytest-")
		if err != nil {
			return nil, err
		}
		e.opts.WorkDir, e.ownDir = d, true
	}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	return e, nil
}

// URL is the dashboard's address, http://127.0.0.1:PORT.
func (e *Emulator) URL() string { return e.srv.URL }

// Close kills every job's process group, stops the server and removes
// the work directory it made.
func (e *Emulator) Close() {
	e.mu.Lock()
	if !e.closed {
		close(e.quit)
	}
	e.closed = true
	var running []*Job
	for _, j := range e.jobs {
		if j.pgid > 0 && !Terminal(j.Status) {
			_ = syscall.Kill(-j.pgid, syscall.SIGKILL)
			running = append(running, j)
		}
	}
	e.mu.Unlock()
	for _, j := range running {
		select {
		case <-j.done:
		case <-time.After(5 * time.Second):
		}
	}
	e.srv.CloseClientConnections()
	e.srv.Close()
	if e.ownDir {
		os.RemoveAll(e.opts.WorkDir)
	}
}

// Jobs returns a copy of every job's record, deleted ones included, in
// submission order.
func (e *Emulator) Jobs() []Job {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Job, 0, len(e.order))
	for _, id := range e.order {
		if j := e.record(id); j != nil {
			out = append(out, j.snapshot())
		}
	}
	return out
}

// Job returns a copy of one job's record (also once deleted).
func (e *Emulator) Job(id string) (Job, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.record(id)
	if j == nil {
		return Job{}, false
	}
	return j.snapshot(), true
}

func (e *Emulator) record(id string) *Job {
	if j := e.jobs[id]; j != nil {
		return j
	}
	return e.gone[id]
}

// Submits counts submit requests received (whatever their answer).
func (e *Emulator) Submits() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.submits
}

// Freeze stops (SIGSTOP) every process of a running job: its executor no
// longer heartbeats, as on a node that hangs. Errors: unknown or not
// running job.
func (e *Emulator) Freeze(id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	j, ok := e.jobs[id]
	if !ok || j.pgid == 0 || Terminal(j.Status) {
		return fmt.Errorf("job %s is not running", id)
	}
	return syscall.Kill(-j.pgid, syscall.SIGSTOP)
}

func (j *Job) snapshot() Job {
	c := Job{SubmissionID: j.SubmissionID, Status: j.Status, Message: j.Message, Entrypoint: j.Entrypoint, Deleted: j.Deleted,
		Body: j.Body, Env: append([]string(nil), j.Env...), StartTime: j.StartTime, EndTime: j.EndTime, Metadata: j.Metadata}
	if j.ExitCode != nil {
		code := *j.ExitCode
		c.ExitCode = &code
	}
	c.logs.Write(j.logs.Bytes())
	return c
}

// Logs is the job's log so far.
func (j Job) Logs() string { return j.logs.String() }

// submitFields are the submit body keys each Ray version knows (from
// Ray's JobSubmitRequest).
func submitFields(version string) map[string]bool {
	f := map[string]bool{"entrypoint": true, "submission_id": true, "job_id": true, "runtime_env": true, "metadata": true}
	if versionAtLeast(version, 2, 2) {
		f["entrypoint_num_cpus"], f["entrypoint_num_gpus"], f["entrypoint_resources"] = true, true, true
	}
	if versionAtLeast(version, 2, 8) {
		f["entrypoint_memory"] = true
	}
	return f
}

func versionAtLeast(v string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(v, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

var jobPath = regexp.MustCompile(`^/api/jobs/([^/]+)(/stop|/logs)?$`)

func (e *Emulator) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/api/version" && r.Method == http.MethodGet:
		writeJSON(w, 200, map[string]string{"version": "4", "ray_version": e.opts.RayVersion, "ray_commit": "emulated", "session_name": "session_raytest"})
	case r.URL.Path == "/api/jobs/" && r.Method == http.MethodPost:
		e.submit(w, r)
	case r.URL.Path == "/api/jobs/" && r.Method == http.MethodGet:
		e.mu.Lock()
		list := make([]map[string]any, 0, len(e.order))
		for _, id := range e.order {
			if j := e.jobs[id]; j != nil {
				list = append(list, j.details())
			}
		}
		e.mu.Unlock()
		writeJSON(w, 200, list)
	default:
		m := jobPath.FindStringSubmatch(r.URL.Path)
		if m == nil {
			http.Error(w, "404: Not Found", http.StatusNotFound)
			return
		}
		e.onJob(w, r, m[1], m[2])
	}
}

func (e *Emulator) onJob(w http.ResponseWriter, r *http.Request, id, action string) {
	e.mu.Lock()
	j, ok := e.jobs[id]
	if !ok {
		e.mu.Unlock()
		text(w, http.StatusNotFound, fmt.Sprintf("Job %s does not exist", id))
		return
	}
	switch {
	case action == "" && r.Method == http.MethodGet:
		d := j.details()
		e.mu.Unlock()
		writeJSON(w, 200, d)
	case action == "/logs" && r.Method == http.MethodGet:
		logs := j.logs.String()
		e.mu.Unlock()
		writeJSON(w, 200, map[string]string{"logs": logs})
	case action == "/stop" && r.Method == http.MethodPost:
		stopped := e.stopLocked(j)
		e.mu.Unlock()
		writeJSON(w, 200, map[string]bool{"stopped": stopped})
	case action == "" && r.Method == http.MethodDelete:
		if !Terminal(j.Status) {
			st := j.Status
			e.mu.Unlock()
			text(w, http.StatusInternalServerError, fmt.Sprintf("Attempted to delete job with submission_id %s, but it is in a non-terminal state %s. Stop the job first.", id, st))
			return
		}
		delete(e.jobs, id)
		j.Deleted = true
		e.gone[id] = j
		e.mu.Unlock()
		writeJSON(w, 200, map[string]bool{"deleted": true})
	default:
		e.mu.Unlock()
		text(w, http.StatusMethodNotAllowed, "405: Method Not Allowed")
	}
}

// stopLocked stops a non-terminal job: a PENDING one ends STOPPED at once;
// a running one gets SIGTERM on its process group and SIGKILL after
// StopWait. It returns false for a terminal job.
func (e *Emulator) stopLocked(j *Job) bool {
	if Terminal(j.Status) {
		return false
	}
	j.stopping = true
	if j.pgid == 0 {
		e.endLocked(j, Stopped, "Job was intentionally stopped.", nil)
		return true
	}
	pgid := j.pgid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	go func() {
		select {
		case <-j.done:
		case <-time.After(e.opts.StopWait):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}()
	return true
}

func (e *Emulator) endLocked(j *Job, status, msg string, code *int) {
	if Terminal(j.Status) {
		return // terminal states never change
	}
	j.Status, j.Message, j.ExitCode, j.EndTime = status, msg, code, time.Now()
}

func (e *Emulator) submit(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.submits++
	e.mu.Unlock()
	var body map[string]any
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		text(w, http.StatusBadRequest, "Failed to parse request: "+err.Error())
		return
	}
	known := submitFields(e.opts.RayVersion)
	keys := make([]string, 0, len(body))
	for k, v := range body {
		if v == nil {
			delete(body, k) // Ray drops null-valued keys
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !known[k] {
			text(w, http.StatusBadRequest, fmt.Sprintf("Failed to parse request: JobSubmitRequest.__init__() got an unexpected keyword argument '%s'", k))
			return
		}
	}
	entrypoint, ok := body["entrypoint"].(string)
	if !ok {
		text(w, http.StatusBadRequest, "Failed to parse request: entrypoint must be a string")
		return
	}
	id, _ := body["submission_id"].(string)
	env, err := entrypointEnv(e.opts.NodeEnv, body["runtime_env"], e.srv.URL)
	if err != nil {
		text(w, http.StatusBadRequest, "Failed to parse request: "+err.Error())
		return
	}
	meta := map[string]string{}
	if m, ok := body["metadata"].(map[string]any); ok {
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				text(w, http.StatusBadRequest, fmt.Sprintf("Failed to parse request: metadata value of %q must be a string", k))
				return
			}
			meta[k] = s
		}
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		text(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	if id == "" {
		e.seq++
		id = fmt.Sprintf("raysubmit_%016d", e.seq)
	}
	if _, dup := e.jobs[id]; dup {
		e.mu.Unlock()
		text(w, http.StatusInternalServerError, fmt.Sprintf("Job with submission_id %s already exists. Please use a different submission_id.", id))
		return
	}
	meta["job_submission_id"] = id
	if _, ok := meta["job_name"]; !ok {
		meta["job_name"] = id
	}
	j := &Job{SubmissionID: id, Status: Pending, Entrypoint: entrypoint, Body: body, Env: env, Metadata: meta,
		StartTime: time.Now(), done: make(chan struct{})}
	e.jobs[id] = j
	if _, reused := e.gone[id]; reused {
		delete(e.gone, id) // Ray forgets a deleted job's ID
	} else {
		e.order = append(e.order, id)
	}
	hold := e.opts.HoldPending != nil && e.opts.HoldPending(id)
	e.mu.Unlock()
	if hold {
		go e.pendingTimeout(j)
	} else {
		e.start(j)
	}
	if e.opts.DropSubmitResponse != nil && e.opts.DropSubmitResponse(id) {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
	}
	writeJSON(w, 200, map[string]string{"job_id": id, "submission_id": id})
}

// pendingTimeout fails a job still PENDING after StartTimeout.
func (e *Emulator) pendingTimeout(j *Job) {
	select {
	case <-time.After(e.opts.StartTimeout):
	case <-e.quit:
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if j.Status == Pending {
		e.endLocked(j, Failed, fmt.Sprintf("Job supervisor actor failed to start within %.1f seconds. This timeout can be configured by setting the environment variable RAY_JOB_START_TIMEOUT_SECONDS.", e.opts.StartTimeout.Seconds()), nil)
		close(j.done)
	}
}

// start runs the job's entrypoint; the job is RUNNING once it started.
func (e *Emulator) start(j *Job) {
	dir, err := os.MkdirTemp(e.opts.WorkDir, "job-")
	if err != nil {
		e.failStart(j, err)
		return
	}
	cmd := exec.Command("/bin/sh", "-c", j.Entrypoint)
	cmd.Dir = dir
	cmd.Env = j.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w := &jobLog{e: e, j: j}
	cmd.Stdout, cmd.Stderr = w, w
	e.mu.Lock()
	if err := cmd.Start(); err != nil {
		e.mu.Unlock()
		e.failStart(j, err)
		return
	}
	j.pgid = cmd.Process.Pid
	j.Status = Running
	e.mu.Unlock()
	go func() {
		err := cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		e.mu.Lock()
		defer e.mu.Unlock()
		switch {
		case j.stopping:
			e.endLocked(j, Stopped, "Job was intentionally stopped.", &code)
		case err == nil:
			e.endLocked(j, Succeeded, "Job finished successfully.", &code)
		default:
			e.endLocked(j, Failed, fmt.Sprintf("Job entrypoint command failed with exit code %d, last available logs (truncated to 20,000 chars):\n%s", code, tail(j.logs.String(), 20000)), &code)
		}
		close(j.done)
	}()
}

func (e *Emulator) failStart(j *Job, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.endLocked(j, Failed, "Job failed to start: "+err.Error(), nil)
	close(j.done)
}

type jobLog struct {
	e *Emulator
	j *Job
}

func (l *jobLog) Write(p []byte) (int, error) {
	l.e.mu.Lock()
	defer l.e.mu.Unlock()
	return l.j.logs.Write(p)
}

// entrypointEnv is the node's environment, Ray's own variables and
// runtime_env.env_vars on top (${VAR} expands the node's value).
func entrypointEnv(node []string, runtimeEnv any, address string) ([]string, error) {
	env := map[string]string{}
	for _, kv := range node {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	env["RAY_ADDRESS"] = address
	env["PYTHONUNBUFFERED"] = "1"
	if runtimeEnv != nil {
		re, ok := runtimeEnv.(map[string]any)
		if !ok {
			return nil, errors.New("runtime_env must be an object")
		}
		b, _ := json.Marshal(re)
		env["RAY_JOB_CONFIG_JSON_ENV_VAR"] = `{"runtime_env":` + string(b) + `}`
		if vars, ok := re["env_vars"]; ok {
			m, ok := vars.(map[string]any)
			if !ok {
				return nil, errors.New("runtime_env.env_vars must be a string map")
			}
			nodeEnv := func(k string) string {
				for _, kv := range node {
					if name, v, _ := strings.Cut(kv, "="); name == k {
						return v
					}
				}
				return ""
			}
			for k, v := range m {
				s, ok := v.(string)
				if !ok {
					return nil, fmt.Errorf("runtime_env.env_vars[%q] must be a string", k)
				}
				env[k] = os.Expand(s, nodeEnv)
			}
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

// details is the job's JobDetails JSON.
func (j *Job) details() map[string]any {
	d := map[string]any{
		"type": "SUBMISSION", "job_id": j.SubmissionID, "submission_id": j.SubmissionID, "status": j.Status,
		"entrypoint": j.Entrypoint, "message": j.Message, "error_type": nil,
		"start_time": j.StartTime.UnixMilli(), "end_time": nil, "metadata": j.Metadata,
		"runtime_env": j.Body["runtime_env"], "driver_info": nil, "driver_exit_code": nil, "driver_node_id": nil,
	}
	if !j.EndTime.IsZero() {
		d["end_time"] = j.EndTime.UnixMilli()
	}
	if j.ExitCode != nil {
		d["driver_exit_code"] = *j.ExitCode
	}
	if j.pgid > 0 {
		d["driver_info"] = map[string]any{"id": "01000000", "node_ip_address": "127.0.0.1", "pid": fmt.Sprint(j.pgid)}
		d["driver_node_id"] = "emulated-head"
	}
	if j.Status == Failed {
		d["error_type"] = "JOB_ENTRYPOINT_COMMAND_ERROR"
	}
	return d
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func text(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(msg))
}
