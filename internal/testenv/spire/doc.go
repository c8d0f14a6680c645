// Package spiretest runs a real SPIRE server and agent on loopback for
// wdc's identity system test: join-token node attestation, unix workload
// attestation, one agent socket. The binaries come from tools/spire/build.sh
// (make spire-tools); a missing binary is ErrNoBinaries, a test failure.
package spiretest
