package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/swell-run/swell/pkg/axis"

	"github.com/swell-run/swell/pkg/autoscaling"
)

// The chart's geometry, in SVG user units (pixels when opened as is).
const (
	chartWidth  = 960
	chartHeight = 520
	marginLeft  = 64
	marginRight = 24
	panelTop    = 56
	panelHeight = 180
	panelGap    = 56
	// maxPoints bounds the points of a line: longer timelines are cut into
	// this many buckets, each drawn at its highest value so that peaks
	// stay visible.
	maxPoints = 1200
)

const (
	colorLoad   = "#1f77b4"
	colorStable = "#17375e"
	colorPods   = "#b0b0b0"
	colorReady  = "#2ca02c"
	// colorServing: the ready pods above this line, up to ready, are idle.
	colorServing = "#8c564b"
	colorScale   = "#ff7f0e"
	colorPanic   = "#d62728"
)

// WriteChart draws the timeline as an SVG a browser opens: above, the load
// (requests in the system each second, or arrivals per second when the
// metric is rps) with the stable-window value the decider saw; below, the
// pods (existing, ready, and the scale asked for). Seconds ending in panic
// mode are shaded across both. title heads the chart.
func WriteChart(w io.Writer, timeline []Second, metric autoscaling.Metric, title string) error {
	bw := bufio.NewWriter(w)
	n := len(timeline)
	plotW := float64(chartWidth - marginLeft - marginRight)
	xOf := func(t float64) float64 { return marginLeft + plotW*t/math.Max(1, float64(n)) }

	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, chartHeight, chartWidth, chartHeight)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, html.EscapeString(title))

	top1 := float64(panelTop)
	top2 := top1 + panelHeight + panelGap
	bottom := top2 + panelHeight

	// Panic shading first, so that the lines draw over it.
	for i := 0; i < n; {
		if !timeline[i].Panic {
			i++
			continue
		}
		j := i
		for j < n && timeline[j].Panic {
			j++
		}
		for _, top := range []float64{top1, top2} {
			fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s" fill-opacity="0.15"/>`+"\n",
				xOf(float64(i)), top, math.Max(0.5, xOf(float64(j))-xOf(float64(i))), panelHeight, colorPanic)
		}
		i = j
	}

	loadLabel, load := "requests in the system (1 s average)", func(r *Second) float64 { return r.Concurrency }
	if metric == autoscaling.MetricRPS {
		loadLabel, load = "arrivals per second", func(r *Second) float64 { return float64(r.Arrivals) }
	}
	stable := func(r *Second) float64 { return r.Stable }
	loadMax := seriesMax(timeline, load, stable)
	panel(bw, top1, loadMax, "load", n, xOf)
	line(bw, timeline, load, top1, loadMax, xOf, colorLoad, "", 1.2)
	line(bw, timeline, stable, top1, loadMax, xOf, colorStable, "5,3", 1.2)
	legend(bw, top1, []legendItem{{loadLabel, colorLoad, ""}, {"stable window (decider)", colorStable, "5,3"}, {"panic mode", colorPanic, "fill"}})

	pods := func(r *Second) float64 { return float64(r.Pods) }
	ready := func(r *Second) float64 { return float64(r.Ready) }
	serving := func(r *Second) float64 { return float64(r.Serving) }
	scale := func(r *Second) float64 { return float64(r.Scale) }
	podMax := seriesMax(timeline, pods, ready, scale)
	panel(bw, top2, podMax, "pods", n, xOf)
	line(bw, timeline, pods, top2, podMax, xOf, colorPods, "", 3)
	line(bw, timeline, ready, top2, podMax, xOf, colorReady, "", 1.5)
	line(bw, timeline, serving, top2, podMax, xOf, colorServing, "", 1.2)
	line(bw, timeline, scale, top2, podMax, xOf, colorScale, "4,3", 1.5)
	legend(bw, top2, []legendItem{{"pods (incl. starting, stopping)", colorPods, ""}, {"ready", colorReady, ""},
		{"serving (a request in service)", colorServing, ""}, {"scale", colorScale, "4,3"}})

	// The time axis, under the lower panel.
	step := timeStep(n)
	for t := 0; t <= n; t += step {
		x := xOf(float64(t))
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`+"\n", x, bottom, x, bottom+4)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, bottom+18, timeLabel(t))
	}
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">time</text>`+"\n", marginLeft+plotW/2, bottom+36)
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

