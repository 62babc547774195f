package activatorsource

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	"github.com/swell-run/swell/activator"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/ports"
	"github.com/swell-run/swell/pkg/service"
)

var bg = context.Background()

func TestNewNeedsClient(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a client: no error")
	}
}

// TestSyncedSourceListsServices: once WaitForSync returns, Services holds
// every pods-Service already in the cluster, and nothing else.
func TestSyncedSourceListsServices(t *testing.T) {
	web := podsService("shop", "web", kube.AnnotationServices, "front", kube.AnnotationContainerConcurrency, "2")
	api := podsService("other", "api")
	user := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "front"}}
	src, _ := started(t, web, api, user, pod("shop", "web-a", "10.0.0.1"), pod("other", "api-a", "10.0.1.1"),
		endpointSlice(web, "web-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", true, false)),
		endpointSlice(api, "api-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.1.1", "api-a", false, false)),
	)
	want := []activator.Service{{
		Key: service.Key{Namespace: "other", Name: "api"}, Pods: []activator.Pod{{Name: "api-a", Addr: "10.0.1.1:8012"}},
	}, {
		Key: webKey, Hosts: kube.HostNames("front", "shop", "cluster.local"), ContainerConcurrency: 2,
		Pods: []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}},
	}}
	if got := src.Services(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// TestListsOnlySwellObjects: the informers ask the API server only for
// pods-Services, their slices, the autoscaler's and the activators' slices,
// the CA ConfigMap and the service ports table, the pods that have not ended, and what callers are
// judged by: the opted-in Deployments, the namespaces and the
// NetworkPolicies.
func TestListsOnlySwellObjects(t *testing.T) {
	_, client := started(t)
	var got []string
	for _, a := range client.Actions() {
		if l, ok := a.(clienttesting.ListAction); ok {
			r := l.GetListRestrictions()
			got = append(got, a.GetResource().Resource+" in "+a.GetNamespace()+": "+r.Labels.String()+" "+r.Fields.String())
		}
	}
	slices.Sort(got)
	sys := kube.DefaultSystemNamespace
	want := []string{
		"configmaps in " + sys + ":  metadata.name=" + kube.CAConfigMap,
		"configmaps in " + sys + ": " + ports.LabelTable + "=true ",
		"deployments in : " + kube.LabelEnabled + "=true ",
		"endpointslices in : " + kube.LabelDeployment + ",!" + kube.LabelRoute + " ",
		"endpointslices in " + sys + ": " + discoveryv1.LabelServiceName + "=" + kube.ActivatorService + " ",
		"endpointslices in " + sys + ": " + discoveryv1.LabelServiceName + "=" + kube.AutoscalerService + " ",
		"namespaces in :  ",
		"networkpolicies in :  ",
		"pods in :  status.phase!=Failed,status.phase!=Succeeded",
		"services in : " + kube.LabelDeployment + " ",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lists\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestServicesAppearChangeAndDisappear(t *testing.T) {
	src, client := started(t, pod("shop", "web-a", "10.0.0.1"), pod("shop", "web-b", "10.0.0.2"), pod("shop", "web-c", "10.0.0.3"))
	services := client.CoreV1().Services("shop")
	slicesAPI := client.DiscoveryV1().EndpointSlices("shop")

	web := podsService("shop", "web", kube.AnnotationServices, "front")
	if _, err := services.Create(bg, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "listed the new service", func(s []activator.Service) bool {
		sv, ok := find(s, "shop/web")
		return ok && len(sv.Pods) == 0 && slices.Equal(sv.Hosts, kube.HostNames("front", "shop", "cluster.local"))
	})

	es := endpointSlice(web, "web-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", false, false))
	if _, err := slicesAPI.Create(bg, es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "listed the pod", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/web")
		return slices.Equal(sv.Pods, []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}})
	})

	es.Endpoints = append(es.Endpoints, endpoint("10.0.0.2", "web-b", false, false))
	es.Endpoints[0] = endpoint("10.0.0.1", "web-a", false, true)
	if _, err := slicesAPI.Update(bg, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "replaced the terminating pod", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/web")
		return slices.Equal(sv.Pods, []activator.Pod{{Name: "web-b", Addr: "10.0.0.2:8012"}})
	})

	// A second slice listing the same pod again, and a new one.
	es2 := endpointSlice(web, "web-2", v4, kube.PortNameHTTP, 8012,
		endpoint("10.0.0.2", "web-b", true, false), endpoint("10.0.0.3", "web-c", true, false))
	if _, err := slicesAPI.Create(bg, es2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "merged the slices", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/web")
		return slices.Equal(sv.Pods, []activator.Pod{{Name: "web-b", Addr: "10.0.0.2:8012"}, {Name: "web-c", Addr: "10.0.0.3:8012"}})
	})

	web.Annotations[kube.AnnotationServices] = "back,front"
	web.Annotations[kube.AnnotationContainerConcurrency] = "7"
	if _, err := services.Update(bg, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "followed the annotations", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/web")
		return sv.ContainerConcurrency == 7 && len(sv.Hosts) == 6 && len(sv.Pods) == 2
	})

	if err := slicesAPI.Delete(bg, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "dropped the deleted slice's pods", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/web")
		return slices.Equal(sv.Pods, []activator.Pod{{Name: "web-b", Addr: "10.0.0.2:8012"}})
	})

	if err := services.Delete(bg, web.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "dropped the service", func(s []activator.Service) bool { return len(s) == 0 })
}

