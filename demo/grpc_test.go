package demo

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func healthClient(t *testing.T, base string) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func check(t *testing.T, hc healthpb.HealthClient) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	return resp.GetStatus(), err
}

func TestGRPCHealthOverH2C(t *testing.T) {
	app := newServer(options{})
	base := serve(t, app)
	hc := healthClient(t, base)

	if st, err := check(t, hc); err != nil || st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before ready: %v, %v; want NOT_SERVING", st, err)
	}
	app.setReady()
	if st, err := check(t, hc); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("when ready: %v, %v; want SERVING", st, err)
	}
	// The client may see the answer before the handler has returned.
	if s := waitInFlight(t, newClient(t, false), base, 0); s.Requests != 2 {
		t.Errorf("stats %+v after two checks, want them counted", s)
	}
	// Plain HTTP/2 on the same port still greets.
	if resp, body := do(t, newClient(t, true), http.MethodGet, base+"/", nil); resp.ProtoMajor != 2 || !strings.HasPrefix(body, "Hello") {
		t.Errorf("h2c GET /: %s %q", resp.Proto, body)
	}
	// An unknown service is NotFound, as the standard health service says.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Errorf("check of unknown service: %v, want NotFound", err)
	}
}

func TestGRPCHealthWatchEndsOnDrain(t *testing.T) {
	app, base := startApp(t, options{})
	hc := healthClient(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first watch update %v, %v; want SERVING", r, err)
	}
	app.drain()
	// The watcher sees NOT_SERVING or the stream ends; either way it must
	// not hang, and the app must not count it in flight any more.
	for {
		r, err := w.Recv()
		if err != nil {
			break
		}
		if r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("watch update after drain: %v", r.GetStatus())
		}
	}
	waitInFlight(t, newClient(t, false), base, 0)
}
