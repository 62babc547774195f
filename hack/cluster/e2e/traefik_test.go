package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

// The suite's ingress controller: Traefik, built by the harness from its
// module (nodeimages.Traefik), serving the Kubernetes Ingress and Gateway
// API providers.
const (
	traefikNamespace = "traefik"
	traefikName      = "traefik"
	// traefikClass is the IngressClass whose Ingresses Traefik serves.
	traefikClass = "traefik"
	// traefikAPIPort serves Traefik's API and /ping on the pod's address
	// only: its Service leaves it out.
	traefikAPIPort = 9000
	// gatewayCRDsEnv names the directory of the Gateway API CRDs of the
	// release Traefik is built with (swell-cluster e2e sets it).
	gatewayCRDsEnv = "SWELL_GATEWAY_CRDS"
)

// traefikManifest installs Traefik in a namespace of its own: its
// ServiceAccount and a ClusterRole with what its two providers read and
// write, nothing else; the IngressClass it serves; a Deployment of one
// unprivileged replica of the image %[1]s; and a Service of ClusterIP for
// its two entry points, web (port 80) and websecure (port 443). Its
// readiness is /ping on the API's port, which is the pod's only.
const traefikManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: traefik
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: traefik
  namespace: traefik
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: traefik
rules:
  # Both providers: the backends of routes, and the certificates of
  # their TLS.
  - apiGroups: [""]
    resources: [services, secrets]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
  # The Ingress provider; it reads Nodes for Services it balances over
  # NodePorts.
  - apiGroups: [networking.k8s.io]
    resources: [ingresses, ingressclasses]
    verbs: [list, watch]
  - apiGroups: [""]
    resources: [nodes]
    verbs: [list, watch]
  # The Gateway API provider, with the standard channel's resources only;
  # Namespaces for the routes a listener allows by label, ConfigMaps for
  # the CA certificates of a BackendTLSPolicy.
  - apiGroups: [""]
    resources: [namespaces, configmaps]
    verbs: [list, watch]
  - apiGroups: [gateway.networking.k8s.io]
    resources: [gatewayclasses, gateways, httproutes, grpcroutes, referencegrants, backendtlspolicies]
    verbs: [list, watch]
  - apiGroups: [gateway.networking.k8s.io]
    resources: [gatewayclasses/status, gateways/status, httproutes/status, grpcroutes/status, backendtlspolicies/status]
    verbs: [update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: traefik
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: traefik
subjects:
  - kind: ServiceAccount
    name: traefik
    namespace: traefik
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: traefik
spec:
  controller: traefik.io/ingress-controller
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: traefik
  namespace: traefik
spec:
  replicas: 1
  selector:
    matchLabels: {app: traefik}
  template:
    metadata:
      labels: {app: traefik}
    spec:
      serviceAccountName: traefik
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
      containers:
        - name: traefik
          image: %[1]s
          imagePullPolicy: IfNotPresent
          args:
            - --global.checkNewVersion=false
            - --global.sendAnonymousUsage=false
            - --entryPoints.web.address=:8000
            - --entryPoints.websecure.address=:8443
            - --entryPoints.traefik.address=:%[2]d
            - --api.insecure=true
            - --api.dashboard=false
            - --log.noColor=true
            - --ping=true
            - --providers.kubernetesIngress=true
            - --providers.kubernetesIngress.strictPrefixMatching=true
            - --providers.kubernetesGateway=true
          ports:
            - {name: web, containerPort: 8000}
            - {name: websecure, containerPort: 8443}
            - {name: traefik, containerPort: %[2]d}
          readinessProbe:
            httpGet: {path: /ping, port: traefik}
            periodSeconds: 1
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
---
apiVersion: v1
kind: Service
metadata:
  name: traefik
  namespace: traefik
spec:
  selector: {app: traefik}
  ports:
    - {name: web, port: 80, targetPort: web}
    - {name: websecure, port: 443, targetPort: websecure}
`

// installTraefik installs, once for the whole suite, the Gateway API's
// CRDs (of the release Traefik is built with, from SWELL_GATEWAY_CRDS)
// and then Traefik (traefikManifest), and waits until it is ready
// (traefikReady). The tests that need an ingress controller call it
// first.
var installTraefik = sync.OnceValue(func() error {
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	crds := os.Getenv(gatewayCRDsEnv)
	if crds == "" {
		return fmt.Errorf("%s is not set, so the Gateway API CRDs are not known: %s", gatewayCRDsEnv, runHint)
	}
	// Server-side: the CRDs are too large for the annotation a client-side
	// apply keeps.
	if out, err := kubectl(ctx, nil, "apply", "--server-side", "-f", crds); err != nil {
		return fmt.Errorf("kubectl apply -f %s: %v\n%s", crds, err, out)
	}
	if out, err := kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds); err != nil {
		return fmt.Errorf("the Gateway API CRDs of %s not established: %v\n%s", crds, err, out)
	}
	manifest := fmt.Sprintf(traefikManifest, nodeimages.Traefik, traefikAPIPort)
	if out, err := kubectl(ctx, []byte(manifest), "apply", "--server-side", "-f", "-"); err != nil {
		return fmt.Errorf("kubectl apply Traefik: %v\n%s", err, out)
	}
	cfg, err := adminConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	if err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		last = traefikReady(ctx, cs)
		return last == nil, nil
	}); err != nil {
		return fmt.Errorf("Traefik not ready within %v: %v", installTimeout, last)
	}
	return nil
})

// traefikProviders are the providers Traefik's API must list.
var traefikProviders = []string{"KubernetesIngress", "KubernetesGateway"}

// traefikReady says what Traefik still lacks, or nil: its Deployment
// rolled out and ready, kube-proxy sending its ClusterIP to its ready
// pods, and each of them serving its API with both providers started.
func traefikReady(ctx context.Context, cs kubernetes.Interface) error {
	d, err := cs.AppsV1().Deployments(traefikNamespace).Get(ctx, traefikName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := rolledOut(d); err != nil {
		return err
	}
	if err := proxiedAsListed(ctx, cs, traefikNamespace, traefikName); err != nil {
		return err
	}
	pods, err := traefikPods(ctx, cs)
	if err != nil {
		return err
	}
	for i := range pods {
		var overview struct{ Providers []string }
		if err := traefikAPI(ctx, &pods[i], "/api/overview", &overview); err != nil {
			return err
		}
		for _, p := range traefikProviders {
			if !slices.Contains(overview.Providers, p) {
				return fmt.Errorf("Traefik's pod %s lists the providers %v, want %v among them", pods[i].Name, overview.Providers, traefikProviders)
			}
		}
	}
	return nil
}

// traefikSetup is setup for a test of the ingress controller: Traefik
// installed and ready, a namespace of the test's own.
func traefikSetup(t *testing.T) *env {
	t.Helper()
	e := setup(t)
	t.Cleanup(e.keepTraefikEvidence)
	start := time.Now()
	if err := installTraefik(); err != nil {
		t.Fatalf("install Traefik: %v", err)
	}
	t.Logf("Traefik installed (once for the suite) after %s", time.Since(start).Round(time.Millisecond))
	e.eventuallyWithin("Traefik ready", installTimeout, func(ctx context.Context) error {
		return traefikReady(ctx, e.cs)
	})
	return e
}

// keepTraefikEvidence is the cleanup of a failed test of the ingress
// controller: Traefik's pods, the end of each of their logs, and their
// logs kept.
func (e *env) keepTraefikEvidence() {
	if !e.t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.t.Logf("Traefik's pods when the test ended, with the last %d lines of each log:\n%s",
		logTailLines, keepLogs(ctx, e.cs, traefikNamespace, evidenceDir(e.t), logTailLines))
}

// traefikPods lists Traefik's ready pods, and fails when there is none.
func traefikPods(ctx context.Context, cs kubernetes.Interface) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods(traefikNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + traefikName})
	if err != nil {
		return nil, err
	}
	var ready []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && isReady(&p) && p.Status.PodIP != "" {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return nil, fmt.Errorf("no ready pod of Traefik among %d", len(list.Items))
	}
	return ready, nil
}

// traefikAPI reads path of the API of Traefik's pod p into v.
func traefikAPI(ctx context.Context, p *corev1.Pod, path string, v any) error {
	url := "http://" + net.JoinHostPort(p.Status.PodIP, fmt.Sprint(traefikAPIPort)) + path
	code, body, err := get(ctx, url)
	if err != nil {
		return fmt.Errorf("Traefik's API: %w", err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("Traefik's API: GET %s: %d %s", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		return fmt.Errorf("Traefik's API: GET %s: %w: %.200s", url, err, body)
	}
	return nil
}

// traefikRouter is what Traefik's API says of an HTTP router.
type traefikRouter struct {
	Name, Rule, Service, Status string
	Using                       []string
}

// traefikService is what Traefik's API says of an HTTP service: the
// servers it balances over, and the status of each.
type traefikService struct {
	Name, Status string
	LoadBalancer *struct {
		Servers []struct{ URL string }
	}
	ServerStatus map[string]string
}

// traefikRoutes reports, as an error, when any ready pod of Traefik does
// not route requests for host on path, enabled, to its service named
// service (what its Kubernetes providers name "<namespace>-<Service>-<port>"),
// whose servers are exactly the URLs want (sorted), each up.
func traefikRoutes(ctx context.Context, cs kubernetes.Interface, service, host, path string, want []string) error {
	pods, err := traefikPods(ctx, cs)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		var routers []traefikRouter
		if err := traefikAPI(ctx, p, "/api/http/routers?per_page=1000", &routers); err != nil {
			return err
		}
		i := slices.IndexFunc(routers, func(r traefikRouter) bool { return r.Service == service })
		if i < 0 {
			return fmt.Errorf("Traefik's pod %s has no router to the service %s", p.Name, service)
		}
		r := routers[i]
		if !strings.Contains(r.Rule, strconv.Quote(host)) || !strings.Contains(r.Rule, strconv.Quote(path)) {
			return fmt.Errorf("Traefik's pod %s: router %s has the rule %s, want one of host %s and path %s", p.Name, r.Name, r.Rule, host, path)
		}
		if r.Status != "enabled" {
			return fmt.Errorf("Traefik's pod %s: router %s is %s", p.Name, r.Name, r.Status)
		}
		var s traefikService
		// A router names its provider's services without the provider.
		_, provider, _ := strings.Cut(r.Name, "@")
		if err := traefikAPI(ctx, p, "/api/http/services/"+service+"@"+provider, &s); err != nil {
			return err
		}
		if s.Status != "enabled" || s.LoadBalancer == nil {
			return fmt.Errorf("Traefik's pod %s: service %s is %s, load balancer %v", p.Name, s.Name, s.Status, s.LoadBalancer)
		}
		var got []string
		for _, srv := range s.LoadBalancer.Servers {
			got = append(got, srv.URL)
			if st := s.ServerStatus[srv.URL]; st != "UP" {
				return fmt.Errorf("Traefik's pod %s: service %s: server %s is %q", p.Name, s.Name, srv.URL, st)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("Traefik's pod %s routes %s%s to %v, want %v", p.Name, host, path, got, want)
		}
	}
	return nil
}
