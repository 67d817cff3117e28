package report

import (
	"math"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units; the SVG scales to its container.
const (
	chartW     = 720
	chartH     = 260
	padLeft    = 64
	padRight   = 16
	padTop     = 28
	padBottom  = 40
	maxPoints  = 600 // a line never has more points than this
	yTickCount = 5
)

// palette is colour-blind friendly (Okabe–Ito).
var palette = [...]string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"}

type chart struct {
	Title          string
	W, H           int
	Left, Top      float64
	Right, Bottom  float64
	XLabel, YLabel string
	XTicks, YTicks []tick
	Lines          []line
	legendNext     float64 // x of the next legend entry
}

type tick struct {
	Pos   float64
	Label string
}

type line struct {
	Name    string
	Color   string
	Points  string  // SVG polyline points: "x,y x,y ..."
	LegendX float64 // where its legend entry starts, in the title row
}

// legendStart leaves room for the title before the first legend entry.
const legendStart = 240

// axis maps data values onto a pixel range.
type axis struct {
	min, max float64
	from, to float64 // pixels for min and max
}

func (a axis) px(v float64) float64 {
	if a.max == a.min {
		return a.from
	}
	return a.from + (v-a.min)/(a.max-a.min)*(a.to-a.from)
}

func newChart(title, xLabel, yLabel string) *chart {
	return &chart{Title: title, W: chartW, H: chartH, Left: padLeft, Top: padTop,
		Right: chartW - padRight, Bottom: chartH - padBottom, XLabel: xLabel, YLabel: yLabel}
}

func (c *chart) xAxis(min, max float64) axis { return axis{min, max, c.Left, c.Right} }
func (c *chart) yAxis(max float64) axis      { return axis{0, max, c.Bottom, c.Top} }

// addLine adds a series drawn through (xs[i], ys[i]).
func (c *chart) addLine(name string, xs, ys []float64, x, y axis) {
	var b strings.Builder
	for i := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(num(x.px(xs[i])))
		b.WriteByte(',')
		b.WriteString(num(y.px(ys[i])))
	}
	if c.legendNext == 0 {
		c.legendNext = legendStart
	}
	c.Lines = append(c.Lines, line{Name: name, Color: palette[len(c.Lines)%len(palette)],
		Points: b.String(), LegendX: c.legendNext})
	// About 6.5 units a character at the legend's 11px font.
	c.legendNext += 14 + 6.5*float64(len([]rune(name))) + 16
}

// valueTicks labels a linear axis from 0 to max at round steps.
func (c *chart) valueTicks(y axis, format func(float64) string) {
	step := y.max / (yTickCount - 1)
	for i := range yTickCount {
		v := step * float64(i)
		c.YTicks = append(c.YTicks, tick{Pos: y.px(v), Label: format(v)})
	}
}

