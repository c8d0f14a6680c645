package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/internal/blobstore"
	"github.com/wdc-runtime/wdc/lease"
)

// maxBatchProblems bounds the bad lines a refused batch lists.
const maxBatchProblems = 20

// batchChunk is how many tasks `tasks submit --batch` adds per add-tasks
// update (at most api.MaxTasksPerBatch): small enough that one update
// answers in a few seconds and progress moves, large enough to cost few
// round trips.
const batchChunk = 100

// batchLine is one envelope of a batch file with its 1-based line number
// and its size in bytes.
type batchLine struct {
	line int
	size int
	env  envelope.Envelope
}

// batchOutcome is one task of a submitted batch.
type batchOutcome struct {
	Line   int    `json:"line"`
	TaskID string `json:"task_id"`
	RunID  string `json:"run_id"`
	// Existing: the task was already in its run with this envelope.
	Existing bool `json:"existing,omitempty"`
	// Error says why the task was not started (empty when it was).
	Error string `json:"error,omitempty"`
}

// batchReport is what `tasks submit --batch` prints.
type batchReport struct {
	Submitted   int            `json:"submitted"`
	Existing    int            `json:"existing"`
	Failed      int            `json:"failed"`
	Runs        int            `json:"runs"`
	Seconds     float64        `json:"seconds"`
	TasksPerSec float64        `json:"tasks_per_second"`
	Tasks       []batchOutcome `json:"tasks"`
}

// readBatch decodes every line of a batch file ("-" is stdin) strictly and
// checks what can be checked without the server: each envelope's fields,
// its launcher, that its input paths name regular files, and that no task
// ID appears twice. Every problem is printed on stderr as "line N: field:
// why" (the first maxBatchProblems), and the usage error counts them;
// nothing is read from or written to the blob store or the server before
// the whole file passed.
// Relative input paths are relative to the file's directory.
func (a *app) readBatch(path string) (lines []batchLine, base string, err error) {
	var r io.Reader = os.Stdin
	base = "."
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, "", usagef("--batch: %v", err)
		}
		defer f.Close()
		r, base = f, filepath.Dir(path)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), envelope.MaxEnvelopeBytes+1)
	var problems []string
	seen := map[string]int{}
	n := 0
	for sc.Scan() {
		n++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		env, err := envelope.Decode(strings.NewReader(text), false)
		if err == nil {
			err = checkInputPaths(env, base)
		}
		if err == nil {
			if first, dup := seen[env.TaskID]; dup {
				err = fmt.Errorf("task_id: %q is also on line %d", env.TaskID, first)
			}
			seen[env.TaskID] = n
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("line %d: %v", n, err))
			continue
		}
		lines = append(lines, batchLine{line: n, size: len(text), env: env})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, "", usagef("%s: line %d: longer than an envelope may be (%d bytes)", path, n+1, envelope.MaxEnvelopeBytes)
		}
		return nil, "", usagef("%s: %v", path, err)
	}
	if len(problems) > 0 {
		for i, p := range problems {
			if i == maxBatchProblems {
				fmt.Fprintf(a.deps.Stderr, "wdc: … and %d more\n", len(problems)-maxBatchProblems)
				break
			}
			fmt.Fprintf(a.deps.Stderr, "wdc: %s: %s\n", path, p)
		}
		return nil, "", usagef("%s: %d of %d lines refused; nothing was submitted", path, len(problems), n)
	}
	if len(lines) == 0 {
		return nil, "", usagef("%s: no envelopes (one JSON envelope per line)", path)
	}
	return lines, base, nil
}

// checkInputPaths checks that every input given by path is a regular file.
func checkInputPaths(env envelope.Envelope, base string) error {
	for i, in := range env.Inputs {
		if in.Path == "" {
			continue
		}
		if _, err := wdcclient.InputPath(base, i, in); err != nil {
			return inputUsage(err)
		}
	}
	return nil
}

