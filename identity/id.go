package identity

import (
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// DefaultTrustDomain is the trust domain of the zero-setup issuer.
const DefaultTrustDomain = "wdc.local"

// WorkerID is the SPIFFE ID of fleet worker id:
// spiffe://<td>/wdc/worker/<id>.
func WorkerID(td spiffeid.TrustDomain, id string) (spiffeid.ID, error) {
	return spiffeid.FromSegments(td, "wdc", "worker", id)
}

// ControlPlaneID is the control plane's SPIFFE ID: spiffe://<td>/wdc/control-plane.
func ControlPlaneID(td spiffeid.TrustDomain) spiffeid.ID {
	return spiffeid.RequireFromSegments(td, "wdc", "control-plane")
}

// TemporalServerID is the SPIFFE ID of a Temporal frontend's serving
// certificate (IssueServer): spiffe://<td>/wdc/temporal-server.
func TemporalServerID(td spiffeid.TrustDomain) spiffeid.ID {
	return spiffeid.RequireFromSegments(td, "wdc", "temporal-server")
}

// SubmitterID is a submitter's SPIFFE ID: spiffe://<td>/wdc/submitter/<name>.
func SubmitterID(td spiffeid.TrustDomain, name string) (spiffeid.ID, error) {
	return spiffeid.FromSegments(td, "wdc", "submitter", name)
}

// WorkerOf returns the fleet worker an ID names, and whether it names one.
func WorkerOf(id spiffeid.ID) (string, bool) {
	rest, ok := strings.CutPrefix(id.Path(), "/wdc/worker/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	return rest, true
}

// SubmitterOf returns the submitter an ID names, and whether it names one.
func SubmitterOf(id spiffeid.ID) (string, bool) {
	rest, ok := strings.CutPrefix(id.Path(), "/wdc/submitter/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	return rest, true
}

// Mode is how a control plane treats signatures (`--identity`).
type Mode string

const (
	// ModeOff ignores signatures: anyone with namespace access may speak
	// for any worker (the fence check still holds).
	ModeOff Mode = "off"
	// ModeOptional verifies a signature when a message carries one and
	// accepts unsigned messages (counted), for a rolling change.
	ModeOptional Mode = "optional"
	// ModeRequired refuses unsigned messages (unauthenticated).
	ModeRequired Mode = "required"
)

// ParseMode parses off, optional or required.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeOff, ModeOptional, ModeRequired:
		return m, nil
	}
	return "", fmt.Errorf("identity mode %q: want off, optional or required", s)
}
