package main

import (
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Reading the Prometheus metrics Swell's processes serve: the scenarios
// take their figures from the components' own counters, gauges and
// histograms.

// scrapeMetrics reads a Prometheus text exposition.
func scrapeMetrics(client *http.Client, url string) (map[string]*dto.MetricFamily, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// counterOf sums a counter's series.
func counterOf(fams map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	for _, m := range fams[name].GetMetric() {
		v += m.GetCounter().GetValue()
	}
	return v
}

// counterByLabel sums a counter's series by the value of one label.
func counterByLabel(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range fams[name].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// gaugeOf is the value of a gauge's (or an untyped metric's) first series.
func gaugeOf(fams map[string]*dto.MetricFamily, name string) (float64, bool) {
	ms := fams[name].GetMetric()
	if len(ms) == 0 {
		return 0, false
	}
	if g := ms[0].GetGauge(); g != nil {
		return g.GetValue(), true
	}
	return ms[0].GetUntyped().GetValue(), true
}

// histogram is one reading of a Prometheus histogram, its series summed:
// cumulative counts at its bounds, in order, the last +Inf (the count of
// every observation), and the sum of the observations.
type histogram struct {
	bounds []float64
	counts []uint64
	sum    float64
}

// histogramOf reads a histogram; ok is false when the exposition has none
// of that name.
func histogramOf(fams map[string]*dto.MetricFamily, name string) (h histogram, ok bool) {
	f := fams[name]
	if f == nil {
		return h, false
	}
	at := map[float64]uint64{}
	for _, m := range f.GetMetric() {
		hm := m.GetHistogram()
		h.sum += hm.GetSampleSum()
		for _, b := range hm.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				at[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
		at[math.Inf(1)] += hm.GetSampleCount()
	}
	h.bounds = slices.Sorted(maps.Keys(at))
	for _, b := range h.bounds {
		h.counts = append(h.counts, at[b])
	}
	return h, true
}

// count is how many observations h holds.
func (h histogram) count() uint64 {
	if len(h.counts) == 0 {
		return 0
	}
	return h.counts[len(h.counts)-1]
}

// at is the cumulative count at the bound b; 0 when h has no such bound.
func (h histogram) at(b float64) uint64 {
	if i, ok := slices.BinarySearch(h.bounds, b); ok {
		return h.counts[i]
	}
	return 0
}

// since is what h observed after before, an earlier reading of the same
// histogram.
func (h histogram) since(before histogram) histogram {
	d := histogram{bounds: h.bounds, counts: make([]uint64, len(h.counts)), sum: h.sum - before.sum}
	for i, b := range h.bounds {
		d.counts[i] = h.counts[i] - min(before.at(b), h.counts[i])
	}
	return d
}

// add merges o into h at the bounds they share: the activator's and the
// queue-proxy's wait histograms share every bound from 1 ms up, and +Inf.
func (h histogram) add(o histogram) histogram {
	var sum histogram
	for i, b := range h.bounds {
		if j, ok := slices.BinarySearch(o.bounds, b); ok {
			sum.bounds = append(sum.bounds, b)
			sum.counts = append(sum.counts, h.counts[i]+o.counts[j])
		}
	}
	sum.sum = h.sum + o.sum
	return sum
}

// above is how many observations exceeded the bound floor.
func (h histogram) above(floor float64) uint64 { return h.count() - h.at(floor) }

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linearly within the bucket that holds it, from 0 for the first;
// the highest finite bound when it lies past every one. 0 without
// observations.
func (h histogram) quantile(q float64) float64 {
	n := h.count()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	for i, c := range h.counts {
		if float64(c) < rank || i > 0 && c == h.counts[i-1] || c == 0 {
			continue // not there yet, or an empty bucket
		}
		if math.IsInf(h.bounds[i], 1) {
			if i == 0 {
				return 0
			}
			return h.bounds[i-1]
		}
		lo, below := 0.0, uint64(0)
		if i > 0 {
			lo, below = h.bounds[i-1], h.counts[i-1]
		}
		return lo + (h.bounds[i]-lo)*(rank-float64(below))/float64(c-below)
	}
	return h.bounds[len(h.bounds)-1]
}

// boundAbove is the upper bound of the bucket holding the q-quantile of
// the observations above floor: the most they took, at the histogram's
// resolution; +Inf when it lies past the last finite bound, 0 without
// such observations.
func (h histogram) boundAbove(q, floor float64) float64 {
	n := h.above(floor)
	if n == 0 {
		return 0
	}
	want, base := uint64(math.Ceil(q*float64(n))), h.at(floor)
	for i, b := range h.bounds {
		if b > floor && h.counts[i]-base >= want {
			return b
		}
	}
	return math.Inf(1)
}