func seriesMax(tl []Second, fs ...func(*Second) float64) float64 {
	m := 0.0
	for i := range tl {
		for _, f := range fs {
			m = math.Max(m, f(&tl[i]))
		}
	}
	return m
}

// panel draws a panel's frame, horizontal grid and value axis.
func panel(w *bufio.Writer, top, maxV float64, label string, n int, xOf func(float64) float64) {
	axisTop, step := axis.NiceCeil(maxV)
	left, right := xOf(0), xOf(float64(max(n, 1)))
	for v := 0.0; v <= axisTop+step/2; v += step {
		y := top + panelHeight - panelHeight*v/axisTop
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", left, y, right, y)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y, strconv.FormatFloat(v, 'f', -1, 64))
	}
	fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#444"/>`+"\n", left, top, right-left, panelHeight)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" fill="#444">%s</text>`+"\n", left, top-8, html.EscapeString(label))
}

// line draws one series as a step line, at most maxPoints buckets wide.
func line(w *bufio.Writer, tl []Second, f func(*Second) float64, top, maxV float64, xOf func(float64) float64, color, dash string, width float64) {
	if len(tl) == 0 {
		return
	}
	axisTop, _ := axis.NiceCeil(maxV)
	yOf := func(v float64) float64 { return top + panelHeight - panelHeight*v/axisTop }
	bucket := (len(tl) + maxPoints - 1) / maxPoints
	var b strings.Builder
	// A step line needs a corner only where the value changes: pods hold
	// for long stretches, and the file stays small.
	prev := math.NaN()
	for start := 0; start < len(tl); start += bucket {
		end := min(start+bucket, len(tl))
		v := 0.0
		for i := start; i < end; i++ {
			v = math.Max(v, f(&tl[i]))
		}
		y := yOf(v)
		if y != prev {
			if !math.IsNaN(prev) {
				fmt.Fprintf(&b, "%.1f,%.1f ", xOf(float64(start)), prev)
			}
			fmt.Fprintf(&b, "%.1f,%.1f ", xOf(float64(start)), y)
			prev = y
		}
	}
	fmt.Fprintf(&b, "%.1f,%.1f", xOf(float64(len(tl))), prev)
	extra := ""
	if dash != "" {
		extra = ` stroke-dasharray="` + dash + `"`
	}
	fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="%.1f"%s points="%s"/>`+"\n", color, width, extra, b.String())
}

type legendItem struct{ label, color, dash string }

// legend lists a panel's series at its top right, right to left.
func legend(w *bufio.Writer, top float64, items []legendItem) {
	x := float64(chartWidth - marginRight)
	y := top - 8
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		// A rough width: sans-serif at 12 units averages under 7 per
		// character.
		x -= float64(len([]rune(it.label)))*7 + 36
		if it.dash == "fill" {
			fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="18" height="10" fill="%s" fill-opacity="0.15"/>`+"\n", x, y-9, it.color)
		} else {
			extra := ""
			if it.dash != "" {
				extra = ` stroke-dasharray="` + it.dash + `"`
			}
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", x, y-4, x+18, y-4, it.color, extra)
		}
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+22, y, html.EscapeString(it.label))
	}
}

// timeStep picks a tick spacing, in seconds, giving at most ten ticks.
func timeStep(n int) int {
	for _, s := range []int{1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400} {
		if n/s <= 10 {
			return s
		}
	}
	return max(1, n/10)
}

func timeLabel(t int) string {
	if t == 0 {
		return "0"
	}
	return autoscaling.FormatDuration(time.Duration(t) * time.Second)
}
