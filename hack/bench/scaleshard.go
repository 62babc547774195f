package main

import (
	"fmt"
	"math"
	"time"

	"github.com/swell-run/swell/hack/scale/pods"
)

// The scale scenario's sharded size: the services of the largest size
// divided into buckets (package shard), each led by one of a few
// autoscaler processes, and the fleet's activators sending each service's
// reports and pokes to its bucket's leader, as in a cluster with BUCKETS
// (docs/kubernetes.md, "Sharding"). Which replica leads which bucket is
// fixed here, at the even share the Leases settle at: the election itself
// is tested on a cluster (hack/cluster/e2e/swell_shard_test.go).

// scaleShardLines are a sharded size's plain lines in its mode: one per
// replica, with the fleet's services and pods in the buckets it leads,
// then one for all of them together (CPU, memory and services without a
// sample summed, the slowest round, every step) with the most loaded
// replica's CPU over the least's.
func scaleShardLines(r scaleResult) []string {
	head := fmt.Sprintf("scale-shard mode=%s replicas=%d buckets=%d services=%d pods=%d", r.mode, r.size.replicas, r.size.buckets, r.size.services, r.pods)
	if !r.measured || len(r.replicas) == 0 {
		return []string{fmt.Sprintf("%s failed=%q", head, errString(r.err))}
	}
	var lines []string
	var cpu, rss, unsampled, round float64
	secs := r.window.Seconds()
	for i, p := range r.replicas {
		lines = append(lines, fmt.Sprintf("scale-shard mode=%s replica=%d buckets=%d services=%d pods=%d cpu_cores=%.2f rss_mib=%.0f unsampled=%.1f scrape_p99_ms=%.0f decide_p99_ms=%s",
			r.mode, i, len(p.lead), p.services, p.pods, p.cpu, float64(p.mem.RSS)/(1<<20), p.unsampled(secs), p.roundP99*1000, scaleMillis(decideP99(p.steps))))
		cpu += p.cpu
		rss += float64(p.mem.RSS) / (1 << 20)
		unsampled += p.unsampled(secs)
		round = max(round, p.roundP99)
	}
	cpuSpread, _ := r.spread(func(p scaleReplica) float64 { return p.cpu })
	lines = append(lines, fmt.Sprintf("%s cpu_cores=%.2f rss_mib=%.0f unsampled=%.1f scrape_p99_ms=%.0f decide_p99_ms=%s cpu_max_min=%.2f",
		head, cpu, rss, unsampled, round*1000, scaleMillis(decideP99(r.steps())), cpuSpread))
	return lines
}

