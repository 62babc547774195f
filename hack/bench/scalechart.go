package main

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/swell-run/swell/pkg/axis"
)

// The scale chart: the autoscaler's CPU and resident memory against the
// number of services, drawn from the scale scenario's plain lines
// (scaleLine) — a run's, or those of a report or docs/performance.md — so
// that the chart in the docs is the figures of the docs. Its look follows
// the soak's chart (hack/soak/chart.go) and `swell sim`'s, and its axes
// are pkg/axis's.

// scalePoint is one size's line in one mode: the autoscaler's CPU in
// cores and its resident memory in MiB; keptUp is false when services
// went without a sample (unsampled above 0) or a load step never led to a
// scale write (step_p99_ms=inf, or decide_p99_ms=inf on a line of before
// the modes): the figures are then what the autoscaler got through, not
// what the size needs. A point of shard is one replica
// of a sharded autoscaler (a `scale-shard replica=I` line), at the
// services of the buckets it leads.
type scalePoint struct {
	mode     string
	services int
	cpu, rss float64
	keptUp   bool
	shard    bool
	replica  int
}

// parseScaleLines reads the `scale [mode=M] services=N ...` lines in r,
// among any other text: for each mode and size the last line, in order of
// mode (scaleModes) and size; then the `scale-shard [mode=M] replica=I
// ...` lines, for each mode and replica the last, in the same order. A
// line without a mode is of before the modes, when the autoscaler only
// pulled. A size that failed (failed=...) is left out. Every malformed
// line is reported, by line number.
func parseScaleLines(r io.Reader) ([]scalePoint, error) {
	type key struct {
		mode string
		n    int // services, or replica
	}
	bySize := map[key]scalePoint{}
	byReplica := map[key]scalePoint{}
	var errs []error
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "scale" && f[0] != "scale-shard" {
			continue
		}
		kv := map[string]string{}
		for _, p := range f[1:] {
			k, v, _ := strings.Cut(p, "=")
			kv[k] = v
		}
		if _, failed := kv["failed"]; failed {
			continue
		}
		p := scalePoint{mode: scaleModePull, shard: f[0] == "scale-shard"}
		if p.shard {
			if _, ok := kv["replica"]; !ok {
				continue // the line of all the replicas
			}
		}
		p99, ok := kv["step_p99_ms"]
		if !ok {
			p99 = kv["decide_p99_ms"]
		}
		unsampled, err := strconv.ParseFloat(cmp.Or(kv["unsampled"], "0"), 64)
		p.keptUp = p99 != "inf" && err == nil && unsampled == 0
		var bad []string
		if m, ok := kv["mode"]; ok {
			if !slices.Contains(scaleModes, m) {
				bad = append(bad, fmt.Sprintf("mode=%q (want %s)", m, strings.Join(scaleModes, " or ")))
			}
			p.mode = m
		}
		if p.services, err = strconv.Atoi(kv["services"]); err != nil || p.services <= 0 {
			bad = append(bad, fmt.Sprintf("services=%q (want a count above 0)", kv["services"]))
		}
		for _, x := range []struct {
			key string
			v   *float64
		}{{"cpu_cores", &p.cpu}, {"rss_mib", &p.rss}} {
			if *x.v, err = strconv.ParseFloat(kv[x.key], 64); err != nil || *x.v < 0 || math.IsInf(*x.v, 0) {
				bad = append(bad, fmt.Sprintf("%s=%q (want a number, 0 or more)", x.key, kv[x.key]))
			}
		}
		if p.shard {
			if p.replica, err = strconv.Atoi(kv["replica"]); err != nil || p.replica < 0 {
				bad = append(bad, fmt.Sprintf("replica=%q (want a number, 0 or more)", kv["replica"]))
			}
		}
		if len(bad) > 0 {
			errs = append(errs, fmt.Errorf("line %d: %s", n, strings.Join(bad, ", ")))
			continue
		}
		if p.shard {
			byReplica[key{p.mode, p.replica}] = p
		} else {
			bySize[key{p.mode, p.services}] = p
		}
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(bySize) == 0 {
		return nil, errors.New("no `scale [mode=M] services=N ... cpu_cores=X rss_mib=Y` line")
	}
	byMode := func(a, b scalePoint) int { return slices.Index(scaleModes, a.mode) - slices.Index(scaleModes, b.mode) }
	sizes, replicas := slices.Collect(maps.Values(bySize)), slices.Collect(maps.Values(byReplica))
	slices.SortFunc(sizes, func(a, b scalePoint) int { return cmp.Or(byMode(a, b), a.services-b.services) })
	slices.SortFunc(replicas, func(a, b scalePoint) int { return cmp.Or(byMode(a, b), a.replica-b.replica) })
	return append(sizes, replicas...), nil
}

