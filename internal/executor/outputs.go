package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
)

// OutputLimits are the output rules' size caps. Zero fields take defaults.
type OutputLimits struct {
	// MaxFiles is the most files outputs/ may hold. Default 1,000; at most
	// api.MaxArtifacts (the result's artifact list travels in a Temporal
	// payload: pack many small files into an archive).
	MaxFiles int
	// MaxFileBytes caps one file, in bytes. Default 1 GiB.
	MaxFileBytes int64
	// MaxTotalBytes caps all files together, in bytes. Default 4 GiB.
	MaxTotalBytes int64
}

// WithDefaults fills zero fields.
func (l OutputLimits) WithDefaults() OutputLimits {
	if l.MaxFiles == 0 {
		l.MaxFiles = 1000
	}
	if l.MaxFiles > api.MaxArtifacts {
		l.MaxFiles = api.MaxArtifacts
	}
	if l.MaxFileBytes == 0 {
		l.MaxFileBytes = 1 << 30
	}
	if l.MaxTotalBytes == 0 {
		l.MaxTotalBytes = 4 << 30
	}
	return l
}

// OutputError is a broken output rule; its message names the file.
type OutputError struct {
	Path   string
	Reason string
}

func (e *OutputError) Error() string { return "outputs/" + e.Path + ": " + e.Reason }

// StageOutputs lists outputDir (never following a symlink), checks each
// entry against the output rules — regular files and directories only, a
// clean relative name (no "..", no symlinks), size caps — and uploads every
// file to the blob store under prefix (blobstore.StagingPrefix) while
// hashing it. It returns the artifacts sorted by name. A broken rule
// returns an *OutputError and leaves the prefix removed; nothing is
// half-staged.
func StageOutputs(ctx context.Context, outputDir string, store *blobstore.Store, prefix string, limits OutputLimits) (_ []api.Artifact, err error) {
	limits = limits.WithDefaults()
	var files []string
	var total int64
	manifest := 0
	walkErr := filepath.WalkDir(outputDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == outputDir {
			return nil
		}
		rel, _ := filepath.Rel(outputDir, p)
		rel = filepath.ToSlash(rel)
		if vErr := envelope.ValidateRelativePath(rel); vErr != nil {
			return &OutputError{Path: rel, Reason: vErr.Error()}
		}
		switch t := d.Type(); {
		case t&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			return &OutputError{Path: rel, Reason: fmt.Sprintf("is a symlink (to %q); outputs must be regular files", target)}
		case t.IsDir():
			return nil
		case !t.IsRegular():
			return &OutputError{Path: rel, Reason: fmt.Sprintf("is not a regular file (%s)", t)}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > limits.MaxFileBytes {
			return &OutputError{Path: rel, Reason: fmt.Sprintf("is %d bytes, over the %d-byte cap per file", info.Size(), limits.MaxFileBytes)}
		}
		total += info.Size()
		if total > limits.MaxTotalBytes {
			return &OutputError{Path: rel, Reason: fmt.Sprintf("brings outputs to %d bytes, over the %d-byte total cap", total, limits.MaxTotalBytes)}
		}
		files = append(files, rel)
		if len(files) > limits.MaxFiles {
			return &OutputError{Path: rel, Reason: fmt.Sprintf("is file %d, over the cap of %d files (pack many small files into an archive)", len(files), limits.MaxFiles)}
		}
		manifest += api.ArtifactManifestBytes(rel)
		if manifest > api.MaxManifestBytes {
			return &OutputError{Path: rel, Reason: fmt.Sprintf("brings the artifact list to %d bytes, over the %d-byte cap of a result (shorter names, or pack the files into an archive)", manifest, api.MaxManifestBytes)}
		}
		return nil
	})
	if walkErr != nil {
		return nil, walkErr
	}
	sort.Strings(files)
	defer func() {
		if err != nil {
			_ = store.RemovePrefix(context.WithoutCancel(ctx), prefix)
		}
	}()
	out := make([]api.Artifact, 0, len(files))
	for _, rel := range files {
		key, err := blobstore.StagedKey(prefix, rel)
		if err != nil {
			return nil, &OutputError{Path: rel, Reason: err.Error()}
		}
		a, err := stageFile(ctx, filepath.Join(outputDir, filepath.FromSlash(rel)), store, key, limits.MaxFileBytes)
		if err != nil {
			var oe *OutputError
			if errors.As(err, &oe) {
				oe.Path = rel
			}
			return nil, err
		}
		a.Name = rel
		out = append(out, a)
	}
	return out, nil
}

