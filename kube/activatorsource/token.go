package activatorsource

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/kube"
)

// The wait between two reads of a token Secret that is not there yet
// doubles from minTokenBackoff up to maxTokenBackoff.
const (
	minTokenBackoff = 100 * time.Millisecond
	maxTokenBackoff = 5 * time.Second
)

// ReadToken returns the token the activator presents to the autoscaler: key
// kube.ActivatorTokenKey of the Secret kube.ActivatorTokenSecret in
// namespace. The autoscaler creates the Secret when it first starts, so
// while it is absent or the key empty ReadToken keeps reading, with a
// capped backoff, until ctx ends; so it does while the API server cannot
// be reached or answers that it is overloaded, as the informers do. An
// error that reading again cannot cure (no permission to read the Secret,
// say) returns at once.
func ReadToken(ctx context.Context, client kubernetes.Interface, namespace string) (string, error) {
	return readToken(ctx, client, namespace, clock.RealClock{})
}

func readToken(ctx context.Context, client kubernetes.Interface, namespace string, clk clock.Clock) (string, error) {
	name := namespace + "/" + kube.ActivatorTokenSecret
	wait := minTokenBackoff
	for {
		sec, err := client.CoreV1().Secrets(namespace).Get(ctx, kube.ActivatorTokenSecret, metav1.GetOptions{})
		switch {
		case err == nil:
			if t := strings.TrimSpace(string(sec.Data[kube.ActivatorTokenKey])); t != "" {
				return t, nil
			}
			err = fmt.Errorf("key %q is empty", kube.ActivatorTokenKey)
		case ctx.Err() != nil:
		case apierrors.IsForbidden(err):
			return "", fmt.Errorf("read the activator token from Secret %s: %w (the activator's service account needs get on secrets in namespace %s)", name, err, namespace)
		case !transient(err):
			return "", fmt.Errorf("read the activator token from Secret %s: %w", name, err)
		}
		t := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("wait for the activator token in Secret %s (the autoscaler creates it; last: %v): %w", name, err, ctx.Err())
		case <-t.C():
		}
		wait = min(2*wait, maxTokenBackoff)
	}
}

// transient reports whether reading again may succeed: the Secret is not
// there yet, the API server could not be reached, or it asked to retry.
func transient(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // no answer from the API server
	}
	return apierrors.IsNotFound(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) ||
		apierrors.IsUnexpectedServerError(err)
}
