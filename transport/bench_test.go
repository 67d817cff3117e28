package transport

import (
	"context"
	"crypto/rand"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"tempest/security"
	"tempest/wire"
)

// benchSecret is used only by the benchmarks below; it passes
// security.ValidateSecret.
const benchSecret = "bench-Hq7vT2xK9mW4pZ1cR8nF5sL3yJ6dG0aB"

// benchNode starts a QUIC transport for a benchmark and closes it when the
// benchmark ends. It deliberately does not reuse the tests' newNode, so test
// helpers can change without moving the benchmark's baseline. The rate limit
// is raised out of reach (a loopback benchmark can exceed the default 20k
// messages/s per source) but left set, so its per-message cost is measured.
func benchNode(b *testing.B, id string) *QUIC {
	b.Helper()
	kr, err := security.NewKeyring(benchSecret, "")
	if err != nil {
		b.Fatalf("keyring: %v", err)
	}
	cfg := DefaultConfig()
	cfg.NodeID = id
	cfg.Keyring = kr
	cfg.Logger = slog.New(slog.DiscardHandler)
	for i := range cfg.RateLimit.Limits {
		cfg.RateLimit.Limits[i] = security.Limit{PerSecond: 1e9, Burst: 1 << 30}
	}
	cfg.DrainTimeout = time.Second
	cfg.Linger = time.Millisecond
	tr, err := NewQUIC(cfg)
	if err != nil {
		b.Fatalf("new transport %s: %v", id, err)
	}
	b.Cleanup(func() { tr.Close() })
	return tr
}

func BenchmarkCall1KiB(b *testing.B)  { benchmarkCall(b, 1<<10) }
func BenchmarkCall64KiB(b *testing.B) { benchmarkCall(b, 64<<10) }

// benchmarkCall measures Ping round trips of size payload bytes between two
// nodes in this process, from 8×GOMAXPROCS concurrent callers (16 on the
// 2-core reference machine, matching bench/transport's 16-caller cell).
// MB/s counts request and response payloads; rt/s is round trips per second
// of wall time.
func benchmarkCall(b *testing.B, size int) {
	srv := benchNode(b, "bench-server")
	cli := benchNode(b, "bench-client")
	srv.Handle(wire.TypePing, func(_ context.Context, _ Peer, msg wire.Message) (wire.Message, error) {
		return msg, nil
	})
	payload := make([]byte, size)
	rand.Read(payload)
	ctx := context.Background()
	addr := srv.Addr()
	// Dial and handshake outside the timed region.
	if _, err := cli.Call(ctx, addr, &wire.Ping{Seq: 1, Payload: payload}); err != nil {
		b.Fatalf("warm-up call: %v", err)
	}
	var seq atomic.Uint64
	seq.Store(1)
	b.SetBytes(int64(2 * size))
	b.ReportAllocs()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &wire.Ping{Payload: payload}
		for pb.Next() {
			req.Seq = seq.Add(1)
			resp, err := cli.Call(ctx, addr, req)
			if err != nil {
				b.Errorf("call: %v", err)
				return
			}
			if p, ok := resp.(*wire.Ping); !ok || p.Seq != req.Seq || len(p.Payload) != size {
				b.Errorf("unexpected reply %T for seq %d", resp, req.Seq)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rt/s")
}

// BenchmarkCall1KiBSerial is one caller's round trips back to back: the
// latency-bound end of bench/transport (its 1-caller cell), where every
// goroutine hand-off and per-call timer shows.
func BenchmarkCall1KiBSerial(b *testing.B) {
	srv := benchNode(b, "bench-server")
	cli := benchNode(b, "bench-client")
	srv.Handle(wire.TypePing, func(_ context.Context, _ Peer, msg wire.Message) (wire.Message, error) {
		return msg, nil
	})
	req := &wire.Ping{Payload: make([]byte, 1<<10)}
	ctx := context.Background()
	if _, err := cli.Call(ctx, srv.Addr(), req); err != nil {
		b.Fatalf("warm-up call: %v", err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req.Seq = uint64(i)
		if _, err := cli.Call(ctx, srv.Addr(), req); err != nil {
			b.Fatalf("call: %v", err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rt/s")
}
