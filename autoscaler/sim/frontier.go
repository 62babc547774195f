package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"

	"github.com/swell-run/swell/pkg/axis"
)

// A FrontierPoint is one run on a cost-versus-waits chart: Label names it
// (a policy, or the swept setting's value).
type FrontierPoint struct {
	Label   string
	Summary Summary
}

// Cost is the point's pod-seconds over the oracle's (the bound is 1); its
// plain pod-seconds when the bound is unknown.
func (p FrontierPoint) Cost() float64 {
	if s := p.Summary; s.OraclePodSeconds > 0 {
		return s.PodSeconds / s.OraclePodSeconds
	}
	return p.Summary.PodSeconds
}

// WaitedShare is the percentage of requests that waited for a pod.
func (p FrontierPoint) WaitedShare() float64 {
	if p.Summary.Requests == 0 {
		return 0
	}
	return 100 * float64(p.Summary.Waited) / float64(p.Summary.Requests)
}

var frontierColors = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"}

// WriteFrontier draws a sweep as an SVG: cost (pod-seconds as a multiple of
// the oracle's) across, against the share of requests that waited for a
// pod above and the p99 wait below. The swept runs are joined by a line in
// the order given, each labelled; every other point (the other policies,
// the oracle) stands alone, labelled.
func WriteFrontier(w io.Writer, title, sweptName string, swept, others []FrontierPoint) error {
	bw := bufio.NewWriter(w)
	all := append(append([]FrontierPoint(nil), swept...), others...)
	xMax := 1.0
	yMax := [2]float64{}
	ys := [2]func(FrontierPoint) float64{
		FrontierPoint.WaitedShare,
		func(p FrontierPoint) float64 { return p.Summary.WaitP99.Seconds() },
	}
	for _, p := range all {
		xMax = math.Max(xMax, p.Cost())
		for i, y := range ys {
			yMax[i] = math.Max(yMax[i], y(p))
		}
	}
	xTop, xStep := axis.NiceCeil(xMax)
	plotW := float64(chartWidth - marginLeft - marginRight)
	xOf := func(v float64) float64 { return marginLeft + plotW*v/xTop }

	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, chartHeight, chartWidth, chartHeight)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", marginLeft, html.EscapeString(title))

	labels := [2]string{"requests that waited for a pod (%)", "p99 wait (s)"}
	for i := range ys {
		top := float64(panelTop) + float64(i)*(panelHeight+panelGap)
		yTop, yStep := axis.NiceCeil(yMax[i])
		yOf := func(v float64) float64 { return top + panelHeight - panelHeight*v/yTop }
		// Frame, grid and value axis.
		for v := 0.0; v <= yTop+yStep/2; v += yStep {
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", xOf(0), yOf(v), xOf(xTop), yOf(v))
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", xOf(0)-6, yOf(v), strconv.FormatFloat(v, 'f', -1, 64))
		}
		for v := 0.0; v <= xTop+xStep/2; v += xStep {
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", xOf(v), top, xOf(v), top+panelHeight)
		}
		fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#444"/>`+"\n", xOf(0), top, xOf(xTop)-xOf(0), panelHeight)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" fill="#444">%s</text>`+"\n", xOf(0), top-8, html.EscapeString(labels[i]))

		// The swept runs, joined.
		if len(swept) > 0 {
			fmt.Fprintf(bw, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="`, frontierColors[0])
			for j, p := range swept {
				if j > 0 {
					bw.WriteByte(' ')
				}
				fmt.Fprintf(bw, "%.1f,%.1f", xOf(p.Cost()), yOf(ys[i](p)))
			}
			fmt.Fprintln(bw, `"/>`)
		}
		for j, p := range swept {
			x, y := xOf(p.Cost()), yOf(ys[i](p))
			fmt.Fprintf(bw, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", x, y, frontierColors[0])
			// Alternate the labels above and below, so neighbours do not
			// overlap.
			dy := -8.0
			if j%2 == 1 {
				dy = 16
			}
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%s</text>`+"\n", x, y+dy, frontierColors[0], html.EscapeString(p.Label))
		}
		for j, p := range others {
			c := frontierColors[1+j%(len(frontierColors)-1)]
			x, y := xOf(p.Cost()), yOf(ys[i](p))
			fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="8" height="8" fill="%s"/>`+"\n", x-4, y-4, c)
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", x+7, y-6, c, html.EscapeString(p.Label))
		}
	}
	// The cost axis, under the lower panel.
	bottom := float64(panelTop) + 2*panelHeight + panelGap
	for v := 0.0; v <= xTop+xStep/2; v += xStep {
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xOf(v), bottom+18, strconv.FormatFloat(v, 'f', -1, 64))
	}
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">pod-seconds as a multiple of the oracle's (the clairvoyant bound is 1); the line: %s</text>`+"\n",
		marginLeft+plotW/2, bottom+36, html.EscapeString(sweptName))
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}
