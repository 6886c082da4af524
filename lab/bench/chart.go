package bench

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"time"
)

var (
	colBG     = color.RGBA{255, 255, 255, 255}
	colAxis   = color.RGBA{60, 60, 60, 255}
	colGrid   = color.RGBA{225, 225, 225, 255}
	colText   = color.RGBA{20, 20, 20, 255}
	colE2E    = color.RGBA{31, 119, 180, 255}
	colFloor  = color.RGBA{44, 160, 44, 255}
	colNaive  = color.RGBA{214, 39, 40, 255}
	colBurst  = color.RGBA{148, 103, 189, 255}
	colPlain  = color.RGBA{127, 127, 127, 255}
	colP50    = color.RGBA{31, 119, 180, 255}
	colP99    = color.RGBA{214, 39, 40, 255}
	colSweep  = color.RGBA{158, 202, 225, 255}
	colTarget = color.RGBA{255, 127, 14, 255}
)

type bar struct {
	label string
	value float64
	col   color.Color
}

// Chart draws the report as a PNG: on the left the throughput of every
// approach (log scale), on the right the sweep's throughput and its p50 and
// p99 latency per in-flight limit.
func (r Report) Chart() ([]byte, error) {
	const W, H = 1400, 720
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBG}, image.Point{}, draw.Src)
	title := fmt.Sprintf("effectively bench %s - %d msgs, %.0f%% dup, provider latency %s",
		r.Started.Format("2006-01-02 15:04"), r.Config.Messages, r.Config.DuplicateRatio*100, r.Config.Latency)
	drawText(img, 20, 18, title, 2, colText)

	bars := []bar{
		{"e2e (mean)", e2eMean(r), colE2E},
		{"floor (mean)", floorMean(r), colFloor},
		{"naive", r.Naive.Throughput, colNaive},
		{"dup burst", r.Burst.Rate, colBurst},
		{"plain", r.Plain.Throughput, colPlain},
	}
	logBars(img, image.Rect(80, 90, 640, 640), "throughput per s (log): unique msgs, wf, dups, txs", bars)
	sweepPanel(img, image.Rect(760, 90, 1370, 640), r)
	drawText(img, 20, H-40, "e2e: JetStream -> worker -> sims -> Postgres. floor: eager start + 2 no-op local acts. naive: 2 regular acts.", 2, colAxis)
	drawText(img, 20, H-18, "dup burst: copies of recorded msgs through the broker.  plain: 1 Postgres tx per msg, no Temporal.", 2, colAxis)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// logBars draws bars on a log10 axis inside area.
func logBars(img *image.RGBA, area image.Rectangle, title string, bars []bar) {
	drawText(img, area.Min.X, area.Min.Y-22, title, 2, colText)
	top := 1.0
	for _, b := range bars {
		top = math.Max(top, b.value)
	}
	decades := math.Max(1, math.Ceil(math.Log10(top)))
	y := func(v float64) int {
		if v < 1 {
			v = 1
		}
		return area.Max.Y - int(math.Log10(v)/decades*float64(area.Dy()))
	}
	for d := 0; d <= int(decades); d++ {
		v := math.Pow(10, float64(d))
		yy := y(v)
		fillRect(img, area.Min.X, yy, area.Dx(), 1, colGrid)
		lbl := fmt.Sprintf("%.0f", v)
		drawText(img, area.Min.X-8-textWidth(lbl, 2), yy-7, lbl, 2, colAxis)
	}
	axes(img, area)
	slot := area.Dx() / len(bars)
	for i, b := range bars {
		x0 := area.Min.X + i*slot + slot/6
		w := slot * 2 / 3
		if b.value > 0 {
			yy := y(b.value)
			fillRect(img, x0, yy, w, area.Max.Y-yy, b.col)
			lbl := fmt.Sprintf("%.0f", b.value)
			if b.value < 100 {
				lbl = fmt.Sprintf("%.1f", b.value)
			}
			drawText(img, x0+w/2-textWidth(lbl, 2)/2, yy-20, lbl, 2, colText)
		}
		drawText(img, x0+w/2-textWidth(b.label, 2)/2, area.Max.Y+10, b.label, 2, colText)
	}
}

func axes(img *image.RGBA, area image.Rectangle) {
	fillRect(img, area.Min.X, area.Min.Y, 2, area.Dy(), colAxis)
	fillRect(img, area.Min.X, area.Max.Y, area.Dx(), 2, colAxis)
}

