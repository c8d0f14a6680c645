package hosts

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/internal/devserver"
)

// envRunCLI makes this test binary behave as the wdc binary, for every
// process run on a host.
const envRunCLI = "WDC_HOSTS_RUN_CLI"

// envClockFile names the file that says how far a host's clock is off
// (a Go duration; absent: not off), for the clock-skew fault.
const envClockFile = "WDC_HOSTS_CLOCK_FILE"

// clockOffset reads the offset in path at each call: the wall clock a
// wdc agent signs by (cmd.Deps.ClockOffset). Every namespace shares the
// kernel's CLOCK_REALTIME, so that is how a host's clock is skewed.
func clockOffset(path string) func() time.Duration {
	if path == "" {
		return nil
	}
	return func() time.Duration {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0
		}
		d, _ := time.ParseDuration(strings.TrimSpace(string(b)))
		return d
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(envRunOperator) == "1" {
		os.Exit(operatorMain(os.Args[1:]))
	}
	if os.Getenv(envRunCLI) == "1" {
		os.Exit(cmd.Main(cmd.Deps{StartDevServer: devserver.StartServer, ClockOffset: clockOffset(os.Getenv(envClockFile))}, os.Args[1:]))
	}
	flag.Parse()
	if testing.Short() {
		fmt.Println("hosts: system tests skipped in -short mode")
		os.Exit(0)
	}
	os.Exit(m.Run())
}
