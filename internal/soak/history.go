package soak

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// History is everything a soak run recorded: the lease operations it saw,
// the executors' command logs, and the state of tasks, runs, the artifact
// store and the workers at the end. The harness fills the slices; Check
// judges them.
type History struct {
	Ops       []Op
	Commands  []Command
	Tasks     []TaskEnd
	Artifacts []Artifact
	Runs      []RunEnd
	// Inputs are the digests ("sha256:<hex>") the workload itself uploaded,
	// so their blobs under sha256/ are not stale.
	Inputs  []string
	Store   StoreState
	Workers []WorkerEnd
}

// OpKind names a lease operation.
type OpKind string

const (
	// OpGrant: a lease was granted to Attempt on Worker with Fence.
	OpGrant OpKind = "grant"
	// OpHeartbeat: a heartbeat with Fence; OK = the lease was still held.
	OpHeartbeat OpKind = "heartbeat"
	// OpSubmit: a result submitted with Fence; OK = accepted, else Reason
	// says why it was refused (a lease.RejectReason such as "stale_fence").
	OpSubmit OpKind = "submit"
	// OpExpire: the control plane expired the lease with Fence (Reason).
	OpExpire OpKind = "expire"
	// OpRevoke: the control plane revoked the lease with Fence (Reason).
	OpRevoke OpKind = "revoke"
)

// valid reports whether k is one of the five op kinds.
func (k OpKind) valid() bool {
	switch k {
	case OpGrant, OpHeartbeat, OpSubmit, OpExpire, OpRevoke:
		return true
	}
	return false
}

// Op is one lease operation. [Call, Return] is the closed real-time interval
// in which it took effect, as the recorder saw it; both must be set. OK only
// means something for heartbeats and submits. Grace, on an expiry or a
// revocation, is how long after it the attempt's command may still run:
// an end no heartbeat could tell the attempt of before (an operator's
// terminate or reset, after which the next grant waits a lock-delay).
type Op struct {
	Kind    OpKind        `json:"kind"`
	Task    string        `json:"task"`
	Attempt int64         `json:"attempt"`
	Fence   int64         `json:"fence"`
	Worker  string        `json:"worker,omitempty"`
	OK      bool          `json:"ok"`
	Reason  string        `json:"reason,omitempty"`
	Call    time.Time     `json:"call"`
	Return  time.Time     `json:"return"`
	Grace   time.Duration `json:"grace,omitempty"`
}

// Command is one executor's log of one attempt's command on Host. Stop is
// zero when the command was never seen stopping.
type Command struct {
	Task    string    `json:"task"`
	Attempt int64     `json:"attempt"`
	Fence   int64     `json:"fence"`
	Host    string    `json:"host"`
	Start   time.Time `json:"start"`
	Stop    time.Time `json:"stop,omitzero"`
}

// Final task states Check accepts (README "What wdc guarantees", 1).
const (
	StateCompleted        = "COMPLETED"
	StateRetriesExhausted = "RETRIES_EXHAUSTED"
)

