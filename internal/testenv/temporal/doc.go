// Package temporaltest configures the official temporal-server on
// PostgreSQL for tests: where tools/build.sh cached the binaries, and the
// server's config directory (persistence on a PostgreSQL that
// tools/postgres.sh started, the four services on given ports, and the
// dynamic config wdc needs).
//
// A missing binary is an error (ErrNoBinaries names the build script),
// never a reason to skip.
//
// Import it as temporaltest
// ("github.com/wdc-runtime/wdc/internal/testenv/temporal"); it is one of
// the test environments under internal/testenv, and nothing outside tests
// imports it.
package temporaltest
