package fleet

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/wdc-runtime/wdc/internal/resource"
)

// State is a fleet worker's state.
type State string

const (
	// Active: heartbeating and accepting reservations.
	Active State = "ACTIVE"
	// Stale: no heartbeat for StaleAfter. Its reservations are reported lost;
	// a heartbeat of the current incarnation makes it ACTIVE again.
	Stale State = "STALE"
	// Draining: live, but takes no new reservations; running attempts finish.
	Draining State = "DRAINING"
	// Offline: no heartbeat for OfflineAfter. Only a new registration (a new
	// incarnation) brings it back.
	Offline State = "OFFLINE"
	// Deregistered: removed from the registry by an operator; its registry
	// entry ends. Registering again starts a new entry whose incarnations
	// continue from this one's.
	Deregistered State = "DEREGISTERED"
)

// Defaults for liveness (issue #2): STALE after 15 s, OFFLINE after 60 s.
const (
	DefaultStaleAfter   = 15 * time.Second
	DefaultOfflineAfter = 60 * time.Second
)

// IDPattern is what worker, task, run and world IDs must match: 1 to 63
// characters, letters, digits, '.', '_' or '-', starting and ending with a
// letter or digit. It is the Kubernetes label-value syntax, so every ID can
// label a Job, and it is safe in file paths and workflow IDs.
var IDPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// ValidateID returns an error naming field when id does not match IDPattern.
func ValidateID(field, id string) error {
	if id == "" {
		return fmt.Errorf("%s: required", field)
	}
	if !IDPattern.MatchString(id) {
		return fmt.Errorf("%s: %q is not a valid ID (1-63 of [A-Za-z0-9._-], starting and ending with a letter or digit)", field, id)
	}
	return nil
}

// Reservation is capacity a worker holds for one lease of one task.
type Reservation struct {
	TaskID    string        `json:"task_id"`
	Fence     int64         `json:"fence"`
	Resources resource.List `json:"resources"`
	// ReservedAt is when the reservation was made (workflow time); zero
	// for reservations recorded before it existed.
	ReservedAt time.Time `json:"reserved_at,omitzero"`
}

// Registration is what a worker declares when it (re-)registers.
type Registration struct {
	WorkerID string `json:"worker_id"`
	// Capacity is the worker's total resources.
	Capacity resource.List `json:"capacity"`
	// Labels are Kubernetes-style key/value pairs matched by a task's
	// selector (ValidateLabels gives the syntax).
	Labels map[string]string `json:"labels,omitempty"`
	// Capabilities are names a task may require, e.g. "docker", "cuda12".
	Capabilities []string `json:"capabilities,omitempty"`
	// StaleAfter and OfflineAfter are the liveness windows (nanoseconds in
	// JSON); zero means the defaults (15 s, 60 s).
	StaleAfter   time.Duration `json:"stale_after,omitempty"`
	OfflineAfter time.Duration `json:"offline_after,omitempty"`
}

