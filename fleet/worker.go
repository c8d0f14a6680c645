package fleet

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/wdc-runtime/wdc/identity"
	"github.com/wdc-runtime/wdc/resource"
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

// Liveness defaults, all derived from the heartbeat interval so that a
// dead worker is noticed within a few seconds, below the lease TTLs tasks
// use (seconds): an agent heartbeats every DefaultHeartbeatInterval (2 s),
// a worker silent for HeartbeatsPerStaleWindow intervals (8 s) is STALE,
// and one silent for 15 intervals (30 s) is OFFLINE. Four intervals let a
// worker ride out a network partition of about TTL/2 of a 6 s lease (3 s)
// plus a missed heartbeat and the reconnect, without going STALE.
const (
	// DefaultHeartbeatInterval is the agent's heartbeat period when neither
	// the heartbeat interval nor the stale window is configured.
	DefaultHeartbeatInterval = 2 * time.Second
	// HeartbeatsPerStaleWindow is how many heartbeat intervals fit in the
	// stale window: an agent heartbeats every StaleAfter/4, so a worker goes
	// STALE only after missing about four heartbeats in a row.
	HeartbeatsPerStaleWindow = 4
	// DefaultStaleAfter is the default stale window, 8 s (4 intervals).
	DefaultStaleAfter = HeartbeatsPerStaleWindow * DefaultHeartbeatInterval
	// DefaultOfflineAfter is the default offline window, 30 s (15
	// intervals; it must be longer than the stale window).
	DefaultOfflineAfter = 15 * DefaultHeartbeatInterval
	// LateAfterHeartbeats is how many heartbeat intervals a worker may be
	// silent and still count as fresh (Worker.Fresh): one missed heartbeat
	// is tolerated, a second makes the worker late. Placement ranks late
	// workers after fresh ones; only the stale window makes them ineligible.
	LateAfterHeartbeats = 2
)

// Slot defaults. Every task takes at least one slot of its worker, so the
// number of tasks a worker holds is bounded even for tasks that request no
// resources.
const (
	// DefaultSlotRequest is the slots a task takes when its resources name
	// none (resource.List.Slots zero): one.
	DefaultSlotRequest = 1
	// MilliCPUPerDefaultSlot is how much CPU capacity gives one slot when
	// a worker's capacity names no slots: one slot per whole core (1000
	// millicores), and at least one slot (DefaultSlots).
	MilliCPUPerDefaultSlot = 1000
)

// DefaultSlots is the slot capacity of a worker whose capacity names none:
// its whole CPU cores (cpuMillis / 1000, rounded down), at least 1.
func DefaultSlots(cpuMillis int64) int64 {
	return max(1, cpuMillis/MilliCPUPerDefaultSlot)
}

// withDefaultSlots returns capacity with Slots set by DefaultSlots when it
// is zero. Records written before slots existed decode with zero and are
// read through this, so they get the same capacity a new registration
// would.
func withDefaultSlots(capacity resource.List) resource.List {
	out := capacity.Clone()
	if out.Slots == 0 {
		out.Slots = DefaultSlots(out.CPUMillis)
	}
	return out
}

// taskRequest returns a task's resources with Slots set to
// DefaultSlotRequest when it is zero. Reservations written before slots
// existed are read through it too: each held one task.
func taskRequest(resources resource.List) resource.List {
	out := resources.Clone()
	if out.Slots == 0 {
		out.Slots = DefaultSlotRequest
	}
	return out
}

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
	TaskID string `json:"task_id"`
	Fence  int64  `json:"fence"`
	// Resources is what the task takes: its request with the slot default
	// applied (Requirements.Request). A reservation recorded before slots
	// existed has no slots and counts as DefaultSlotRequest.
	Resources resource.List `json:"resources"`
	// ReservedAt is when the reservation was made (the registry's workflow
	// time); zero for reservations recorded before it existed, or made
	// without a time. A reservation held long after ReservedAt with no
	// lease behind it was leaked by a lost reserve answer.
	ReservedAt time.Time `json:"reserved_at,omitzero"`
}

