// Package workflow holds the workflow types a worker runs (sleep and http
// so far), the registry that finds them by name, and the statistics they
// report: per-step counts and HDR latency histograms that merge exactly.
//
// # Types, params and the registry
//
// A Type turns the type-specific keys of a job file into params
// (ParseParams), decodes params that arrived over the network
// (DecodeParams) and builds a Runner for one run (New). DefaultRegistry
// holds the built-in types; there is no package-level registry, so a test
// or a worker can register its own without touching anyone else's.
//
// Params are stored in wire.WorkflowSpec.Params as CBOR bytes rather than as
// a field per type in the spec. Managers and gates carry, persist and
// forward specs without knowing any type, so a new type (or a new field of
// one) needs no change to the wire catalogue, the manager or the gate; only
// the worker and the job-file parser, which both hold the registry, decode
// them. The bytes are decoded with the strict wire codec and validated in
// New as well as in jobfile, because a spec may come from any API client,
// not only from a parsed file. Params use integer keys with omitempty, and a
// field added later must read its zero value as "not set": old specs still
// decode, and an old worker ignores keys it does not know.
//
// Job files reach types through Fields, a reader over a plain tree (Node)
// that jobfile builds from YAML with line numbers. Types read keys through
// it and run the same Validate the network path runs; Fields places each
// problem at its line and reports keys nobody read as unknown.
//
// # Running
//
// Runner.Run gets an Env from the worker: its cores, a Report callback
// (every ReportInterval, 100 ms by default, and once at the end), a logger
// and a clock. Run returns what it counted when the workflow ends or its
// context does; cancel and timeout interrupt requests in flight rather
// than waiting for them.
//
// The http type has two load models behind one executor interface
// (executor.go), so every model shares the request path and its counting:
//
//   - closed: VUs goroutines, each looping over the steps in order, one
//     request at a time. With iterations, the total is divided up front: VU
//     i does iterations/vus passes, the first iterations%vus VUs one more,
//     so the total is exact. With duration, VUs stop starting requests when
//     it passes and finish the ones in flight. With stages, the VU count
//     follows a piecewise-linear ramp (ramp.go); a VU retired on the way
//     down finishes its iteration first.
//   - open: iterations start at a rate (iterations per second, optionally
//     ramping through stages) whatever the target's latency, served by a
//     pool of at most max_vus VUs. An iteration that cannot get a VU before
//     the next one falls due is dropped and counted (dropped_iterations).
//     Each response is recorded twice: uncorrected (request sent to last
//     byte) and corrected (from when it was meant to be sent, like wrk2).
//
// Steps may pause (think_time), check the body (expect_body), and template
// their url, header values and body ({{vu}}, {{iteration}},
// {{random_int a b}}, {{data.column}}; template.go), parsed when params are
// validated and when a runner is built, never per request. {{data.column}}
// reads the iteration's row of the workflow's CSV data file (data.go),
// shipped inside the params; rows go out sequentially from a counter shared
// by the run's VUs, at random, or one per VU. connection_reuse: false dials
// per request.
//
// protocol picks the HTTP version (http_protocol.go): http1 (default, a
// keep-alive connection per VU, plain or TLS), h2 (HTTP/2 over TLS, no
// fallback), h2c (HTTP/2 over cleartext with prior knowledge), h3 (HTTP/3
// over QUIC with quic-go's http3); under h2, h2c and h3 the VUs share
// multiplexed connections. insecure_skip_verify: true accepts a self-signed
// target's certificate. http1 is sent by the lean client in internal/h1
// (http_h1.go), which owns one connection per VU and runs no goroutines of
// its own; h2, h2c and h3 go through net/http and http3 (newSender).
//
// A step is a user's action rather than a lone request (flow.go,
// http_session.go, docs/load-tests.md): captures take values from its
// response (gjson path, regex group, header, cookie) into the VU's
// {{name}} variables for later steps; each VU has a cookie jar (RFC 6265,
// the public-suffix list), emptied each iteration; redirects are followed
// (default 10), each hop a request counted and timed under the step; and
// checks are counted pass/fail without changing a request's outcome. The
// runner, not the clients, does all four, so every protocol behaves alike.
//
// A run also keeps a per-second series (series.go: completed, failed,
// dropped, live VUs, p50/p99) for the newest MaxSeriesSeconds seconds.
//
// # Counting
//
// Every request the runner starts is counted exactly once: completed if the
// response has an expected status, failed otherwise (unexpected status,
// connection refused, timeout, unreadable body, a capture that found
// nothing, a redirect past the limit), by step and by error class. A step
// skipped for want of a captured value is counted failed (class skipped)
// but was never sent.
// When the run's context is cancelled, requests in flight are aborted and
// counted as failed with class "cancelled"; the target may or may not have
// seen them. So after a natural end the target's request count equals
// completed+failed, and after a cancel it lies between completed+failed
// minus the VUs that were mid-request, and completed+failed. (One caveat,
// kept by both clients: an idempotent request is resent once if a reused
// connection turns out to have been closed by the server before any of the
// answer arrived, which is almost always a server closing an idle
// keep-alive connection as the request went out; a target that closes
// connections mid-request without answering may see such a request twice.
// The http1 client also peeks at a connection before reusing it for a
// request it could not resend, or after a second idle, so a closed one is
// replaced rather than counted as a failure.)
//
// # Histograms
//
// Latencies go into HDR histograms with one geometry everywhere: 1µs to 60s
// at 3 significant digits. Because every histogram has the same buckets,
// merging is adding counts bucket by bucket, and the merge of shards is
// exactly the histogram one recorder of all the samples would have built;
// percentiles are read from merged histograms and never averaged. Workers
// report cumulative histograms (since the run started), so a lost or
// repeated progress message costs nothing; managers and gates combine
// workflows and datacenters with MergeStepStats.
//
// Histogram is the library's packed form, which keeps only populated
// buckets (a few KiB for real traffic, against 136 KiB for all 17408). On
// the wire it is CBOR holding the geometry and the populated buckets as
// varint (value delta, count) pairs; HdrHistogram's own V2 format was not
// used because its zlib stage allocates most of a megabyte per encode.
// DecodeHistogram treats its input as hostile: size capped, geometry fixed,
// values ascending and in range (so decoding stays linear), counts checked
// for overflow.
//
// Inside a runner, VUs record into dense histograms (an array increment per
// sample), sharded by core so they rarely share a lock. A snapshot swaps
// each shard's dense histogram for an empty one under the lock and folds
// the samples into the step's cumulative histogram outside it.
package workflow
