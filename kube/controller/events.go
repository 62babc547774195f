package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/swell-run/swell/autoscaler"
	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/autoscaler/scaler"
	"github.com/swell-run/swell/pkg/service"
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

// event records an Event on key's Deployment, if it is opted in.
func (c *Backend) event(key service.Key, typ, reason, msg string) {
	d, err := c.deployment(key)
	if err != nil {
		return
	}
	c.recorder.Event(deploymentRef(d), typ, reason, msg)
}