// CapabilityPattern is what a capability name must match.
var CapabilityPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$`)

// Validate checks every field and returns all problems joined, each naming
// its field. Errors: bad worker ID, negative or misnamed capacity, invalid
// label, invalid capability, negative windows, OfflineAfter ≤ StaleAfter.
func (r Registration) Validate() error {
	var errs []error
	if err := ValidateID("worker_id", r.WorkerID); err != nil {
		errs = append(errs, err)
	}
	for _, p := range r.Capacity.Validate("capacity") {
		errs = append(errs, p)
	}
	if err := ValidateLabels("labels", r.Labels); err != nil {
		errs = append(errs, err)
	}
	for i, c := range r.Capabilities {
		if !CapabilityPattern.MatchString(c) {
			errs = append(errs, fmt.Errorf("capabilities[%d]: %q is not a valid capability name", i, c))
		}
	}
	if r.StaleAfter < 0 {
		errs = append(errs, fmt.Errorf("stale_after: must not be negative (got %s)", r.StaleAfter))
	}
	if r.OfflineAfter < 0 {
		errs = append(errs, fmt.Errorf("offline_after: must not be negative (got %s)", r.OfflineAfter))
	}
	if s, o := r.windows(); o <= s {
		errs = append(errs, fmt.Errorf("offline_after: %s must be longer than stale_after %s", o, s))
	}
	return joinProblems(errs)
}

func (r Registration) windows() (stale, offline time.Duration) {
	stale, offline = r.StaleAfter, r.OfflineAfter
	if stale == 0 {
		stale = DefaultStaleAfter
	}
	if offline == 0 {
		offline = DefaultOfflineAfter
	}
	return stale, offline
}

// Worker is the registry's record of one fleet worker. The WdcWorker
// workflow keeps one and carries it across continue-as-new.
type Worker struct {
	WorkerID string `json:"worker_id"`
	// Incarnation counts registrations, from 1. Heartbeats of any other
	// incarnation are ignored.
	Incarnation  int64             `json:"incarnation"`
	State        State             `json:"state"`
	Capacity     resource.List     `json:"capacity"`
	Labels       map[string]string `json:"labels,omitempty"`
	Capabilities []string          `json:"capabilities,omitempty"`
	// StaleAfter and OfflineAfter are the liveness windows (nanoseconds in
	// JSON).
	StaleAfter   time.Duration `json:"stale_after"`
	OfflineAfter time.Duration `json:"offline_after"`
	RegisteredAt time.Time     `json:"registered_at"`
	// LastHeartbeatAt is the last accepted heartbeat (or registration).
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
	// HeartbeatSeq is the highest accepted heartbeat sequence number.
	HeartbeatSeq int64 `json:"heartbeat_seq"`
	// HeartbeatsAccepted counts accepted heartbeats over the worker's life.
	HeartbeatsAccepted int64 `json:"heartbeats_accepted"`
	// Draining is set by Drain and cleared by Undrain or a new registration
	// (a restarted agent comes back ACTIVE).
	Draining bool `json:"draining,omitempty"`
	// DrainReason is the operator's note given with the drain.
	DrainReason string `json:"drain_reason,omitempty"`
	// Reservations are held, oldest first.
	Reservations []Reservation `json:"reservations,omitempty"`
	// StateChangedAt is when State last changed.
	StateChangedAt time.Time `json:"state_changed_at"`
}

// Register applies a (re-)registration at now: a new incarnation, ACTIVE,
// not draining, the declared capacity/labels/capabilities. Reservations of
// the previous incarnation are returned as lost (its attempts died with it)
// and cleared. Call Registration.Validate first.
func (w *Worker) Register(r Registration, now time.Time) (lost []Reservation) {
	lost = w.Reservations
	stale, offline := r.windows()
	*w = Worker{
		WorkerID:           r.WorkerID,
		Incarnation:        w.Incarnation + 1,
		State:              Active,
		Capacity:           r.Capacity.Clone(),
		Labels:             copyLabels(r.Labels),
		Capabilities:       sortedUnique(r.Capabilities),
		StaleAfter:         stale,
		OfflineAfter:       offline,
		RegisteredAt:       now,
		LastHeartbeatAt:    now,
		HeartbeatSeq:       0,
		HeartbeatsAccepted: w.HeartbeatsAccepted,
		StateChangedAt:     now,
	}
	return lost
}

// Heartbeat is a liveness message from a worker process.
type Heartbeat struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
	// Seq increases with every heartbeat of an incarnation.
	Seq int64 `json:"seq"`
}

// Heartbeat errors: the heartbeat was ignored.
var (
	ErrWrongIncarnation = errors.New("heartbeat is from another incarnation")
	ErrOffline          = errors.New("worker is OFFLINE and must register again")
	ErrWrongWorker      = errors.New("heartbeat names another worker")
)

// Heartbeat renews liveness at now. A STALE worker becomes ACTIVE again (or
// DRAINING if it was draining). Errors (the heartbeat is ignored):
// ErrWrongWorker, ErrWrongIncarnation, ErrOffline.
func (w *Worker) Heartbeat(hb Heartbeat, now time.Time) error {
	switch {
	case hb.WorkerID != w.WorkerID:
		return fmt.Errorf("%w: %q, this is %q", ErrWrongWorker, hb.WorkerID, w.WorkerID)
	case hb.Incarnation != w.Incarnation:
		return fmt.Errorf("%w: %d, current is %d", ErrWrongIncarnation, hb.Incarnation, w.Incarnation)
	case w.State == Offline || w.State == Deregistered:
		return ErrOffline
	}
	w.HeartbeatsAccepted++
	if hb.Seq > w.HeartbeatSeq {
		w.HeartbeatSeq = hb.Seq
	}
	w.LastHeartbeatAt = now
	w.setState(w.liveState(), now)
	return nil
}

// Drain stops new reservations; reservations held are kept. An OFFLINE
// worker stays OFFLINE.
func (w *Worker) Drain(reason string, now time.Time) {
	w.Draining = true
	w.DrainReason = reason
	if w.State == Active {
		w.setState(Draining, now)
	}
}

// Undrain lets a DRAINING worker take reservations again.
func (w *Worker) Undrain(now time.Time) {
	w.Draining = false
	w.DrainReason = ""
	if w.State == Draining {
		w.setState(Active, now)
	}
}

// Deregister ends the worker's registration and returns the reservations
// it held (lost to their tasks).
func (w *Worker) Deregister(now time.Time) (lost []Reservation) {
	lost = w.Reservations
	w.Reservations = nil
	w.setState(Deregistered, now)
	return lost
}

// Evaluate applies the liveness windows at now: no heartbeat for StaleAfter
// → STALE, for OfflineAfter → OFFLINE. On leaving ACTIVE/DRAINING every
// reservation is returned as lost and cleared. changed reports a state
// change.
func (w *Worker) Evaluate(now time.Time) (changed bool, lost []Reservation) {
	if w.State == Offline || w.State == Deregistered {
		return false, nil
	}
	silent := now.Sub(w.LastHeartbeatAt)
	next := w.State
	switch {
	case silent >= w.OfflineAfter:
		next = Offline
	case silent >= w.StaleAfter:
		next = Stale
	}
	if next == w.State {
		return false, nil
	}
	w.setState(next, now)
	lost = w.Reservations
	w.Reservations = nil
	return true, lost
}

// NextDeadline is when Evaluate would next change the state: the STALE or
// OFFLINE boundary. Zero for an OFFLINE worker (nothing left to wait for).
func (w *Worker) NextDeadline() time.Time {
	switch w.State {
	case Active, Draining:
		return w.LastHeartbeatAt.Add(w.StaleAfter)
	case Stale:
		return w.LastHeartbeatAt.Add(w.OfflineAfter)
	}
	return time.Time{}
}

// Free is capacity minus every reservation.
func (w *Worker) Free() resource.List {
	free := w.Capacity.Clone()
	for _, r := range w.Reservations {
		free = free.Sub(r.Resources)
	}
	return free
}

// Reserve holds req.Resources for a task's lease when Eligible accepts the
// worker. Reserving again for the same task and fence is a no-op (the
// reservation is idempotent); a reservation for an older fence of the same
// task is replaced. Errors: the *Ineligible from Eligible.
func (w *Worker) Reserve(taskID string, fence int64, req Requirements, now time.Time) error {
	for i, r := range w.Reservations {
		if r.TaskID == taskID && r.Fence == fence {
			return nil
		}
		if r.TaskID == taskID {
			// A newer lease of the same task replaces the old reservation.
			w.Reservations = append(w.Reservations[:i], w.Reservations[i+1:]...)
			break
		}
	}
	if err := Eligible(w, req); err != nil {
		return err
	}
	w.Reservations = append(w.Reservations, Reservation{TaskID: taskID, Fence: fence, Resources: req.Resources.Clone(), ReservedAt: now})
	return nil
}

// HasReservation reports whether the task holds a reservation under fence.
func (w *Worker) HasReservation(taskID string, fence int64) bool {
	for _, r := range w.Reservations {
		if r.TaskID == taskID && r.Fence == fence {
			return true
		}
	}
	return false
}

// Release drops the reservation of taskID under fence and reports whether
// there was one. A release naming an older fence than the one held is
// ignored (it is late).
func (w *Worker) Release(taskID string, fence int64) bool {
	for i, r := range w.Reservations {
		if r.TaskID == taskID && r.Fence == fence {
			w.Reservations = append(w.Reservations[:i], w.Reservations[i+1:]...)
			return true
		}
	}
	return false
}

func (w *Worker) liveState() State {
	if w.Draining {
		return Draining
	}
	return Active
}

func (w *Worker) setState(s State, now time.Time) {
	if w.State != s {
		w.State = s
		w.StateChangedAt = now
	}
}

func copyLabels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for _, k := range sortedKeys(in) {
		out[k] = in[k]
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedUnique(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	out := append([]string{}, in...)
	sort.Strings(out)
	j := 0
	for i := range out {
		if i == 0 || out[i] != out[j-1] {
			out[j] = out[i]
			j++
		}
	}
	return out[:j]
}
