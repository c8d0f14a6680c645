#!/usr/bin/env bash
# Runs a command and, when $WDC_TIMINGS names a file, appends how long it
# took to it, for .ci/run's summary of phase durations:
#
#   tools/timed.sh NAME COMMAND [ARG...]
#
# appends "NAME<TAB>SECONDS<TAB>EXIT STATUS" and exits with COMMAND's
# status. Without $WDC_TIMINGS it only runs COMMAND.
set -uo pipefail
name=$1
shift
began=$(date +%s)
"$@"
rc=$?
if [ -n "${WDC_TIMINGS:-}" ]; then
  printf '%s\t%s\t%s\n' "$name" "$(($(date +%s) - began))" "$rc" >>"$WDC_TIMINGS"
fi
exit "$rc"
