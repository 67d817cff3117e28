#!/usr/bin/env bash
# Load generator comparison (issue 6, "Measure"): Tempest's in-process http
# engine vs wrk vs k6, closed model, 50 connections/VUs, against the same
# `tempest target`. Target pinned to CPU 0, generator to CPU 1.
# Client CPU is the generator's user+sys from /usr/bin/time. The table gives
# the median over reps of each figure (the machine is shared and noisy; read
# the per-rep numbers too).
#
#   bench/loadgen/run.sh            # the official measurement: 30 s runs, 3 reps, interleaved
#   D=5 REPS=1 bench/loadgen/run.sh # a quick look
#   PROFILE=1 bench/loadgen/run.sh  # then one more engine run under pprof, summarised
#   TLS=1 bench/loadgen/run.sh      # the same against an HTTPS target (self-signed, HTTP/1.1)
#
# Env: D (seconds), REPS, VUS, PORT, K6 (path to k6; default: PATH, then
# /tmp/tools/k6), TARGET_CPU, GEN_CPU, PROFILE, BASELINE (an engine binary
# built from an older commit, run as one more tool, "baseline", interleaved
# with the rest). Tools that are missing are skipped. Memory per idle VU is
# bench/loadgen/mem.sh.
set -euo pipefail

cd "$(dirname "$0")/../.."
D=${D:-30}
REPS=${REPS:-3}
VUS=${VUS:-50}
PORT=${PORT:-18080}
TARGET_CPU=${TARGET_CPU:-0}
GEN_CPU=${GEN_CPU:-1}
OUT=$(mktemp -d /tmp/loadgen.XXXXXX)
# TLS=1: the target serves HTTPS with a certificate it makes at start; the
# engine and k6 skip verification, wrk never verifies. Connections are kept
# alive, so the handshakes are a start-up cost and the rates measure
# encrypted requests.
SCHEME=http TARGET_TLS=() ENGINE_TLS=() CURL=(curl -fs)
if [[ -n ${TLS:-} ]]; then SCHEME=https TARGET_TLS=(--tls) ENGINE_TLS=(-insecure) CURL=(curl -fsk); fi
URL="${SCHEME}://127.0.0.1:${PORT}/"

[[ -x bin/tempest ]] || make build >/dev/null
go build -o "$OUT/engine" ./bench/loadgen/engine

K6=${K6:-$(command -v k6 || true)}
[[ -n "$K6" ]] || { [[ -x /tmp/tools/k6 ]] && K6=/tmp/tools/k6; } || true
tools=(engine)
if [[ -n ${BASELINE:-} ]]; then tools+=(baseline); fi
if command -v wrk >/dev/null; then tools+=(wrk); else echo "skip wrk: not installed (apt-get install -y wrk)" >&2; fi
if [[ -n "$K6" && -x "$K6" ]]; then tools+=(k6); else echo "skip k6: not found (GOBIN=/tmp/tools go install go.k6.io/k6@v1.8.1)" >&2; fi

taskset -c "$TARGET_CPU" bin/tempest target --addr "127.0.0.1:${PORT}" "${TARGET_TLS[@]}" >"$OUT/target.log" 2>&1 &
TPID=$!
trap 'kill $TPID 2>/dev/null || true; wait $TPID 2>/dev/null || true' EXIT
for _ in $(seq 50); do "${CURL[@]}" "$URL" >/dev/null 2>&1 && break; sleep 0.1; done

cat >"$OUT/k6.js" <<JS
import http from 'k6/http';
export const options = { vus: ${VUS}, duration: '${D}s', summaryTrendStats: ['p(50)', 'p(99)'], insecureSkipTLSVerify: true };
export default function () { http.get('${URL}'); }
export function handleSummary(data) {
  const m = data.metrics;
  return { stdout: 'RESULT reqs=' + m.http_reqs.values.count + ' failed_rate=' + m.http_req_failed.values.rate +
    ' p50_ms=' + m.http_req_duration.values['p(50)'] + ' p99_ms=' + m.http_req_duration.values['p(99)'] + '\n' };
}
JS

# to_ms converts a wrk latency ("812.00us", "1.23ms", "1.01s") to ms.
to_ms() { awk -v v="$1" 'BEGIN{ if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v+0} else if (v ~ /s$/) {sub(/s$/,"",v); print v*1000} else print v }'; }

