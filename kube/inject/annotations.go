package inject

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/spelling"
)

// The per-service annotations injection reads from the workload.
const (
	// AnnotationContainerConcurrency is the hard per-pod limit of requests at
	// the app (autoscaling.ContainerConcurrencyKey).
	AnnotationContainerConcurrency = autoscaling.ContainerConcurrencyKey
	// AnnotationTimeout bounds a whole request (REQUEST_TIMEOUT).
	AnnotationTimeout = kube.Prefix + "timeout"
	// AnnotationResponseStartTimeout bounds the wait for response headers.
	AnnotationResponseStartTimeout = kube.Prefix + "response-start-timeout"
	// AnnotationStreamIdleTimeout bounds the time without response bytes.
	AnnotationStreamIdleTimeout = kube.Prefix + "stream-idle-timeout"
	// AnnotationQueueDepth is how many requests may wait for the app.
	AnnotationQueueDepth = kube.Prefix + "queue-depth"
	// AnnotationContainer names the app container among several.
	AnnotationContainer = kube.Prefix + "container"
)

// The keys injection writes on the pod template. They are accepted among
// the workload's annotations too, since a bare Pod's annotations are its
// template's.
const (
	// AnnotationInjected holds the queue-proxy image a template was
	// injected with.
	AnnotationInjected = kube.Prefix + "injected"
	// AnnotationUserReadinessProbe holds, as JSON, the app's readiness probe
	// as it was before injection moved it to the queue-proxy.
	AnnotationUserReadinessProbe = kube.Prefix + "user-readiness-probe"
)

// known lists the swell.run/ keys a workload may carry, for the did-you-mean
// of unknown ones.
var known = []string{
	AnnotationContainerConcurrency,
	AnnotationTimeout,
	AnnotationResponseStartTimeout,
	AnnotationStreamIdleTimeout,
	AnnotationQueueDepth,
	AnnotationContainer,
	AnnotationInjected,
	AnnotationUserReadinessProbe,
	kube.AnnotationStatus,
}

// settings are the per-service values read from the annotations.
type settings struct {
	containerConcurrency int
	// queueDepth is -1 when not given: the queue-proxy's default applies.
	queueDepth           int
	timeout              time.Duration
	responseStartTimeout time.Duration
	streamIdleTimeout    time.Duration
	container            string
}

// parseSettings validates every swell.run/ and autoscaling.swell.run/
// annotation and returns every problem at once.
func parseSettings(annotations map[string]string, d autoscaling.Defaults) (settings, error) {
	s := settings{queueDepth: -1, timeout: network.DefaultRequestTimeout}
	var errs []error
	bad := func(key, problem, accepted string) {
		errs = append(errs, fmt.Errorf("%s: %q %s; accepted: %s", key, annotations[key], problem, accepted))
	}

	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		if k == kube.LabelEnabled {
			errs = append(errs, fmt.Errorf("%s: is read from the labels, not the annotations; set it as a label on the workload and its pod template", k))
			continue
		}
		if msg, ok := unknownKey(k); ok {
			errs = append(errs, fmt.Errorf("%s: unknown key (value %q)%s", k, annotations[k], msg))
		}
	}

	cc, err := autoscaling.ParseContainerConcurrency(annotations)
	if err != nil {
		errs = append(errs, err)
	}
	s.containerConcurrency = cc
	if _, err := autoscaling.Parse(annotations, cc, d); err != nil {
		errs = append(errs, err)
	}

	duration := func(key string, lo, hi time.Duration, accepted string) (time.Duration, bool) {
		text, ok := annotations[key]
		if !ok {
			return 0, false
		}
		v, err := time.ParseDuration(strings.TrimSpace(text))
		switch {
		case err != nil:
			bad(key, "is not a duration", accepted)
		case v < lo || v > hi:
			bad(key, "is out of range", accepted)
		default:
			return v, true
		}
		return 0, false
	}
	timeoutOK := true
	if _, given := annotations[AnnotationTimeout]; given {
		v, ok := duration(AnnotationTimeout, network.RequestTimeoutMin, network.RequestTimeoutMax, "a duration from 1s to 1h, e.g. 30s or 5m")
		if ok {
			s.timeout = v
		}
		timeoutOK = ok
	}
	within := fmt.Sprintf("a duration from 0s (none) to the request timeout %s (%s), e.g. 10s", formatDuration(s.timeout), AnnotationTimeout)
	if !timeoutOK {
		within = fmt.Sprintf("a duration from 0s (none) to the request timeout (%s)", AnnotationTimeout)
	}
	if v, ok := duration(AnnotationResponseStartTimeout, 0, s.timeout, within); ok {
		s.responseStartTimeout = v
	}
	if v, ok := duration(AnnotationStreamIdleTimeout, 0, s.timeout, within); ok {
		s.streamIdleTimeout = v
	}

	if text, ok := annotations[AnnotationQueueDepth]; ok {
		v, err := strconv.Atoi(strings.TrimSpace(text))
		switch {
		case err != nil || v < 0:
			bad(AnnotationQueueDepth, "is not an integer ≥ 0", "an integer ≥ 0 (default: 10×container-concurrency)")
		case cc == 0:
			// Without a concurrency limit nothing ever queues, so a depth is
			// a sign the author expected a limit that is not there.
			bad(AnnotationQueueDepth, "has no effect without a concurrency limit",
				fmt.Sprintf("a queue depth only together with %s > 0", AnnotationContainerConcurrency))
		default:
			s.queueDepth = v
		}
	}

	if name, ok := annotations[AnnotationContainer]; ok {
		if strings.TrimSpace(name) == "" {
			bad(AnnotationContainer, "is empty", "the name of the app container")
		}
		s.container = name
	}
	return s, errors.Join(errs...)
}

// unknownKey says whether k is a swell.run/ key Swell does not know,
// or nearly one (a misspelt domain in front of a known name), and returns
// the did-you-mean to add to the message.
func unknownKey(k string) (string, bool) {
	name, ours := strings.CutPrefix(k, kube.Prefix)
	if !ours {
		domain, rest, found := strings.Cut(k, "/")
		if !found || spelling.Distance(strings.ToLower(domain+"/"), kube.Prefix) > 2 {
			return "", false
		}
		for _, c := range known {
			if strings.TrimPrefix(c, kube.Prefix) == rest {
				return "; did you mean " + c + "?", true
			}
		}
		return "", false
	}
	best, bestD := "", max(1, min(3, len(name)/4))+1
	for _, c := range known {
		if d := spelling.Distance(strings.ToLower(name), strings.TrimPrefix(c, kube.Prefix)); d < bestD {
			best, bestD = c, d
		}
	}
	msg := "; accepted: " + strings.Join(known[:6], ", ")
	if best != "" {
		msg += "; did you mean " + best + "?"
	}
	return msg, true
}

// formatDuration writes d as the queue-proxy reads it, without the zero
// units time.Duration.String leaves ("5m", not "5m0s").
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
