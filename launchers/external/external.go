package external

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/launchers"
	"github.com/wdc-runtime/wdc/lease"
)

// Options configures a Launcher.
type Options struct {
	// WorkerID is the fleet worker whose launches are handed off.
	WorkerID string
	// SpoolDir receives one file per attempt, <task>-a<attempt>-f<fence>.json
	// (SpoolFile), holding its Command as JSON. Created when missing.
	SpoolDir string
	// Blobs is the artifact store `wdc exec` reads the sealed envelope
	// from (the same store as Target.BlobURL).
	Blobs *blobstore.Store
	// Target is how the rendered `wdc exec` connects.
	Target Target
	Logger *slog.Logger
	// OnHandOff, when set, is called with every command handed off and
	// the spool file that holds it.
	OnHandOff func(cmd Command, spoolFile string)
	// Signer, when set, is the worker's identity: each attempt gets a key
	// delegated to it alone, in KeyFile (mode 0600), which `wdc exec
	// --attempt-key` reads, removes, and signs the result with.
	Signer *identity.Signer
}

// KeyFile is where the delegated key of claim c is spooled: SpoolFile's
// path with .key for .json.
func KeyFile(dir string, c lease.Claim) string {
	return strings.TrimSuffix(SpoolFile(dir, c), ".json") + ".key"
}

// AttemptKey delegates, under s, a key to claim c alone and returns it
// encoded as ParseAttemptKey reads it: what every launcher hands an
// attempt's `wdc exec` (a spooled file, a Secret, env_vars).
func AttemptKey(s *identity.Signer, c lease.Claim) ([]byte, error) {
	k, err := s.Delegate(c, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("delegate a key to attempt %s: %w", c, err)
	}
	return json.Marshal(k)
}

// WriteAttemptKey writes an encoded key (AttemptKey) to path, readable by
// its owner only.
func WriteAttemptKey(path string, key []byte) error {
	return blobstore.WriteFileAtomic(path, 0o600, func(w io.Writer) error { _, err := w.Write(key); return err })
}

// ReadAttemptKey reads the key WriteAttemptKey wrote and checks that it
// was delegated to claim c.
func ReadAttemptKey(path string, c lease.Claim) (*identity.AttemptKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseAttemptKey(b, c, "attempt key "+path)
}

// ParseAttemptKey decodes a key as WriteAttemptKey (or EnvAttemptKeyData)
// holds it and checks that it was delegated to claim c; errors start with
// source.
func ParseAttemptKey(b []byte, c lease.Claim, source string) (*identity.AttemptKey, error) {
	var k identity.AttemptKey
	if err := json.Unmarshal(b, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if k.Delegation.Claim != c {
		return nil, fmt.Errorf("%s is for attempt %s, not %s", source, k.Delegation.Claim, c)
	}
	return &k, nil
}

// Launcher hands attempts off: it runs nothing itself.
type Launcher struct {
	opts Options
}

var _ launchers.Launcher = (*Launcher)(nil)

// New returns a Launcher. Errors: missing WorkerID, SpoolDir or Blobs; a
// spool directory that cannot be created.
func New(opts Options) (*Launcher, error) {
	switch {
	case opts.WorkerID == "":
		return nil, errors.New("external launcher: worker ID is required")
	case opts.SpoolDir == "":
		return nil, errors.New("external launcher: spool dir is required")
	case opts.Blobs == nil:
		return nil, errors.New("external launcher: blob store is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(opts.SpoolDir, 0o755); err != nil {
		return nil, fmt.Errorf("external launcher: spool dir: %w", err)
	}
	return &Launcher{opts: opts}, nil
}

// SpoolFile is where the command of claim c is spooled:
// <dir>/<task>-a<attempt>-f<fence>.json.
func SpoolFile(dir string, c lease.Claim) string {
	return filepath.Join(dir, c.TaskID+"-a"+strconv.FormatInt(c.Attempt, 10)+"-f"+strconv.FormatInt(c.Fence, 10)+".json")
}

// Submit hands the attempt off: it stores the sealed envelope in the blob
// store (a content-addressed put; a no-op when it is there already),
// writes the attempt's `wdc exec` command to its spool file and returns
// the spool file as the Submission's TaskDir (PID 0). The attempt then
// runs when, and if, something runs that command; until its first
// heartbeat the lease runs down its TTL from the grant.
//
// Errors (nothing is spooled): the attempt is for another worker; ctx is
// done or past its deadline (launchers.ErrLaunchExpired); the envelope's
// digest is not the lease's; the store or the spool directory cannot be
// written.
func (l *Launcher) Submit(ctx context.Context, a launchers.Attempt) (launchers.Submission, error) {
	claim, err := launchers.Accept(ctx, l.opts.WorkerID, a)
	if err != nil {
		return launchers.Submission{}, err
	}
	if err := launchers.StoreEnvelope(ctx, l.opts.Blobs, a); err != nil {
		return launchers.Submission{}, err
	}
	cmd := Render(l.opts.Target, claim)
	if l.opts.Signer != nil {
		key, err := AttemptKey(l.opts.Signer, claim)
		if err != nil {
			return launchers.Submission{}, err
		}
		keyPath := KeyFile(l.opts.SpoolDir, claim)
		if err := WriteAttemptKey(keyPath, key); err != nil {
			return launchers.Submission{}, fmt.Errorf("spool %s: %w", keyPath, err)
		}
		cmd = cmd.WithAttemptKey(keyPath)
	}
	path := SpoolFile(l.opts.SpoolDir, claim)
	if err := blobstore.WriteFileAtomic(path, 0o644, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(cmd)
	}); err != nil {
		return launchers.Submission{}, fmt.Errorf("spool %s: %w", path, err)
	}
	l.opts.Logger.Info("attempt handed off", "task", claim.TaskID, "attempt", claim.Attempt, "fence", claim.Fence, "spool", path, "command", cmd.String())
	if l.opts.OnHandOff != nil {
		l.opts.OnHandOff(cmd, path)
	}
	return launchers.Submission{TaskDir: path}, nil
}

// Status reports RUNNING while the attempt's spool file exists (handed
// off; whether anything runs it, only its heartbeats tell), else
// ErrUnknownAttempt.
func (l *Launcher) Status(ctx context.Context, c lease.Claim) (launchers.Status, error) {
	path := SpoolFile(l.opts.SpoolDir, c)
	if _, err := os.Stat(path); err != nil {
		return launchers.Status{Phase: launchers.PhaseUnknown}, launchers.ErrUnknownAttempt
	}
	return launchers.Status{Phase: launchers.PhaseRunning, Detail: "handed off: " + path}, nil
}

// Cancel removes the attempt's spool file, so the command is not started
// from it any more. A `wdc exec` already running it is not reached from
// here: it stops itself at its next heartbeat or lease check, which finds
// the lease ended. Unknown attempts are ignored.
func (l *Launcher) Cancel(ctx context.Context, c lease.Claim, reason string) error {
	for _, p := range []string{SpoolFile(l.opts.SpoolDir, c), KeyFile(l.opts.SpoolDir, c)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Running is 0: handed-off attempts do not run in this process.
func (l *Launcher) Running() int { return 0 }

// Shutdown does nothing: handed-off attempts are not this process's to
// kill. When the agent stops, its worker goes STALE and its leases are
// revoked (worker_lost); each `wdc exec` then fences itself.
func (l *Launcher) Shutdown(ctx context.Context, reason string) {}
