package main

import (
	"encoding/xml"
	"math"
	"strings"
	"testing"
	"time"
)

// svgDoc is the part of an SVG the tests read.
type svgDoc struct {
	XMLName   xml.Name `xml:"svg"`
	Texts     []string `xml:"text"`
	Polylines []struct {
		Points string `xml:"points,attr"`
		Title  string `xml:"title"`
	} `xml:"polyline"`
	Circles []struct {
		Title string `xml:"title"`
	} `xml:"circle"`
}

func TestChart(t *testing.T) {
	// Samples every minute, at rest every fifth.
	r := fakeResult(30, func(i int) float64 { return 100 + float64(i) })
	// The long-lived queue-proxy's heap is unknown in one sample.
	r.rows[4].v[col("qp_long_heap_bytes")] = math.NaN()
	var b strings.Builder
	if err := writeChart(&b, "soak <30 services> & more", r.rows, 15*time.Minute); err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal([]byte(b.String()), &doc); err != nil {
		t.Fatalf("not XML: %v\n%s", err, b.String())
	}
	if len(doc.Texts) == 0 || doc.Texts[0] != "soak <30 services> & more" {
		t.Errorf("title %q", doc.Texts[:1])
	}

	var want []string
	var all []series
	for _, p := range chartPanels {
		for _, s := range p.series {
			want = append(want, s.label)
			all = append(all, s)
		}
	}
	if len(doc.Polylines) != len(want) {
		t.Fatalf("%d lines, want %d (%q)", len(doc.Polylines), len(want), want)
	}
	for i, pl := range doc.Polylines {
		s := all[i]
		if pl.Title != want[i] {
			t.Errorf("line %d is %q, want %q", i, pl.Title, want[i])
		}
		n := len(strings.Fields(pl.Points))
		wantN := len(r.rows)
		if s.key == "qp_long_heap_bytes" {
			wantN-- // the unknown sample is left out
		}
		if n != wantN {
			t.Errorf("line %q has %d points, want %d", pl.Title, n, wantN)
		}
	}
	// A dot on every line at each of the 7 samples at rest (0, 5, ...,
	// 30 minutes).
	if len(doc.Circles) != 7*len(want) {
		t.Errorf("%d dots, want %d", len(doc.Circles), 7*len(want))
	}
	for _, label := range []string{"minutes since the traffic began; dotted line: the second half begins, the first half's traffic again; dots: samples at rest", "swell local: memory (MiB)", "long-lived queue-proxy, mean: goroutines and open files", "replicas", "30"} {
		found := false
		for _, s := range doc.Texts {
			found = found || s == label
		}
		if !found {
			t.Errorf("no text %q", label)
		}
	}
}

func TestChartOfShortRunCountsSeconds(t *testing.T) {
	r := fakeResult(0, func(int) float64 { return 1 })
	r.rows = nil
	for i := range 11 {
		r.rows = append(r.rows, makeRow(time.Duration(2*i)*time.Second, "", false, &snapshot{}))
	}
	var b strings.Builder
	if err := writeChart(&b, "smoke", r.rows, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal([]byte(b.String()), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), ">seconds since the traffic began") || !strings.Contains(b.String(), ">20</text>") {
		t.Error("a 20-second run's axis is not in seconds up to 20")
	}
	// Only the counts exist in empty samples: the replicas.
	if len(doc.Polylines) != 1 {
		t.Errorf("%d lines, want the one of replicas running", len(doc.Polylines))
	}
}
