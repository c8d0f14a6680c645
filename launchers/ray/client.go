package ray

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Job states, as Ray's JobStatus names them. STOPPED, SUCCEEDED and
// FAILED are terminal: they never change.
const (
	StatusPending   = "PENDING"
	StatusRunning   = "RUNNING"
	StatusStopped   = "STOPPED"
	StatusSucceeded = "SUCCEEDED"
	StatusFailed    = "FAILED"
)

// Terminal reports whether a job status never changes again.
func Terminal(status string) bool {
	return status == StatusStopped || status == StatusSucceeded || status == StatusFailed
}

// VersionInfo is GET /api/version's answer.
type VersionInfo struct {
	// Version is the dashboard's API version ("4" in Ray 2.x).
	Version string `json:"version"`
	// RayVersion is the Ray release, e.g. "2.9.3"; it decides the submit
	// fields wdc may send (FieldsFor).
	RayVersion  string `json:"ray_version"`
	RayCommit   string `json:"ray_commit"`
	SessionName string `json:"session_name"`
}

// RuntimeEnv is the part of Ray's runtime_env wdc uses.
type RuntimeEnv struct {
	// EnvVars are set for the entrypoint on top of the node's own
	// environment (Ray expands ${VAR} from the node's value).
	EnvVars map[string]string `json:"env_vars,omitempty"`
}

// SubmitRequest is the body of POST /api/jobs/ (Ray's JobSubmitRequest).
// Empty optional fields are omitted; Fields.Apply drops those the target
// Ray version does not know, since Ray answers an unknown key with HTTP
// 400.
type SubmitRequest struct {
	// Entrypoint is the shell command Ray runs (with a shell) as the job's
	// driver. Required.
	Entrypoint string `json:"entrypoint"`
	// SubmissionID names the job; a second submit with the same ID fails
	// with "already exists" (wdc's idempotency key).
	SubmissionID string      `json:"submission_id,omitempty"`
	RuntimeEnv   *RuntimeEnv `json:"runtime_env,omitempty"`
	// Metadata is free-form string data kept with the job.
	Metadata map[string]string `json:"metadata,omitempty"`
	// EntrypointNumCPUs and EntrypointNumGPUs reserve cores and GPUs for
	// the entrypoint (Ray ≥ 2.2), EntrypointMemory bytes (Ray ≥ 2.8),
	// EntrypointResources custom resources (Ray ≥ 2.2).
	EntrypointNumCPUs   *float64           `json:"entrypoint_num_cpus,omitempty"`
	EntrypointNumGPUs   *float64           `json:"entrypoint_num_gpus,omitempty"`
	EntrypointMemory    *int64             `json:"entrypoint_memory,omitempty"`
	EntrypointResources map[string]float64 `json:"entrypoint_resources,omitempty"`
}

// SubmitResponse is POST /api/jobs/'s answer.
type SubmitResponse struct {
	// JobID repeats SubmissionID (Ray keeps it for old clients).
	JobID        string `json:"job_id"`
	SubmissionID string `json:"submission_id"`
}

// JobDetails is Ray's description of one job (GET /api/jobs/{id}).
type JobDetails struct {
	// Type is SUBMISSION or DRIVER.
	Type         string `json:"type"`
	JobID        string `json:"job_id"`
	SubmissionID string `json:"submission_id"`
	Status       string `json:"status"`
	Entrypoint   string `json:"entrypoint"`
	Message      string `json:"message"`
	ErrorType    string `json:"error_type"`
	// StartTime and EndTime are milliseconds since the epoch (0: not yet).
	StartTime      int64             `json:"start_time"`
	EndTime        int64             `json:"end_time"`
	Metadata       map[string]string `json:"metadata"`
	RuntimeEnv     json.RawMessage   `json:"runtime_env"`
	DriverExitCode *int              `json:"driver_exit_code"`
	DriverNodeID   string            `json:"driver_node_id"`
}

// APIError is an HTTP answer other than 200: the status and Ray's message
// (its plain-text body, trimmed to 2 KiB).
type APIError struct {
	// Op is the client call ("submit", "status", ...), Method and Path the
	// request.
	Op, Method, Path string
	StatusCode       int
	Message          string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("ray %s: %s %s: HTTP %d: %s", e.Op, e.Method, e.Path, e.StatusCode, e.Message)
}

// TransportError is a request that got no HTTP answer (refused, reset,
// timed out): whether the server acted on it is unknown.
type TransportError struct {
	Op, Method, Path string
	// Tries is how many times the request was sent.
	Tries int
	Err   error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("ray %s: %s %s: no answer after %d tr%s: %v", e.Op, e.Method, e.Path, e.Tries, map[bool]string{true: "y", false: "ies"}[e.Tries == 1], e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }

// IsNotFound reports an HTTP 404 (Ray: "Job X does not exist").
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound
}

// IsAlreadyExists reports Ray's answer to a duplicate submission_id: HTTP
// 500 "Job with submission_id X already exists".
func IsAlreadyExists(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.StatusCode == http.StatusInternalServerError && strings.Contains(ae.Message, "already exists")
}

// IsTransport reports a request that got no HTTP answer.
func IsTransport(err error) bool {
	var te *TransportError
	return errors.As(err, &te)
}

// ClientOptions configures a Client.
type ClientOptions struct {
	// Address is the dashboard's base URL, http(s)://HEAD:8265. Required.
	Address string
	// Timeout bounds each HTTP request (default 10 s).
	Timeout time.Duration
	// Retries is how many times a request that got no HTTP answer is sent
	// again, Backoff apart (doubling), for every call but Submit (default
	// 2, so 3 tries; negative: none).
	Retries int
	Backoff time.Duration
	// HTTPClient sends the requests (default: a new http.Client).
	HTTPClient *http.Client
}

