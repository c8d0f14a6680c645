package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/gowebpki/jcs"

	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/resource"
)

// Launcher kinds an envelope may name (see docs/architecture.md,
// "Launchers").
const (
	LauncherLocal = "local"
	LauncherRay   = "ray"
	LauncherK8s   = "k8s"
)

// Envelope is the immutable description of a task. JSON field names are the
// wire format of task files (`wdc tasks submit FILE`).
type Envelope struct {
	// TaskID identifies the logical task (fleet.IDPattern). Required.
	TaskID string `json:"task_id"`
	// RunID is the parent run (fleet.IDPattern). Required.
	RunID string `json:"run_id"`
	// WorldID is the world the task belongs to (fleet.IDPattern). Required.
	WorldID string `json:"world_id"`
	// Command is the program and its arguments, run in the attempt's task
	// directory without a shell. Required, non-empty first element.
	Command []string `json:"command"`
	// Env is the task's whole environment besides WDC_TASK_ID, WDC_ATTEMPT,
	// WDC_FENCE and WDC_TASK_DIR: nothing is inherited from the worker.
	// Names match EnvNamePattern and must not start with "WDC_".
	Env map[string]string `json:"env,omitempty"`
	// Inputs are files placed under inputs/ in the task directory.
	Inputs []Input `json:"inputs,omitempty"`
	// Resources the task needs; a worker's free capacity must cover them.
	Resources resource.List `json:"resources,omitzero"`
	// Capabilities the worker must have, e.g. ["docker"].
	Capabilities []string `json:"capabilities,omitempty"`
	// Selector is matched against worker labels (Kubernetes label syntax).
	Selector map[string]string `json:"selector,omitempty"`
	// Timeouts bound the attempt.
	Timeouts Timeouts `json:"timeouts,omitzero"`
	// Launcher is "local" (default), "ray" or "k8s". A "ray" or "k8s" task
	// runs only on workers with the capability LauncherCapability(kind)
	// (Requirements).
	Launcher string `json:"launcher"`
	// Ray holds what only the Ray launcher reads; only with launcher "ray".
	Ray *RayOptions `json:"ray,omitempty"`
	// K8s holds the Kubernetes launcher's settings; only with launcher
	// "k8s".
	K8s *K8s `json:"k8s,omitempty"`
}

// RayOptions are a task's Ray-specific settings.
type RayOptions struct {
	// PlacementGroup, when set, makes the Ray launcher run the attempt
	// inside a placement group of these bundles.
	PlacementGroup *PlacementGroup `json:"placement_group,omitempty"`
}

