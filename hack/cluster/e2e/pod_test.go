package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestCrashRestarts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const exitCode = 3

	pod, err := e.cs.CoreV1().Pods(e.ns).Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "crash"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyAlways,
			Containers: []corev1.Container{{
				Name:    "shell",
				Image:   "swell/shell",
				Command: []string{"/bin/sh", "-c", fmt.Sprintf("echo started; sleep 1; exit %d", exitCode)},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}

	e.eventually("pod crash restarted twice after exiting with code 3", func(ctx context.Context) error {
		p, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cs := containerStatus(p, "shell")
		if cs == nil {
			return fmt.Errorf("no container status")
		}
		last := cs.LastTerminationState.Terminated
		if cs.RestartCount < 2 || last == nil || last.ExitCode != exitCode {
			return fmt.Errorf("restarts %d, last state %s", cs.RestartCount, describeState(cs.LastTerminationState))
		}
		pod = p
		return nil
	})

	// Each run has a log of its own; the first one is complete by now.
	if log := containerLog(t, pod, "shell", 0); !strings.Contains(log, "started") {
		t.Errorf("log of the first run of pod %s: %q, want it to contain %q", pod.Name, log, "started")
	}
}
