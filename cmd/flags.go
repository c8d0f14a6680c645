package cmd

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/wdc-runtime/wdc/fleet"
	"github.com/wdc-runtime/wdc/internal/executor"
	wdcres "github.com/wdc-runtime/wdc/resource"
)

// registrationFlags are the flags that describe a fleet worker; `workers
// register` and `agent` share them.
type registrationFlags struct {
	workerID     string
	cpu          string
	memory       string
	gpus         int64
	slots        int64
	resources    []string
	labels       []string
	capabilities []string
	staleAfter   time.Duration
	offlineAfter time.Duration
	resCheck     time.Duration
}

func (r *registrationFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&r.workerID, "worker-id", "", "the worker's ID: 1-63 of [A-Za-z0-9._-], starting and ending alphanumeric (required)")
	f.StringVar(&r.cpu, "cpu", "", `CPU capacity in cores or millicores, Kubernetes quantity syntax: "4", "1.5", "500m" (default: this machine's cores)`)
	f.StringVar(&r.memory, "memory", "", `memory capacity, Kubernetes quantity syntax: "8Gi", "512Mi", "1e9" bytes (default: this machine's memory)`)
	f.Int64Var(&r.gpus, "gpus", 0, "whole GPUs the worker offers")
	f.Int64Var(&r.slots, "slots", 0, "how many tasks may run at once; a task takes one slot unless it asks for more (0 or unset: one per whole CPU core, at least 1)")
	f.StringArrayVar(&r.resources, "resource", nil, "custom resource NAME=COUNT, e.g. licenses=2 (repeatable)")
	f.StringArrayVar(&r.labels, "label", nil, "label KEY=VALUE matched by task selectors, Kubernetes label syntax (repeatable)")
	f.StringArrayVar(&r.capabilities, "capability", nil, "capability a task may require, e.g. docker (repeatable)")
	f.DurationVar(&r.staleAfter, "stale-after", fleet.DefaultStaleAfter, "no heartbeat for this long makes the worker STALE (its leases are revoked)")
	f.DurationVar(&r.offlineAfter, "offline-after", fleet.DefaultOfflineAfter, "no heartbeat for this long makes the worker OFFLINE (it must register again)")
	f.DurationVar(&r.resCheck, "reservation-check-after", fleet.DefaultReservationCheckAfter, "how old a reservation must be before the registry checks it against its task, and how often it checks again: a reservation left by a terminated or reset task is released within about twice this (at least "+fleet.MinReservationCheckAfter.String()+")")
}

// registration parses the flags into a validated fleet.Registration. Every
// error names its flag and is a usage error.
func (r *registrationFlags) registration() (fleet.Registration, error) {
	if r.workerID == "" {
		return fleet.Registration{}, usagef("--worker-id: required")
	}
	reg := fleet.Registration{WorkerID: r.workerID, StaleAfter: r.staleAfter, OfflineAfter: r.offlineAfter, ReservationCheckAfter: r.resCheck, Capabilities: r.capabilities}
	var err error
	if reg.Capacity.CPUMillis, err = parseCPU(r.cpu); err != nil {
		return reg, err
	}
	if reg.Capacity.MemoryBytes, err = parseMemory(r.memory); err != nil {
		return reg, err
	}
	if r.gpus < 0 {
		return reg, usagef("--gpus: must not be negative (got %d)", r.gpus)
	}
	reg.Capacity.GPUs = r.gpus
	if r.slots < 0 {
		return reg, usagef("--slots: must not be negative (got %d)", r.slots)
	}
	reg.Capacity.Slots = r.slots
	if reg.Capacity.Custom, err = parseCounts("--resource", r.resources); err != nil {
		return reg, err
	}
	if reg.Labels, err = parsePairs("--label", r.labels); err != nil {
		return reg, err
	}
	if err := reg.Validate(); err != nil {
		return reg, usageError{err}
	}
	return reg, nil
}

// parseCPU turns a Kubernetes CPU quantity into millicores; "" is this
// machine's core count.
func parseCPU(s string) (int64, error) {
	if s == "" {
		return int64(runtime.NumCPU()) * 1000, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, usagef("--cpu %q: %v (want e.g. 4, 1.5 or 500m)", s, err)
	}
	if q.Sign() < 0 {
		return 0, usagef("--cpu %q: must not be negative", s)
	}
	if q.Cmp(*resource.NewMilliQuantity(math.MaxInt64, resource.DecimalSI)) >= 0 { // parsing clamps at the maximum
		return 0, usagef("--cpu %q: too large (below %d millicores)", s, int64(math.MaxInt64))
	}
	return q.MilliValue(), nil
}

// parseMemory turns a Kubernetes memory quantity into bytes; "" is this
// machine's total memory.
func parseMemory(s string) (int64, error) {
	if s == "" {
		return machineMemory(), nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, usagef("--memory %q: %v (want e.g. 8Gi or 512Mi)", s, err)
	}
	if q.Sign() < 0 {
		return 0, usagef("--memory %q: must not be negative", s)
	}
	if q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) >= 0 { // parsing clamps at the maximum
		return 0, usagef("--memory %q: too large (below %d bytes)", s, int64(math.MaxInt64))
	}
	return q.Value(), nil
}

