package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/pkg/service"
	"github.com/swell-run/swell/pkg/stats"
)

// OnEvent is the executor's scaler.Config.OnEvent: it records each change
// made to a Deployment, and each failure, as an Event on it, and tells the
// listeners its status changed. It does not block: the lister read is
// local and the recorder queues the Event.
func (c *Backend) OnEvent(e scaler.Event) {
	typ, reason, msg := corev1.EventTypeNormal, "", e.Reason
	switch e.Kind {
	case scaler.EventScale:
		switch {
		case e.To == 0:
			reason = ReasonScaledToZero
		case e.To > e.From:
			reason = ReasonScaledUp
		default:
			reason = ReasonScaledDown
		}
		msg = fmt.Sprintf("%d → %d: %s", e.From, e.To, e.Reason)
	case scaler.EventRoute:
		reason = ReasonRoutePods
		if e.ToRoute == plan.RouteActivator {
			reason = ReasonRouteActivator
		}
		if msg == "" {
			msg = fmt.Sprintf("%s → %s", e.FromRoute, e.ToRoute)
		}
	case scaler.EventError:
		typ, reason = corev1.EventTypeWarning, ReasonScaleFailed
		msg = fmt.Sprintf("%v (retry in %v)", e.Err, e.RetryIn)
	default:
		return
	}
	c.event(e.Service, typ, reason, msg)
	c.changed(e.Service)
}

// OnNotable is the loop's autoscaler.Config.OnNotable: it records panic
// mode starting or ending as an Event on the Deployment, and tells the
// listeners its status changed. It runs on the loop goroutine and does not
// block.
func (c *Backend) OnNotable(n autoscaler.Notable) {
	if n.PanicChanged {
		reason := ReasonPanicEnded
		if n.Decision.InPanic {
			reason = ReasonPanicStarted
		}
		c.event(n.Service, corev1.EventTypeNormal, reason, n.Decision.Reason)
	}
	c.changed(n.Service)
}

// OnGaugeProblem is the loop's autoscaler.Config.OnGaugeProblem: a
// Warning on the Deployment when its pods cannot read the app gauge it
// scales on (missing, not a number, negative, an endpoint that hangs or
// sends too much...), and a Normal event when they read it again. The
// service scales on its other metrics meanwhile.
func (c *Backend) OnGaugeProblem(p autoscaler.GaugeProblem) {
	if p.Problem == stats.GaugeOK {
		c.event(p.Service, corev1.EventTypeNormal, ReasonGaugeReadable, fmt.Sprintf("the pods read the app gauge %s again", p.Gauge))
	} else {
		c.event(p.Service, corev1.EventTypeWarning, ReasonGaugeUnreadable,
			fmt.Sprintf("%d pods cannot read the app gauge %s: %s (see the queue-proxy's log); scaling on the other metrics meanwhile",
				p.Pods, p.Gauge, p.Problem))
	}
	c.changed(p.Service)
}

// event records an Event on key's Deployment, if it is opted in.
func (c *Backend) event(key service.Key, typ, reason, msg string) {
	d, err := c.deployment(key)
	if err != nil {
		return
	}
	c.recorder.Event(deploymentRef(d), typ, reason, msg)
}
