package hosts

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/internal/devserver"
)

// envRunCLI makes this test binary behave as the wdc binary, for every
// process run on a host.
const envRunCLI = "WDC_HOSTS_RUN_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(envRunOperator) == "1" {
		os.Exit(operatorMain(os.Args[1:]))
	}
	if os.Getenv(envRunCLI) == "1" {
		os.Exit(cmd.Main(cmd.Deps{StartDevServer: devserver.StartServer}, os.Args[1:]))
	}
	flag.Parse()
	if testing.Short() {
		fmt.Println("hosts: system tests skipped in -short mode")
		os.Exit(0)
	}
	os.Exit(m.Run())
}