// machineMemory reads MemTotal from /proc/meminfo (0 when unknown).
func machineMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// parsePairs parses repeated KEY=VALUE flags.
func parsePairs(flag string, in []string) (map[string]string, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(in))
	for _, kv := range in {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("%s %q: want KEY=VALUE", flag, kv)
		}
		if _, dup := out[k]; dup {
			return nil, usagef("%s %q: key %q given twice", flag, kv, k)
		}
		out[k] = v
	}
	return out, nil
}

// parseCounts parses repeated NAME=COUNT flags into whole amounts.
func parseCounts(flag string, in []string) (map[string]int64, error) {
	pairs, err := parsePairs(flag, in)
	if err != nil || pairs == nil {
		return nil, err
	}
	out := make(map[string]int64, len(pairs))
	for k, v := range pairs {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, usagef("%s %s=%s: the count must be a whole number", flag, k, v)
		}
		out[k] = n
	}
	return out, nil
}

// formatResources renders a resource list for humans: "cpu 4, mem 8.0Gi, gpu 1, slots 4, licenses 2".
func formatResources(l wdcres.List) string {
	parts := []string{
		"cpu " + strconv.FormatFloat(float64(l.CPUMillis)/1000, 'f', -1, 64),
		"mem " + formatBytes(l.MemoryBytes),
	}
	if l.GPUs != 0 {
		parts = append(parts, fmt.Sprintf("gpu %d", l.GPUs))
	}
	if l.Slots != 0 {
		parts = append(parts, fmt.Sprintf("slots %d", l.Slots))
	}
	names := make([]string, 0, len(l.Custom))
	for k := range l.Custom {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %d", k, l.Custom[k]))
	}
	return strings.Join(parts, ", ")
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit || m <= -unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ci", float64(n)/float64(div), "KMGTPE"[exp])
}

// outputLimitFlags are the limits on an attempt's outputs; `agent` and
// `exec` share them.
type outputLimitFlags struct {
	maxFile  int64
	maxTotal int64
	maxFiles int
}

func (o *outputLimitFlags) bind(f *pflag.FlagSet) {
	f.Int64Var(&o.maxFile, "max-output-file-bytes", 0, "largest output file in bytes (default 1 GiB)")
	f.Int64Var(&o.maxTotal, "max-output-bytes", 0, "largest total of an attempt's outputs in bytes (default 4 GiB)")
	f.IntVar(&o.maxFiles, "max-output-files", 0, "most output files per attempt (default 1000, at most 10000)")
}

// limits returns the flags as executor.OutputLimits (0: the default).
// Errors: a negative value, named by its flag (a usage error).
func (o *outputLimitFlags) limits() (executor.OutputLimits, error) {
	for _, v := range []struct {
		flag string
		n    int64
	}{{"--max-output-file-bytes", o.maxFile}, {"--max-output-bytes", o.maxTotal}, {"--max-output-files", int64(o.maxFiles)}} {
		if v.n < 0 {
			return executor.OutputLimits{}, usagef("%s: must not be negative (got %d)", v.flag, v.n)
		}
	}
	return executor.OutputLimits{MaxFileBytes: o.maxFile, MaxTotalBytes: o.maxTotal, MaxFiles: o.maxFiles}, nil
}

// runAsFlags name the user a command runs as; `agent` (Local attempts)
// and `exec` share them.
type runAsFlags struct {
	user, group string
}

func (r *runAsFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&r.user, "run-as-user", "", "run each task's command as this user (name or uid; not root), with no supplementary groups, so it cannot read the executor's credentials, environment or memory (default: the executor's own user)")
	f.StringVar(&r.group, "run-as-group", "", "with --run-as-user: the command's group (name or gid; default: the user's primary group)")
}

// lookup resolves the user and group. nil: no --run-as-user. Errors are
// usage errors naming the flag.
func (r *runAsFlags) lookup() (*executor.RunAs, error) {
	ra, err := executor.LookupRunAs(r.user, r.group)
	if err != nil {
		return nil, usagef("%s", err)
	}
	if ra != nil && os.Geteuid() != 0 {
		return nil, usagef("--run-as-user %q: switching user needs root (this process is uid %d)", r.user, os.Geteuid())
	}
	return ra, nil
}

// checkWorkDir checks that ra's user can reach workDir, the root of the
// task directories (nil ra: nothing to check).
func checkWorkDir(ra *executor.RunAs, workDir string) error {
	if ra == nil {
		return nil
	}
	if err := ra.CheckWorkDir(workDir); err != nil {
		return usagef("--run-as-user %q: the work dir: %s", ra.User, err)
	}
	return nil
}

// protectProcess makes this process non-dumpable (executor.ProtectProcess)
// and, when its commands will run as root, says they can read what it
// holds (warnRootCommands).
func (a *app) protectProcess(warnRoot bool) {
	if err := executor.ProtectProcess(); err != nil {
		a.notice("warning: " + err.Error() + ": a task's command of this user can read this process's environment through /proc")
	}
	a.warnRootCommands(warnRoot)
}

// warnRootCommands, when warn is set and commands started as this
// process's user could read it (executor.CommandsCanPtrace), says so.
func (a *app) warnRootCommands(warn bool) {
	if warn && executor.CommandsCanPtrace() {
		a.notice("warning: running as root with CAP_SYS_PTRACE and without --run-as-user: each task's command can read this process's credentials (AWS_*, TEMPORAL_API_KEY) through /proc; give --run-as-user")
	}
}
