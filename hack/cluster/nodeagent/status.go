package nodeagent

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// status returns the pod's status as the kubelet reports it. scheduled is
// the PodScheduled condition the apiserver holds, kept as it is.
func (w *podWorker) status(scheduled *corev1.PodCondition) corev1.PodStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := corev1.PodStatus{
		HostIP:    w.rt.hostIP,
		HostIPs:   []corev1.HostIP{{IP: w.rt.hostIP}},
		StartTime: &w.startTime,
		QOSClass:  w.pod.Status.QOSClass,
	}
	if w.netReady {
		s.PodIP = w.ip.String()
		s.PodIPs = []corev1.PodIP{{IP: s.PodIP}}
	}
	for _, c := range w.inits {
		s.InitContainerStatuses = append(s.InitContainerStatuses, c.status())
	}
	for _, c := range w.containers {
		s.ContainerStatuses = append(s.ContainerStatuses, c.status())
	}
	s.Phase = w.phase()
	if s.Phase == corev1.PodPending && w.netErr != "" {
		s.Message = "pod network: " + w.netErr
		s.Reason = "NetworkNotReady"
	}

	var unready []string
	for _, c := range w.containers {
		if !c.ready {
			unready = append(unready, c.spec.Name)
		}
	}
	terminal := s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed
	ready := len(unready) == 0 && !terminal
	reason, msg := "", ""
	switch {
	case terminal:
		reason = "PodCompleted"
	case !ready:
		reason = "ContainersNotReady"
		msg = fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	}
	var initReason, initMsg string
	if !w.initialized && len(w.inits) > 0 && !terminal {
		initReason = "ContainersNotInitialized"
		var pending []string
		for _, c := range w.inits {
			if !c.done {
				pending = append(pending, c.spec.Name)
			}
		}
		initMsg = fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(pending, " "))
	}
	if terminal && len(w.inits) > 0 && !w.initialized {
		initReason = "PodCompleted"
	}
	s.Conditions = []corev1.PodCondition{
		w.condition(corev1.PodReadyToStartContainers, w.netReady && !terminal, "", ""),
		w.condition(corev1.PodInitialized, w.initialized || len(w.inits) == 0 || (terminal && !w.initFailed), initReason, initMsg),
		w.condition(corev1.PodReady, ready, reason, msg),
		w.condition(corev1.ContainersReady, ready, reason, msg),
	}
	if scheduled != nil {
		s.Conditions = append(s.Conditions, *scheduled)
	}
	return s
}

// condition returns a pod condition, keeping its transition time while its
// status stays.
func (w *podWorker) condition(t corev1.PodConditionType, ok bool, reason, msg string) corev1.PodCondition {
	st := corev1.ConditionFalse
	if ok {
		st = corev1.ConditionTrue
	}
	c, seen := w.conds[t]
	if !seen || c.Status != st {
		c = corev1.PodCondition{Type: t, Status: st, LastTransitionTime: metav1.NewTime(w.rt.clock.Now())}
	}
	c.Reason, c.Message = reason, msg
	w.conds[t] = c
	return c
}

// phase follows the kubelet: Pending until every container has started
// once, Succeeded or Failed when all ended for good, else Running.
func (w *podWorker) phase() corev1.PodPhase {
	if w.initFailed {
		return corev1.PodFailed
	}
	if !w.initialized {
		return corev1.PodPending
	}
	allDone, failed, pending := true, false, false
	for _, c := range w.containers {
		if !c.done {
			allDone = false
		} else if c.exitCode != 0 {
			failed = true
		}
		if c.state.Waiting != nil && c.last.Terminated == nil && c.restarts == 0 {
			pending = true
		}
	}
	switch {
	case allDone && failed:
		return corev1.PodFailed
	case allDone:
		return corev1.PodSucceeded
	case pending:
		return corev1.PodPending
	}
	return corev1.PodRunning
}

func (c *container) status() corev1.ContainerStatus {
	started := c.started && c.state.Running != nil
	s := corev1.ContainerStatus{
		Name:                 c.spec.Name,
		State:                c.state,
		LastTerminationState: c.last,
		Ready:                c.ready,
		RestartCount:         c.restarts,
		Image:                c.spec.Image,
		ContainerID:          c.id,
		Started:              &started,
	}
	if c.binary != "" {
		s.ImageID = "swell-binary://" + c.binary
	}
	return s
}
