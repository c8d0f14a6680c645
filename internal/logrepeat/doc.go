// Package logrepeat keeps a failure that repeats from flooding a log: a
// retry loop reports each try to a Failure, which logs the first failure
// at once, then at most one line every 30 s with the count so far, and
// one line when a try succeeds again.
package logrepeat
