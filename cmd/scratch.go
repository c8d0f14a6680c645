package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/wdc-runtime/wdc/api"
	wdcclient "github.com/wdc-runtime/wdc/client"
	"github.com/wdc-runtime/wdc/internal/devopts"
)

// scratch is what a self-contained command (demo, bench) runs against:
// an in-process Temporal server and a temporary data directory, or, with
// --address (or TEMPORAL_ADDRESS), that server and the standard data dir
// shared with the control planes already there.
type scratch struct {
	// External: --address named a server; IDs then get Suffix so that a
	// second run does not collide with the first.
	External bool
	Suffix   string
	Address  string
	Client   client.Client
	DataDir  string
	BlobURL  string

	cleanup []func()
}

// startScratch prepares a scratch: the server (progress lines while the
// embedded one starts), the data dir (dataDir when given; a new
// "<prefix>*" temporary directory removed by Close unless keep), the
// client (search attributes checked on an external server) and the blob
// URL (blobURL, else WDC_BLOB_URL, else the data dir's default). Close
// undoes it in reverse order.
func (a *app) startScratch(ctx context.Context, c *cobra.Command, prefix, dataDir, blobURL string, keep bool, progress func(string)) (*scratch, error) {
	s := &scratch{Address: a.global.address, DataDir: dataDir, BlobURL: blobURL}
	s.External = c.Flags().Changed("address") || a.deps.Getenv("TEMPORAL_ADDRESS") != "" || a.global.addressFromProfile
	if s.External {
		s.Suffix = "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	} else {
		if a.deps.StartDevServer == nil {
			return nil, errors.New("this build has no embedded server; pass --address")
		}
		progress("starting an in-process Temporal server")
		srv, err := a.deps.StartDevServer(ctx, devopts.Options{SearchAttributes: api.SearchAttributes()})
		if err != nil {
			return nil, err
		}
		s.cleanup = append(s.cleanup, func() { _ = srv.Stop() })
		s.Address = srv.FrontendHostPort()
		progress(fmt.Sprintf("server ready at %s in %s", s.Address, srv.StartupDuration().Round(time.Millisecond)))
	}
	switch {
	case s.DataDir != "":
	case s.External:
		// Control planes already polling that namespace ingest from
		// their data dir; share it (the default, or WDC_DATA_DIR).
		s.DataDir = a.defaultDataDir()
	default:
		d, err := os.MkdirTemp("", prefix)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.DataDir = d
		if !keep {
			s.cleanup = append(s.cleanup, func() { os.RemoveAll(d) })
		}
	}
	tc, err := a.dialAddress(ctx, s.Address)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Client = tc
	s.cleanup = append(s.cleanup, tc.Close)
	if s.External {
		if err := wdcclient.CheckSearchAttributes(ctx, tc, a.global.namespace, false); err != nil {
			s.Close()
			return nil, err
		}
	}
	if s.BlobURL == "" {
		s.BlobURL = a.deps.Getenv("WDC_BLOB_URL")
	}
	return s, nil
}

// Close closes the client, removes the temporary data dir (unless kept)
// and stops the embedded server, in that order.
func (s *scratch) Close() {
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
	s.cleanup = nil
}