// submitBatch is `tasks submit --batch FILE`: the whole file is checked
// first (readBatch), then envelopes are sealed (inputs copied into the
// blob store) and added to their runs batchChunk at a time, up to
// batchInFlight updates at once, reported in file order, with a progress bar on a terminal and a line per batch
// otherwise. A task that could not be started (its ID used by another run)
// is reported with its line; the exit code is then 1.
// The batches are signed as the submitter svid names.
func (a *app) submitBatch(ctx context.Context, path string, o api.TaskOptions, dataDir, blobURL string, svid *svidFlags) error {
	lines, base, err := a.readBatch(path)
	if err != nil {
		return err
	}
	return a.withControlPlane(ctx, func(wc *wdcclient.Client) error {
		return svid.withSigner(ctx, wc, func() error { return a.submitLines(ctx, wc, lines, base, o, dataDir, blobURL) })
	})
}

// submitLines is submitBatch's submission of the checked lines through wc.
func (a *app) submitLines(ctx context.Context, wc *wdcclient.Client, lines []batchLine, base string, o api.TaskOptions, dataDir, blobURL string) error {
	var err error
	var store *blobstore.Store
	for _, l := range lines {
		if len(l.env.Inputs) > 0 {
			if store, err = a.openStore(ctx, dataDir, blobURL); err != nil {
				return err
			}
			defer store.Close()
			break
		}
	}
	progress := a.batchProgress(len(lines))
	rep := batchReport{Tasks: make([]batchOutcome, 0, len(lines))}
	runs := map[string]bool{}
	began := time.Now()
	var chunks [][]batchLine
	for from := 0; from < len(lines); from += len(chunks[len(chunks)-1]) {
		chunks = append(chunks, nextChunk(lines[from:]))
	}
	// On return: cancel what is in flight, wait for it, then close
	// the store (deferred earlier).
	var wg sync.WaitGroup
	defer wg.Wait()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make([]chan chunkOutcome, len(chunks))
	for k := range done {
		done[k] = make(chan chunkOutcome, 1)
	}
	var stderrMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Seal each chunk in order, then submit it with up to
		// batchInFlight updates in flight; the first that cannot be
		// sealed stops the rest.
		sem := make(chan struct{}, batchInFlight)
		for k, chunk := range chunks {
			envs, err := sealChunk(sctx, chunk, base, store)
			if err != nil {
				done[k] <- chunkOutcome{err: err, sealing: true}
				return
			}
			select {
			case sem <- struct{}{}:
			case <-sctx.Done():
				done[k] <- chunkOutcome{err: sctx.Err()}
				return
			}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				res, err := a.submitChunk(sctx, wc, chunk, envs, o, &stderrMu)
				done[k] <- chunkOutcome{res: res, err: err}
			}()
		}
	}()
	submitted := 0
	for k, chunk := range chunks {
		d := <-done[k]
		switch {
		case d.sealing:
			return d.err
		case d.err != nil && k == 0 && identityRefusal(d.err):
			// Every batch is signed alike: the first one's refusal is
			// every one's, and a refused batch adds nothing.
			return fmt.Errorf("nothing was submitted: %w", appError(d.err))
		case d.err != nil:
			before := "the lines before them were submitted"
			if k == 0 {
				before = "nothing before them"
			}
			return fmt.Errorf("lines %d-%d: %w (%s; these and later ones may have been; submitting the file again is idempotent)", chunk[0].line, chunk[len(chunk)-1].line, appError(d.err), before)
		}
		for i, l := range chunk {
			out := batchOutcome{Line: l.line, TaskID: l.env.TaskID, RunID: l.env.RunID, Existing: d.res.Results[i].Existing, Error: d.res.Errors[i]}
			switch {
			case out.Error != "":
				rep.Failed++
			case out.Existing:
				rep.Existing++
			default:
				rep.Submitted++
			}
			rep.Tasks = append(rep.Tasks, out)
		}
		runs[chunk[0].env.RunID] = true
		submitted += len(chunk)
		progress(submitted, chunk[0].env.RunID)
	}
	rep.Runs = len(runs)
	rep.Seconds = time.Since(began).Seconds()
	rep.TasksPerSec = float64(len(lines)) / rep.Seconds
	err = a.emit(rep, func(w io.Writer) error {
		fmt.Fprintf(w, "%d tasks submitted to %d run(s) in %.1f s (%.0f tasks/s)", rep.Submitted, rep.Runs, rep.Seconds, rep.TasksPerSec)
		if rep.Existing > 0 {
			fmt.Fprintf(w, "; %d already there", rep.Existing)
		}
		fmt.Fprintln(w)
		for _, t := range rep.Tasks {
			if t.Error != "" {
				fmt.Fprintf(w, "line %d: task %s not started: %s\n", t.Line, t.TaskID, t.Error)
			}
		}
		return nil
	})
	if err == nil && rep.Failed > 0 {
		err = exitError{code: ExitFailure, err: fmt.Errorf("%d of %d tasks were not started (see above)", rep.Failed, len(lines))}
	}
	return err
}

