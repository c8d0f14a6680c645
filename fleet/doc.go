// Package fleet holds the rules of the worker registry: a fleet worker's
// record, its liveness states (ACTIVE, STALE, DRAINING, OFFLINE) and the
// transitions between them, incarnations, slots and reservations, Eligible
// — the one function that decides whether a worker may take a task — and
// Place, which orders the eligible workers for selection (avoided and late
// workers last, least loaded first, seeded spread among equals).
//
// It is pure Go with no Temporal import: the WdcWorker workflow, the
// worker-selection activity and `wdc workers assign` all call it, and it is
// table-tested as plain functions. Nothing here reads the clock: callers
// pass the time in.
package fleet
