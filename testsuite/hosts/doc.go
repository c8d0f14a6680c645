// Package hosts tests wdc across machines, on one: three network
// namespaces joined by veth pairs to a bridge, each a "host" with its own
// environment and data directory and nothing shared but the kernel (so
// their clocks are one). Host a runs `wdc server start-dev` (Temporal and
// the S3 artifact store) and a control plane, hosts b and c each an agent.
// A partition is a blackhole: an nft table in a host's namespace drops
// every packet on its link and leaves the sockets open, as a real network
// does.
//
// The tests need Linux, root, `ip` (iproute2) and `nft` (nftables); they
// fail, naming what is missing, without them (.ci/run installs the
// packages). Every wdc process is this test binary re-executed as wdc. The
// namespaces, veths and bridge get names unique to the test and are
// removed when it ends, with every process left in them (a test binary
// killed before its cleanups leaves them behind: names start with "wh",
// see `ip netns list` and `ip link`).
//
// Each test repeats its partition $WDC_HOSTS_RUNS times (default 1;
// `make soak` 10). TestNemesisSoak (soak_test.go; make soak-ci, not make
// test) runs six hosts under seeded faults and checks the recorded
// history with internal/soak (docs/reliability.md); with
// $WDC_SOAK_SERVER=official, host a's Temporal server is PostgreSQL and
// the official temporal-server (official_test.go).
package hosts