// batchInFlight is how many add-tasks updates `tasks submit --batch` has
// in flight at once; results are reported in the file's order.
const batchInFlight = 4

// chunkOutcome is one chunk's answer; sealing is set when the chunk could
// not be sealed (then no later chunk was sent).
type chunkOutcome struct {
	res     api.AddTasksResult
	err     error
	sealing bool
}

// sealChunk seals every envelope of a chunk (hashing, or storing in store,
// its input files) and stores the sealed envelope.
func sealChunk(ctx context.Context, chunk []batchLine, base string, store *blobstore.Store) ([]envelope.Envelope, error) {
	envs := make([]envelope.Envelope, len(chunk))
	for i, l := range chunk {
		put := blobstore.HashFile
		if store != nil {
			put = putFile(ctx, store)
		}
		sealed, err := sealEnvelope(l.env, base, put)
		if err == nil {
			err = storeEnvelope(ctx, store, sealed)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w (the lines before it were submitted; submitting the file again is idempotent)", l.line, err)
		}
		envs[i] = sealed
	}
	return envs, nil
}

// submitChunk sends one chunk's add-tasks update, and again every
// runFullRetry while the run is full (nothing of the chunk was added).
func (a *app) submitChunk(ctx context.Context, wc *wdcclient.Client, chunk []batchLine, envs []envelope.Envelope, o api.TaskOptions, stderrMu *sync.Mutex) (api.AddTasksResult, error) {
	res, err := wc.SubmitTasks(ctx, envs, o)
	for waited := false; wdcclient.IsRunFull(err); waited = true {
		// The run's pending state is full: it makes room as its tasks end
		// and its results are committed.
		if !waited {
			stderrMu.Lock()
			fmt.Fprintf(a.deps.Stderr, "wdc: lines %d-%d wait for room in run %s: %v\n", chunk[0].line, chunk[len(chunk)-1].line, chunk[0].env.RunID, err)
			stderrMu.Unlock()
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(runFullRetry):
		}
		res, err = wc.SubmitTasks(ctx, envs, o)
	}
	return res, err
}

// batchChunkBytes bounds the envelope bytes of one add-tasks update (its
// request and the child starts it records stay well inside Temporal's
// 2 MiB payload limit).
const batchChunkBytes = 512 << 10

// nextChunk is the longest prefix of lines with one run and world, at
// most batchChunk long and at most batchChunkBytes of envelopes (at least
// one line).
func nextChunk(lines []batchLine) []batchLine {
	n, size := 1, lines[0].size
	for n < len(lines) && n < batchChunk && size+lines[n].size <= batchChunkBytes &&
		lines[n].env.RunID == lines[0].env.RunID && lines[n].env.WorldID == lines[0].env.WorldID {
		size += lines[n].size
		n++
	}
	return lines[:n]
}

// runFullRetry is how often a batch waiting for room in a full run tries
// again.
const runFullRetry = 2 * time.Second

// batchProgress reports submission progress on stderr: a bar on a
// terminal, else one line per batch.
func (a *app) batchProgress(total int) func(done int, run string) {
	if f, ok := a.deps.Stderr.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("submitting"),
			progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("tasks"),
			progressbar.OptionClearOnFinish())
		return func(done int, _ string) { _ = bar.Set(done) }
	}
	return func(done int, run string) {
		fmt.Fprintf(a.deps.Stderr, "wdc: sent %d/%d (run %s)\n", done, total, run)
	}
}

// identityRefusal reports whether err is the control plane's refusal of a
// message's identity (unauthenticated, wrong_identity, replayed).
func identityRefusal(err error) bool {
	var we *wdcclient.Error
	if !errors.As(err, &we) {
		return false
	}
	switch lease.RejectReason(we.Type) {
	case lease.RejectUnauthenticated, lease.RejectWrongIdentity, lease.RejectReplayed:
		return true
	}
	return false
}
