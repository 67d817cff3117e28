// Package target is Tempest's built-in HTTP target: a small, fast server
// that load tests, demos, benchmarks and tests point at instead of a real
// service. `tempest target` runs it from the command line.
//
// # Answers
//
// Any method on any path is answered by the default route: after Latency
// plus a uniform [0, Jitter), a fraction ErrorRate of requests get 500
// "error\n" and the rest 200 with a BodySize-byte body ("okok…"). Two test
// aids bypass latency and error rate:
//
//	/status/{code}   answers {code} (200-599) with an empty body
//	/delay/{ms}      waits {ms} milliseconds (at most MaxDelay), then 200
//
// Request bodies are read to the end and discarded; their size is counted
// as bytes_in. A request whose body cannot be read, or whose client leaves
// during the wait, is dropped without an answer.
//
// # Counting
//
// The server counts every request it answers, and GET /__stats reports the
// counts as JSON, so a run's own tally can be checked against an outside
// one:
//
//	{"requests":N,"errors":E,"by_status":{"200":..},"by_method":{"GET":..},
//	 "bytes_in":B,"in_flight":0,"started_at":"…","uptime_seconds":12.5}
//
// "Answered" means the server had begun writing the response: the count is
// taken just before the status line is written. So any response a client
// has received is already counted; and once in_flight is 0, requests equals
// the number of responses sent, which equals a client's count of responses
// received unless a connection broke mid-response (which the client saw as
// an error). The control routes GET /__stats and POST /__reset (zero the
// counters) are not counted. Counters are atomics, exact under any
// concurrency; a snapshot during traffic may catch by_method a request
// ahead of by_status.
//
// # Cost
//
// The default route takes no lock, logs nothing, and allocates nothing of
// its own: bodies and header values are built once, counters are indexed
// arrays, latency timers are pooled. Random choices hash a per-request
// sequence number with Seed (SplitMix64), so with a fixed seed the number
// of errors among the first N requests is the same on every run, whatever
// the interleaving.
package target
