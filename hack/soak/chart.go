package main

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
)

// The chart: the judged figures and their context over the run's minutes,
// one panel per quantity, as an SVG a browser or a Markdown viewer shows.
// Its look follows `swell sim`'s chart (autoscaler/sim/chart.go).

// The chart's geometry, in SVG user units.
const (
	chartWidth   = 960
	marginLeft   = 64
	marginRight  = 24
	panelTop     = 64
	panelHeight  = 120
	panelGap     = 52
	bottomMargin = 52
)

// series is one line: a column's values.
type series struct {
	key, label, color, dash string
}

// chartPanel is one panel: lines sharing a unit.
type chartPanel struct {
	title  string
	unit   unit
	series []series
}

var chartPanels = []chartPanel{
	{"swell local: memory (MiB)", unitBytes, []series{
		{"local_rss_bytes", "resident", "#1f77b4", ""},
		{"local_heap_goal_bytes", "GC heap goal", "#17375e", "5,3"},
		{"local_heap_bytes", "Go heap in use", "#9bbbd9", ""},
	}},
	{"swell local: goroutines and open files", unitCount, []series{
		{"local_goroutines", "goroutines", "#1f77b4", ""},
		{"local_fds", "open files", "#9467bd", ""},
	}},
	{"long-lived queue-proxy, mean: memory (MiB)", unitBytes, []series{
		{"qp_long_rss_bytes", "resident", "#ff7f0e", ""},
		{"qp_long_heap_goal_bytes", "GC heap goal", "#a04a00", "5,3"},
		{"qp_long_heap_bytes", "Go heap in use", "#ffbb78", ""},
	}},
	{"long-lived queue-proxy, mean: goroutines and open files", unitCount, []series{
		{"qp_long_goroutines", "goroutines", "#ff7f0e", ""},
		{"qp_long_fds", "open files", "#8c564b", ""},
	}},
	{"replicas", unitCount, []series{
		{"qp_count", "queue-proxies running", "#2ca02c", ""},
	}},
}

// writeChart draws rows (in time order) as an SVG. half, when > 0, marks
// where the second half of the run, the replay of the first, begins.
func writeChart(w io.Writer, title string, rows []row, half time.Duration) error {
	bw := bufio.NewWriter(w)
	height := panelTop + len(chartPanels)*(panelHeight+panelGap) - panelGap + bottomMargin
	end := time.Second
	for _, r := range rows {
		end = max(end, r.at)
	}
	plotW := float64(chartWidth - marginLeft - marginRight)
	xOf := func(t time.Duration) float64 { return marginLeft + plotW*float64(t)/float64(end) }

	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, html.EscapeString(title))

	bottom := 0.0
	for p, pn := range chartPanels {
		top := float64(panelTop + p*(panelHeight+panelGap))
		bottom = top + panelHeight
		top1 := 0.0
		for _, s := range pn.series {
			i := col(s.key)
			for _, r := range rows {
				if v := r.v[i]; !math.IsNaN(v) {
					top1 = math.Max(top1, scaled(v, pn.unit))
				}
			}
		}
		axisTop, step := axis.NiceCeil(top1)
		yOf := func(v float64) float64 { return top + panelHeight - panelHeight*v/axisTop }
		// Grid and value axis.
		for v := 0.0; v <= axisTop+step/2; v += step {
			y := yOf(v)
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", xOf(0), y, xOf(end), y)
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
				xOf(0)-6, y, strconv.FormatFloat(v, 'f', -1, 64))
		}
		if half > 0 && half < end {
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="2,3"/>`+"\n",
				xOf(half), top, xOf(half), bottom)
		}
		fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#444"/>`+"\n",
			xOf(0), top, xOf(end)-xOf(0), panelHeight)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" fill="#444">%s</text>`+"\n", xOf(0), top-8, html.EscapeString(pn.title))
		// Lines, each titled so that hovering names it, with a dot on
		// each sample at rest: those the verdict compares.
		for _, s := range pn.series {
			i := col(s.key)
			var pts []string
			for _, r := range rows {
				v := r.v[i]
				if math.IsNaN(v) {
					continue
				}
				x, y := xOf(r.at), yOf(scaled(v, pn.unit))
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
				if r.rest {
					fmt.Fprintf(bw, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at rest</title></circle>`+"\n",
						x, y, s.color, html.EscapeString(s.label))
				}
			}
			if len(pts) == 0 {
				continue
			}
			dash := ""
			if s.dash != "" {
				dash = ` stroke-dasharray="` + s.dash + `"`
			}
			fmt.Fprintf(bw, `<polyline fill="none" stroke="%s" stroke-width="1.6"%s points="%s"><title>%s</title></polyline>`+"\n",
				s.color, dash, strings.Join(pts, " "), html.EscapeString(s.label))
		}
		legend(bw, top, pn.series)
	}

	// The time axis, in minutes (seconds for a short run), under the
	// lowest panel.
	step, unitName, per := minuteStep(end), "minutes", time.Minute
	if step < time.Minute {
		unitName, per = "seconds", time.Second
	}
	for t := time.Duration(0); t <= end; t += step {
		x := xOf(t)
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`+"\n", x, bottom, x, bottom+4)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x, bottom+18, t/per)
	}
	label := unitName + " since the traffic began"
	if half > 0 {
		label += "; dotted line: the second half begins, the first half's traffic again; dots: samples at rest"
	}
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", marginLeft+plotW/2, bottom+38, label)
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// scaled is v in the panel's unit: MiB for bytes.
func scaled(v float64, u unit) float64 {
	if u == unitBytes {
		return v / (1 << 20)
	}
	return v
}

// legend lists a panel's series at its top right, right to left.
func legend(w *bufio.Writer, top float64, items []series) {
	x := float64(chartWidth - marginRight)
	y := top - 8
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		// A rough width: sans-serif at 12 units averages under 7 per
		// character.
		x -= float64(len([]rune(it.label)))*6.5 + 32
		dash := ""
		if it.dash != "" {
			dash = ` stroke-dasharray="` + it.dash + `"`
		}
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", x, y-4, x+18, y-4, it.color, dash)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+22, y, html.EscapeString(it.label))
	}
}

// minuteStep picks a tick spacing giving at most about ten ticks: whole
// minutes, or seconds for a short run.
func minuteStep(end time.Duration) time.Duration {
	for _, s := range []time.Duration{5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute,
		5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour} {
		if end/s <= 10 {
			return s
		}
	}
	return max(time.Hour, end/10)
}
