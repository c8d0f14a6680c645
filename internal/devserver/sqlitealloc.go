package devserver

import (
	"sync"

	"modernc.org/libc"
	sqlitelib "modernc.org/sqlite/lib"
)

// The C allocator under modernc.org/sqlite (modernc.org/memory) serves a
// request of up to 16 KiB from a 64 KiB page of equal power-of-two slots,
// and unmaps the page as soon as its last slot is freed. sqlite3_malloc
// adds an 8-byte size header to what it is asked for.
const (
	allocatorPage     = 1 << 16
	smallestSlotLog   = 4
	largestSlotLog    = 14
	sqliteMallocExtra = 8
	// pagesPerSlotSize pages stay mapped for each slot size; journalPages
	// for the 2 KiB slots a memory database's rollback journal takes its
	// 1,024-byte chunks from: room for about 2 MiB of journal.
	pagesPerSlotSize = 4
	journalPages     = 64
	journalSlotLog   = 11
)

var pinOnce sync.Once

// pinAllocatorPages keeps pages of every slot size of SQLite's allocator
// mapped for the life of the process (about 7 MiB in all). Without them a
// memory database maps, faults in and unmaps pages at every commit, for
// its rollback journal and for each statement's buffers: a fifth of the
// dev server's CPU in `wdc bench`. One slot per page stays allocated; the rest go on the
// allocator's free list, where later requests of that size find them.
func pinAllocatorPages() {
	pinOnce.Do(func() {
		tls := libc.NewTLS()
		defer tls.Close()
		for log := smallestSlotLog; log <= largestSlotLog; log++ {
			pages := pagesPerSlotSize
			if log == journalSlotLog {
				pages = journalPages
			}
			pinSlots(tls, 1<<log, pages)
		}
	})
}

// pinSlots allocates whole pages of slot-byte slots and frees all but the
// first slot of each page.
func pinSlots(tls *libc.TLS, slot, pages int) {
	perPage := (allocatorPage - 64) / slot // the page header is under 64 bytes
	held := make([]uintptr, 0, pages*perPage)
	for range pages * perPage {
		p := sqlitelib.Xsqlite3_malloc(tls, int32(slot-sqliteMallocExtra))
		if p == 0 {
			break
		}
		held = append(held, p)
	}
	kept := map[uintptr]bool{}
	for _, p := range held {
		if page := p &^ (allocatorPage - 1); !kept[page] {
			kept[page] = true
			continue
		}
		sqlitelib.Xsqlite3_free(tls, p)
	}
}
