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
	legendRow      int     // row of the next legend entry
}

type tick struct {
	Pos    float64
	Label  string
	Anchor string // text-anchor of an x tick's label: "middle", or "end" at the right edge
}

type line struct {
	Name    string
	Color   string
	Points  string  // SVG polyline points: "x,y x,y ..."
	LegendX float64 // where its legend entry starts
	LegendY float64 // the top of its legend row
}

// The legend sits in rows under the x axis's label, as many as its
// entries need: a row above the plot had room for two short names, and
// one entry per step pushed the rest off the drawing.
const (
	legendTop    = 44 // below the plot's bottom
	legendRowH   = 16
	legendGap    = 16  // between entries
	charW        = 6.5 // about one character at the labels' 11px font
	legendMarker = 14  // the swatch and its gap
)

// textWidth estimates a label's width at the charts' 11px font.
func textWidth(s string) float64 { return charW * float64(len([]rune(s))) }

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
	w := legendMarker + textWidth(name)
	if c.legendNext == 0 {
		c.legendNext = c.Left
	} else if c.legendNext+w > float64(c.W) {
		c.legendNext = c.Left
		c.legendRow++
	}
	c.Lines = append(c.Lines, line{Name: name, Color: palette[len(c.Lines)%len(palette)],
		Points: b.String(), LegendX: c.legendNext, LegendY: c.Bottom + legendTop + float64(c.legendRow*legendRowH)})
	c.legendNext += w + legendGap
	c.H = int(c.Bottom) + legendTop + (c.legendRow+1)*legendRowH
}

// fitLeft widens the left margin to the longest value label, so a label
// such as "123.5 s" is not cut off at the drawing's edge. Call it after
// valueTicks and before the x axis is made.
func (c *chart) fitLeft() {
	for _, t := range c.YTicks {
		c.Left = max(c.Left, textWidth(t.Label)+12)
	}
}

// addXTick labels x position pos; a label that would reach past the
// drawing's right edge ends at its tick instead of centring on it.
func (c *chart) addXTick(pos float64, label string) {
	anchor := "middle"
	if pos+textWidth(label)/2 > float64(c.W)-2 {
		anchor = "end"
	}
	c.XTicks = append(c.XTicks, tick{Pos: pos, Label: label, Anchor: anchor})
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
	case v >= 100_000:
		return strconv.FormatFloat(v/1000, 'f', 0, 64) + " s"
	case v >= 10_000:
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + " s"
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

// timeSteps are the offsets between time labels a reader finds round.
var timeSteps = [...]float64{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400}

// timeTicks labels the time axis at about six round offsets.
func (c *chart) timeTicks(x axis) {
	span := x.max - x.min
	step := timeSteps[len(timeSteps)-1]
	for _, s := range timeSteps {
		if s >= span/6 {
			step = s
			break
		}
	}
	long := x.max >= 120 // one style of label along the whole axis
	for v := math.Ceil(x.min/step) * step; v <= x.max+1e-9; v += step {
		c.addXTick(x.px(v), fmtSeconds(v, long))
	}
}

// fmtSeconds labels an offset as "90s", or with long as "1m30s" or "2h5m"
// (an hours-long run's labels need no seconds).
func fmtSeconds(v float64, long bool) string {
	s := int64(v)
	switch {
	case !long:
		return strconv.FormatInt(s, 10) + "s"
	case s >= 3600 && s%3600 == 0:
		return strconv.FormatInt(s/3600, 10) + "h"
	case s >= 3600:
		return strconv.FormatInt(s/3600, 10) + "h" + strconv.FormatInt(s%3600/60, 10) + "m"
	case s%60 == 0:
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
	y := c.yAxis(niceMax(top))
	c.valueTicks(y, format)
	c.fitLeft()
	x := c.xAxis(xs[0], max(xs[len(xs)-1], xs[0]+1))
	c.addLine(a, xs, as, x, y)
	c.addLine(b, xs, bs, x, y)
	c.timeTicks(x)
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
	y := c.yAxis(niceMax(top))
	c.valueTicks(y, fmtMs)
	c.fitLeft()
	x := c.xAxis(tailPos(50), tailPos(99.99))
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
		c.addXTick(x.px(tailPos(p)), "p"+strconv.FormatFloat(p, 'f', -1, 64))
	}
	return c
}

func tailPos(p float64) float64 { return math.Log10(100 / (100 - p)) }
