#!/usr/bin/env bash
# tools/uitest/run.sh [SCREENSHOT_DIR]: the browser test of the Temporal
# Web UI (make ui-test; make ui-screenshots passes docs/img).
# Builds bin/wdc, starts `wdc server start-dev` on free ports in a
# temporary directory, runs `wdc demo worker-leases` against it, starts a
# control plane (current details are answered by a query, and the demo
# stops its own), then runs uitest.mjs in headless Chromium: the list and
# the task's page, screenshots into SCREENSHOT_DIR (default bin/uitest).
# Every process it starts is stopped on exit. Needs node, npm and Debian's
# chromium (CHROMIUM overrides /usr/bin/chromium); .ci/run installs them.
# UITEST_FLAGS adds flags to uitest.mjs (e.g. '--expect TEXT').
set -euo pipefail
cd "$(dirname "$0")/../.."
shots=${1:-bin/uitest}
GO=${GO:-go}
began=$(date +%s)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/wdc-uitest.XXXXXX")
pids=()
cleanup() {
  rc=$?
  set +e
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  if [ "$rc" != 0 ]; then
    for f in server demo control-plane; do
      [ -s "$tmp/$f.log" ] && { echo "uitest: --- $f.log (last 30 lines)"; tail -30 "$tmp/$f.log"; }
    done
    echo "uitest: FAILED after $(($(date +%s) - began)) s (screenshots, if any, in $shots)"
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT

# waitfor FILE TEXT SECONDS: waits until FILE contains TEXT.
waitfor() {
  for _ in $(seq "$(($3 * 10))"); do
    grep -qF "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "uitest: no \"$2\" in $(basename "$1") after $3 s" >&2
  return 1
}

# The Node package: playwright-core from package-lock.json, into
# tools/uitest/node_modules (ignored by git); it drives Debian's Chromium,
# never a browser of its own.
if [ ! -f tools/uitest/node_modules/.package-lock.json ] ||
  [ tools/uitest/package-lock.json -nt tools/uitest/node_modules/.package-lock.json ]; then
  (cd tools/uitest && npm ci --no-audit --no-fund --loglevel=error)
fi
chromium=${CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || { echo "uitest: no Chromium at $chromium (apt-get install chromium)" >&2; exit 1; }

nice "$GO" build -o bin/wdc ./cmd/wdc

# Two free ports: the frontend and the Web UI (the S3 endpoint is off).
read -r port ui_port < <(node -e '
  const net = require("net"); const got = [];
  const take = () => { const s = net.createServer().listen(0, "127.0.0.1", () => {
    got.push(s.address().port); s.close(() => got.length < 2 ? take() : console.log(got.join(" "))); }); };
  take();')
address=127.0.0.1:$port
ui=http://127.0.0.1:$ui_port

bin/wdc server start-dev --port "$port" --ui-port "$ui_port" --no-s3 \
  --db-filename "$tmp/dev.db" >"$tmp/server.log" 2>&1 &
pids+=($!)
waitfor "$tmp/server.log" "web ui" 60
node -e '
  const until = Date.now() + 10000;
  const poll = () => fetch(process.argv[1]).then((r) => { if (!r.ok) throw r.status; })
    .catch((e) => { if (Date.now() > until) { console.error("uitest: Web UI not answering:", e); process.exit(1); } return new Promise((ok) => setTimeout(ok, 100)).then(poll); });
  poll();' "$ui/api/v1/settings"

bin/wdc demo worker-leases --address "$address" --data-dir "$tmp/data" -o json \
  >"$tmp/demo.json" 2>"$tmp/demo.log"
# The demo's task, and the worker whose lease (attempt 1) expired.
read -r task worker reason < <(node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  console.log(r.task_id, r.worker_1, r.retry_reason);' "$tmp/demo.json")
echo "uitest: demo task $task on $address (attempt 1 on $worker: $reason); Web UI $ui"

# start-dev's issuer, as the quickstart exports it: identity required.
WDC_CA_DIR="$tmp/dev.db.ca" bin/wdc control-plane --address "$address" --data-dir "$tmp/data" >"$tmp/control-plane.log" 2>&1 &
pids+=($!)
waitfor "$tmp/control-plane.log" "control plane polling" 30

node tools/uitest/uitest.mjs --url "$ui" --namespace default --task-id "$task" \
  --expect "$worker" --expect "$reason" --screenshots "$shots" --chromium "$chromium" ${UITEST_FLAGS:-}
echo "uitest: passed in $(($(date +%s) - began)) s"
