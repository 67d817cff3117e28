#!/usr/bin/env bash
# Run Tempest's benchmarks and keep the output.
#
#   bench/run.sh                      # everything below, in order
#   bench/run.sh -reps 5              # extra arguments go to bench/transport
#   BENCH_ONLY=loadgen bench/run.sh   # one part: gotest, transport, loadgen (engine vs wrk vs k6),
#                                     # loadgen-mem (memory per idle VU), loadgen-tls (both against an
#                                     # HTTPS target), gate (gate overhead and failover),
#                                     # rainstorm (pipelines EO/ALO vs Miller, recovery; RAINSTORM_ARGS)
#   BENCH_PROFILE=1 bench/run.sh      # also CPU-profile each secure cell and summarise 1 KiB/16
#   BENCH_COUNT=5 bench/run.sh        # go test -count (default 3; quote medians, e.g. with benchstat)
#
# Output goes to stdout and to bench/results/<UTC stamp>-*.txt.
# Suggested Makefile target:   bench: ; bench/run.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

results=bench/results
mkdir -p "$results"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
gotest_out="$results/$stamp-gotest.txt"
transport_out="$results/$stamp-transport.txt"

want() { [[ -z ${BENCH_ONLY:-} || ${BENCH_ONLY} == "$1" ]]; }

if want gotest; then
echo "== go test benchmarks -> $gotest_out"
go test -run '^$' -bench . -benchmem -count "${BENCH_COUNT:-3}" ./wire/ ./security/ ./transport/ 2>&1 | tee "$gotest_out"
fi

args=("$@")
profdir=''
if [[ ${BENCH_PROFILE:-0} == 1 ]]; then
  profdir="$results/$stamp-profiles"
  args+=(-cpuprofile "$profdir")
fi

if want transport; then
echo
echo "== go run ./bench/transport ${args[*]:-} -> $transport_out"
go run ./bench/transport "${args[@]}" 2>&1 | tee "$transport_out"
fi

if [[ -n $profdir && -f $profdir/secure-1024B-c16.pprof ]]; then
  echo
  bench/profile_summary.sh "$profdir/secure-1024B-c16.pprof" 2>&1 | tee "$results/$stamp-profile-secure-1024B-c16.txt"
fi

# The benches below run the binaries: build them from this tree.
if want loadgen || want loadgen-mem || want loadgen-tls || want gate || want rainstorm; then make build >/dev/null; fi
if want loadgen; then
  echo
  echo "== bench/loadgen/run.sh -> $results/$stamp-loadgen.txt"
  bench/loadgen/run.sh 2>&1 | tee "$results/$stamp-loadgen.txt"
fi
if want loadgen-mem; then
  echo
  echo "== bench/loadgen/mem.sh -> $results/$stamp-loadgen-mem.txt"
  bench/loadgen/mem.sh 2>&1 | tee "$results/$stamp-loadgen-mem.txt"
fi
if want loadgen-tls; then
  echo
  echo "== TLS=1 bench/loadgen/run.sh, mem.sh -> $results/$stamp-loadgen-tls.txt"
  { TLS=1 bench/loadgen/run.sh && TLS=1 VUS="1000 5000" bench/loadgen/mem.sh; } 2>&1 | tee "$results/$stamp-loadgen-tls.txt"
fi
if want gate; then
  echo
  echo "== go run ./bench/gate -> $results/$stamp-gate.txt"
  go run ./bench/gate -bin bin 2>&1 | tee "$results/$stamp-gate.txt"
fi
if want rainstorm; then
  echo
  echo "== go run ./bench/rainstorm ${RAINSTORM_ARGS:-} -> $results/$stamp-rainstorm.txt"
  # shellcheck disable=SC2086 # RAINSTORM_ARGS holds several flags
  go run ./bench/rainstorm -bin bin -profile ${RAINSTORM_ARGS:-} 2>&1 | tee "$results/$stamp-rainstorm.txt"
fi
