#!/usr/bin/env bash
# Summarise a CPU profile from bench/transport (-cpuprofile DIR), or, with
# SET=http, one from the load generator's engine (bench/loadgen).
#
#   bench/profile_summary.sh bench/results/<stamp>-profiles/secure-1024B-c16.pprof [N]
#   SET=http bench/profile_summary.sh /tmp/loadgen.XXXX/engine.pprof
#
# Prints the top N (default 12) entries of `go tool pprof -top -cum`, then an
# exclusive breakdown by component: each sample is charged to the FIRST
# component below whose pattern appears anywhere in its stack, so the rows
# add up to 100% (allocation done inside CBOR is charged to CBOR, a sendmsg
# made by quic-go to socket syscalls, and so on).
set -euo pipefail

prof=${1:?usage: $0 PROFILE [N]}
n=${2:-12}

echo "== go tool pprof -top -cum (top $n) : $prof"
go tool pprof -top -cum -nodecount="$n" "$prof" 2>/dev/null | sed -n '/^Duration/p;/flat%/,$p'

# name|focus regex, in priority order.
transport_components=(
  'envelope key derivation (HKDF-SHA256, per message)|golang\.org/x/crypto/hkdf'
  'envelope cipher setup (AES key schedule + NewGCM, per message)|security\.\(\*secretKey\)\.aead'
  'envelope AES-GCM seal/open + salt/nonce (crypto/rand)|security\.\(\*Keyring\)\.(Seal|Open)'
  'CBOR encode/decode (envelope + body, incl. its allocs)|fxamacker/cbor'
  'socket syscalls (sendmsg/recvmsg/read/write)|internal/poll\.\(\*FD\)|x/net/internal/socket\.|syscall\.Syscall|syscall\.RawSyscall'
  'QUIC packet protection (TLS 1.3 AES-GCM + header protection)|quic-go/internal/handshake'
  'quic-go other (packing, frames, ACKs, loss/cc, stream buffers)|quic-go'
  'garbage collector (mark workers, assists, sweep)|runtime\.gcBgMarkWorker|runtime\.gcAssistAlloc|runtime\.bgsweep|runtime\.bgscavenge|runtime\.GC$'
  'tempest transport other (breaker, replay, rate limit, ids, demux, allocs)|tempest/'
  'bench harness / TCP floor code (main.*)|^main\.'
)
http_components=(
  'socket write (request; on loopback it also runs the TCP delivery)|internal/poll\.\(\*FD\)\.Write'
  'socket read (response)|internal/poll\.\(\*FD\)\.Read'
  'dial and close|net\.\(\*Dialer\)|internal/poll\.\(\*FD\)\.(Close|decref)'
  'netpoll (epoll_wait)|runtime\.netpoll$'
  'garbage collector (mark workers, assists, sweep)|runtime\.gcBgMarkWorker|runtime\.gcAssistAlloc|runtime\.bgsweep|runtime\.bgscavenge'
  'heap allocation (runtime.mallocgc)|runtime\.mallocgc$'
  'net/http client (goroutine hand-offs, header parsing)|net/http\.|net/textproto\.'
  'h1 client (encode, parse)|workflow/internal/h1\.'
  'recorder (histograms, counters, series)|workflow\.\(\*recorder|hdrhistogram|workflow\.\(\*shardSeries'
  'clock reads|^time\.Now$|^time\.Since$'
  'tempest runner other (iterate, templates, executor)|tempest/'
)
transport_overlaps=(
  'all envelope crypto (security.Keyring.Seal/Open)|security\.\(\*Keyring\)\.(Seal|Open)'
  'all heap allocation (runtime.mallocgc)|runtime\.mallocgc$'
  'all socket syscalls|internal/poll\.\(\*FD\)|x/net/internal/socket\.|syscall\.Syscall|syscall\.RawSyscall'
  'all quic-go|quic-go'
)
http_overlaps=(
  'all heap allocation (runtime.mallocgc)|runtime\.mallocgc$'
  'all syscalls (socket I/O, epoll, futex)|internal/runtime/syscall/linux\.Syscall6|syscall\.Syscall|syscall\.RawSyscall|runtime\.futex'
  'the scheduler (findRunnable, incl. its netpoll)|runtime\.findRunnable'
)
case ${SET:-transport} in
transport) components=("${transport_components[@]}") overlaps=("${transport_overlaps[@]}") ;;
http) components=("${http_components[@]}") overlaps=("${http_overlaps[@]}") ;;
*) echo "SET must be transport or http" >&2; exit 2 ;;
esac

total_line=$(go tool pprof -top -nodefraction=0 -nodecount=1 "$prof" 2>/dev/null | grep -m1 '^Duration' || true)
echo
echo "== exclusive breakdown by component ($total_line)"
ignore=''
accounted=0
for c in "${components[@]}"; do
  name=${c%%|*}
  re=${c#*|}
  args=(-top -nodefraction=0 -edgefraction=0 -nodecount=1000000 -focus="$re")
  [[ -n $ignore ]] && args+=(-ignore="$ignore")
  line=$(go tool pprof "${args[@]}" "$prof" 2>/dev/null | grep -m1 '^Showing nodes accounting for' || true)
  if [[ -n $line ]]; then
    amt=$(sed -E 's/^Showing nodes accounting for ([^,]+), ([0-9.]+)% of.*/\1/' <<<"$line")
    pct=$(sed -E 's/^Showing nodes accounting for ([^,]+), ([0-9.]+)% of.*/\2/' <<<"$line")
  else
    amt=0s pct=0
  fi
  accounted=$(awk -v a="$accounted" -v b="$pct" 'BEGIN{printf "%.2f", a+b}')
  printf '%6.1f%%  %8s  %s\n' "$pct" "$amt" "$name"
  ignore=${ignore:+$ignore|}$re
done
rest=$(awk -v a="$accounted" 'BEGIN{printf "%.1f", 100-a}')
printf '%6s%%  %8s  %s\n' "$rest" "" 'runtime other (scheduler, netpoll, timers, futex)'

echo
echo "== overlapping views (a sample may count in several rows)"
for c in "${overlaps[@]}"; do
  name=${c%%|*}
  re=${c#*|}
  line=$(go tool pprof -top -nodefraction=0 -edgefraction=0 -nodecount=1000000 -focus="$re" "$prof" 2>/dev/null | grep -m1 '^Showing nodes accounting for' || true)
  pct=$(sed -E 's/^Showing nodes accounting for ([^,]+), ([0-9.]+)% of.*/\2/' <<<"${line:-Showing nodes accounting for 0s, 0% of}")
  printf '%6.1f%%  %s\n' "$pct" "$name"
done