// stageFile uploads src to key while hashing. src is opened with
// O_NOFOLLOW so a file swapped for a symlink after the listing is refused;
// a file that grows over maxBytes meanwhile aborts the upload.
func stageFile(ctx context.Context, src string, store *blobstore.Store, key string, maxBytes int64) (api.Artifact, error) {
	f, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return api.Artifact{}, &OutputError{Reason: "became a symlink while staging"}
		}
		return api.Artifact{}, err
	}
	defer f.Close()
	cr := &capReader{r: f, left: maxBytes}
	d, n, err := store.Stage(ctx, key, cr)
	if errors.Is(err, errOverCap) {
		return api.Artifact{}, &OutputError{Reason: fmt.Sprintf("grew over the %d-byte cap while staging", maxBytes)}
	}
	if err != nil && (cr.readErr == nil || !errors.Is(err, cr.readErr)) {
		return api.Artifact{}, &StoreError{Err: err}
	}
	if err != nil {
		return api.Artifact{}, err
	}
	return api.Artifact{Digest: d, SizeBytes: n}, nil
}

var errOverCap = errors.New("over the size cap")

// StoreError is a failure of the artifact store while staging outputs (an
// unreachable endpoint, a store that went away mid-upload): not the
// program's fault, so the attempt is reported infra_killed and retried
// rather than its result being submitted without outputs.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return "artifact store: " + e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// capReader reads r and fails with errOverCap once more than left bytes
// come (so the upload is aborted, not truncated).
type capReader struct {
	r       io.Reader
	left    int64
	readErr error // the first error of r other than EOF
}

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF && c.readErr == nil {
		c.readErr = err
	}
	c.left -= int64(n)
	if c.left < 0 {
		return n, errOverCap
	}
	return n, err
}

// Logs are an attempt's log files by name (api.LogStdout, api.LogStderr),
// as the executor opened them before its command started.
type Logs map[string]*os.File

// Close closes every log file.
func (l Logs) Close() {
	for _, f := range l {
		f.Close()
	}
}

// StageLogs uploads the tail (at most api.MaxLogBytes) of each of logs
// under prefix (blobstore.LogStagingPrefix) while hashing it. It reads
// through the descriptors only (never a path the command could have
// replaced) and leaves their offsets alone; a missing log is skipped.
func StageLogs(ctx context.Context, logs Logs, store *blobstore.Store, prefix string) ([]api.Artifact, error) {
	var out []api.Artifact
	for _, name := range []string{api.LogStdout, api.LogStderr} {
		f := logs[name]
		if f == nil {
			continue
		}
		a, err := stageTail(ctx, f, store, prefix+name, api.MaxLogBytes)
		if err != nil {
			return nil, fmt.Errorf("stage %s: %w", name, err)
		}
		a.Name = name
		out = append(out, a)
	}
	return out, nil
}

// stageTail uploads the last limit bytes of f to key, hashing them.
func stageTail(ctx context.Context, f *os.File, store *blobstore.Store, key string, limit int64) (api.Artifact, error) {
	fi, err := f.Stat()
	if err != nil {
		return api.Artifact{}, err
	}
	if !fi.Mode().IsRegular() {
		return api.Artifact{}, fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	start := max(fi.Size()-limit, 0)
	d, n, err := store.Stage(ctx, key, io.NewSectionReader(f, start, limit))
	if err != nil {
		return api.Artifact{}, err
	}
	return api.Artifact{Digest: d, SizeBytes: n}, nil
}