// Client is a small client of the Ray dashboard's Jobs REST API. It
// needs no Ray library.
type Client struct {
	base *url.URL
	opts ClientOptions
}

// NewClient returns a client of the dashboard at opts.Address. Errors: an
// address that is not an http:// or https:// URL with a host.
func NewClient(opts ClientOptions) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(opts.Address, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ray address %q: want http://HOST:PORT (the dashboard, port 8265 by default)", opts.Address)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Retries == 0 {
		opts.Retries = 2
	}
	if opts.Retries < 0 {
		opts.Retries = 0
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 200 * time.Millisecond
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	return &Client{base: u, opts: opts}, nil
}

// Address is the dashboard's base URL.
func (c *Client) Address() string { return c.base.String() }

// Version asks GET /api/version.
func (c *Client) Version(ctx context.Context) (VersionInfo, error) {
	var v VersionInfo
	err := c.do(ctx, "version", http.MethodGet, "/api/version", nil, &v, true)
	return v, err
}

// Body is the exact bytes Submit sends for req.
func Body(req SubmitRequest) ([]byte, error) { return json.Marshal(req) }

// Submit sends POST /api/jobs/ once, never retried: a request that got no
// answer may have created the job, which only a GET of its submission ID
// can tell (a *TransportError). Errors: *APIError (IsAlreadyExists for a
// duplicate submission ID; 400 for a field Ray does not know).
func (c *Client) Submit(ctx context.Context, req SubmitRequest) (SubmitResponse, error) {
	var out SubmitResponse
	body, err := Body(req)
	if err != nil {
		return out, fmt.Errorf("ray submit: encode request: %w", err)
	}
	err = c.do(ctx, "submit", http.MethodPost, "/api/jobs/", json.RawMessage(body), &out, false)
	return out, err
}

// Job asks GET /api/jobs/{id}. Errors: IsNotFound for an unknown ID.
func (c *Client) Job(ctx context.Context, id string) (JobDetails, error) {
	var d JobDetails
	err := c.do(ctx, "status", http.MethodGet, "/api/jobs/"+url.PathEscape(id), nil, &d, true)
	return d, err
}

// List asks GET /api/jobs/: every job the cluster knows.
func (c *Client) List(ctx context.Context) ([]JobDetails, error) {
	var l []JobDetails
	err := c.do(ctx, "list", http.MethodGet, "/api/jobs/", nil, &l, true)
	return l, err
}

// Stop sends POST /api/jobs/{id}/stop: Ray sends SIGTERM to the
// entrypoint's process group, SIGKILL after 3 s. It returns false when the
// job was already terminal. Errors: IsNotFound.
func (c *Client) Stop(ctx context.Context, id string) (bool, error) {
	var out struct {
		Stopped bool `json:"stopped"`
	}
	err := c.do(ctx, "stop", http.MethodPost, "/api/jobs/"+url.PathEscape(id)+"/stop", nil, &out, true)
	return out.Stopped, err
}

// Delete sends DELETE /api/jobs/{id}. Errors: IsNotFound; an *APIError
// with HTTP 500 when the job is not terminal yet; an answer that says it
// was not deleted.
func (c *Client) Delete(ctx context.Context, id string) error {
	var out struct {
		Deleted bool `json:"deleted"`
	}
	if err := c.do(ctx, "delete", http.MethodDelete, "/api/jobs/"+url.PathEscape(id), nil, &out, true); err != nil {
		return err
	}
	if !out.Deleted {
		return fmt.Errorf("ray delete: job %s was not deleted", id)
	}
	return nil
}

// Logs asks GET /api/jobs/{id}/logs: the job's whole log. Errors:
// IsNotFound.
func (c *Client) Logs(ctx context.Context, id string) (string, error) {
	var out struct {
		Logs string `json:"logs"`
	}
	err := c.do(ctx, "logs", http.MethodGet, "/api/jobs/"+url.PathEscape(id)+"/logs", nil, &out, true)
	return out.Logs, err
}

// maxMessage bounds the error text kept from an answer.
const maxMessage = 2048

// do sends one request (again on a transport error when retry, up to
// Retries times) and decodes a 200 answer into out.
func (c *Client) do(ctx context.Context, op, method, path string, in, out any, retry bool) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("ray %s: encode request: %w", op, err)
		}
	}
	tries := 1
	if retry {
		tries += c.opts.Retries
	}
	wait := c.opts.Backoff
	var lastErr error
	for i := 1; i <= tries; i++ {
		if i > 1 {
			select {
			case <-ctx.Done():
				return &TransportError{Op: op, Method: method, Path: path, Tries: i - 1, Err: fmt.Errorf("%w (last: %v)", ctx.Err(), lastErr)}
			case <-time.After(wait):
			}
			wait *= 2
		}
		status, resp, err := c.once(ctx, method, path, body)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				return &TransportError{Op: op, Method: method, Path: path, Tries: i, Err: err}
			}
			continue
		}
		if status != http.StatusOK {
			msg := strings.TrimSpace(string(resp))
			if len(msg) > maxMessage {
				msg = msg[:maxMessage] + "…"
			}
			return &APIError{Op: op, Method: method, Path: path, StatusCode: status, Message: msg}
		}
		if out != nil {
			if err := json.Unmarshal(resp, out); err != nil {
				return fmt.Errorf("ray %s: %s %s: decode answer: %w", op, method, path, err)
			}
		}
		return nil
	}
	return &TransportError{Op: op, Method: method, Path: path, Tries: tries, Err: lastErr}
}

// maxAnswer bounds an answer's size (a job's whole log may be large).
const maxAnswer = 64 << 20

func (c *Client) once(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, c.base.String()+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}
