package workflow

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"tempest/wire"
)

// Latency histograms share one geometry everywhere (workers, managers,
// gates), which is what makes merging exact: same buckets, counts add.
const (
	// HistogramLowest is the resolution: values are recorded in microseconds.
	HistogramLowest = time.Microsecond
	// HistogramHighest is the largest value kept; longer ones are recorded as
	// HistogramHighest, so the tail shows "60s or more" rather than vanishing.
	HistogramHighest = 60 * time.Second
	// HistogramDigits is the precision: any value is within 0.1% of the truth.
	HistogramDigits = 3
	// MaxHistogramBytes bounds an encoded histogram. The largest honest
	// encoding (every bucket populated, with counts as large as a total
	// below MaxInt64 allows) is about 145 KiB; TestHistogramWorstCaseSize
	// checks the bound holds.
	MaxHistogramBytes = 256 << 10

	histogramVersion = 1
	highestMicros    = int64(HistogramHighest / time.Microsecond)
	// histogramBuckets is how many buckets the geometry above has;
	// TestHistogramGeometry checks it against the library.
	histogramBuckets = 17408
)

// ErrInvalidHistogram is returned (wrapped) for histogram bytes that do not
// decode: a peer is buggy or hostile, so callers count it rather than retry.
var ErrInvalidHistogram = errors.New("invalid histogram")

// Histogram is an HDR latency histogram with Tempest's fixed geometry
// (1µs..60s, 3 significant digits). It is not safe for concurrent use.
//
// It is the library's packed (sparse) form: it holds only populated buckets,
// typically a few KiB, where the dense form holds all 17408 (136 KiB), and
// merging two is a linear walk of their bucket lists. Runners record into
// dense histograms, where recording is O(1), and move them into this form
// for snapshots, the wire and merging.
//
// Percentiles from several histograms are only ever obtained by merging the
// histograms and asking the merged one; averaging percentiles is wrong for
// any skewed distribution, which latency always is.
type Histogram struct {
	h *hdrhistogram.PackedHistogram
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{h: hdrhistogram.NewPacked(1, highestMicros, HistogramDigits)}
}

// newDenseHistogram is the recording form runners use.
func newDenseHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, highestMicros, HistogramDigits)
}

// clampMicros maps a latency to a recordable value.
func clampMicros(d time.Duration) int64 {
	return min(max(d.Microseconds(), 0), highestMicros)
}

// Record adds one latency, clamped to [0, HistogramHighest].
func (h *Histogram) Record(d time.Duration) {
	// In range by construction; the only other failure is the total passing
	// MaxInt64, which a process cannot reach by recording.
	_ = h.h.RecordValue(clampMicros(d))
}

// Merge adds o's samples to h. Both have the same buckets, so this adds
// counts bucket by bucket: the result is exactly what one histogram fed
// every sample would hold. It fails only if the total count would pass
// MaxInt64, which only hostile input reaches.
func (h *Histogram) Merge(o *Histogram) error {
	if o.h.TotalCount() > math.MaxInt64-h.h.TotalCount() {
		return fmt.Errorf("merge histograms: %w: total count overflows", ErrInvalidHistogram)
	}
	if dropped := h.h.Merge(o.h); dropped != 0 {
		return fmt.Errorf("merge histograms: %w: %d samples dropped", ErrInvalidHistogram, dropped)
	}
	return nil
}

// mergeDense adds a runner's dense histogram, using scratch (reset here) so
// that h grows by one linear merge rather than by inserting bucket by bucket.
func (h *Histogram) mergeDense(d *hdrhistogram.Histogram, scratch *hdrhistogram.PackedHistogram) {
	scratch.Reset()
	// Same geometry and far below MaxInt64 samples: nothing can be dropped.
	_ = scratch.MergeFrom(d)
	_ = h.h.Merge(scratch)
}

// Count is the number of samples.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// Percentile returns the latency at or below which p percent (0..100) of
// samples fall, or 0 for an empty histogram.
func (h *Histogram) Percentile(p float64) time.Duration {
	return micros(h.h.ValueAtPercentile(p))
}

// Min returns the smallest sample (to the histogram's precision).
func (h *Histogram) Min() time.Duration { return micros(h.h.Min()) }

// Max returns the largest sample (to the histogram's precision).
func (h *Histogram) Max() time.Duration { return micros(h.h.Max()) }

// Mean returns the mean sample.
func (h *Histogram) Mean() time.Duration {
	return time.Duration(h.h.Mean() * float64(time.Microsecond))
}

// Clone returns an independent copy.
func (h *Histogram) Clone() *Histogram { return &Histogram{h: h.h.Clone()} }

