package external

import (
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/wdc-runtime/wdc/lease"
)

// Environment variables `wdc exec` reads its claim and work directory
// from, when the matching flag is not given (a pod spec or a Ray
// runtime_env can pass them as env instead of arguments).
const (
	EnvTaskID         = "WDC_EXEC_TASK_ID"         // --task-id
	EnvAttempt        = "WDC_EXEC_ATTEMPT"         // --attempt
	EnvFence          = "WDC_EXEC_FENCE"           // --fence
	EnvWorkerID       = "WDC_EXEC_WORKER_ID"       // --worker-id
	EnvEnvelopeDigest = "WDC_EXEC_ENVELOPE_DIGEST" // --envelope-digest
	EnvWorkDir        = "WDC_EXEC_WORK_DIR"        // --work-dir
	EnvAttemptKey     = "WDC_EXEC_ATTEMPT_KEY"     // --attempt-key
	// EnvAttemptKeyData holds the attempt's key itself (as its key file
	// does) where no file can be handed over: a Kubernetes launcher sets
	// it from the attempt's Secret. `wdc exec` reads and unsets it.
	EnvAttemptKeyData = "WDC_EXEC_ATTEMPT_KEY_DATA"
)

// Target is how a `wdc exec` reaches the control plane and the blob
// store: the connection settings of the agent or CLI that renders it.
// None of it is secret; credentials are named by Command.SecretEnv.
type Target struct {
	// Binary is argv[0]: the wdc binary on the machine that runs the
	// command (default "wdc", looked up in its PATH).
	Binary string
	// Address is the Temporal frontend host:port; Namespace its namespace.
	Address   string
	Namespace string
	// BlobURL is the artifact store URL (file:///dir, s3://bucket?...),
	// which never holds credentials.
	BlobURL string
	// TLS settings, as the global --tls* flags (paths on the machine that
	// runs the command).
	TLS                                bool
	TLSCertPath, TLSKeyPath, TLSCAPath string
	TLSServerName                      string
	// APIKey says that Temporal needs an API key (TEMPORAL_API_KEY); its
	// value is never rendered.
	APIKey bool
}

// Command is one attempt's `wdc exec`, ready for an external launcher.
type Command struct {
	// Claim is the attempt the command runs.
	Claim lease.Claim `json:"claim"`
	// Argv is the complete command line: argv[0] is Target.Binary.
	Argv []string `json:"argv"`
	// Env holds the same settings as Argv as KEY=VALUE environment
	// variables, sorted: `<binary> exec` with this environment and no
	// flags runs the same attempt.
	Env []string `json:"env"`
	// SecretEnv names the credentials the launcher must provide from its
	// own secret store (values are never rendered): TEMPORAL_API_KEY when
	// Temporal needs an API key, the cloud SDK's variables for an s3://,
	// gs:// or azblob:// store (or any other source of its default chain,
	// such as an instance role). Empty when none is needed.
	SecretEnv []string `json:"secret_env"`
}

// Render builds the `wdc exec` command for claim c against target t.
func Render(t Target, c lease.Claim) Command {
	bin := t.Binary
	if bin == "" {
		bin = "wdc"
	}
	type setting struct{ flag, env, value string }
	settings := []setting{
		{"--task-id", EnvTaskID, c.TaskID},
		{"--attempt", EnvAttempt, strconv.FormatInt(c.Attempt, 10)},
		{"--fence", EnvFence, strconv.FormatInt(c.Fence, 10)},
		{"--worker-id", EnvWorkerID, c.WorkerID},
		{"--envelope-digest", EnvEnvelopeDigest, c.EnvelopeDigest},
		{"--address", "TEMPORAL_ADDRESS", t.Address},
		{"--namespace", "TEMPORAL_NAMESPACE", t.Namespace},
		{"--blob-url", "WDC_BLOB_URL", t.BlobURL},
		{"--tls-cert-path", "TEMPORAL_TLS_CERT", t.TLSCertPath},
		{"--tls-key-path", "TEMPORAL_TLS_KEY", t.TLSKeyPath},
		{"--tls-ca-path", "TEMPORAL_TLS_CA", t.TLSCAPath},
		{"--tls-server-name", "TEMPORAL_TLS_SERVER_NAME", t.TLSServerName},
	}
	cmd := Command{Claim: c, Argv: []string{bin, "exec"}, Env: []string{}, SecretEnv: []string{}}
	for _, s := range settings {
		if s.value == "" {
			continue
		}
		cmd.Argv = append(cmd.Argv, s.flag, s.value)
		cmd.Env = append(cmd.Env, s.env+"="+s.value)
	}
	if t.TLS {
		cmd.Argv = append(cmd.Argv, "--tls")
		cmd.Env = append(cmd.Env, "TEMPORAL_TLS=true")
	}
	sort.Strings(cmd.Env)
	if t.APIKey {
		cmd.SecretEnv = append(cmd.SecretEnv, "TEMPORAL_API_KEY")
	}
	cmd.SecretEnv = append(cmd.SecretEnv, storeCredentials(t.BlobURL)...)
	return cmd
}

// storeCredentials names the variables of the default credential chain of
// the store's cloud SDK.
func storeCredentials(blobURL string) []string {
	u, err := url.Parse(blobURL)
	if err != nil {
		return nil
	}
	switch u.Scheme {
	case "s3":
		return []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
	case "gs":
		return []string{"GOOGLE_APPLICATION_CREDENTIALS"}
	case "azblob":
		return []string{"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY"}
	}
	return nil
}

// WithAttemptKey returns c that also names the attempt's key file (flag
// --attempt-key, EnvAttemptKey).
func (c Command) WithAttemptKey(path string) Command {
	c.Argv = append(slices.Clone(c.Argv), "--attempt-key", path)
	c.Env = append(slices.Clone(c.Env), EnvAttemptKey+"="+path)
	sort.Strings(c.Env)
	return c
}

// String is the command line, quoted for a POSIX shell.
func (c Command) String() string { return ShellQuote(c.Argv) }

// ShellQuote joins args for a POSIX shell, quoting those that need it.
func ShellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
