package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/wdc-runtime/wdc/internal/buildinfo"
)

func (a *app) newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print wdc's version, commit, Go version and Temporal SDK and server versions",
		Long: `Print what the Go toolchain recorded in this binary: wdc's module version, the
VCS commit it was built from (and whether the tree was modified), the Go
version, and the versions of the Temporal SDK and of the Temporal server it
embeds for 'wdc server start-dev'. The build ID is what 'wdc control-plane'
serves unless --build-id says otherwise: the module version, else the commit,
else "dev". 'wdc --version' prints the same.`,
		Example: `  wdc version
  wdc version -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return a.printVersion() },
	}
}

// printVersion prints buildinfo.Read, as JSON with -o json.
func (a *app) printVersion() error {
	info := buildinfo.Read()
	return a.emit(info, func(w io.Writer) error { return writeVersion(w, info) })
}

// writeVersion renders info for humans, one fact a line.
func writeVersion(w io.Writer, info buildinfo.Info) error {
	commit := info.Commit
	switch {
	case commit == "":
		commit = "unknown (built without VCS information)"
	case info.Modified:
		commit += " (modified)"
	}
	server := info.TemporalServer
	if server == "" {
		server = "not linked into this binary"
	}
	tw := table(w)
	fmt.Fprintf(tw, "wdc\t%s\n", orUnknown(info.Version))
	fmt.Fprintf(tw, "commit\t%s\n", commit)
	fmt.Fprintf(tw, "go\t%s\n", orUnknown(info.Go))
	fmt.Fprintf(tw, "temporal sdk\t%s\n", orUnknown(info.TemporalSDK))
	fmt.Fprintf(tw, "temporal server\t%s\n", server)
	fmt.Fprintf(tw, "build id\t%s\n", info.BuildID)
	return tw.Flush()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
