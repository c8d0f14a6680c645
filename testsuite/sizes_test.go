package testsuite

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/wdc-runtime/wdc/api"
)

// Sizes of the long system tests. `make test` (CI) runs them reduced, at
// the defaults below, which still reach every state their assertions are
// about; `make scale` and `make soak` set the variables to full size.
const (
	// envScaleTasks is how many tasks TestManyTasksInOneRun submits in one
	// run: default defaultScaleTasks, `make scale` 10000. At least
	// minScaleTasks.
	envScaleTasks     = "WDC_SCALE_TASKS"
	defaultScaleTasks = 2000
	// minScaleTasks: with fewer tasks than twice the ended tasks a run keeps
	// listed, no continue-as-new needs to drop any from the listing.
	minScaleTasks = 2 * api.RunListedEndedTasks

	// envSoakFor is how long each soak test keeps going (streams its
	// messages; TestShortPartitionsCostNoLease cuts and heals), as a Go
	// duration: by default each test's own reduced length (soakFor's
	// argument), `make soak` 90s. At least minSoakFor.
	envSoakFor = "WDC_SOAK_FOR"
	// minSoakFor: the soak tests want three continue-as-new generations
	// or more (soakContinueAsNewAfter events each) from their stream.
	minSoakFor = 10 * time.Second
)

// scaleTasks is the size of TestManyTasksInOneRun: $WDC_SCALE_TASKS or
// the default. A value that is not a number of at least minScaleTasks
// fails the test.
func scaleTasks(t *testing.T) int {
	t.Helper()
	s := os.Getenv(envScaleTasks)
	if s == "" {
		return defaultScaleTasks
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < minScaleTasks {
		t.Fatalf("%s=%q: want a number of tasks, at least %d", envScaleTasks, s, minScaleTasks)
	}
	return n
}

// soakFor is how long a soak test streams: $WDC_SOAK_FOR, else reduced.
// A value that is not a duration of at least minSoakFor fails the test.
func soakFor(t *testing.T, reduced time.Duration) time.Duration {
	t.Helper()
	s := os.Getenv(envSoakFor)
	if s == "" {
		return reduced
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < minSoakFor {
		t.Fatalf("%s=%q: want a duration, at least %s", envSoakFor, s, minSoakFor)
	}
	return d
}
