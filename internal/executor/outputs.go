package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/wdc-runtime/wdc/api"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/internal/envelope"
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
// clean relative name (no "..", no symlinks), size caps — and copies every
// file into stagingDir while hashing it. It returns the artifacts sorted by
// name. A broken rule returns an *OutputError and leaves stagingDir
// removed; nothing is half-staged.
func StageOutputs(outputDir, stagingDir string, limits OutputLimits) (_ []api.Artifact, err error) {
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
			os.RemoveAll(stagingDir)
		}
	}()
	if err := os.MkdirAll(stagingDir, 0o755); err != nil {
		return nil, err
	}
	out := make([]api.Artifact, 0, len(files))
	for _, rel := range files {
		a, err := stageFile(filepath.Join(outputDir, filepath.FromSlash(rel)), filepath.Join(stagingDir, filepath.FromSlash(rel)), limits.MaxFileBytes)
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

// stageFile copies src to dst (atomically) while hashing. src is opened
// with O_NOFOLLOW so a file swapped for a symlink after the listing is
// refused.
func stageFile(src, dst string, maxBytes int64) (api.Artifact, error) {
	f, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return api.Artifact{}, &OutputError{Reason: "became a symlink while staging"}
		}
		return api.Artifact{}, err
	}
	defer f.Close()
	a, err := copyHashed(f, dst, maxBytes+1)
	if err == nil && a.SizeBytes > maxBytes {
		os.Remove(dst)
		return api.Artifact{}, &OutputError{Reason: fmt.Sprintf("grew over the %d-byte cap while staging", maxBytes)}
	}
	return a, err
}

// copyHashed copies at most limit bytes of r to dst atomically (temp file,
// fsync, rename), creating dst's directory, and returns their digest and
// size.
func copyHashed(r io.Reader, dst string, limit int64) (api.Artifact, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return api.Artifact{}, err
	}
	h := sha256.New()
	var n int64
	err := blobstore.WriteFileAtomic(dst, 0o644, func(w io.Writer) error {
		var err error
		n, err = io.Copy(io.MultiWriter(w, h), io.LimitReader(r, limit))
		return err
	})
	if err != nil {
		return api.Artifact{}, err
	}
	return api.Artifact{Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), SizeBytes: n}, nil
}

// StageLogs copies the tail (at most api.MaxLogBytes) of the task
// directory's stdout.log and stderr.log into stagingDir while hashing them.
// Missing logs are skipped.
func StageLogs(taskDir, stagingDir string) ([]api.Artifact, error) {
	var out []api.Artifact
	for _, name := range []string{api.LogStdout, api.LogStderr} {
		f, err := os.Open(filepath.Join(taskDir, name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		a, err := stageTail(f, filepath.Join(stagingDir, name), api.MaxLogBytes)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("stage %s: %w", name, err)
		}
		a.Name = name
		out = append(out, a)
	}
	return out, nil
}

// stageTail copies the last max bytes of f to dst (atomically), hashing them.
func stageTail(f *os.File, dst string, max int64) (api.Artifact, error) {
	fi, err := f.Stat()
	if err != nil {
		return api.Artifact{}, err
	}
	if skip := fi.Size() - max; skip > 0 {
		if _, err := f.Seek(skip, io.SeekStart); err != nil {
			return api.Artifact{}, err
		}
	}
	return copyHashed(f, dst, max)
}
