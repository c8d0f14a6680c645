// Package topology tests wdc on the production topology, natively: a
// PostgreSQL cluster with Temporal's schema (tools/postgres.sh), the
// official temporal-server binary (built by the tools module,
// tools/build.sh), two `wdc control-plane` processes and two `wdc agent`
// processes. It is what docker-compose.yml runs, without containers.
//
// The test finds the Temporal binaries in $WDC_TEMPORAL_TOOLS (default
// ${XDG_CACHE_HOME:-$HOME/.cache}/wdc-tools/temporal) and fails, naming
// the missing piece, when they or PostgreSQL are absent: `make test` and
// .ci/run prepare both. It imports no go.temporal.io/server package; the
// server runs as its own process, and the wdc processes are this test
// binary re-executed as wdc.
package topology