// Registration is what a worker declares when it (re-)registers.
type Registration struct {
	WorkerID string `json:"worker_id"`
	// Capacity is the worker's total resources. Capacity.Slots zero means
	// DefaultSlots (one per whole CPU core, at least one).
	Capacity resource.List `json:"capacity"`
	// Labels are Kubernetes-style key/value pairs matched by a task's
	// selector (ValidateLabels gives the syntax).
	Labels map[string]string `json:"labels,omitempty"`
	// Capabilities are names a task may require, e.g. "docker", "cuda12".
	Capabilities []string `json:"capabilities,omitempty"`
	// StaleAfter and OfflineAfter are the liveness windows (nanoseconds in
	// JSON); zero means the defaults (DefaultStaleAfter 8 s,
	// DefaultOfflineAfter 30 s).
	StaleAfter   time.Duration `json:"stale_after,omitempty"`
	OfflineAfter time.Duration `json:"offline_after,omitempty"`
	// HeartbeatInterval is how often the agent heartbeats (nanoseconds in
	// JSON); zero means StaleAfter / HeartbeatsPerStaleWindow, which is
	// what an agent uses when not told otherwise. It must be shorter than
	// StaleAfter. Placement uses it to tell fresh workers from late ones.
	HeartbeatInterval time.Duration `json:"heartbeat_interval,omitempty"`
	// LivenessFenced: the worker's executors kill their commands by the
	// time it may go STALE (a Local agent's), so a lease revoked because
	// it went STALE or OFFLINE needs no lock-delay. Otherwise the next
	// attempt waits a lease TTL after the revocation.
	LivenessFenced bool `json:"liveness_fenced,omitempty"`
	// ReservationCheckAfter is how old a reservation must be before the
	// registry checks it against its task, and how often it checks again
	// (nanoseconds in JSON); zero means DefaultReservationCheckAfter.
	ReservationCheckAfter time.Duration `json:"reservation_check_after,omitempty"`
	// Adopt names the attempts the registering process still runs and
	// takes over from the previous incarnation (a restarted Kubernetes or
	// Ray agent whose Jobs kept running); see Worker.Register.
	Adopt []Adoption `json:"adopt,omitempty"`
	// Proof is the worker's signature over the rest of the registration
	// (identity.Verifier.Worker), required when the control plane's
	// identity mode is; the registry keeps only its signer and time.
	Proof *identity.Proof `json:"proof,omitempty"`
}

// Adoption is one attempt a new incarnation claims to run still, named as
// the registry's reservation names it (task and fence) plus its attempt.
type Adoption struct {
	TaskID  string `json:"task_id"`
	Attempt int64  `json:"attempt"`
	Fence   int64  `json:"fence"`
}

// MaxAdoptions bounds Registration.Adopt, which travels in one update.
const MaxAdoptions = 10000

