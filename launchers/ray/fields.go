package ray

import (
	"fmt"
	"strconv"
	"strings"
)

// Fields is the set of optional submit fields a Ray version knows. Ray
// answers a body key it does not know with HTTP 400, so the launcher
// sends only these (entrypoint, submission_id, runtime_env and metadata
// are known to every version it accepts).
type Fields struct {
	// RayVersion is the version the set is for ("2.9.3").
	RayVersion string `json:"ray_version"`
	// EntrypointCPUsGPUsResources: entrypoint_num_cpus,
	// entrypoint_num_gpus and entrypoint_resources (Ray 2.2 and later).
	EntrypointCPUsGPUsResources bool `json:"entrypoint_num_cpus_gpus_resources"`
	// EntrypointMemory: entrypoint_memory (Ray 2.8 and later).
	EntrypointMemory bool `json:"entrypoint_memory"`
}

// MinRayVersion is the oldest Ray release the launcher talks to: the
// first whose Jobs API takes submission_id.
const MinRayVersion = "2.0"

// LatestFields is the field set of every Ray release from 2.8 on, which
// `wdc workers render-launch --launcher ray` uses unless told a version.
var LatestFields = Fields{RayVersion: "2.8+", EntrypointCPUsGPUsResources: true, EntrypointMemory: true}

// FieldsFor returns the field set of a Ray release ("2.9.3", "2.10.0rc1",
// "3.0.0.dev0"). Errors: a version that does not start with MAJOR.MINOR,
// or one older than MinRayVersion.
func FieldsFor(rayVersion string) (Fields, error) {
	major, minor, ok := majorMinor(rayVersion)
	if !ok {
		return Fields{}, fmt.Errorf("ray version %q: want MAJOR.MINOR[.PATCH]", rayVersion)
	}
	at := func(ma, mi int) bool { return major > ma || major == ma && minor >= mi }
	if !at(2, 0) {
		return Fields{}, fmt.Errorf("ray version %s: older than %s, whose Jobs API is the first with submission_id", rayVersion, MinRayVersion)
	}
	return Fields{RayVersion: rayVersion, EntrypointCPUsGPUsResources: at(2, 2), EntrypointMemory: at(2, 8)}, nil
}

func majorMinor(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	digits := func(s string) (int, bool) {
		end := 0
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(s[:end])
		return n, err == nil
	}
	major, ok1 := digits(parts[0])
	minor, ok2 := digits(parts[1])
	return major, minor, ok1 && ok2 && len(parts[0]) > 0
}

// Apply removes from req every field this set does not know and returns
// their JSON names (empty when nothing was dropped).
func (f Fields) Apply(req *SubmitRequest) []string {
	var dropped []string
	if !f.EntrypointCPUsGPUsResources {
		if req.EntrypointNumCPUs != nil {
			dropped, req.EntrypointNumCPUs = append(dropped, "entrypoint_num_cpus"), nil
		}
		if req.EntrypointNumGPUs != nil {
			dropped, req.EntrypointNumGPUs = append(dropped, "entrypoint_num_gpus"), nil
		}
		if req.EntrypointResources != nil {
			dropped, req.EntrypointResources = append(dropped, "entrypoint_resources"), nil
		}
	}
	if !f.EntrypointMemory && req.EntrypointMemory != nil {
		dropped, req.EntrypointMemory = append(dropped, "entrypoint_memory"), nil
	}
	return dropped
}
