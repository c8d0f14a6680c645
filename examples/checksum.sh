#!/bin/sh
# Checksums and counts the input file and writes a JSON summary artifact that
# names the task, attempt and fence which produced it (WDC_* come from the
# executor).
set -eu
f=inputs/observations.csv
sum=$(sha256sum "$f" | cut -d' ' -f1)
rows=$(wc -l < "$f")
bytes=$(wc -c < "$f")
printf '{"task":"%s","input":"observations.csv","sha256":"%s","rows":%d,"bytes":%d,"attempt":%s,"fence":%s}\n' \
  "$WDC_TASK_ID" "$sum" "$rows" "$bytes" "$WDC_ATTEMPT" "$WDC_FENCE" > outputs/summary.json
