package devserver

import (
	"database/sql"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

// minorFaults is the process's minor page faults so far.
func minorFaults(t *testing.T) int64 {
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return ru.Minflt
}

// TestMemoryStoreCommitsWithoutFaultingInPages: once prepareStore has
// run, as start-dev runs it, a memory database's commits, each journaling
// about 100 KiB, fault in fewer than 5 pages each (the journal's and the
// statements' memory stays mapped).
func TestMemoryStoreCommitsWithoutFaultingInPages(t *testing.T) {
	_, err := prepareStore(Options{})
	require.NoError(t, err)
	db, err := sql.Open("sqlite", "file:wdc-alloc-test?mode=memory&cache=shared")
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.Exec("CREATE TABLE blobs (id INTEGER PRIMARY KEY, data BLOB)")
	require.NoError(t, err)
	// Rows of 3,000 bytes, made before measuring, so that Go's own heap
	// faults in little meanwhile.
	rows := [][]byte{
		[]byte(strings.Repeat("x", 3000)),
		[]byte(strings.Repeat("y", 3000)),
	}
	for i := range 200 {
		_, err := db.Exec("INSERT INTO blobs (id, data) VALUES (?, ?)", i, rows[0])
		require.NoError(t, err)
	}
	update := "UPDATE blobs SET data = ? WHERE id = ?"
	commit := func(round int) {
		tx, err := db.Begin()
		require.NoError(t, err)
		// 30 rows of 3,000 bytes journal 25 or more 4 KiB pages.
		for i := range 30 {
			_, err := tx.Exec(update, rows[round%2], (round*30+i)%200)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit())
	}
	for round := range 20 { // warm up Go's heap and SQLite's page cache
		commit(round)
	}
	runtime.GC()
	const rounds = 200
	before := minorFaults(t)
	for round := range rounds {
		commit(round)
	}
	perCommit := float64(minorFaults(t)-before) / rounds
	t.Logf("minor page faults per commit: %.1f", perCommit)
	require.Less(t, perCommit, 5.0, "a commit faulted in its journal's memory")
}