// spread is the largest of the replicas' v over the smallest; false when
// the smallest is 0.
func (r *scaleResult) spread(v func(scaleReplica) float64) (float64, bool) {
	if len(r.replicas) == 0 {
		return math.NaN(), false
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range r.replicas {
		lo, hi = min(lo, v(p)), max(hi, v(p))
	}
	if lo <= 0 {
		return math.NaN(), false
	}
	return hi / lo, true
}

// scaleShardSection is a sharded size's table in its mode: a column per
// replica, their sum and spread, and the one leader of the same services
// in the same mode and run (single, nil when it was not measured).
func scaleShardSection(r scaleResult, single *scaleResult, tm scaleTiming) section {
	s := section{title: fmt.Sprintf("Scale: %d services × %d pods, %d buckets led by %d autoscalers, %s", r.size.services, scalePodsPerService, r.size.buckets, r.size.replicas, r.mode)}
	if !r.measured || len(r.replicas) == 0 {
		s.text = fmt.Sprintf("Did not run to the end: %v", errString(r.err))
		s.notes = []string{fmt.Sprintf("Load average (1, 5, 15 min): %s before, %s after.", r.loadBefore, r.loadAfter)}
		return s
	}
	one := single != nil && single.measured && len(single.replicas) == 1
	s.header = []string{"metric"}
	for i, p := range r.replicas {
		s.header = append(s.header, fmt.Sprintf("replica %d (buckets %s)", i, joinInts(p.lead)))
	}
	s.header = append(s.header, "all", "max ÷ min")
	if one {
		s.header = append(s.header, "one leader, same run")
	}
	secs := r.window.Seconds()
	// row adds a metric: each replica's cell, then the sum (by total,
	// "" for none) and the spread (of spread, nil for none), then the
	// one leader's cell.
	row := func(name string, cell func(f scaleFigures) string, total func() string, spread func(scaleReplica) float64) {
		out := []string{name}
		for _, p := range r.replicas {
			out = append(out, cell(scaleFigures{p: p, secs: secs, maxWait: tm.stepWait}))
		}
		sum, ratio := "", ""
		if total != nil {
			sum = total()
		}
		if spread != nil {
			if v, ok := r.spread(spread); ok {
				ratio = fmt.Sprintf("%.2f×", v)
			}
		}
		out = append(out, sum, ratio)
		if one {
			out = append(out, cell(scaleFigures{p: single.replicas[0], secs: single.window.Seconds(), maxWait: tm.stepWait}))
		}
		s.rows = append(s.rows, out)
	}
	sum := func(v func(scaleReplica) float64) float64 {
		t := 0.0
		for _, p := range r.replicas {
			t += v(p)
		}
		return t
	}
	cpu := func(p scaleReplica) float64 { return p.cpu }
	rss := func(p scaleReplica) float64 { return float64(p.mem.RSS) }
	ok := func(p scaleReplica) float64 { return p.scrapes["ok"] }
	scale := func(p scaleReplica) float64 { return float64(p.writes["scale"]) }
	route := func(p scaleReplica) float64 { return float64(p.writes["route"]) }
	missing := func(p scaleReplica) float64 { return p.missing }
	all := scaleFigures{p: scaleReplica{steps: r.steps()}, secs: secs, maxWait: tm.stepWait}

	row("services; the fleet's pods; pods ready at the end", func(f scaleFigures) string {
		return fmt.Sprintf("%d; %d; %d", f.p.services, f.p.pods, f.p.readyPods)
	}, func() string {
		return fmt.Sprintf("%.0f; %.0f; %.0f", sum(func(p scaleReplica) float64 { return float64(p.services) }),
			sum(func(p scaleReplica) float64 { return float64(p.pods) }), sum(func(p scaleReplica) float64 { return float64(p.readyPods) }))
	}, func(p scaleReplica) float64 { return float64(p.services) })
	row("**CPU, of one core**", func(f scaleFigures) string { return fmt.Sprintf("%.2f", f.p.cpu) },
		func() string { return fmt.Sprintf("%.2f", sum(cpu)) }, cpu)
	row("RSS at the end", func(f scaleFigures) string { return mib(f.p.mem.RSS) },
		func() string { return mib(int64(sum(rss))) }, rss)
	row("open files (limit)", func(f scaleFigures) string { return fmt.Sprintf("%.0f (%.0f)", f.p.openFDs, f.p.maxFD) }, nil, nil)
	row("collection rounds; not started", func(f scaleFigures) string { return fmt.Sprintf("%.0f; %.0f", f.p.rounds, f.p.roundsDropped) }, nil, nil)
	row("collection round, mean; p99", func(f scaleFigures) string {
		return fmt.Sprintf("%s; %s", millis(f.p.roundMean), millis(f.p.roundP99))
	}, nil, func(p scaleReplica) float64 { return p.roundP99 })
	row("scrapes answered; one scrape's p99", func(f scaleFigures) string {
		return fmt.Sprintf("%s; %s", f.per(f.p.scrapes["ok"]), millis(f.p.scrapeP99))
	}, func() string { return fmt.Sprintf("%.0f/s", sum(ok)/secs) }, ok)
	row("scrapes failed", scaleFigures.failed, nil, nil)
	row("**services without a sample, a second**", func(f scaleFigures) string { return fmt.Sprintf("%.1f", f.p.unsampled(f.secs)) },
		func() string { return fmt.Sprintf("%.1f", sum(missing)/secs) }, nil)
	if r.mode == scaleModePush {
		pushing := func(p scaleReplica) float64 { return p.pushing }
		row("pods pushing at the end; frames applied", func(f scaleFigures) string {
			return fmt.Sprintf("%.0f; %s", f.p.pushing, f.per(f.p.pushApplied))
		}, func() string { return fmt.Sprintf("%.0f", sum(pushing)) }, pushing)
		row("pod reports a round read from pushes", func(f scaleFigures) string { return f.per(f.p.pushedReads) }, nil, nil)
		row("push connections refused (redirected: elsewhere); closed", func(f scaleFigures) string {
			return fmt.Sprintf("%s; %s", f.byReason(f.p.pushRejected), f.byReason(f.p.pushClosed))
		}, nil, nil)
		row("decisions on a sharp push", func(f scaleFigures) string { return f.per(f.p.pushDecisions) }, nil, nil)
	}
	row("activators connected; their reports, pokes", func(f scaleFigures) string {
		return fmt.Sprintf("%.0f; %s, %s", f.p.activators, f.per(f.p.reports), f.per(f.p.pokes))
	}, nil, nil)
	row("busy step → scale write", func(f scaleFigures) string { return f.lat(pods.KindBusy) },
		func() string { return all.lat(pods.KindBusy) }, nil)
	row("zero service woken (poke) → scale write", func(f scaleFigures) string { return f.lat(pods.KindZero) },
		func() string { return all.lat(pods.KindZero) }, nil)
	row("scale writes; most in one second", func(f scaleFigures) string {
		return fmt.Sprintf("%s; %d", f.per(float64(f.p.writes["scale"])), f.p.maxScaleWrite)
	}, func() string { return fmt.Sprintf("%.0f/s", sum(scale)/secs) }, scale)
	row("route writes", func(f scaleFigures) string { return f.per(float64(f.p.writes["route"])) },
		func() string { return fmt.Sprintf("%.0f/s", sum(route)/secs) }, nil)

	how, settle := "", tm.settle
	if r.mode == scaleModePush {
		how = "The pods push to the replicas spread evenly, as over a Service's endpoints; a replica redirects (307) a pod whose service " +
			"it does not lead to the replica that does, which the pod follows, and dials directly from then on. "
		settle += scalePushSettle
	}
	s.text = fmt.Sprintf("The fleet of the one-leader size, its activators reporting each service to the replica leading its bucket "+
		"(`reporter.Pool`), and %d autoscaler processes, replica i leading the buckets b with b mod %d = i (fixed: no Leases). %s"+
		"Measured over %s after %s of settling; each replica's services were stepped %d times. \"all\" sums the replicas "+
		"(every step, for the latencies); \"max ÷ min\" is the most loaded replica's figure over the least loaded's.",
		r.size.replicas, r.size.replicas, how, r.window.Round(time.Second), settle, tm.steps)
	if one {
		s.notes = append(s.notes, fmt.Sprintf("Against one leader of the same services in this run: CPU %.2f of %.2f cores in all (%.2f×), "+
			"the most loaded replica %.2f× the one leader's.", sum(cpu), single.replicas[0].cpu, sum(cpu)/single.replicas[0].cpu,
			maxOf(r.replicas, cpu)/single.replicas[0].cpu))
	}
	s.notes = append(s.notes, fmt.Sprintf("Fleet: %.2f cores, %s resident at the end, over %d processes.", r.fleetCPU, mib(r.fleetMem.RSS), r.fleetProcs))
	if fs := r.fleet; r.mode == scaleModePush {
		s.notes = append(s.notes, fmt.Sprintf("The fleet's pushes: %.0f frames a second in the window; since it started, %d dials, %d redirects "+
			"followed, %d refused (403), %d answered 503, %d failed, %d connections closed by the autoscaler; %d open at the end.",
			r.fleetFrames/secs, fs.PushDials, fs.PushRedirects, fs.PushRefused, fs.PushUnavailable, fs.PushFailures, fs.PushClosed, fs.Pushing))
	}
	s.notes = append(s.notes, fmt.Sprintf("Load average (1, 5, 15 min): %s before, %s after.", r.loadBefore, r.loadAfter))
	s.notes = append(s.notes, scaleConditions(r)...)
	if r.err != nil {
		s.notes = append(s.notes, fmt.Sprintf("**Failed after the window**: %v", r.err))
	}
	return s
}

func maxOf(ps []scaleReplica, v func(scaleReplica) float64) float64 {
	m := math.Inf(-1)
	for _, p := range ps {
		m = max(m, v(p))
	}
	return m
}