// scaleModeColors draw each mode's sizes and replicas.
var scaleModeColors = map[string]string{scaleModePull: "#1f77b4", scaleModePush: "#ff7f0e"}

// scaleModeLegend says what each mode is, in the legend.
var scaleModeLegend = map[string]string{
	scaleModePull: "pull: the autoscaler scrapes every pod every second",
	scaleModePush: "push: the pods push their stats to the autoscaler",
}

// The chart's geometry, in SVG user units.
const (
	scaleChartWidth   = 720
	scaleMarginLeft   = 64
	scaleMarginRight  = 32
	scalePanelTop     = 56
	scaleLegendHeight = 20
	scalePanelHeight  = 150
	scalePanelGap     = 56
	scaleBottom       = 64
)

// writeScaleChart draws pts as an SVG: CPU above, resident memory below,
// against the services, a line of sizes and a color for each mode; a
// size that did not keep up is a hollow dot, and each replica of a
// sharded autoscaler a square at the services it leads. source says
// where the figures come from, under the title.
func writeScaleChart(w io.Writer, source string, all []scalePoint) error {
	var modes []string
	sizes := map[string][]scalePoint{}
	replicas := map[string][]scalePoint{}
	for _, p := range all {
		if !slices.Contains(modes, p.mode) {
			modes = append(modes, p.mode)
		}
		if p.shard {
			replicas[p.mode] = append(replicas[p.mode], p)
		} else {
			sizes[p.mode] = append(sizes[p.mode], p)
		}
	}
	bw := bufio.NewWriter(w)
	panels := []struct {
		title string
		v     func(scalePoint) float64
		label func(float64) string
	}{
		{"autoscaler CPU (cores: 1 is one core busy)", func(p scalePoint) float64 { return p.cpu },
			func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }},
		{"autoscaler resident memory (MiB)", func(p scalePoint) float64 { return p.rss },
			func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }},
	}
	// A legend under the source: each mode, when there are several or
	// replicas; the replicas, when there are any.
	var legend []string
	if len(modes) > 1 || len(replicas) > 0 {
		legend = append(legend, modes...)
	}
	if len(replicas) > 0 {
		legend = append(legend, "")
	}
	panelTop := scalePanelTop + (len(legend)+1)*scaleLegendHeight
	height := panelTop + len(panels)*(scalePanelHeight+scalePanelGap) - scalePanelGap + scaleBottom
	maxServices := 0
	for _, p := range all {
		maxServices = max(maxServices, p.services)
	}
	xTop, xStep := axis.NiceCeil(float64(maxServices))
	// The plot runs a little past the last tick, so that a dot there is
	// not drawn on the frame.
	xEnd := xTop * 1.04
	plotW := float64(scaleChartWidth - scaleMarginLeft - scaleMarginRight)
	xOf := func(v float64) float64 { return scaleMarginLeft + plotW*v/xEnd }

	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		scaleChartWidth, height, scaleChartWidth, height)
	fmt.Fprintf(bw, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(bw, `<text x="%d" y="24" font-size="15" font-weight="bold">The autoscaler alone, against the services it scales (5 pods each)</text>`+"\n", scaleMarginLeft)
	fmt.Fprintf(bw, `<text x="%d" y="44" fill="#444">%s</text>`+"\n", scaleMarginLeft, html.EscapeString(source))
	for i, item := range legend {
		y := scalePanelTop + i*scaleLegendHeight
		if item == "" {
			// One phrase for the modes whose replicas divide as many
			// services alike, as they do in a run.
			var phrases []string
			byPhrase := map[string][]string{}
			for _, m := range modes {
				if rs := replicas[m]; len(rs) > 0 {
					total := 0
					for _, p := range rs {
						total += p.services
					}
					ph := fmt.Sprintf("each of %d autoscaler replicas dividing %s services by buckets", len(rs), thousands(total))
					if byPhrase[ph] == nil {
						phrases = append(phrases, ph)
					}
					byPhrase[ph] = append(byPhrase[ph], m)
				}
			}
			for j, ph := range phrases {
				if len(modes) > 1 {
					phrases[j] = ph + " (" + strings.Join(byPhrase[ph], ", ") + ")"
				}
			}
			fmt.Fprintf(bw, `<rect x="%d" y="%d" width="8" height="8" fill="#444"/>`+"\n", scaleMarginLeft, y)
			fmt.Fprintf(bw, `<text x="%d" y="%d" fill="#444">%s</text>`+"\n", scaleMarginLeft+14, y+8,
				html.EscapeString(strings.Join(phrases, "; ")+", at the services it leads"))
			continue
		}
		fmt.Fprintf(bw, `<circle cx="%d" cy="%d" r="4" fill="%s"/>`+"\n", scaleMarginLeft+4, y+4, scaleModeColor(item))
		fmt.Fprintf(bw, `<text x="%d" y="%d" fill="#444">%s</text>`+"\n", scaleMarginLeft+14, y+8, html.EscapeString(cmp.Or(scaleModeLegend[item], item)))
	}

	bottom := 0.0
	for i, pn := range panels {
		top := float64(panelTop + i*(scalePanelHeight+scalePanelGap))
		bottom = top + scalePanelHeight
		yMax := 0.0
		for _, p := range all {
			yMax = math.Max(yMax, pn.v(p))
		}
		// Room above the highest dot for its label.
		yTop, yStep := axis.NiceCeil(yMax * 1.1)
		yOf := func(v float64) float64 { return bottom - scalePanelHeight*v/yTop }
		// Grid and value axis.
		for v := 0.0; v <= yTop+yStep/2; v += yStep {
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", xOf(0), yOf(v), xOf(xEnd), yOf(v))
			// Six digits at most: a step of 0.2 added up is 0.6000000000000001.
			fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
				xOf(0)-6, yOf(v), strconv.FormatFloat(v, 'g', 6, 64))
		}
		for v := 0.0; v <= xTop+xStep/2; v += xStep {
			fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", xOf(v), top, xOf(v), bottom)
		}
		fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#444"/>`+"\n",
			xOf(0), top, xOf(xEnd)-xOf(0), scalePanelHeight)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" fill="#444">%s</text>`+"\n", xOf(0), top-8, html.EscapeString(pn.title))
		for mi, m := range modes {
			color, pts := scaleModeColor(m), sizes[m]
			// Each mode's sizes, joined in order (dashed to a size that
			// did not keep up), each dot titled and labelled with its
			// value: the first mode's labels above, the others' below.
			for j := 1; j < len(pts); j++ {
				a, b := pts[j-1], pts[j]
				dash := ""
				if !a.keptUp || !b.keptUp {
					dash = ` stroke-dasharray="5,3"`
				}
				fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.6"%s/>`+"\n",
					xOf(float64(a.services)), yOf(pn.v(a)), xOf(float64(b.services)), yOf(pn.v(b)), color, dash)
			}
			labelDY := -10.0
			if mi > 0 {
				labelDY = 18
			}
			for _, p := range pts {
				x, y := xOf(float64(p.services)), yOf(pn.v(p))
				fill, note := color, ""
				if !p.keptUp {
					fill, note = "white", "; did not keep up"
				}
				fmt.Fprintf(bw, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" stroke="%s" stroke-width="1.6"><title>%s, %s services: %s%s</title></circle>`+"\n",
					x, y, fill, color, m, thousands(p.services), pn.label(pn.v(p)), note)
				fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%s</text>`+"\n", x, y+labelDY, color, pn.label(pn.v(p)))
			}
			// The replicas unlabelled: they sit among the sizes of as
			// many services; their values are in their titles.
			for _, p := range replicas[m] {
				x, y := xOf(float64(p.services)), yOf(pn.v(p))
				fill, note := color, ""
				if !p.keptUp {
					fill, note = "white", "; did not keep up"
				}
				fmt.Fprintf(bw, `<rect x="%.1f" y="%.1f" width="8" height="8" fill="%s" stroke="%s" stroke-width="1.6"><title>%s, replica %d of a sharded autoscaler, %s services: %s%s</title></rect>`+"\n",
					x-4, y-4, fill, color, m, p.replica, thousands(p.services), pn.label(pn.v(p)), note)
			}
		}
	}
	// The services axis, under the lower panel.
	for v := 0.0; v <= xTop+xStep/2; v += xStep {
		x := xOf(v)
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`+"\n", x, bottom, x, bottom+4)
		fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, bottom+18, thousands(int(v)))
	}
	label := "services"
	if slices.ContainsFunc(all, func(p scalePoint) bool { return !p.keptUp }) {
		label += "; hollow: did not keep up (services went without a sample, or a load step never led to a scale write), the figures are what it got through"
	}
	fmt.Fprintf(bw, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", scaleMarginLeft+plotW/2, bottom+38, html.EscapeString(label))
	fmt.Fprintln(bw, `</svg>`)
	return bw.Flush()
}

// scaleModeColor is the color of a mode's points.
func scaleModeColor(mode string) string { return cmp.Or(scaleModeColors[mode], "#444") }

// writeScaleChartFile draws the chart of the scale lines in lines (a
// run's, a report's or a document's) into path; source says which. The
// chart is drawn whole before the file is written.
func writeScaleChartFile(path, source string, lines []byte) error {
	pts, err := parseScaleLines(bytes.NewReader(lines))
	if err != nil {
		return fmt.Errorf("scale chart from %s: %w", source, err)
	}
	var b bytes.Buffer
	if err := writeScaleChart(&b, source, pts); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}
