// Package temporaltest runs the official temporal-server on PostgreSQL
// for tests: where tools/build.sh cached the binaries, a throwaway
// PostgreSQL with Temporal's schema (tools/postgres.sh), the server's
// config directory (the four services on given ports, the dynamic config
// wdc needs), and the namespace registered as temporalio/auto-setup does.
//
// A missing binary is an error (ErrNoBinaries names the build script),
// never a reason to skip.
//
// Import it as temporaltest
// ("github.com/wdc-runtime/wdc/internal/testenv/temporal"); it is one of
// the test environments under internal/testenv, and nothing outside tests
// imports it.
package temporaltest
