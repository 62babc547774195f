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
	// AnnotationSharedProcessNamespace says injection set the pod's
	// shareProcessNamespace, which the user had left unset: injecting
	// again takes it back when the metrics no longer need it.
	AnnotationSharedProcessNamespace = kube.Prefix + "injected-share-process-namespace"
)

// settable lists the swell.run/ keys a user sets on a workload: what an
// unknown key is told is accepted.
var settable = []string{
	AnnotationContainerConcurrency,
	AnnotationTimeout,
	AnnotationResponseStartTimeout,
	AnnotationStreamIdleTimeout,
	AnnotationQueueDepth,
	AnnotationContainer,
	kube.AnnotationAllowedCallers,
	kube.AnnotationHosts,
}

// known lists every swell.run/ key a workload may carry: the settable
// ones and those Swell writes.
var known = append(slices.Clip(settable), AnnotationInjected, AnnotationUserReadinessProbe, AnnotationSharedProcessNamespace, kube.AnnotationStatus)

// settings are the per-service values read from the annotations.
type settings struct {
	containerConcurrency int
	// queueDepth is -1 when not given: the queue-proxy's default applies.
	queueDepth           int
	timeout              time.Duration
	responseStartTimeout time.Duration
	streamIdleTimeout    time.Duration
	container            string
	// autoscaling is the service's autoscaling spec, without the app's
	// requests.
	autoscaling autoscaling.Spec
}

// parseSettings validates every swell.run/ and autoscaling.swell.run/
// annotation and returns every problem at once.
func parseSettings(annotations map[string]string, d autoscaling.Defaults) (settings, error) {
	s := settings{queueDepth: -1, timeout: network.DefaultRequestTimeout}
	var errs []error
	bad := func(key, problem, accepted string) {
		errs = append(errs, &autoscaling.Error{Key: key, Name: key, Value: annotations[key], Problem: problem, Accepted: accepted})
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
			errs = append(errs, &autoscaling.Error{Key: k, Name: k, Value: annotations[k], KeyProblem: true,
				Problem: "is read from the labels, not the annotations", Accepted: "a label on the workload and on its pod template"})
			continue
		}
		if err := unknownKey(k, annotations[k]); err != nil {
			errs = append(errs, err)
		}
	}

	cc, err := autoscaling.ParseContainerConcurrency(annotations)
	if err != nil {
		errs = append(errs, err)
	}
	s.containerConcurrency = cc
	spec, err := autoscaling.Parse(annotations, cc, d)
	if err != nil {
		errs = append(errs, err)
	}
	s.autoscaling = spec

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
	within := fmt.Sprintf("a duration from 0s (none) to the request timeout %s (%s), e.g. 10s", autoscaling.FormatDuration(s.timeout), AnnotationTimeout)
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

	// Read by the activator, not by injection; judged here so that a bad
	// value is refused when applied rather than found later.
	if v, ok := annotations[kube.AnnotationAllowedCallers]; ok {
		if _, err := kube.ParseAllowedCallers(v); err != nil {
			errs = append(errs, err)
		}
	}
	if v, ok := annotations[kube.AnnotationHosts]; ok {
		if _, err := kube.ParseHosts(v); err != nil {
			errs = append(errs, err)
		}
	}
	return s, errors.Join(errs...)
}

// unknownKey returns the error for k when it is a swell.run/ key Swell
// does not know, or nearly one (a misspelt domain in front of a known
// name), and nil when it is another tool's.
func unknownKey(k, v string) error {
	e := &autoscaling.Error{Key: k, Name: k, Value: v, Problem: "unknown key", KeyProblem: true,
		Accepted: strings.Join(settable, ", ")}
	name, ours := strings.CutPrefix(k, kube.Prefix)
	if !ours {
		domain, rest, found := strings.Cut(k, "/")
		if !found || spelling.Suggest(domain+"/", []string{kube.Prefix}) == "" || !slices.Contains(known, kube.Prefix+rest) {
			return nil
		}
		e.Suggestion = kube.Prefix + rest
		return e
	}
	names := make([]string, len(known))
	for i, c := range known {
		names[i] = strings.TrimPrefix(c, kube.Prefix)
	}
	if sg := spelling.Suggest(name, names); sg != "" {
		e.Suggestion = kube.Prefix + sg
	}
	return e
}