# one run: appends "tool rep reqs wall p50 p99 cpu" to $OUT/rows
run_one() {
  local tool=$1 rep=$2 log="$OUT/$1.$2.log" tf="$OUT/$1.$2.time"
  local reqs wall p50 p99
  case $tool in
  engine | baseline)
    local bin=$OUT/engine
    [[ $tool == baseline ]] && bin=$BASELINE
    /usr/bin/time -f '%U %S' -o "$tf" taskset -c "$GEN_CPU" "$bin" -url "$URL" -vus "$VUS" -d "${D}s" "${ENGINE_TLS[@]}" >"$log" 2>&1
    reqs=$(grep -o 'completed=[0-9]*' "$log" | cut -d= -f2)
    wall=$(grep -o 'wall_s=[0-9.]*' "$log" | cut -d= -f2)
    p50=$(grep -o 'p50_ms=[0-9.]*' "$log" | cut -d= -f2)
    p99=$(grep -o 'p99_ms=[0-9.]*' "$log" | cut -d= -f2) ;;
  wrk)
    /usr/bin/time -f '%U %S' -o "$tf" taskset -c "$GEN_CPU" wrk -t1 -c"$VUS" -d"${D}s" --latency "$URL" >"$log" 2>&1
    reqs=$(awk '/requests in/{print $1}' "$log")
    wall=$(awk '/requests in/{v=$4; sub(/s,$/,"",v); print v}' "$log")
    p50=$(to_ms "$(awk '$1=="50%"{print $2}' "$log")")
    p99=$(to_ms "$(awk '$1=="99%"{print $2}' "$log")") ;;
  k6)
    /usr/bin/time -f '%U %S' -o "$tf" taskset -c "$GEN_CPU" "$K6" run --no-usage-report --quiet "$OUT/k6.js" >"$log" 2>&1
    reqs=$(grep -o 'RESULT reqs=[0-9]*' "$log" | cut -d= -f2)
    wall=$D
    p50=$(grep -o 'p50_ms=[0-9.]*' "$log" | cut -d= -f2)
    p99=$(grep -o 'p99_ms=[0-9.]*' "$log" | cut -d= -f2) ;;
  esac
  local cpu; cpu=$(awk '{print $1+$2}' "$tf")
  echo "$tool $rep $reqs $wall $p50 $p99 $cpu" >>"$OUT/rows"
  printf '  %-6s rep %d: %s req in %ss, p50 %s ms, p99 %s ms, client CPU %s s\n' "$tool" "$rep" "$reqs" "$wall" "$p50" "$p99" "$cpu" >&2
}

echo "D=${D}s REPS=$REPS VUs/conns=$VUS $URL load average $(cut -d' ' -f1-3 /proc/loadavg) target CPU $TARGET_CPU, generator CPU $GEN_CPU, tools: ${tools[*]} (logs in $OUT)" >&2
for rep in $(seq "$REPS"); do
  for tool in "${tools[@]}"; do run_one "$tool" "$rep"; sleep 1; done
done

# Table: medians over reps of req/s, p50, p99, CPU-s and req per CPU-s, each
# taken on its own; the ratios divide the medians of req per CPU-s.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A eff
for t in "${tools[@]}"; do eff[$t]=$(awk -v t="$t" '$1 == t && $7 > 0 { print $3 / $7 }' "$OUT/rows" | median); done
echo "| tool | req/s (per rep) | p50 ms | p99 ms | client CPU-s / run | req per client CPU-s (per rep) | vs k6 | vs wrk |"
echo "|---|---|---|---|---|---|---|---|"
for t in "${tools[@]}"; do
  rps=$(awk -v t="$t" '$1 == t { print $3 / $4 }' "$OUT/rows" | median)
  reps=$(awk -v t="$t" '$1 == t { printf "%s%.0f", (n++ ? ", " : ""), $3 / $4 }' "$OUT/rows")
  effs=$(awk -v t="$t" '$1 == t && $7 > 0 { printf "%s%.0f", (n++ ? ", " : ""), $3 / $7 }' "$OUT/rows")
  p50=$(awk -v t="$t" '$1 == t { print $5 }' "$OUT/rows" | median)
  p99=$(awk -v t="$t" '$1 == t { print $6 }' "$OUT/rows" | median)
  cpu=$(awk -v t="$t" '$1 == t { print $7 }' "$OUT/rows" | median)
  awk -v t="$t" -v rps="$rps" -v reps="$reps" -v effs="$effs" -v p50="$p50" -v p99="$p99" -v cpu="$cpu" \
    -v e="${eff[$t]}" -v k6="${eff[k6]:-0}" -v wrk="${eff[wrk]:-0}" 'BEGIN {
      vk = k6 > 0 ? sprintf("%.2fx", e / k6) : "n/a"
      vw = wrk > 0 ? sprintf("%.2fx", e / wrk) : "n/a"
      printf "| %s | %.0f (%s) | %.2f | %.2f | %.2f | **%.0f** (%s) | %s | %s |\n", t, rps, reps, p50, p99, cpu, e, effs, vk, vw }'
done
echo
echo "target: $("${CURL[@]}" "${SCHEME}://127.0.0.1:${PORT}/__stats" || true)"

if [[ -n ${PROFILE:-} ]]; then
  echo
  echo "profile: one more engine run of ${D}s under pprof ($OUT/engine.pprof)" >&2
  taskset -c "$GEN_CPU" "$OUT/engine" -url "$URL" -vus "$VUS" -d "${D}s" "${ENGINE_TLS[@]}" -cpuprofile "$OUT/engine.pprof" | tee "$OUT/engine.profile.log"
  SET=http bench/profile_summary.sh "$OUT/engine.pprof" 15
fi
