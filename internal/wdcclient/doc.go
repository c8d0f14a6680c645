// Package wdcclient is the client side of wdc's protocol: every call the
// CLI, the agent and the control-plane activities make to wdc workflows
// (register, heartbeat, drain, sweep, list workers; submit, inspect and
// cancel tasks; start, inspect, commit and close runs), with Temporal errors
// turned into *Error values that carry wdc's error type.
package wdcclient
