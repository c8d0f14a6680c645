// Package fleet holds the rules of the worker registry: a fleet worker's
// record, its liveness states (ACTIVE, STALE, DRAINING, OFFLINE) and the
// transitions between them, incarnations, reservations, and Eligible — the
// ONE function that decides whether a worker may take a task (DESIGN §4,
// STYLE 12).
//
// It is pure Go with no Temporal import: the WdcWorker workflow, the
// worker-selection activity and `wdc workers assign` all call it, and it is
// table-tested as plain functions. Nothing here reads the clock.
package fleet