// PlacementGroup asks Ray to reserve bundles of resources together
// (ray.util.placement_group). The attempt's executor runs in bundle 0,
// with bundle 0's resources; the other bundles stay reserved for the Ray
// work the task's command starts.
type PlacementGroup struct {
	// Bundles are resource maps in Ray's own names: "CPU", "GPU",
	// "memory" (bytes) or a custom resource, each amount positive.
	// At least one bundle, each with at least one resource.
	Bundles []map[string]float64 `json:"bundles"`
	// Strategy is PACK (default), SPREAD, STRICT_PACK or STRICT_SPREAD.
	Strategy string `json:"strategy,omitempty"`
	// TimeoutSeconds bounds the wait for the group to be placed (default
	// DefaultPlacementTimeoutSeconds); an attempt whose group is not
	// placed by then fails as launch_failed.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// Placement group strategies (Ray's names).
var PlacementStrategies = []string{"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"}

// DefaultPlacementTimeoutSeconds is how long an attempt waits for its
// placement group by default.
const DefaultPlacementTimeoutSeconds = 300

// Input is one input file. In a sealed envelope it is named by content
// digest; in a task file it may instead give a Path that `wdc tasks submit`
// puts into the blob store and replaces with its digest (Seal).
type Input struct {
	// Name is the file's path under inputs/: relative, slash-separated,
	// no "." or ".." segments. Unique within the envelope.
	Name string `json:"name"`
	// Digest is "sha256:<64 hex>" of the file's bytes.
	Digest string `json:"digest,omitempty"`
	// SizeBytes is the file's size in bytes.
	SizeBytes int64 `json:"size_bytes,omitempty"`
	// Path is a local file to take the content from at submit time; never
	// present in a sealed envelope (so it never affects the digest).
	Path string `json:"path,omitempty"`
}

// Timeouts bound one attempt. Zero means no limit.
type Timeouts struct {
	// ExecutionSeconds is the wall-clock limit of the command in seconds;
	// the executor kills the command's process group when it is exceeded.
	ExecutionSeconds int64 `json:"execution_seconds,omitempty"`
}

// EnvNamePattern is what an env variable name must match (POSIX names).
var EnvNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// DigestPattern is what a content or envelope digest looks like.
var DigestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ReservedEnvPrefix marks variables the executor sets itself.
const ReservedEnvPrefix = "WDC_"

// MaxExecutionSeconds is the longest execution timeout, ten years.
const MaxExecutionSeconds = 10 * 365 * 24 * 3600

// MaxCommandArgs and MaxEnvVars bound an envelope's size.
const (
	MaxCommandArgs = 4096
	MaxEnvVars     = 1024
	MaxInputs      = 10000
)

// Requirements returns what the task needs from a worker.
// An envelope for a launcher other than Local also needs the worker
// capability LauncherCapability(launcher), which agents of that kind
// declare: a "k8s" or "ray" task is never placed on a worker that would
// run it as a local process.
func (e Envelope) Requirements() fleet.Requirements {
	caps := e.Capabilities
	if e.Launcher != "" && e.Launcher != LauncherLocal && !slices.Contains(caps, LauncherCapability(e.Launcher)) {
		caps = append(slices.Clone(caps), LauncherCapability(e.Launcher))
		sort.Strings(caps)
	}
	return fleet.Requirements{Resources: e.Resources, Capabilities: caps, Selector: e.Selector}
}

// LauncherCapability is the worker capability that says the worker's
// agent launches attempts of that kind: "launcher/<kind>".
func LauncherCapability(kind string) string { return "launcher/" + kind }

// Normalize fills defaults (Launcher "local") and sorts and de-duplicates
// Capabilities, so that equivalent envelopes digest the same. Decode calls
// it.
func (e *Envelope) Normalize() {
	if e.Launcher == "" {
		e.Launcher = LauncherLocal
	}
	if len(e.Capabilities) > 0 {
		caps := append([]string{}, e.Capabilities...)
		sort.Strings(caps)
		out := caps[:0]
		for i, c := range caps {
			if i == 0 || c != caps[i-1] {
				out = append(out, c)
			}
		}
		e.Capabilities = out
	}
	if e.Ray != nil && e.Ray.PlacementGroup != nil && e.Ray.PlacementGroup.Strategy == "" {
		e.Ray.PlacementGroup.Strategy = "PACK"
	}
}

// Validate checks every field and returns a *ValidationError listing each
// problem with its field path, or nil. A sealed envelope (sealed=true) must
// name every input by digest and carry no Path.
func (e Envelope) Validate(sealed bool) error {
	v := &ValidationError{}
	for _, id := range []struct{ field, value string }{{"task_id", e.TaskID}, {"run_id", e.RunID}, {"world_id", e.WorldID}} {
		if err := fleet.ValidateID(id.field, id.value); err != nil {
			v.add(id.field, strings.TrimPrefix(err.Error(), id.field+": "))
		}
	}
	switch {
	case len(e.Command) == 0:
		v.add("command", "required: a non-empty list, program first")
	case e.Command[0] == "":
		v.add("command[0]", "the program must not be empty")
	case len(e.Command) > MaxCommandArgs:
		v.add("command", fmt.Sprintf("at most %d arguments (got %d)", MaxCommandArgs, len(e.Command)))
	}
	for i, a := range e.Command {
		if strings.IndexByte(a, 0) >= 0 {
			v.add(fmt.Sprintf("command[%d]", i), "contains a NUL byte")
		}
	}
	if len(e.Env) > MaxEnvVars {
		v.add("env", fmt.Sprintf("at most %d variables (got %d)", MaxEnvVars, len(e.Env)))
	}
	for _, k := range sortedKeys(e.Env) {
		switch {
		case !EnvNamePattern.MatchString(k):
			v.add("env."+k, "invalid name: want [A-Za-z_][A-Za-z0-9_]*")
		case strings.HasPrefix(k, ReservedEnvPrefix):
			v.add("env."+k, "names starting with WDC_ are set by the executor")
		case strings.IndexByte(e.Env[k], 0) >= 0:
			v.add("env."+k, "value contains a NUL byte")
		}
	}
	if len(e.Inputs) > MaxInputs {
		v.add("inputs", fmt.Sprintf("at most %d inputs (got %d)", MaxInputs, len(e.Inputs)))
	}
	seen := map[string]bool{}
	for i, in := range e.Inputs {
		f := fmt.Sprintf("inputs[%d]", i)
		if err := ValidateRelativePath(in.Name); err != nil {
			v.add(f+".name", err.Error())
		} else if seen[in.Name] {
			v.add(f+".name", fmt.Sprintf("duplicate input %q", in.Name))
		} else {
			for _, other := range e.Inputs[:i] {
				if strings.HasPrefix(in.Name, other.Name+"/") || strings.HasPrefix(other.Name, in.Name+"/") {
					v.add(f+".name", fmt.Sprintf("%q and %q cannot both exist (one would be a directory of the other)", in.Name, other.Name))
					break
				}
			}
		}
		seen[in.Name] = true
		switch {
		case sealed && in.Path != "":
			v.add(f+".path", "a sealed envelope names inputs by digest only")
		case sealed && in.Digest == "":
			v.add(f+".digest", "required")
		case !sealed && in.Digest == "" && in.Path == "":
			v.add(f, "give path (a local file) or digest")
		case in.Digest != "" && in.Path != "":
			v.add(f, "give path or digest, not both")
		}
		if in.Digest != "" && !DigestPattern.MatchString(in.Digest) {
			v.add(f+".digest", fmt.Sprintf("%q is not sha256:<64 lowercase hex>", in.Digest))
		}
		if in.SizeBytes < 0 {
			v.add(f+".size_bytes", "must not be negative")
		}
	}
	for _, p := range e.Resources.Validate("resources") {
		v.add(p.Field, p.Message)
	}
	for i, c := range e.Capabilities {
		if !fleet.CapabilityPattern.MatchString(c) {
			v.add(fmt.Sprintf("capabilities[%d]", i), fmt.Sprintf("%q is not a valid capability name", c))
		}
	}
	if err := fleet.ValidateLabels("selector", e.Selector); err != nil {
		v.add("selector", strings.TrimPrefix(err.Error(), "selector: "))
	}
	if e.Timeouts.ExecutionSeconds < 0 || e.Timeouts.ExecutionSeconds > MaxExecutionSeconds {
		v.add("timeouts.execution_seconds", fmt.Sprintf("must be between 0 (no limit) and %d (ten years)", MaxExecutionSeconds))
	}
	v.validateK8s(e.K8s)
	switch e.Launcher {
	case "", LauncherLocal, LauncherRay, LauncherK8s:
	default:
		v.add("launcher", fmt.Sprintf("%q: want local, ray or k8s", e.Launcher))
	}
	if e.Ray != nil {
		e.Ray.validate(v, e.Launcher)
	}
	if len(v.Problems) == 0 {
		return nil
	}
	return v
}

// validate checks the Ray options: they go with launcher "ray"; a
// placement group needs at least one bundle, each with at least one
// resource, every amount positive and finite, and a known strategy.
func (r *RayOptions) validate(v *ValidationError, launcher string) {
	if launcher != LauncherRay {
		v.add("ray", fmt.Sprintf("only with launcher %q (launcher is %q)", LauncherRay, launcher))
	}
	pg := r.PlacementGroup
	if pg == nil {
		return
	}
	const f = "ray.placement_group"
	if len(pg.Bundles) == 0 {
		v.add(f+".bundles", "required: at least one bundle, e.g. [{\"CPU\": 1}]")
	}
	for i, b := range pg.Bundles {
		bf := fmt.Sprintf("%s.bundles[%d]", f, i)
		if len(b) == 0 {
			v.add(bf, "empty: give at least one resource, e.g. {\"CPU\": 1}")
		}
		for _, name := range sortedKeys(b) {
			if x := b[name]; !(x > 0) || math.IsInf(x, 0) {
				v.add(bf+"."+name, fmt.Sprintf("must be a positive amount (got %v)", x))
			}
			if name == "" || strings.ContainsAny(name, "\x00") {
				v.add(bf, fmt.Sprintf("invalid resource name %q", name))
			}
		}
	}
	if pg.Strategy != "" && !slices.Contains(PlacementStrategies, pg.Strategy) {
		v.add(f+".strategy", fmt.Sprintf("%q: want one of %s", pg.Strategy, strings.Join(PlacementStrategies, ", ")))
	}
	if pg.TimeoutSeconds < 0 || pg.TimeoutSeconds > MaxExecutionSeconds {
		v.add(f+".timeout_seconds", fmt.Sprintf("must be between 0 (default %d) and %d", DefaultPlacementTimeoutSeconds, MaxExecutionSeconds))
	}
}

// ValidateRelativePath accepts a clean, relative, slash-separated path with
// no ".", ".." or empty segments, no backslash or NUL, at most 4096 bytes.
// It is the rule for input names and output artifact names.
func ValidateRelativePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("required")
	case len(p) > 4096:
		return fmt.Errorf("longer than 4096 bytes")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is absolute; want a relative path", p)
	case strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("%q contains a backslash or NUL", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return fmt.Errorf("%q contains '..'", p)
		}
		if seg == "" || seg == "." {
			return fmt.Errorf("%q is not a clean path", p)
		}
	}
	if path.Clean(p) != p {
		return fmt.Errorf("%q is not a clean path", p)
	}
	return nil
}

// CanonicalJSON returns the RFC 8785 canonical JSON of the envelope as it
// marshals (omitted zero fields stay omitted).
func (e Envelope) CanonicalJSON() ([]byte, error) {
	raw, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("marshal envelope: %w", err)
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalize envelope: %w", err)
	}
	return out, nil
}

// Digest is "sha256:" + hex SHA-256 of CanonicalJSON. Call Normalize first
// (Decode does) so that defaults do not change the digest.
func (e Envelope) Digest() (string, error) {
	return DigestOf(e)
}

// DigestOf is the one digest rule of wdc: "sha256:" + hex SHA-256 of the
// RFC 8785 canonical JSON of v as encoding/json marshals it. The envelope
// digest and the run's TCD digest both use it.
func DigestOf(v any) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("digest: marshal: %w", err)
	}
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("digest: canonicalize: %w", err)
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