// sweepPanel draws the sweep: throughput bars on top, p50/p99 lines below.
func sweepPanel(img *image.RGBA, area image.Rectangle, r Report) {
	pts := append([]Result(nil), r.Sweep...)
	labels := make([]string, 0, len(pts)+1)
	for _, p := range r.Sweep {
		labels = append(labels, fmt.Sprintf("%d", p.InFlight))
	}
	if r.Paced != nil {
		pts = append(pts, *r.Paced)
		labels = append(labels, fmt.Sprintf("%.0f%%", pacedShare*100))
	}
	if len(pts) == 0 {
		drawText(img, area.Min.X, area.Min.Y, "no sweep in this run", 2, colText)
		return
	}
	gap := 60
	upper := image.Rect(area.Min.X, area.Min.Y, area.Max.X, area.Min.Y+area.Dy()/2-gap/2)
	lower := image.Rect(area.Min.X, upper.Max.Y+gap, area.Max.X, area.Max.Y)
	slot := area.Dx() / len(pts)
	center := func(i int) int { return area.Min.X + i*slot + slot/2 }

	// Throughput.
	drawText(img, upper.Min.X, upper.Min.Y-22, "e2e sweep: unique msgs/s per in-flight limit", 2, colText)
	top := 1.0
	for _, p := range pts {
		top = math.Max(top, p.Throughput)
	}
	top = 4 * niceCeil(top/4)
	yT := func(v float64) int { return upper.Max.Y - int(v/top*float64(upper.Dy())) }
	gridLinear(img, upper, top, yT, "")
	for i, p := range pts {
		w := slot / 2
		x0 := center(i) - w/2
		yy := yT(p.Throughput)
		c := colSweep
		if i == len(r.Sweep) {
			c = colTarget
		}
		fillRect(img, x0, yy, w, upper.Max.Y-yy, c)
		lbl := fmt.Sprintf("%.0f", p.Throughput)
		drawText(img, center(i)-textWidth(lbl, 2)/2, yy-20, lbl, 2, colText)
	}

	// Latency, on a log axis: the sweep spans milliseconds to seconds.
	drawText(img, lower.Min.X, lower.Min.Y-22, "latency ms (log): p50 blue, p99 red; x: in-flight", 2, colText)
	lo, hi := math.Inf(1), 1.0
	for _, p := range pts {
		lo = math.Min(lo, math.Max(1, ms(p.Latency.P50)))
		hi = math.Max(hi, ms(p.Latency.P99))
	}
	dLo := math.Min(math.Floor(math.Log10(lo)), 2) // keep the 150 ms target in view
	dHi := math.Max(math.Ceil(math.Log10(hi)), dLo+1)
	yL := func(v float64) int {
		v = math.Max(v, math.Pow(10, dLo))
		return lower.Max.Y - int((math.Log10(v)-dLo)/(dHi-dLo)*float64(lower.Dy()))
	}
	for d := dLo; d <= dHi; d++ {
		yy := yL(math.Pow(10, d))
		fillRect(img, lower.Min.X, yy, lower.Dx(), 1, colGrid)
		lbl := fmt.Sprintf("%g", math.Pow(10, d))
		drawText(img, lower.Min.X-8-textWidth(lbl, 2), yy-7, lbl, 2, colAxis)
	}
	axes(img, lower)
	if p99Target <= math.Pow(10, dHi) {
		lbl := fmt.Sprintf("%d ms", p99Target)
		fillRect(img, lower.Min.X, yL(p99Target), lower.Dx(), 2, colTarget)
		drawText(img, lower.Max.X-textWidth(lbl, 2)-4, yL(p99Target)+6, lbl, 2, colTarget)
	}
	for _, series := range []struct {
		get func(Result) time.Duration
		col color.Color
		dy  int // label offset: p50 below its point, p99 above
	}{{func(p Result) time.Duration { return p.Latency.P50 }, colP50, 8}, {func(p Result) time.Duration { return p.Latency.P99 }, colP99, -22}} {
		for i, p := range pts {
			x, yy := center(i), yL(ms(series.get(p)))
			fillRect(img, x-4, yy-4, 9, 9, series.col)
			if i > 0 {
				px, py := center(i-1), yL(ms(series.get(pts[i-1])))
				line(img, px, py, x, yy, series.col)
			}
			lbl := fmt.Sprintf("%.0f", ms(series.get(p)))
			drawText(img, x+8, yy+series.dy, lbl, 2, series.col)
		}
	}
	for i, l := range labels {
		drawText(img, center(i)-textWidth(l, 2)/2, lower.Max.Y+10, l, 2, colText)
	}
}

func gridLinear(img *image.RGBA, area image.Rectangle, top float64, y func(float64) int, _ string) {
	for k := 0; k <= 4; k++ {
		v := top * float64(k) / 4
		yy := y(v)
		fillRect(img, area.Min.X, yy, area.Dx(), 1, colGrid)
		lbl := fmt.Sprintf("%g", math.Round(v*10)/10)
		drawText(img, area.Min.X-8-textWidth(lbl, 2), yy-7, lbl, 2, colAxis)
	}
	axes(img, area)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// line draws a 3-pixel-wide line from (x0, y0) to (x1, y1).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := x1-x0, y1-y0
	steps := max(abs(dx), abs(dy), 1)
	for i := 0; i <= steps; i++ {
		x := x0 + dx*i/steps
		y := y0 + dy*i/steps
		fillRect(img, x-1, y-1, 3, 3, c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// p99Target is the latency target at the paced point, in milliseconds.
const p99Target = 150

// e2eMean is the mean rate of the e2e runs of the series (E2E alone in a
// report from before the series).
func e2eMean(r Report) float64 {
	_, e2es := r.series()
	var sum float64
	for _, e := range e2es {
		sum += e.Throughput
	}
	return sum / float64(max(1, len(e2es)))
}

// floorMean is the report's mean floor, computed again for a report read
// from an older JSON that lacks it.
func floorMean(r Report) float64 {
	if r.FloorMean > 0 {
		return r.FloorMean
	}
	return r.Floor.Throughput
}
