package wire

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

func benchEnvelope1KiB() *Envelope {
	return &Envelope{
		Version: ProtocolVersion,
		KeyID:   7,
		Sender:  "manager-dc1-2",
		Type:    TypeWorkflowProgress,
		ID:      g2first(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		Flags:   FlagOneWay,
		Salt:    bytes.Repeat([]byte{0x5a}, 32),
		Nonce:   bytes.Repeat([]byte{0x4e}, 12),
		Body:    bytes.Repeat([]byte{0xab}, 1024),
	}
}

func BenchmarkEncodeEnvelope1KiB(b *testing.B) {
	e := benchEnvelope1KiB()
	b.ReportAllocs()
	b.SetBytes(int64(len(e.Body)))
	for b.Loop() {
		if _, err := EncodeEnvelope(e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeEnvelope1KiB(b *testing.B) {
	data, err := EncodeEnvelope(benchEnvelope1KiB())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := DecodeEnvelope(data); err != nil {
			b.Fatal(err)
		}
	}
}

// A typical report: three steps, each with a compact encoded histogram.
func BenchmarkMarshalWorkflowProgress(b *testing.B) {
	p := &WorkflowProgress{
		JobID:          "job-7f3a9c",
		WorkflowID:     "job-7f3a9c/wf-2",
		WorkflowName:   "checkout-flow",
		Status:         WorkflowRunning,
		CompletedCount: 1_234_567,
		FailedCount:    89,
		RatePerSecond:  4567.25,
		Elapsed:        93 * time.Second,
		Timestamp:      time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano(),
		AssignedCores:  []int{0, 1, 2, 3},
		WorkerID:       "worker-dc1-17",
		FenceToken:     42,
	}
	for i := range 3 {
		p.StepStats = append(p.StepStats, StepStats{
			StepName:       fmt.Sprintf("step-%d", i),
			CompletedCount: 400_000,
			FailedCount:    30,
			TotalCount:     400_030,
			Histogram:      bytes.Repeat([]byte{byte(i)}, 256),
		})
	}
	b.ReportAllocs()
	var n int
	for b.Loop() {
		out, err := Marshal(p)
		if err != nil {
			b.Fatal(err)
		}
		n = len(out)
	}
	b.SetBytes(int64(n))
}