// niceMax rounds v up to 1, 2, 2.5 or 5 times a power of ten, so tick
// labels are round numbers; zero or less becomes 1 (an empty chart still
// has an axis).
func niceMax(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*mag*(1+1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// fmtCount prints a count-like axis value compactly.
func fmtCount(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// fmtMs prints a latency with the precision it deserves.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(v, 'f', 3, 64) + " ms"
}

// bucket merges consecutive seconds so a line has at most maxPoints
// points: counts become per-second averages over the bucket, p50 its
// average and p99 its maximum (a spike must stay visible).
func bucket(series []Second) []Second {
	n := (len(series) + maxPoints - 1) / maxPoints
	if n <= 1 {
		return series
	}
	out := make([]Second, 0, maxPoints)
	for i := 0; i < len(series); i += n {
		end := min(i+n, len(series))
		b := Second{At: series[i].At}
		for _, s := range series[i:end] {
			b.Completed += s.Completed
			b.Failed += s.Failed
			b.Dropped += s.Dropped
			b.VUs = max(b.VUs, s.VUs)
			b.P50Ms += s.P50Ms
			b.P99Ms = max(b.P99Ms, s.P99Ms)
		}
		k := int64(end - i)
		b.Completed /= k
		b.Failed /= k
		b.Dropped /= k
		b.P50Ms /= float64(k)
		out = append(out, b)
	}
	return out
}

// timeTicks labels the time axis at about six round offsets.
func (c *chart) timeTicks(x axis) {
	span := x.max - x.min
	step := niceMax(span / 6)
	if step < 1 {
		step = 1
	}
	long := x.max >= 120 // one style of label along the whole axis
	for v := math.Ceil(x.min/step) * step; v <= x.max+1e-9; v += step {
		c.XTicks = append(c.XTicks, tick{Pos: x.px(v), Label: fmtSeconds(v, long)})
	}
}

// fmtSeconds labels an offset as "90s", or with long as "1m30s".
func fmtSeconds(v float64, long bool) string {
	s := int64(v)
	if !long {
		return strconv.FormatInt(s, 10) + "s"
	}
	if s%60 == 0 {
		return strconv.FormatInt(s/60, 10) + "m"
	}
	return strconv.FormatInt(s/60, 10) + "m" + strconv.FormatInt(s%60, 10) + "s"
}

// throughputChart draws completed and failed outcomes per second.
func throughputChart(series []Second) *chart {
	return timeChart("Throughput", "per second", series, "completed", "failed", fmtCount,
		func(p Second) (float64, float64) { return float64(p.Completed), float64(p.Failed) })
}

// latencyChart draws p50 and p99 per second; seconds without responses
// are left at zero rather than interpolated.
func latencyChart(series []Second) *chart {
	return timeChart("Latency over time", "latency", series, "p50", "p99", fmtMs,
		func(p Second) (float64, float64) { return p.P50Ms, p.P99Ms })
}

// timeChart draws two lines, named a and b with values from value, over
// the run's (bucketed) seconds.
func timeChart(title, yLabel string, series []Second, a, b string, format func(float64) string,
	value func(Second) (float64, float64)) *chart {
	c := newChart(title, "time since start", yLabel)
	pts := bucket(series)
	xs := make([]float64, len(pts))
	as := make([]float64, len(pts))
	bs := make([]float64, len(pts))
	top := 0.0
	for i, p := range pts {
		xs[i] = float64(p.At)
		as[i], bs[i] = value(p)
		top = max(top, as[i], bs[i])
	}
	x := c.xAxis(xs[0], max(xs[len(xs)-1], xs[0]+1))
	y := c.yAxis(niceMax(top))
	c.addLine(a, xs, as, x, y)
	c.addLine(b, xs, bs, x, y)
	c.timeTicks(x)
	c.valueTicks(y, format)
	return c
}

// distributionChart draws each step's latency against percentile on the
// usual HDR axis, log10(1/(1-p)), so the tail (99.9, 99.99) gets as much
// room as the body.
func distributionChart(steps []Step) *chart {
	c := newChart("Latency distribution", "percentile", "latency")
	top := 0.0
	for _, s := range steps {
		for _, d := range s.Distribution {
			top = max(top, d.Ms)
		}
	}
	x := c.xAxis(tailPos(50), tailPos(99.99))
	y := c.yAxis(niceMax(top))
	for _, s := range steps {
		var xs, ys []float64
		for _, d := range s.Distribution {
			if d.P < 50 || d.P > 99.99 {
				continue
			}
			xs = append(xs, tailPos(d.P))
			ys = append(ys, d.Ms)
		}
		if len(xs) > 0 {
			c.addLine(s.Name, xs, ys, x, y)
		}
	}
	for _, p := range []float64{50, 90, 99, 99.9, 99.99} {
		c.XTicks = append(c.XTicks, tick{Pos: x.px(tailPos(p)), Label: "p" + strconv.FormatFloat(p, 'f', -1, 64)})
	}
	c.valueTicks(y, fmtMs)
	return c
}

func tailPos(p float64) float64 { return math.Log10(100 / (100 - p)) }
