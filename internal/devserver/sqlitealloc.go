package devserver

import (
	"sync"

	"modernc.org/libc"
	sqlitelib "modernc.org/sqlite/lib"
)

// The C allocator under modernc.org/sqlite (modernc.org/memory v1.11)
// serves a request of up to 16 KiB from a 64 KiB page of equal
// power-of-two slots (its private pageSize and maxSlotSize), and unmaps
// the page as soon as its last slot is freed. sqlite3_malloc adds an
// 8-byte size header to what it is asked for.
const (
	allocatorPage     = 1 << 16
	smallestSlotShift = 4
	largestSlotShift  = 14
	sqliteMallocExtra = 8
	// pagesPerSlotSize pages stay mapped for each slot size; journalPages
	// for the 2 KiB slots a memory database's rollback journal takes its
	// 1,024-byte chunks from: room for about 2 MB of journal.
	pagesPerSlotSize = 4
	journalPages     = 64
	journalSlotShift = 11
)

var pinOnce sync.Once

// pinAllocatorPages keeps pages of every slot size of SQLite's allocator
// mapped for the life of the process (about 6.5 MiB), so that a commit
// finds its journal's and statements' memory mapped. Safe to call again.
func pinAllocatorPages() {
	pinOnce.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		for shift := smallestSlotShift; shift <= largestSlotShift; shift++ {
			pages := pagesPerSlotSize
			if shift == journalSlotShift {
				pages = journalPages
			}
			pinSlots(tls, 1<<shift, pages)
		}
	})
}

// pinSlots allocates slot-byte slots until they span pages pages, then
// frees all but the first slot it took from each page.
func pinSlots(tls *libc.TLS, slot, pages int) {
	pinned := map[uintptr]bool{}
	var rest []uintptr
	for len(pinned) < pages {
		p := sqlitelib.Xsqlite3_malloc(tls, int32(slot-sqliteMallocExtra))
		if p == 0 {
			break
		}
		if page := p &^ (allocatorPage - 1); !pinned[page] {
			pinned[page] = true
			continue
		}
		rest = append(rest, p)
	}
	for _, p := range rest {
		sqlitelib.Xsqlite3_free(tls, p)
	}
}