// TaskEnd is one submitted task at the end: its final State (StateCompleted,
// StateRetriesExhausted, "" when it never ended) and the end's Reason.
type TaskEnd struct {
	Task   string `json:"task"`
	RunID  string `json:"run_id"`
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Artifact is an accepted artifact: output Name of Task's Attempt/Fence,
// with its Digest ("sha256:<hex>").
type Artifact struct {
	Task    string `json:"task"`
	Attempt int64  `json:"attempt"`
	Fence   int64  `json:"fence"`
	Name    string `json:"name"`
	Digest  string `json:"digest"`
}

// RunEnd is one run at the end: the task IDs whose results it committed,
// the task IDs in its evidence, and ChainErr, empty when its TCD chain
// verified.
type RunEnd struct {
	RunID     string   `json:"run_id"`
	Committed []string `json:"committed"`
	Evidence  []string `json:"evidence"`
	ChainErr  string   `json:"chain_err,omitempty"`
}

// StoreState is the artifact store at the end: Blobs lists the digests
// ("sha256:<hex>") of every object under sha256/.
type StoreState struct {
	Blobs []string
}

// WorkerEnd is one worker at the end: reservations it still holds and its
// free and total slots.
type WorkerEnd struct {
	WorkerID     string `json:"worker_id"`
	Reservations int    `json:"reservations"`
	FreeSlots    int    `json:"free_slots"`
	Slots        int    `json:"slots"`
}

// Record types of the JSON Lines form: the value of each line's "type".
const (
	recordOp       = "op"
	recordCommand  = "command"
	recordTask     = "task"
	recordArtifact = "artifact"
	recordRun      = "run"
	recordInput    = "input"
	recordBlob     = "blob"
	recordWorker   = "worker"
)

// digestRecord is the body of an "input" or "blob" line.
type digestRecord struct {
	Digest string `json:"digest"`
}

// WriteJSONL writes h as JSON Lines, one record a line, each with a "type"
// ("op", "command", "task", "artifact", "run", "input", "blob", "worker").
func WriteJSONL(w io.Writer, h History) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	write := func(typ string, body any) error {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("write %s record: %w", typ, err)
		}
		// Splice the discriminator in front of the body's own fields.
		head := `{"type":"` + typ + `"`
		if len(b) > 2 {
			head += ","
		}
		return enc.Encode(json.RawMessage(append([]byte(head), b[1:]...)))
	}
	var err error
	for _, op := range h.Ops {
		err = errors.Join(err, write(recordOp, op))
	}
	for _, c := range h.Commands {
		err = errors.Join(err, write(recordCommand, c))
	}
	for _, t := range h.Tasks {
		err = errors.Join(err, write(recordTask, t))
	}
	for _, a := range h.Artifacts {
		err = errors.Join(err, write(recordArtifact, a))
	}
	for _, r := range h.Runs {
		err = errors.Join(err, write(recordRun, r))
	}
	for _, d := range h.Inputs {
		err = errors.Join(err, write(recordInput, digestRecord{d}))
	}
	for _, d := range h.Store.Blobs {
		err = errors.Join(err, write(recordBlob, digestRecord{d}))
	}
	for _, wk := range h.Workers {
		err = errors.Join(err, write(recordWorker, wk))
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

// maxLine bounds one JSON Lines record (a run lists every task it
// committed), in bytes.
const maxLine = 64 << 20

// ReadJSONL reads a History written by WriteJSONL. Blank lines are skipped;
// an error names the line number, and the field when one is at fault.
func ReadJSONL(r io.Reader) (History, error) {
	var h History
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		if err := h.readRecord(line); err != nil {
			return History{}, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return History{}, fmt.Errorf("read history: %w", err)
	}
	return h, nil
}

// readRecord decodes one line and appends it to h.
func (h *History) readRecord(line []byte) error {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(line, &head); err != nil {
		return fmt.Errorf("not a record: %w", err)
	}
	switch head.Type {
	case recordOp:
		var op Op
		if err := decodeRecord(line, &op); err != nil {
			return err
		}
		if !op.Kind.valid() {
			return fmt.Errorf("op: field kind: unknown op kind %q", op.Kind)
		}
		h.Ops = append(h.Ops, op)
	case recordCommand:
		var c Command
		if err := decodeRecord(line, &c); err != nil {
			return err
		}
		h.Commands = append(h.Commands, c)
	case recordTask:
		var t TaskEnd
		if err := decodeRecord(line, &t); err != nil {
			return err
		}
		h.Tasks = append(h.Tasks, t)
	case recordArtifact:
		var a Artifact
		if err := decodeRecord(line, &a); err != nil {
			return err
		}
		h.Artifacts = append(h.Artifacts, a)
	case recordRun:
		var r RunEnd
		if err := decodeRecord(line, &r); err != nil {
			return err
		}
		h.Runs = append(h.Runs, r)
	case recordInput, recordBlob:
		var d digestRecord
		if err := decodeRecord(line, &d); err != nil {
			return err
		}
		if head.Type == recordInput {
			h.Inputs = append(h.Inputs, d.Digest)
		} else {
			h.Store.Blobs = append(h.Store.Blobs, d.Digest)
		}
	case recordWorker:
		var w WorkerEnd
		if err := decodeRecord(line, &w); err != nil {
			return err
		}
		h.Workers = append(h.Workers, w)
	case "":
		return errors.New(`field type: missing`)
	default:
		return fmt.Errorf("field type: unknown record type %q", head.Type)
	}
	return nil
}

// decodeRecord decodes line into body, refusing fields body does not have
// (other than "type") and naming the field whose value does not fit.
func decodeRecord[T any](line []byte, body *T) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return err
	}
	typ := string(fields["type"])
	delete(fields, "type")
	// Decode one field at a time, in a stable order, so an error names it.
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		one, err := json.Marshal(map[string]json.RawMessage{name: fields[name]})
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(one))
		dec.DisallowUnknownFields()
		if err := dec.Decode(body); err != nil {
			return fmt.Errorf("%s: field %s: %w", strings.Trim(typ, `"`), name, err)
		}
	}
	return nil
}