// CapabilityPattern is what a capability name must match.
var CapabilityPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$`)

// Validate checks every field and returns all problems joined, each naming
// its field. Errors: bad worker ID, negative or misnamed capacity, invalid
// label, invalid capability, negative windows, OfflineAfter ≤ StaleAfter,
// a negative HeartbeatInterval or one not shorter than StaleAfter.
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
	s, o := r.windows()
	if o <= s {
		errs = append(errs, fmt.Errorf("offline_after: %s must be longer than stale_after %s", o, s))
	}
	if r.HeartbeatInterval < 0 {
		errs = append(errs, fmt.Errorf("heartbeat_interval: must not be negative (got %s)", r.HeartbeatInterval))
	} else if r.HeartbeatInterval >= s {
		errs = append(errs, fmt.Errorf("heartbeat_interval: %s must be shorter than stale_after %s", r.HeartbeatInterval, s))
	}
	if r.ReservationCheckAfter != 0 && r.ReservationCheckAfter < MinReservationCheckAfter {
		errs = append(errs, fmt.Errorf("reservation_check_after: %s is below the minimum %s", r.ReservationCheckAfter, MinReservationCheckAfter))
	}
	if len(r.Adopt) > MaxAdoptions {
		errs = append(errs, fmt.Errorf("adopt: %d attempts, at most %d", len(r.Adopt), MaxAdoptions))
	}
	seen := make(map[string]bool, len(r.Adopt))
	for i, a := range r.Adopt {
		field := fmt.Sprintf("adopt[%d]", i)
		if err := ValidateID(field+".task_id", a.TaskID); err != nil {
			errs = append(errs, err)
		}
		if a.Attempt < 1 || a.Fence < 1 {
			errs = append(errs, fmt.Errorf("%s: attempt and fence must be ≥ 1 (got %d, %d)", field, a.Attempt, a.Fence))
		}
		if seen[a.TaskID] {
			errs = append(errs, fmt.Errorf("%s: task %q adopted twice (a task has one current attempt)", field, a.TaskID))
		}
		seen[a.TaskID] = true
	}
	return joinProblems(errs)
}

// DefaultReservationCheckAfter is the reservation check period of a
// registration that names none; MinReservationCheckAfter is the shortest
// one accepted (each check is a query of every checked reservation's task).
const (
	DefaultReservationCheckAfter = 2 * time.Minute
	MinReservationCheckAfter     = 5 * time.Second
)

// ReservationCheckPeriod is how old a reservation must be before the
// registry checks it against its task, and how often it checks again.
func (w *Worker) ReservationCheckPeriod() time.Duration {
	if w.ReservationCheckAfter > 0 {
		return w.ReservationCheckAfter
	}
	return DefaultReservationCheckAfter
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
	Incarnation int64 `json:"incarnation"`
	State       State `json:"state"`
	// Capacity is the registered capacity, with Slots filled in by
	// DefaultSlots when the registration named none. A record written
	// before slots existed has zero Slots and is read as DefaultSlots too.
	Capacity     resource.List     `json:"capacity"`
	Labels       map[string]string `json:"labels,omitempty"`
	Capabilities []string          `json:"capabilities,omitempty"`
	// StaleAfter and OfflineAfter are the liveness windows (nanoseconds in
	// JSON).
	StaleAfter   time.Duration `json:"stale_after"`
	OfflineAfter time.Duration `json:"offline_after"`
	// HeartbeatInterval is the registered heartbeat interval (nanoseconds
	// in JSON); zero means StaleAfter / HeartbeatsPerStaleWindow (see
	// HeartbeatPeriod).
	HeartbeatInterval time.Duration `json:"heartbeat_interval,omitempty"`
	// LivenessFenced is the registration's (see Registration).
	LivenessFenced bool `json:"liveness_fenced,omitempty"`
	// ReservationCheckAfter is the registration's; see ReservationCheckPeriod.
	ReservationCheckAfter time.Duration `json:"reservation_check_after,omitempty"`

	RegisteredAt time.Time `json:"registered_at"`
	// Identity is the SPIFFE ID that signed the registration ("" when it
	// was accepted unsigned), and IdentitySignedAt when it signed: a
	// registration signed no later is a replay.
	Identity         string    `json:"identity,omitempty"`
	IdentitySignedAt time.Time `json:"identity_signed_at,omitzero"`
	// IdentityIssuedAt is when the registration's certificate was issued
	// (its NotBefore; zero when unsigned).
	IdentityIssuedAt time.Time `json:"identity_issued_at,omitzero"`
	// RevokedThrough is set by Revoke: a registration whose certificate
	// was issued at or before it is refused, across incarnations.
	RevokedThrough time.Time `json:"revoked_through,omitzero"`
	// RevokedAt and RevokeReason are when and why the last Revoke was.
	RevokedAt    time.Time `json:"revoked_at,omitzero"`
	RevokeReason string    `json:"revoke_reason,omitempty"`
	// LastHeartbeatAt is the last accepted heartbeat signal (or
	// registration); while LivenessActivity is set, the heartbeats go to
	// Temporal instead (client.Client.Views reads the last one from there).
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
	// LivenessActivity is the ID of the activity (api.LivenessActivityID)
	// whose heartbeats Temporal records for this worker while its entry
	// keeps one pending; empty when the entry judges heartbeat signals
	// itself. While it is set, LastHeartbeatAt, HeartbeatSeq and
	// HeartbeatsAccepted count only heartbeat signals, and Temporal times
	// the worker out after StaleAfter without a heartbeat.
	LivenessActivity string `json:"liveness_activity,omitempty"`
	// LivenessAwaitsSignal: the entry schedules no liveness activity
	// until the next accepted heartbeat signal (a signed incarnation's
	// activity ran its lifetime, or the entry continued as new).
	LivenessAwaitsSignal bool `json:"liveness_awaits_signal,omitempty"`
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
// not draining, the declared capacity/labels/capabilities, the revocation
// kept. A reservation of
// the previous incarnation that r.Adopt names by task and fence is kept
// (the new incarnation runs that attempt still: w.Reservations holds
// exactly the adopted ones afterwards); every other one is returned as
// lost (its attempt died with the old process) and cleared. An adoption
// of a fence the record does not hold is ignored. Call
// Registration.Validate first.
func (w *Worker) Register(r Registration, now time.Time) (lost []Reservation) {
	var kept []Reservation
	for _, res := range w.Reservations {
		if adopts(r.Adopt, res) {
			kept = append(kept, res)
		} else {
			lost = append(lost, res)
		}
	}
	stale, offline := r.windows()
	*w = Worker{
		WorkerID:              r.WorkerID,
		Incarnation:           w.Incarnation + 1,
		State:                 Active,
		Capacity:              withDefaultSlots(r.Capacity),
		Labels:                copyLabels(r.Labels),
		Capabilities:          sortedUnique(r.Capabilities),
		StaleAfter:            stale,
		OfflineAfter:          offline,
		HeartbeatInterval:     r.HeartbeatInterval,
		LivenessFenced:        r.LivenessFenced,
		ReservationCheckAfter: r.ReservationCheckAfter,
		RegisteredAt:          now,
		LastHeartbeatAt:       now,
		HeartbeatSeq:          0,
		HeartbeatsAccepted:    w.HeartbeatsAccepted,
		StateChangedAt:        now,
		Reservations:          kept,
		RevokedThrough:        w.RevokedThrough,
		RevokedAt:             w.RevokedAt,
		RevokeReason:          w.RevokeReason,
	}
	return lost
}

// adopts reports whether adoptions name reservation r (task and fence).
func adopts(adoptions []Adoption, r Reservation) bool {
	for _, a := range adoptions {
		if a.TaskID == r.TaskID && a.Fence == r.Fence {
			return true
		}
	}
	return false
}

// Heartbeat is a liveness message from a worker process.
type Heartbeat struct {
	WorkerID    string `json:"worker_id"`
	Incarnation int64  `json:"incarnation"`
	// Seq increases with every heartbeat of an incarnation.
	Seq int64 `json:"seq"`
	// Proof is the worker's signature over the rest of the heartbeat, by
	// its own SVID; only a heartbeat signal carries one (a heartbeat by ID
	// reaches Temporal, not wdc).
	Proof *identity.Proof `json:"proof,omitempty"`
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

// Revoke ends the incarnation at now because its identity was revoked:
// OFFLINE, every reservation returned as lost and cleared, and every
// certificate issued through `through` refused from now on (see
// RevokedThrough; an earlier floor is kept when later).
func (w *Worker) Revoke(through time.Time, reason string, now time.Time) (lost []Reservation) {
	lost = w.Reservations
	w.Reservations = nil
	if through.After(w.RevokedThrough) {
		w.RevokedThrough = through
	}
	w.RevokedAt, w.RevokeReason = now, reason
	w.Draining = false
	w.setState(Offline, now)
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

// HeartbeatPeriod is the heartbeat interval in effect: HeartbeatInterval
// when registered, else StaleAfter / HeartbeatsPerStaleWindow (the agent's
// default), else DefaultHeartbeatInterval for a record without windows.
func (w *Worker) HeartbeatPeriod() time.Duration {
	switch {
	case w.HeartbeatInterval > 0:
		return w.HeartbeatInterval
	case w.StaleAfter > 0:
		return w.StaleAfter / HeartbeatsPerStaleWindow
	}
	return DefaultHeartbeatInterval
}

// Fresh reports whether the worker's last heartbeat is at most
// LateAfterHeartbeats heartbeat periods (HeartbeatPeriod) before now. A
// worker that is not fresh is late: probably dead but not yet STALE.
// A zero now judges every worker fresh. For a worker whose heartbeats
// Temporal records (LivenessActivity), LastHeartbeatAt must be the last
// one Temporal recorded (selection reads it from the entry's description).
func (w *Worker) Fresh(now time.Time) bool {
	if now.IsZero() {
		return true
	}
	return now.Sub(w.LastHeartbeatAt) <= LateAfterHeartbeats*w.HeartbeatPeriod()
}

// TotalCapacity is Capacity with a zero Slots read as DefaultSlots.
func (w *Worker) TotalCapacity() resource.List { return withDefaultSlots(w.Capacity) }

// Reserved is the sum of every reservation, each counted as at least
// DefaultSlotRequest slots.
func (w *Worker) Reserved() resource.List {
	var used resource.List
	for _, r := range w.Reservations {
		used = used.Add(taskRequest(r.Resources))
	}
	return used
}

// Free is TotalCapacity minus Reserved. Amounts may be negative when a
// reservation outlived a smaller re-declared capacity; Eligible treats
// those as short.
func (w *Worker) Free() resource.List { return w.TotalCapacity().Sub(w.Reserved()) }

// Load is how busy the worker is: the largest fraction of any resource of
// TotalCapacity that its reservations hold (resource.List.Share, the
// dominant share), slots included. 0 for an idle worker, 1 when some
// resource is fully reserved.
func (w *Worker) Load() float64 { return w.Reserved().Share(w.TotalCapacity()) }

// ForTask is w as a Reserve for taskID judges it: without the task's own
// reservations, which that Reserve keeps (same fence) or replaces. A
// selection judges eligibility on it, so a reservation the task leaked
// never keeps the task off the worker.
func (w Worker) ForTask(taskID string) Worker {
	w.Reservations = slices.DeleteFunc(slices.Clone(w.Reservations), func(r Reservation) bool { return r.TaskID == taskID })
	return w
}

// Reserve holds req.Request() for a task's lease when Eligible accepts the
// worker, recording now as ReservedAt. Reserving again for the same task
// and fence is a no-op that keeps the first ReservedAt (the reservation is
// idempotent, so a reserve whose answer was lost may be repeated); a
// reservation for an older fence of the same task is replaced. Errors: the
// *Ineligible from Eligible. now is the registry's workflow time.
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
	w.Reservations = append(w.Reservations, Reservation{TaskID: taskID, Fence: fence, Resources: req.Request(), ReservedAt: now})
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
