// Package examples carries the example task files of the README so that
// the demo runs exactly what a user runs by hand: the checksum script and
// its input file.
package examples

import _ "embed"

// ChecksumScript is checksum.sh: it checksums and counts
// inputs/observations.csv and writes outputs/summary.json naming the
// attempt and fence that produced it.
//
//go:embed checksum.sh
var ChecksumScript string

// Observations is observations.csv: 240 rows of synthetic sensor readings.
//
//go:embed observations.csv
var Observations string
