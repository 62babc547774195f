package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// What a failed test leaves to tell why: its failure message says what it
// last saw; when it ends, the state of its namespace and of Swell's pods
// with the end of their logs is added to it, and every log of their
// containers is written under SWELL_E2E_EVIDENCE (swell-cluster e2e sets
// it in the cluster's kept state), before the namespace and its pods go.

// evidenceEnv names the directory where failed tests keep their logs.
const evidenceEnv = "SWELL_E2E_EVIDENCE"

// logTailLines is how much of each Swell container's log a failure
// message shows; the whole log is in the evidence directory.
const logTailLines = 15

// evidenceDir is where the test keeps its logs, or "" when the suite runs
// without an evidence directory.
func evidenceDir(t *testing.T) string {
	root := os.Getenv(evidenceEnv)
	if root == "" {
		return ""
	}
	return filepath.Join(root, strings.Trim(notLabelChars.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-"))
}

// keepNamespaceEvidence is the cleanup of a failed test's namespace: the
// namespace's pods and events, and its containers' logs kept.
func (e *env) keepNamespaceEvidence() {
	if !e.t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.t.Logf("namespace %s when the test ended:\n%s", e.ns, e.describe())
	dir := evidenceDir(e.t)
	if dir == "" {
		return
	}
	keepLogs(ctx, e.cs, e.ns, dir, 0)
	e.t.Logf("the logs of its containers are in %s", filepath.Join(dir, e.ns))
}

// keepSwellEvidence is the cleanup of a failed test of Swell: Swell's
// pods, the end of each of their logs, and their logs kept.
func (e *env) keepSwellEvidence() {
	if !e.t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := evidenceDir(e.t)
	where := "set " + evidenceEnv + " to keep them whole"
	if dir != "" {
		where = "whole in " + filepath.Join(dir, swellNamespace)
	}
	e.t.Logf("Swell's pods when the test ended, with the last %d lines of each log (%s):\n%s",
		logTailLines, where, keepLogs(ctx, e.cs, swellNamespace, dir, logTailLines))
}

// keepLogs writes the log of every container of every pod of ns, and of
// its run before if it restarted, to dir/ns/<pod>/<container>.log (with
// dir "", nowhere), and returns the pods' states with the last tail lines
// of each log.
func keepLogs(ctx context.Context, cs kubernetes.Interface, ns, dir string, tail int) string {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Sprintf("list the pods of %s: %v", ns, err)
	}
	var b strings.Builder
	for i := range pods.Items {
		p := &pods.Items[i]
		b.WriteString(describePod(p))
		for _, c := range p.Spec.Containers {
			runs := []bool{false}
			if s := containerStatus(p, c.Name); s != nil && s.RestartCount > 0 {
				runs = append(runs, true)
			}
			for _, previous := range runs {
				opts := &corev1.PodLogOptions{Container: c.Name, Previous: previous}
				raw, err := cs.CoreV1().Pods(ns).GetLogs(p.Name, opts).DoRaw(ctx)
				log := string(raw)
				if err != nil {
					log = fmt.Sprintf("no log: %v\n", err)
				}
				file := c.Name + ".log"
				if previous {
					file = c.Name + ".previous.log"
				}
				if dir != "" {
					path := filepath.Join(dir, ns, p.Name, file)
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
						err = os.WriteFile(path, []byte(log), 0o644)
					}
					if err != nil {
						fmt.Fprintf(&b, "    keep %s: %v\n", path, err)
					}
				}
				if tail > 0 {
					fmt.Fprintf(&b, "    --- %s, last %d lines\n%s", file, tail, lastLines(log, tail))
				}
			}
		}
	}
	return b.String()
}

// lastLines is the last n lines of s, each indented, ending in a newline.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("      " + l + "\n")
	}
	return b.String()
}
