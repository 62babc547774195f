#!/bin/sh
# compare.sh [TRACE]: every policy at its defaults (default is the class a
# service gets when it sets none: adaptive), and the clairvoyant bound, on
# each kind of traffic of docs/autoscaling.md ("How it compares"), at pod
# startups of 2 s and 10 s; POLICIES="--policy kpa,default,oracle" runs
# fewer. TRACE is the Azure LLM
# trace (default ../shared/traces/azure-llm-2023-conv.csv from the module
# root). Run it from the module root; it prints one comparison table per
# traffic and startup.
set -eu
trace=${1:-../shared/traces/azure-llm-2023-conv.csv}
swell="${SWELL:-go run ./cmd/swell}"
policies="${POLICIES:---policy default,kpa,hpa,exponential,pid,hybrid,oracle}"
for startup in 2s 10s; do
	run() {
		name=$1
		shift
		echo "## $name, pod startup $startup"
		$swell sim "$@" --pod-startup "$startup" $policies 2>/dev/null
		echo
	}
	run "LLM trace" --trace "$trace" --sleep-per-token 20ms --container-concurrency 4
	run "bursts, heavy-tailed sizes, silences and service times" --profile bursts --rate 12 --burst-size 150 --off 1m --duration 1h \
		--service-time 560ms --service-dist lognormal --container-concurrency 4
	run "on/off, Pareto silences" --profile onoff --rate 2 --on 1m --off 4m --off-dist pareto --duration 12h
	run "on/off, regular silences" --profile onoff --rate 2 --on 30s --off 100s --duration 6h
	run "diurnal" --profile diurnal --rate 20 --period 2h --duration 6h --service-time 200ms --container-concurrency 4
	run "step" --profile step --rate 5 --step-rate 50 --step-at 10m --duration 30m --service-time 200ms --container-concurrency 4
	run "spike" --profile spike --rate 2 --spike-rate 50 --spike-at 4m --spike-for 1m --duration 10m \
		--service-time 200ms --service-dist exponential --container-concurrency 2
done
