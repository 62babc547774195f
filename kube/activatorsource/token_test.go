package activatorsource

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"

	"github.com/swell-run/swell/kube"
)

// notifyClock is the fake clock, reporting each timer ReadToken arms, so
// the test steps the clock exactly when ReadToken waits on it.
type notifyClock struct {
	*testclock.FakeClock
	timers chan time.Duration
}

func (c *notifyClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.timers <- d
	return t
}

func newNotifyClock() *notifyClock {
	return &notifyClock{FakeClock: testclock.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)), timers: make(chan time.Duration, 1)}
}

func tokenSecret(token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: kube.DefaultSystemNamespace, Name: kube.ActivatorTokenSecret},
		Data:       map[string][]byte{kube.ActivatorTokenKey: []byte(token)},
	}
}

type tokenResult struct {
	token string
	err   error
}

func readAsync(ctx context.Context, client *fake.Clientset, clk clock.Clock) <-chan tokenResult {
	done := make(chan tokenResult, 1)
	go func() {
		t, err := readToken(ctx, client, kube.DefaultSystemNamespace, clk)
		done <- tokenResult{t, err}
	}()
	return done
}

func recvTimer(t *testing.T, clk *notifyClock) time.Duration {
	t.Helper()
	select {
	case d := <-clk.timers:
		return d
	case <-time.After(testTimeout):
		t.Fatal("ReadToken never waited")
		return 0
	}
}

func TestReadTokenPresent(t *testing.T) {
	client := fake.NewClientset(tokenSecret("s3cret\n"))
	got, err := ReadToken(context.Background(), client, kube.DefaultSystemNamespace)
	if err != nil || got != "s3cret" {
		t.Fatalf("got %q %v, want s3cret", got, err)
	}
}

// TestReadTokenWaitsForSecret: absent, then empty, then set; the waits in
// between double up to the cap.
func TestReadTokenWaitsForSecret(t *testing.T) {
	client := fake.NewClientset()
	clk := newNotifyClock()
	done := readAsync(context.Background(), client, clk)
	secrets := client.CoreV1().Secrets(kube.DefaultSystemNamespace)

	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if d := recvTimer(t, clk); d != w {
			t.Errorf("wait %d: %v, want %v", i, d, w)
		}
		switch i {
		case len(want) - 2:
			if _, err := secrets.Create(context.Background(), tokenSecret(""), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case len(want) - 1:
			if _, err := secrets.Update(context.Background(), tokenSecret("s3cret"), metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Step(w)
	}
	select {
	case r := <-done:
		if r.err != nil || r.token != "s3cret" {
			t.Fatalf("got %q %v, want s3cret", r.token, r.err)
		}
	case d := <-clk.timers:
		t.Fatalf("waited %v more with the token in place", d)
	}
}

func TestReadTokenForbiddenFailsAtOnce(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("get", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, kube.ActivatorTokenSecret, errors.New("RBAC: access denied"))
	})
	clk := newNotifyClock()
	select {
	case r := <-readAsync(context.Background(), client, clk):
		if r.err == nil || !apierrors.IsForbidden(r.err) {
			t.Fatalf("got %q %v, want a Forbidden error", r.token, r.err)
		}
		for _, want := range []string{kube.DefaultSystemNamespace + "/" + kube.ActivatorTokenSecret, "get on secrets"} {
			if !strings.Contains(r.err.Error(), want) {
				t.Errorf("error %q does not mention %q", r.err, want)
			}
		}
	case d := <-clk.timers:
		t.Fatalf("retried (waiting %v) on Forbidden", d)
	}
}

func TestReadTokenUnauthorizedFailsAtOnce(t *testing.T) {
	client := fake.NewClientset()
	client.PrependReactor("get", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewUnauthorized("token expired")
	})
	clk := newNotifyClock()
	select {
	case r := <-readAsync(context.Background(), client, clk):
		if !apierrors.IsUnauthorized(r.err) || !strings.Contains(r.err.Error(), kube.ActivatorTokenSecret) {
			t.Fatalf("got %q %v, want Unauthorized naming the Secret", r.token, r.err)
		}
	case d := <-clk.timers:
		t.Fatalf("retried (waiting %v) on Unauthorized", d)
	}
}

// TestReadTokenRetriesTransientErrors: an unreachable or overloaded API
// server is waited out.
func TestReadTokenRetriesTransientErrors(t *testing.T) {
	client := fake.NewClientset(tokenSecret("s3cret"))
	failures := []error{
		errors.New("dial tcp 10.96.0.1:443: connect: connection refused"),
		apierrors.NewServiceUnavailable("etcd leader changed"),
		apierrors.NewTooManyRequests("slow down", 1),
	}
	client.PrependReactor("get", "secrets", func(clienttesting.Action) (bool, runtime.Object, error) {
		if len(failures) == 0 {
			return false, nil, nil
		}
		err := failures[0]
		failures = failures[1:]
		return true, nil, err
	})
	clk := newNotifyClock()
	done := readAsync(context.Background(), client, clk)
	for range 3 {
		clk.Step(recvTimer(t, clk))
	}
	if r := <-done; r.err != nil || r.token != "s3cret" {
		t.Fatalf("got %q %v, want s3cret", r.token, r.err)
	}
}

func TestReadTokenStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clk := newNotifyClock()
	done := readAsync(ctx, fake.NewClientset(), clk)
	recvTimer(t, clk)
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), kube.ActivatorTokenSecret) {
		t.Fatalf("got %q %v, want context.Canceled naming the Secret", r.token, r.err)
	}
}
