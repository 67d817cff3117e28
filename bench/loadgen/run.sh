#!/usr/bin/env bash
# Load generator comparison (issue 6, "Measure"): Tempest's in-process http
# engine vs wrk vs k6, closed model, 50 connections/VUs, against the same
# `tempest target`. Target pinned to CPU 0, generator to CPU 1.
# Client CPU is the generator's user+sys from /usr/bin/time.
#
#   bench/loadgen/run.sh            # D=10 s, 2 reps, interleaved
#   D=30 REPS=3 bench/loadgen/run.sh
#
# Env: D (seconds), REPS, VUS, PORT, K6 (path to k6; default: PATH, then
# /tmp/tools/k6), TARGET_CPU, GEN_CPU. Tools that are missing are skipped.
set -euo pipefail

cd "$(dirname "$0")/../.."
D=${D:-10}
REPS=${REPS:-2}
VUS=${VUS:-50}
PORT=${PORT:-18080}
TARGET_CPU=${TARGET_CPU:-0}
GEN_CPU=${GEN_CPU:-1}
URL="http://127.0.0.1:${PORT}/"
OUT=$(mktemp -d /tmp/loadgen.XXXXXX)

[[ -x bin/tempest ]] || make build >/dev/null
go build -o "$OUT/engine" ./bench/loadgen/engine

K6=${K6:-$(command -v k6 || true)}
[[ -n "$K6" ]] || { [[ -x /tmp/tools/k6 ]] && K6=/tmp/tools/k6; } || true
tools=(engine)
if command -v wrk >/dev/null; then tools+=(wrk); else echo "skip wrk: not installed (apt-get install -y wrk)" >&2; fi
if [[ -n "$K6" && -x "$K6" ]]; then tools+=(k6); else echo "skip k6: not found (GOBIN=/tmp/tools go install go.k6.io/k6@v1.8.1)" >&2; fi

taskset -c "$TARGET_CPU" bin/tempest target --addr "127.0.0.1:${PORT}" >"$OUT/target.log" 2>&1 &
TPID=$!
trap 'kill $TPID 2>/dev/null || true; wait $TPID 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -fs "$URL" >/dev/null 2>&1 && break; sleep 0.1; done

cat >"$OUT/k6.js" <<JS
import http from 'k6/http';
export const options = { vus: ${VUS}, duration: '${D}s', summaryTrendStats: ['p(50)', 'p(99)'] };
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
  engine)
    /usr/bin/time -f '%U %S' -o "$tf" taskset -c "$GEN_CPU" "$OUT/engine" -url "$URL" -vus "$VUS" -d "${D}s" >"$log" 2>&1
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

echo "D=${D}s REPS=$REPS VUs/conns=$VUS target CPU $TARGET_CPU, generator CPU $GEN_CPU, tools: ${tools[*]} (logs in $OUT)" >&2
for rep in $(seq "$REPS"); do
  for tool in "${tools[@]}"; do run_one "$tool" "$rep"; sleep 1; done
done

# Table: means over reps (req/s = sum reqs / sum wall; req per CPU-s = sum reqs / sum CPU).
awk -v tools="${tools[*]}" '
  { n[$1]++; r[$1]+=$3; w[$1]+=$4; p50[$1]+=$5; p99[$1]+=$6; c[$1]+=$7
    reps[$1] = reps[$1] sprintf("%s%.0f", (reps[$1]==""?"":", "), $3/$4) }
  END {
    split(tools, t, " ")
    for (i in t) { k=t[i]; eff[k] = c[k] > 0 ? r[k]/c[k] : 0 }
    printf "| tool | req/s (per rep) | p50 ms | p99 ms | client CPU-s / run | req per client CPU-s | vs k6 | vs wrk |\n"
    printf "|---|---|---|---|---|---|---|---|\n"
    for (i=1; i in t; i++) { k=t[i]
      vk = ("k6" in eff)  && eff["k6"]  > 0 ? sprintf("%.2fx", eff[k]/eff["k6"])  : "n/a"
      vw = ("wrk" in eff) && eff["wrk"] > 0 ? sprintf("%.2fx", eff[k]/eff["wrk"]) : "n/a"
      printf "| %s | %.0f (%s) | %.2f | %.2f | %.2f | %.0f | %s | %s |\n", k, r[k]/w[k], reps[k], p50[k]/n[k], p99[k]/n[k], c[k]/n[k], eff[k], vk, vw }
  }' "$OUT/rows"
echo
echo "target: $(curl -fs "http://127.0.0.1:${PORT}/__stats" || true)"
