// Command wdc is the single binary of wdc: CLI, control plane, agent and
// embedded dev server. The command tree lives in package cmd.
package main

import (
	"os"

	"github.com/wdc-runtime/wdc/cmd"
	"github.com/wdc-runtime/wdc/internal/devserver"
)

func main() {
	os.Exit(cmd.Main(cmd.Deps{StartDevServer: devserver.StartServer}, os.Args[1:]))
}
