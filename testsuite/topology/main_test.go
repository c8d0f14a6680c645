package topology

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/wdc-runtime/wdc/cmd"
)

// envRunCLI makes this test binary behave as the wdc binary, for the
// control planes, agents and demo that run as real subprocesses. It has no
// embedded dev server: every process dials the official temporal-server.
const envRunCLI = "WDC_TOPOLOGY_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(envRunCLI) == "1" {
		os.Exit(cmd.Main(cmd.Deps{}, os.Args[1:]))
	}
	flag.Parse()
	if testing.Short() {
		fmt.Println("topology: system tests skipped in -short mode")
		os.Exit(0)
	}
	os.Exit(m.Run())
}