// TestSliceBeforeItsService: a slice cached before its Service is picked
// up when the Service arrives.
func TestSliceBeforeItsService(t *testing.T) {
	src, client := started(t, pod("shop", "late-a", "10.0.0.9"), pod("shop", "marker-a", "10.0.0.8"))
	create := func(objs ...runtime.Object) {
		t.Helper()
		for _, o := range objs {
			var err error
			switch o := o.(type) {
			case *corev1.Service:
				_, err = client.CoreV1().Services(o.Namespace).Create(bg, o, metav1.CreateOptions{})
			case *discoveryv1.EndpointSlice:
				_, err = client.DiscoveryV1().EndpointSlices(o.Namespace).Create(bg, o, metav1.CreateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	late := podsService("shop", "late")
	marker := podsService("shop", "marker")
	create(endpointSlice(late, "late-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.9", "late-a", true, false)), marker)
	// The slice informer delivers in order: once the marker's slice is
	// seen, so was the late one.
	create(endpointSlice(marker, "marker-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.8", "marker-a", true, false)))
	waitUntil(t, src, "listed the marker's pod", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/marker")
		return len(sv.Pods) == 1
	})
	if _, ok := find(src.Services(), "shop/late"); ok {
		t.Fatal("a service listed before its pods-Service exists")
	}
	create(late)
	waitUntil(t, src, "listed the early slice's pod", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/late")
		return slices.Equal(sv.Pods, []activator.Pod{{Name: "late-a", Addr: "10.0.0.9:8012"}})
	})
}

