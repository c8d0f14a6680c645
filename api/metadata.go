package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/wdc-runtime/wdc/envelope"
	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/resource"
)

// User metadata: what the Temporal Web UI and `temporal workflow describe`
// show of wdc's workflows (docs/operations.md, "The Temporal Web UI").
// Summaries are one line; details are small Markdown. They are pure
// functions of their input, so workflows may call them.

// Memo fields of a WdcTask, set when its run starts it.
const (
	// MemoRunID is the task's run ID.
	MemoRunID = "WdcRunID"
	// MemoEnvelopeDigest is the task's sealed envelope digest.
	MemoEnvelopeDigest = "WdcEnvelopeDigest"
	// MemoLeaseTTL is the task's lease TTL (nanoseconds): a later run of
	// the task waits that long after this one closed before it grants a
	// fence (the lock-delay of api.SelectWorkerResult.LockDelayUntil).
	MemoLeaseTTL = "WdcLeaseTTL"
)

// summaryCommandRunes bounds the command shown in a task's summary.
const summaryCommandRunes = 60

// Bounds of user metadata, in bytes of its JSON payload: Temporal refuses
// a summary payload over 400 bytes and a details payload over 20,000
// (limit.userMetadataSummarySize, limit.userMetadataDetailsSize), which
// would fail the start or the workflow task that carries it.
const (
	MaxSummaryBytes = 300
	MaxDetailsBytes = 16000
)

// ClipSummary is s cut ("…") so that its JSON encoding is at most
// MaxSummaryBytes; every summary wdc sets passes through it.
func ClipSummary(s string) string { return clipJSON(s, MaxSummaryBytes) }

// ClipDetails is s cut so that its JSON encoding is at most
// MaxDetailsBytes.
func ClipDetails(s string) string { return clipJSON(s, MaxDetailsBytes) }

// clipJSON cuts s at a rune boundary, marking the cut with "…", so that
// json.Marshal(s) (HTML escaping included, as the SDK's JSON payload
// converter does) is at most max bytes.
func clipJSON(s string, max int) string {
	if b, err := json.Marshal(s); err == nil && len(b) <= max {
		return s
	}
	n := len(`""`) + len("…")
	var out strings.Builder
	for _, r := range s {
		b, _ := json.Marshal(string(r))
		if n+len(b)-2 > max {
			break
		}
		n += len(b) - 2
		out.WriteRune(r)
	}
	return out.String() + "…"
}

// TaskSummary is a WdcTask's static summary: "task T · run R · <command>",
// the command cut to about 60 characters.
func TaskSummary(env envelope.Envelope) string {
	return ClipSummary(fmt.Sprintf("task %s · run %s · %s", env.TaskID, env.RunID, ShortCommand(env.Command, summaryCommandRunes)))
}

// TaskDetails is a WdcTask's static details (Markdown): envelope digest,
// world, launcher, resources and the full command.
func TaskDetails(env envelope.Envelope, digest string) string {
	launcher := env.Launcher
	if launcher == "" {
		launcher = envelope.LauncherLocal
	}
	var b strings.Builder
	fmt.Fprintf(&b, "- envelope digest: `%s`\n", digest)
	fmt.Fprintf(&b, "- run: %s · world: %s\n", env.RunID, env.WorldID)
	fmt.Fprintf(&b, "- launcher: %s\n", launcher)
	fmt.Fprintf(&b, "- resources: %s\n", FormatResources(env.Resources))
	fmt.Fprintf(&b, "- command: `%s`\n", strings.ReplaceAll(strings.Join(env.Command, " "), "`", "'"))
	return ClipDetails(b.String())
}

// RunSummary is a WdcRun's static summary: "run R · world W". Its task
// counts change, so they are in its current details.
func RunSummary(runID, worldID string) string {
	return ClipSummary(fmt.Sprintf("run %s · world %s", runID, worldID))
}

// WorkerSummary is a WdcWorker's static summary, from the registration
// that started the entry: "worker W · <launcher> · <capacity>".
func WorkerSummary(reg fleet.Registration) string {
	return ClipSummary(fmt.Sprintf("worker %s · %s · %s", reg.WorkerID, WorkerLauncher(reg.Capabilities), FormatResources(reg.Capacity)))
}

// WorkerLauncher is the launcher a worker's capabilities name
// (envelope.LauncherCapability), or "local".
func WorkerLauncher(capabilities []string) string {
	for _, c := range capabilities {
		if kind, ok := strings.CutPrefix(c, envelope.LauncherCapability("")); ok && kind != "" {
			return kind
		}
	}
	return envelope.LauncherLocal
}

// FormatResources is l in one short line: "cpu 2 · mem 1Gi · gpu 1 ·
// slots 4 · name 3" (zero amounts left out; "none" when all are zero).
func FormatResources(l resource.List) string {
	var parts []string
	if l.CPUMillis != 0 {
		if l.CPUMillis%1000 == 0 {
			parts = append(parts, "cpu "+strconv.FormatInt(l.CPUMillis/1000, 10))
		} else {
			parts = append(parts, "cpu "+strconv.FormatInt(l.CPUMillis, 10)+"m")
		}
	}
	if l.MemoryBytes != 0 {
		parts = append(parts, "mem "+formatBytes(l.MemoryBytes))
	}
	if l.GPUs != 0 {
		parts = append(parts, "gpu "+strconv.FormatInt(l.GPUs, 10))
	}
	if l.Slots != 0 {
		parts = append(parts, "slots "+strconv.FormatInt(l.Slots, 10))
	}
	names := make([]string, 0, len(l.Custom))
	for n := range l.Custom {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		parts = append(parts, n+" "+strconv.FormatInt(l.Custom[n], 10))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " · ")
}

// formatBytes is n in the largest binary unit that divides it (Ki, Mi,
// Gi, Ti), else in bytes.
func formatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// ShortCommand is argv joined by spaces, with a leading shell ("sh -c")
// left out and the rest cut to at most max runes ("…" marks a cut).
func ShortCommand(argv []string, max int) string {
	if len(argv) >= 3 && argv[1] == "-c" && strings.HasSuffix(argv[0], "sh") {
		argv = argv[2:]
	}
	s := strings.Join(strings.Fields(strings.Join(argv, " ")), " ")
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}

// SDK client and worker identities: what Temporal records as the identity
// of every event a wdc process causes.

// AgentIdentity is the identity of worker's agent: "wdc-agent/<worker>".
func AgentIdentity(worker string) string { return "wdc-agent/" + worker }

// ControlPlaneIdentity is the identity of control plane process pid on
// host: "wdc-control-plane@<host>/<pid>" (a host may run several).
func ControlPlaneIdentity(host string, pid int) string {
	return "wdc-control-plane@" + host + "/" + strconv.Itoa(pid)
}

// CLIIdentity is the CLI's identity on host: "wdc-cli@<host>".
func CLIIdentity(host string) string { return "wdc-cli@" + host }

// ExecIdentity is the identity of a `wdc exec` attempt process of worker:
// "wdc-exec/<worker>".
func ExecIdentity(worker string) string { return "wdc-exec/" + worker }
