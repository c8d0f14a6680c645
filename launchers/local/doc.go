// Package local is the Local launcher: it runs an attempt in the agent's
// own process through the executor (task directory, own process group,
// explicit environment, heartbeats, self-fencing, result submission) and
// keeps track of the attempts it started so they can be inspected and
// cancelled.
package local