// TestChangedOnlyOnChange: an update that changes nothing the activator
// routes by (a pod turning ready) signals nothing; Services keeps handing
// out the same slice until something changes.
func TestChangedOnlyOnChange(t *testing.T) {
	a, b := podsService("shop", "a"), podsService("shop", "b")
	sa := endpointSlice(a, "a-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "a-0", false, false))
	sb := endpointSlice(b, "b-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.2", "b-0", false, false))
	src, client := started(t, a, b, sa, sb, pod("shop", "a-0", "10.0.0.1"), pod("shop", "b-0", "10.0.0.2"), pod("shop", "b-1", "10.0.0.3"))
	select {
	case <-src.Changed(): // the initial sync's signal
	default:
		t.Fatal("no signal for the initial services")
	}
	first := src.Services()
	if again := src.Services(); &again[0] != &first[0] {
		t.Error("Services rebuilt its slice without a change")
	}

	slicesAPI := client.DiscoveryV1().EndpointSlices("shop")
	sa.Endpoints[0] = endpoint("10.0.0.1", "a-0", true, false)
	if _, err := slicesAPI.Update(bg, sa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The same informer delivers b's update after a's.
	sb.Endpoints = append(sb.Endpoints, endpoint("10.0.0.3", "b-1", false, false))
	if _, err := slicesAPI.Update(bg, sb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// One signal, sent once b's change is in place.
	select {
	case <-src.Changed():
	case <-time.After(testTimeout):
		t.Fatal("no signal for b's new pod")
	}
	if sv, _ := find(src.Services(), "shop/b"); len(sv.Pods) != 2 {
		t.Fatalf("signalled before b's change: %+v", sv)
	}
	select {
	case <-src.Changed():
		t.Error("a second signal: the update that changed nothing signalled")
	default:
	}
	if got := src.Services(); &got[0] == &first[0] {
		t.Error("Services handed out the old slice after a change")
	}
}

func TestAutoscalerAddr(t *testing.T) {
	as := podsService(kube.DefaultSystemNamespace, "x")
	as.Name, as.Labels = kube.AutoscalerService, nil
	elsewhere := as.DeepCopy()
	elsewhere.Namespace = "default"
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want string
		ok   bool
	}{
		{"no endpoint", nil, "", false},
		{"not ready", []runtime.Object{endpointSlice(as, "as-1", v4, kube.PortNameHTTP, 8080,
			endpoint("10.0.0.5", "as-0", false, false))}, "", false},
		{"another namespace's", []runtime.Object{endpointSlice(elsewhere, "as-1", v4, kube.PortNameHTTP, 8080,
			endpoint("10.0.0.5", "as-0", true, false))}, "", false},
		{"ready", []runtime.Object{endpointSlice(as, "as-1", v4, kube.PortNameHTTP, 8080,
			endpoint("10.0.0.5", "as-0", false, false), endpoint("10.0.0.6", "as-1", true, false))}, "10.0.0.6:8080", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _ := started(t, tc.objs...)
			got, ok := src.AutoscalerAddr()
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %q %v, want %q %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestRunReturnsWhenContextEnds: Run stops its informers and returns.
func TestRunReturnsWhenContextEnds(t *testing.T) {
	src, _ := started(t) // the cleanup cancels Run and waits for it
	if _, ok := src.AutoscalerAddr(); ok {
		t.Error("an autoscaler address in an empty cluster")
	}
}

// TestRoutedServiceIsNotThePodsService: a Service the autoscaler routes
// carries the Deployment's label too, as do the slices Kubernetes wrote for
// it before the takeover (they point at the app's port); only the
// pods-Service's slices are the service's pods.
func TestRoutedServiceIsNotThePodsService(t *testing.T) {
	web := podsService("shop", "web", kube.AnnotationServices, "front")
	front := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "front",
		Labels: map[string]string{kube.LabelDeployment: "web"}}}
	src, _ := started(t, front, web, pod("shop", "web-a", "10.0.0.1"),
		endpointSlice(front, "front-k8s", v4, kube.PortNameHTTP, 8080, endpoint("10.0.0.1", "web-a", true, false)),
		endpointSlice(web, "web-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", true, false)),
	)
	want := []activator.Service{{
		Key: webKey, Hosts: kube.HostNames("front", "shop", "cluster.local"),
		Pods: []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}},
	}}
	if got := src.Services(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// TestAutoscalerChanged: a new leader's endpoint is signalled, so the
// reporter can reconnect at once.
func TestAutoscalerChanged(t *testing.T) {
	as := podsService(kube.DefaultSystemNamespace, "x")
	as.Name, as.Labels = kube.AutoscalerService, nil
	src, cs := started(t)
	select {
	case <-src.AutoscalerChanged():
		t.Fatal("a change signalled in an empty cluster")
	default:
	}
	es := endpointSlice(as, kube.AutoscalerService, v4, kube.PortNameHTTP, 8080, endpoint("10.0.0.6", "as-1", true, false))
	if _, err := cs.DiscoveryV1().EndpointSlices(es.Namespace).Create(t.Context(), es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-src.AutoscalerChanged():
	case <-time.After(10 * time.Second):
		t.Fatal("no signal for the autoscaler's new endpoint")
	}
	if got, ok := src.AutoscalerAddr(); got != "10.0.0.6:8080" || !ok {
		t.Errorf("AutoscalerAddr = %q %v after the signal, want 10.0.0.6:8080", got, ok)
	}
}

// TestDeploymentNotAKeyIsSkipped: a pods-Service whose Deployment's name
// cannot be a service key (Deployment names may hold dots, keys may not) is
// left out and logged; the others are listed as usual.
func TestDeploymentNotAKeyIsSkipped(t *testing.T) {
	core, logs := observer.New(zapcore.ErrorLevel)
	bad := podsService("shop", "web.v2")
	src, _ := startedWith(t, zap.New(core), bad, podsService("shop", "web"),
		endpointSlice(bad, "bad-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "bad-a", true, false)))
	if got, want := src.Services(), []activator.Service{{Key: webKey}}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	entries := logs.All()
	if len(entries) == 0 {
		t.Fatal("nothing logged for the Deployment that cannot be a service")
	}
	for _, e := range entries {
		if f := e.ContextMap(); f["service"] != "shop/"+kube.PodsServiceName("web.v2") || !strings.Contains(fmt.Sprint(f["error"]), `"shop/web.v2"`) {
			t.Errorf("logged %q with %v, want the pods-Service and the key's error", e.Message, f)
		}
	}
}

// TestAutoscalerRoots: the CAs come from the CA ConfigMap of the system
// namespace, follow its changes with a signal (a reporter waiting for them
// dials at once), and are gone with it; a bundle that does not parse, or
// a ConfigMap of another name, gives no roots.
func TestAutoscalerRoots(t *testing.T) {
	src, cs := started(t)
	if src.AutoscalerRoots() != nil {
		t.Fatal("roots without a CA ConfigMap")
	}
	cms := cs.CoreV1().ConfigMaps(kube.DefaultSystemNamespace)
	waitRoots := func(what string, want bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for (src.AutoscalerRoots() != nil) != want {
			select {
			case <-src.AutoscalerChanged():
			case <-deadline:
				t.Fatalf("%s: roots present %v, want %v", what, src.AutoscalerRoots() != nil, want)
			}
		}
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-the-ca", Namespace: kube.DefaultSystemNamespace},
		Data: map[string]string{kube.CAConfigMapKey: testCA}}
	if _, err := cms.Create(t.Context(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kube.CAConfigMap, Namespace: kube.DefaultSystemNamespace},
		Data: map[string]string{kube.CAConfigMapKey: "not a certificate"}}
	if _, err := cms.Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	<-src.AutoscalerChanged()
	if src.AutoscalerRoots() != nil {
		t.Fatal("roots from a ConfigMap that holds no certificate, or from another ConfigMap")
	}
	cm.Data[kube.CAConfigMapKey] = testCA
	if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoots("after the bundle arrived", true)
	if err := cms.Delete(t.Context(), kube.CAConfigMap, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoots("after the ConfigMap was deleted", false)
}

// testCA is a self-signed CA certificate.
var testCA = func() string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}()

// TestPeers: the activators sharing each service's capacity are the ready
// endpoints of the activator Service, at least one; their change signals.
func TestPeers(t *testing.T) {
	src, cs := started(t)
	if n := src.Peers(); n != 1 {
		t.Errorf("Peers with no slice = %d, want 1", n)
	}
	act := podsService(kube.DefaultSystemNamespace, "x")
	act.Name, act.Labels = kube.ActivatorService, nil
	es := endpointSlice(act, kube.ActivatorService, v4, kube.PortNameHTTP, 8012,
		endpoint("10.0.0.1", "act-1", true, false), endpoint("10.0.0.2", "act-2", true, false),
		endpoint("10.0.0.3", "act-3", true, false), endpoint("10.0.0.4", "act-4", false, false),
		endpoint("10.0.0.5", "act-5", true, true))
	if _, err := cs.DiscoveryV1().EndpointSlices(es.Namespace).Create(t.Context(), es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(testTimeout)
	for src.Peers() != 3 {
		select {
		case <-src.Changed():
		case <-deadline:
			t.Fatalf("Peers = %d, want the 3 ready, not terminating", src.Peers())
		}
	}
	// Dual stack: the same activators listed again by their IPv6
	// addresses are no more activators; one listed by IPv6 alone, with no
	// pod named, is not counted.
	es6 := endpointSlice(act, kube.ActivatorService+"-v6", discoveryv1.AddressTypeIPv6, kube.PortNameHTTP, 8012,
		endpoint("fd00::1", "act-1", true, false), endpoint("fd00::2", "act-2", true, false),
		endpoint("fd00::3", "act-3", true, false), endpoint("fd00::9", "", true, false))
	if _, err := cs.DiscoveryV1().EndpointSlices(es6.Namespace).Create(t.Context(), es6, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSlices := time.After(testTimeout)
	for {
		list, _ := src.activators.EndpointSlices(es6.Namespace).List(labels.Everything())
		if len(list) == 2 {
			break
		}
		select {
		case <-src.Changed():
		case <-waitSlices:
			t.Fatal("the IPv6 slice never reached the cache")
		}
	}
	if n := src.Peers(); n != 3 {
		t.Errorf("Peers with the IPv6 twin = %d, want 3", n)
	}
}

// TestPodsFollowThePodsInformer: an endpoint counts as the service's pod
// only while a pod of its namespace holds its address, whichever of the
// slice and the pod the informers deliver first (second security review,
// finding 1).
func TestPodsFollowThePodsInformer(t *testing.T) {
	web := podsService("shop", "web")
	es := endpointSlice(web, "web-1", v4, kube.PortNameHTTP, 8012, endpoint("10.0.0.1", "web-a", true, false))
	src, client := started(t, web, es, pod("bank", "vault", "10.0.0.1"))
	if sv, _ := find(src.Services(), "shop/web"); len(sv.Pods) != 0 {
		t.Fatalf("an address of another namespace's pod listed as the service's: %+v", sv.Pods)
	}
	if err := client.CoreV1().Pods("bank").Delete(bg, "vault", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("shop").Create(bg, pod("shop", "web-a", "10.0.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "listed the pod once it holds the address", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/web")
		return slices.Equal(sv.Pods, []activator.Pod{{Name: "web-a", Addr: "10.0.0.1:8012"}})
	})
	if err := client.CoreV1().Pods("shop").Delete(bg, "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "dropped the pod once it has gone, though the slice still lists it", func(s []activator.Service) bool {
		sv, _ := find(s, "shop/web")
		return len(sv.Pods) == 0
	})
}

// TestServicePortFromTheTable: a service's own port is the one the ports
// table in the system namespace gives its key, and follows it; an
// annotation on the pods-Service claiming a port, which anyone who may
// edit Services in the namespace can write, gives none.
func TestServicePortFromTheTable(t *testing.T) {
	sys := kube.DefaultSystemNamespace
	table := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: ports.ConfigMapName(20001), Labels: map[string]string{ports.LabelTable: "true"}},
		Data:       map[string]string{"20001": "shop/web"},
	}
	web := podsService("shop", "web", "swell.run/service-port", "20005")
	api := podsService("shop", "api", "swell.run/service-port", "20001")
	src, client := started(t, table, web, api)
	waitUntil(t, src, "web on port 20001", func(svcs []activator.Service) bool {
		w, ok := find(svcs, "shop/web")
		a, _ := find(svcs, "shop/api")
		return ok && w.Port == 20001 && a.Port == 0
	})
	table.Data = map[string]string{"20001": "released 2030-01-01T00:00:00Z", "20002": "shop/web", "20003": "shop/api"}
	if _, err := client.CoreV1().ConfigMaps(sys).Update(bg, table, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "web on 20002, api on 20003", func(svcs []activator.Service) bool {
		w, _ := find(svcs, "shop/web")
		a, _ := find(svcs, "shop/api")
		return w.Port == 20002 && a.Port == 20003
	})
	if err := client.CoreV1().ConfigMaps(sys).Delete(bg, table.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, src, "no ports once the table is gone", func(svcs []activator.Service) bool {
		w, _ := find(svcs, "shop/web")
		a, _ := find(svcs, "shop/api")
		return w.Port == 0 && a.Port == 0
	})
}
