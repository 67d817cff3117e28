#!/usr/bin/env bash
# Run Tempest's benchmarks and keep the output.
#
#   bench/run.sh                      # go test benchmarks, then bench/transport with defaults
#   bench/run.sh -reps 5              # extra arguments go to bench/transport
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

echo "== go test benchmarks -> $gotest_out"
go test -run '^$' -bench . -benchmem -count "${BENCH_COUNT:-3}" ./wire/ ./security/ ./transport/ 2>&1 | tee "$gotest_out"

args=("$@")
profdir=''
if [[ ${BENCH_PROFILE:-0} == 1 ]]; then
  profdir="$results/$stamp-profiles"
  args+=(-cpuprofile "$profdir")
fi

echo
echo "== go run ./bench/transport ${args[*]:-} -> $transport_out"
go run ./bench/transport "${args[@]}" 2>&1 | tee "$transport_out"

if [[ -n $profdir && -f $profdir/secure-1024B-c16.pprof ]]; then
  echo
  bench/profile_summary.sh "$profdir/secure-1024B-c16.pprof" 2>&1 | tee "$results/$stamp-profile-secure-1024B-c16.txt"
fi
