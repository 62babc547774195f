// Package webhook serves Swell's Kubernetes admission webhooks: the
// mutating one injects the queue-proxy into opted-in workloads, the
// validating one rejects opted-in workloads whose Swell annotations are
// invalid.
package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/autoscaling"
)

// DefaultMaxBody is the default limit on a request body: the apiserver's
// own limit on a request, so no object it admitted is too large here.
const DefaultMaxBody = 3 << 20

// The AdmissionReview version served.
const (
	reviewAPIVersion = "admission.k8s.io/v1"
	reviewKind       = "AdmissionReview"
)

// Config is how the webhooks inject and validate.
type Config struct {
	// Inject is how to inject; its Image is required.
	Inject inject.Config
	// Logger gets a debug line per decision and an info line per denial;
	// nil logs nothing.
	Logger *zap.Logger
	// MaxBody is the largest request body accepted, in bytes; 0 means
	// DefaultMaxBody.
	MaxBody int64
	// Defaults, if set, returns the cluster's autoscaling defaults as they
	// are now; each request is judged against them instead of
	// Inject.Defaults, so an edit of the defaults applies without a
	// restart.
	Defaults func() autoscaling.Defaults
	// PushURL, if set, returns where the injected queue-proxies push their
	// stats as it is now, in place of Inject.PushURL.
	PushURL func() string
}

// New returns the webhooks' handler. It serves POST /mutate and POST
// /validate (an admission.k8s.io/v1 AdmissionReview in and out, as JSON) and
// GET /healthz. Another path is 404, another method 405, a body that is not
// application/json 415, and a malformed or oversized body 400 with a plain
// text reason.
func New(cfg Config) (http.Handler, error) {
	if cfg.Inject.Image == "" {
		return nil, errors.New("webhook: no queue-proxy image given (Config.Inject.Image)")
	}
	if cfg.MaxBody < 0 {
		return nil, fmt.Errorf("webhook: MaxBody %d is negative; accepted: a byte count > 0, or 0 for the default %d", cfg.MaxBody, DefaultMaxBody)
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	a := &admitter{inject: cfg.Inject, defaults: cfg.Defaults, pushURL: cfg.PushURL, log: cfg.Logger}

	mux := http.NewServeMux()
	mux.Handle("POST /mutate", review(cfg.MaxBody, a.mutate))
	mux.Handle("POST /validate", review(cfg.MaxBody, a.validate))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux, nil
}

// review adapts an admission decision to HTTP: it reads and checks the
// AdmissionReview, and writes the response review, echoing the request's
// UID.
func review(maxBody int64, admit func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			http.Error(w, fmt.Sprintf("content type %q is not accepted; accepted: application/json", ct), http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
				http.Error(w, fmt.Sprintf("request body is larger than %d bytes", mbe.Limit), http.StatusBadRequest)
				return
			}
			http.Error(w, fmt.Sprintf("read request body: %v", err), http.StatusBadRequest)
			return
		}
		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil {
			http.Error(w, fmt.Sprintf("decode AdmissionReview: %v", err), http.StatusBadRequest)
			return
		}
		if in.APIVersion != reviewAPIVersion || in.Kind != reviewKind {
			http.Error(w, fmt.Sprintf("got apiVersion %q kind %q; accepted: apiVersion %s kind %s", in.APIVersion, in.Kind, reviewAPIVersion, reviewKind), http.StatusBadRequest)
			return
		}
		if in.Request == nil {
			http.Error(w, "AdmissionReview has no request", http.StatusBadRequest)
			return
		}

		resp := admit(in.Request)
		resp.UID = in.Request.UID
		out := admissionv1.AdmissionReview{Response: resp}
		out.APIVersion, out.Kind = reviewAPIVersion, reviewKind
		b, err := json.Marshal(&out)
		if err != nil {
			http.Error(w, fmt.Sprintf("encode AdmissionReview: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	})
}
