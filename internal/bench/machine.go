package bench

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// Machine describes where the figures were measured.
type Machine struct {
	// Cores is runtime.NumCPU(): the logical CPUs this process may use.
	Cores     int    `json:"cores"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	GoVersion string `json:"go_version"`
	// CPUModel is /proc/cpuinfo's first "model name" ("" if unknown).
	CPUModel string `json:"cpu_model,omitempty"`
	// MemoryBytes is /proc/meminfo's MemTotal in bytes (0 if unknown).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// ThisMachine describes the running machine.
func ThisMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version()}
	m.CPUModel = procField("/proc/cpuinfo", "model name", ":")
	if kb := procField("/proc/meminfo", "MemTotal", ":"); kb != "" {
		n, _ := strconv.ParseInt(strings.Fields(kb)[0], 10, 64)
		m.MemoryBytes = n * 1024
	}
	return m
}

// procField returns the value of the first line "key<sep>value" in a
// /proc file, trimmed; "" when absent.
func procField(path, key, sep string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), sep)
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Versions are the versions the figures belong to.
type Versions struct {
	// Wdc is the main module's version from the build info (a pseudo
	// version or "(devel)"), with the VCS revision when stamped.
	Wdc string `json:"wdc"`
	// TemporalServer is the version the server reports (GetClusterInfo).
	TemporalServer string `json:"temporal_server"`
	// ServerModule, SDKModule and APIModule are the go.temporal.io module
	// versions this binary was built with (ServerModule: the embedded
	// server's; empty when the binary does not link it).
	ServerModule string `json:"temporal_server_module"`
	SDKModule    string `json:"temporal_sdk_module"`
	APIModule    string `json:"temporal_api_module"`
}

// BuildVersions reads the module versions from runtime/debug.ReadBuildInfo
// (the SDK's from temporal.SDKVersion when the build info has none).
func BuildVersions() Versions {
	// A test binary's build info lists no modules: the SDK says its own.
	v := Versions{SDKModule: "v" + temporal.SDKVersion}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Wdc = info.Main.Version
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Wdc += " " + s.Value
		case "vcs.modified":
			if s.Value == "true" {
				v.Wdc += " (modified)"
			}
		}
	}
	for _, d := range info.Deps {
		version := d.Version
		if d.Replace != nil {
			version = d.Replace.Version
		}
		switch d.Path {
		case "go.temporal.io/server":
			v.ServerModule = version
		case "go.temporal.io/sdk":
			v.SDKModule = version
		case "go.temporal.io/api":
			v.APIModule = version
		}
	}
	return v
}
