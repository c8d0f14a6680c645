package k8s

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/wdc-runtime/wdc/lease"
)

// Label and annotation keys on every Job, pod and Lease of an attempt.
// Labels hold LabelValue of each value (selectable, ≤ 63 bytes); the
// annotations of the same names under AnnotationPrefix hold the values
// unchanged.
const (
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedByValue   = "wdc"
	LabelWorker      = "wdc.dev/worker"
	LabelTask        = "wdc.dev/task"
	LabelLease       = "wdc.dev/lease"
	LabelAttempt     = "wdc.dev/attempt"
	LabelFence       = "wdc.dev/fence"
	LabelWorld       = "wdc.dev/world"
	LabelRun         = "wdc.dev/run"
	AnnotationPrefix = "wdc.dev/full-"
	// AnnotationDigest holds the lease's envelope digest.
	AnnotationDigest = "wdc.dev/envelope-digest"
)

// hashLen is how many hex digits of SHA-256 a shortened name keeps.
const hashLen = 10

// LabelValue makes s a valid label value: s itself when it is one (at
// most 63 bytes of [A-Za-z0-9._-], starting and ending alphanumeric, or
// empty); otherwise the longest valid prefix of s with every other byte
// replaced by '_', cut to leave room for "-" and hashLen hex digits of
// SHA-256(s), so that two values that shorten alike still differ. The
// result always passes validation.IsValidLabelValue and depends on s
// only.
func LabelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	b := []byte(s)
	for i, c := range b {
		if !(c == '-' || c == '_' || c == '.' || isAlnum(c)) {
			b[i] = '_'
		}
	}
	prefix := strings.TrimLeftFunc(string(b), func(r rune) bool { return !isAlnum(byte(r)) })
	if max := validation.LabelValueMaxLength - 1 - hashLen; len(prefix) > max {
		prefix = prefix[:max]
	}
	prefix = strings.TrimRightFunc(prefix, func(r rune) bool { return !isAlnum(byte(r)) })
	if prefix == "" {
		return shortHash(s)
	}
	return prefix + "-" + shortHash(s)
}

// JobName is the name of claim c's Job and Lease, unique per (task,
// attempt, fence): "wdc-<task>-a<attempt>-f<fence>", a DNS-1123 label of
// at most 63 bytes. A task ID that is not already lower-case DNS-label
// text, or too long, is lowered, cut and followed by a hash of the full
// ID, so two tasks never share a Job name.
func JobName(c lease.Claim) string {
	suffix := "-a" + strconv.FormatInt(c.Attempt, 10) + "-f" + strconv.FormatInt(c.Fence, 10)
	room := validation.DNS1123LabelMaxLength - len("wdc-") - len(suffix)
	task := c.TaskID
	if len(validation.IsDNS1123Label(task)) == 0 && len(task) <= room {
		return "wdc-" + task + suffix
	}
	b := []byte(strings.ToLower(task))
	for i, ch := range b {
		if !isLowerAlnum(ch) {
			b[i] = '-'
		}
	}
	prefix := string(b)
	if len(prefix) > room-1-hashLen {
		prefix = prefix[:room-1-hashLen]
	}
	prefix = strings.Trim(prefix, "-")
	if prefix != "" {
		prefix += "-"
	}
	return "wdc-" + prefix + shortHash(task) + suffix
}

// KeySecretName is the name of the Secret that holds claim c's delegated
// key: JobName(c) with "-key".
func KeySecretName(c lease.Claim) string { return JobName(c) + "-key" }

// HolderIdentity is the holder of claim c's Lease: "<worker>/<attempt>/<fence>".
func HolderIdentity(c lease.Claim) string {
	return c.WorkerID + "/" + strconv.FormatInt(c.Attempt, 10) + "/" + strconv.FormatInt(c.Fence, 10)
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:hashLen]
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isLowerAlnum(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' }
