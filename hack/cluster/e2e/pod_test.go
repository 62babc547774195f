package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/swell-run/swell/hack/cluster/nodeimages"
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
				Name:            "box",
				Image:           nodeimages.Box,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Args:            []string{"-say", "started", "-after", "1s", "-exit", fmt.Sprint(exitCode)},
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
		cs := containerStatus(p, "box")
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

	// The kubelet keeps the log of the run before the current one.
	log, err := e.podLogs(t.Context(), pod, "box", true)
	if err != nil || !strings.Contains(log, "started") {
		t.Errorf("log of the previous run of pod %s: %q %v, want it to contain %q", pod.Name, log, err, "started")
	}
}