// Reset empties h.
func (h *Histogram) Reset() { h.h.Reset() }

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// histogramWire is the encoding of a histogram for wire.StepStats: CBOR
// with the geometry spelled out (a decoder refuses any other) and the
// populated buckets as a byte string of unsigned varint pairs, (value delta,
// count), in ascending value order; a bucket's value is the lowest it holds,
// and the first delta is from zero. Latency histograms are sparse, so this
// is small (a few hundred bytes to a few KiB).
//
// It is not HdrHistogram's V2 format: that one runs through zlib, and a zlib
// writer allocates most of a megabyte per encode, which a worker would pay
// for every step every 100 ms. The pairs are one byte string rather than a
// CBOR array because decoding integers one by one through reflection cost
// more than all the rest of a merge.
type histogramWire struct {
	Version int    `cbor:"1,keyasint"`
	Lowest  int64  `cbor:"2,keyasint"`
	Highest int64  `cbor:"3,keyasint"`
	Digits  int    `cbor:"4,keyasint"`
	Buckets []byte `cbor:"5,keyasint,omitempty"`
}

// Encode returns h as bytes for wire.StepStats.Histogram.
func (h *Histogram) Encode() ([]byte, error) {
	var buckets []byte
	prev := int64(0)
	for value, count := range h.h.ForEachBucket {
		buckets = binary.AppendUvarint(buckets, uint64(value-prev))
		buckets = binary.AppendUvarint(buckets, uint64(count))
		prev = value
	}
	b, err := wire.Marshal(histogramWire{
		Version: histogramVersion, Lowest: 1, Highest: highestMicros, Digits: HistogramDigits, Buckets: buckets,
	})
	if err != nil {
		return nil, fmt.Errorf("encode histogram: %w", err)
	}
	return b, nil
}

// DecodeHistogram decodes bytes from Encode, which may come from the
// network: the size is capped before decoding, the geometry must be exactly
// Tempest's, values must ascend (so each bucket is appended, never inserted:
// decoding stays linear whatever the order an attacker picks) and stay in
// range, and counts must be positive and not sum past MaxInt64. Empty input
// is an empty histogram.
func DecodeHistogram(b []byte) (*Histogram, error) {
	h := NewHistogram()
	if len(b) == 0 {
		return h, nil
	}
	bad := func(format string, args ...any) (*Histogram, error) {
		return nil, fmt.Errorf("decode histogram: %w: %s", ErrInvalidHistogram, fmt.Sprintf(format, args...))
	}
	if len(b) > MaxHistogramBytes {
		return bad("%d bytes, more than %d", len(b), MaxHistogramBytes)
	}
	var w histogramWire
	if err := wire.Unmarshal(b, &w); err != nil {
		return bad("%v", err)
	}
	if w.Version != histogramVersion || w.Lowest != 1 || w.Highest != highestMicros || w.Digits != HistogramDigits {
		return bad("version %d geometry %d..%d/%d, want version %d geometry 1..%d/%d",
			w.Version, w.Lowest, w.Highest, w.Digits, histogramVersion, highestMicros, HistogramDigits)
	}
	value := int64(0)
	for p, i := w.Buckets, 0; len(p) > 0; i++ {
		delta, n := binary.Uvarint(p)
		if n <= 0 {
			return bad("bad value varint in bucket %d", i)
		}
		p = p[n:]
		count, n := binary.Uvarint(p)
		if n <= 0 {
			return bad("bad count varint in bucket %d", i)
		}
		p = p[n:]
		if (i > 0 && delta == 0) || delta > uint64(highestMicros-value) {
			return bad("bucket %d: value %d+%d is not ascending within 0..%d", i, value, delta, highestMicros)
		}
		value += int64(delta)
		if count == 0 || count > math.MaxInt64 {
			return bad("bucket %d: count %d", i, count)
		}
		if err := h.h.RecordValues(value, int64(count)); err != nil {
			return bad("bucket %d: %v", i, err)
		}
	}
	return h, nil
}

// Percentiles decodes an encoded histogram (e.g. a merged
// wire.StepStats.Histogram) and returns the latency at each percentile
// (0..100, e.g. 50, 99, 99.9).
func Percentiles(hist []byte, percentiles ...float64) ([]time.Duration, error) {
	for _, p := range percentiles {
		if !(p >= 0 && p <= 100) { // also refuses NaN
			return nil, fmt.Errorf("percentile %v is outside 0..100", p)
		}
	}
	h, err := DecodeHistogram(hist)
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, len(percentiles))
	for i, p := range percentiles {
		out[i] = h.Percentile(p)
	}
	return out, nil
}

// Cumulative counts h's samples at or below each bound (seconds, ascending),
// as a Prometheus classic histogram wants them, and sums them in seconds.
// Each sample counts at its HDR bucket's lowest value, so both are exact to
// the histogram's precision (0.1%), not to the microsecond.
func (h *Histogram) Cumulative(bounds []float64) (counts []uint64, sum float64) {
	counts = make([]uint64, len(bounds))
	i := 0
	var below uint64
	for value, count := range h.h.ForEachBucket {
		secs := float64(value) / 1e6
		for i < len(bounds) && secs > bounds[i] {
			counts[i] = below
			i++
		}
		below += uint64(count)
		sum += secs * float64(count)
	}
	for ; i < len(bounds); i++ {
		counts[i] = below
	}
	return counts, sum
}
