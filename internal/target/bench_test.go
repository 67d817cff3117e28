package target

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkTarget measures answered requests per second with keep-alive
// clients, beside a bare net/http handler writing "ok" as the peer: the
// ratio is what the target's routing, counting and canned responses cost.
// Clients share the machine with the server, so req/s is for the pair.
func BenchmarkTarget(b *testing.B) {
	b.Run("target", func(b *testing.B) {
		s, base := startTarget(b, nil)
		benchRequests(b, base+"/bench")
		if st := s.Stats(); st.Requests != uint64(b.N) {
			b.Fatalf("target counted %d requests, clients got %d answers", st.Requests, b.N)
		}
	})
	b.Run("net-http", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("ok"))
		})}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(ln) }()
		b.Cleanup(func() { srv.Close(); <-done })
		benchRequests(b, "http://"+ln.Addr().String()+"/bench")
	})
}

// benchRequests sends b.N GETs from 4×GOMAXPROCS goroutines over
// keep-alive connections and reports req/s.
func benchRequests(b *testing.B, url string) {
	const parallelism = 4
	c := newClient(b, 64)
	b.ReportAllocs()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkHandler is the default route alone, without sockets: the cost
// the target adds to each request on top of net/http.
func BenchmarkHandler(b *testing.B) {
	s, err := New(Config{BodySize: DefaultBodySize, ErrorRate: 0.1})
	if err != nil {
		b.Fatal(err)
	}
	r, err := http.NewRequest(http.MethodGet, "/bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &nullWriter{h: http.Header{}}
		for pb.Next() {
			s.ServeHTTP(w, r)
		}
	})
	if st := s.Stats(); st.Requests != uint64(b.N) {
		b.Fatalf("counted %d requests, served %d", st.Requests, b.N)
	}
}
