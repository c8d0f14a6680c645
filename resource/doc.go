// Package resource holds the resource amounts wdc schedules with: CPU in
// millicores, memory in bytes, whole GPUs and named custom resources. The
// same type is a worker's capacity, a task's request and a reservation.
//
// It is pure Go (no Temporal import) so workflow code may call it; every
// function that walks the Custom map does so in sorted key order.
package resource
