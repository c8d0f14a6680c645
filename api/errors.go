package api

import "fmt"

// Application error types wdc returns through Temporal (match them with
// temporal.ApplicationError.Type()). Fence rejections use the
// lease.RejectReason strings as their type.
const (
	// ErrTypeInvalidArgument: a message failed validation (field named).
	ErrTypeInvalidArgument = "invalid_argument"
	// ErrTypeArtifactMismatch: a staged artifact is missing or does not hash
	// to its declared digest.
	ErrTypeArtifactMismatch = "artifact_mismatch"
	// ErrTypeNotRegistered: the worker workflow has no registration.
	ErrTypeNotRegistered = "not_registered"
	// ErrTypeIneligible: reserve refused (worker not ACTIVE or too full).
	ErrTypeIneligible = "ineligible"
	// ErrTypeConflict: the request conflicts with existing state (a task ID
	// used with another envelope, a stale expected_parent_time, a closed run).
	ErrTypeConflict = "conflict"
	// ErrTypeLaunchFailed: the launcher could not start the attempt.
	ErrTypeLaunchFailed = "launch_failed"
	// ErrTypeRunFull: the run's pending state (open tasks and uncommitted
	// results, MaxRunPendingBytes) has no room for the tasks added; it
	// makes room as tasks end without a result and as results are
	// committed. Nothing of the refused request was added.
	ErrTypeRunFull = "run_full"
)

type fieldError struct{ field, msg string }

func (e fieldError) Error() string { return e.field + ": " + e.msg }

func fieldErr(field, format string, args ...any) error {
	return fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}
