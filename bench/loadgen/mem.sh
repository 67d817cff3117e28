#!/usr/bin/env bash
# Memory per idle VU (issue 6): Tempest's in-process http engine vs k6,
# against a `tempest target` that holds every request for 30 s, so each VU
# sits on one open request. For each tool and VU count the generator runs
# until the target reports that many requests in flight; then its VmRSS is
# read from /proc and the generator is stopped. Per VU is
# (RSS at N - RSS at 1) / (N - 1), so start-up and the runtime's own memory
# cancel out.
#
#   bench/loadgen/mem.sh                 # VUS="1000 10000"
#   VUS="1000" bench/loadgen/mem.sh
#   TLS=1 bench/loadgen/mem.sh           # each idle VU holds a TLS connection (HTTPS target)
#
# Env: VUS, PORT, K6 (path to k6; default: PATH, then /tmp/tools/k6; "none"
# skips it), ENGINE (an engine binary to measure instead of building this
# tree's, e.g. one built from an older commit). k6 is skipped when missing. k6 needs about 1 MB per VU (a JS runtime each): check
# free memory before asking it for 10,000.
set -euo pipefail

cd "$(dirname "$0")/../.."
VUS=${VUS:-"1000 10000"}
PORT=${PORT:-18081}
OUT=$(mktemp -d /tmp/loadgen-mem.XXXXXX)
SCHEME=http TARGET_TLS=() ENGINE_TLS=() CURL=(curl -fs) K6_TLS=
if [[ -n ${TLS:-} ]]; then SCHEME=https TARGET_TLS=(--tls) ENGINE_TLS=(-insecure) CURL=(curl -fsk) K6_TLS=", insecureSkipTLSVerify: true"; fi
URL="${SCHEME}://127.0.0.1:${PORT}/"

[[ -x bin/tempest ]] || make build >/dev/null
ENGINE=${ENGINE:-$OUT/engine}
[[ -x $ENGINE && $ENGINE != "$OUT/engine" ]] || go build -o "$ENGINE" ./bench/loadgen/engine
K6=${K6:-$(command -v k6 || true)}
[[ -n "$K6" ]] || { [[ -x /tmp/tools/k6 ]] && K6=/tmp/tools/k6; } || true
tools=(engine)
if [[ -n "$K6" && -x "$K6" ]]; then tools+=(k6); else echo "skip k6: not found" >&2; fi

bin/tempest target --addr "127.0.0.1:${PORT}" --latency 30s "${TARGET_TLS[@]}" >"$OUT/target.log" 2>&1 &
TPID=$!
GPID=
cleanup() {
  [[ -n $GPID ]] && kill "$GPID" 2>/dev/null || true
  kill $TPID 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 50); do "${CURL[@]}" "${SCHEME}://127.0.0.1:${PORT}/__stats" >/dev/null 2>&1 && break; sleep 0.1; done

in_flight() { "${CURL[@]}" "${SCHEME}://127.0.0.1:${PORT}/__stats" | grep -o '"in_flight":[0-9]*' | cut -d: -f2; }
rss_kb() { awk '/^VmRSS:/{print $2}' "/proc/$1/status"; }

# sample TOOL N: start the generator, wait for N requests in flight, print
# its RSS in KB, stop it and wait until the target has dropped them.
sample() {
  local tool=$1 n=$2
  case $tool in
  engine) "$ENGINE" -url "$URL" -vus "$n" -d 60s "${ENGINE_TLS[@]}" >"$OUT/$tool.$n.log" 2>&1 & ;;
  k6)
    cat >"$OUT/k6.$n.js" <<JS
import http from 'k6/http';
export const options = { vus: ${n}, duration: '60s'${K6_TLS} };
export default function () { http.get('${URL}', { timeout: '120s' }); }
JS
    "$K6" run --no-usage-report --quiet "$OUT/k6.$n.js" >"$OUT/$tool.$n.log" 2>&1 & ;;
  esac
  GPID=$!
  local waited=0
  until [[ $(in_flight) -ge $n ]]; do
    sleep 0.2
    waited=$((waited + 1))
    if ((waited > 600)); then echo "$tool: $n requests never in flight" >&2; return 1; fi
  done
  sleep 1 # let start-up garbage settle into the figure the same way for both
  rss_kb "$GPID"
  kill "$GPID" 2>/dev/null || true
  wait "$GPID" 2>/dev/null || true
  GPID=
  until [[ $(in_flight) -eq 0 ]]; do sleep 0.2; done
}

echo "| tool | VUs | RSS at 1 VU | RSS at N VUs | per idle VU |"
echo "|---|---|---|---|---|"
for tool in "${tools[@]}"; do
  base=$(sample "$tool" 1)
  for n in $VUS; do
    rss=$(sample "$tool" "$n")
    awk -v t="$tool" -v n="$n" -v b="$base" -v r="$rss" \
      'BEGIN { printf "| %s | %d | %.1f MB | %.1f MB | **%.1f KiB** |\n", t, n, b/1024, r/1024, (r-b)/(n-1) }'
  done
done
