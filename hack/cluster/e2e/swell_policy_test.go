package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/swell-run/swell/hack/cluster/nodeimages"
)

// autoscalerUser is the autoscaler's service account as the API server
// names it: the admission policies of deploy/policy.yaml judge the
// requests made as this user.
const autoscalerUser = "system:serviceaccount:" + swellNamespace + ":autoscaler"

// The policies of deploy/policy.yaml.
const (
	policyDeployments = "swell-autoscaler-deployments"
	policyPods        = "swell-autoscaler-pods"
	policyScale       = "swell-autoscaler-scale"
	policyServices    = "swell-autoscaler-services"
	policyEndpoints   = "swell-autoscaler-endpoints"
	policyWebhooks    = "swell-autoscaler-webhooks"
	policyKubeSystem  = "swell-autoscaler-kube-system"
)

// Labels and annotations Swell writes, as kube/ names them.
const (
	labelManagedBy      = "app.kubernetes.io/managed-by"
	labelDeployment     = "swell.run/deployment"
	sliceControllerName = "controller.swell.run"
)

// dryRun makes a write that the API server admits (or refuses) and then
// does not store: what must be refused changes nothing even if it is not.
var dryRun = []string{metav1.DryRunAll}

// asAutoscaler returns a client acting as the autoscaler's service
// account. The admin may impersonate; the API server adds the account's
// groups, so RBAC judges it as the autoscaler's pods.
func (e *env) asAutoscaler() kubernetes.Interface {
	e.t.Helper()
	cfg := rest.CopyConfig(e.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: autoscalerUser}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

// attempt is one write made as the autoscaler and the answer it must get.
type attempt struct {
	what string
	// refusedBy names the policy that must refuse the write; empty, the
	// write must be allowed.
	refusedBy string
	do        func(ctx context.Context) error
}

// try makes each attempt in turn. A refusal must come from the policy the
// attempt names, which also shows that RBAC let the write through:
// authorization comes before admission.
func (e *env) try(attempts []attempt) {
	e.t.Helper()
	for _, a := range attempts {
		err := a.do(e.t.Context())
		switch {
		case a.refusedBy == "" && err != nil:
			e.t.Errorf("%s: %v; want it allowed", a.what, err)
		case a.refusedBy == "":
			e.t.Logf("allowed: %s", a.what)
		case !refusedBy(err, a.refusedBy):
			e.t.Errorf("%s: %v; want it refused by ValidatingAdmissionPolicy %s", a.what, err, a.refusedBy)
		default:
			e.t.Logf("refused: %s: %v", a.what, err)
		}
	}
}

// refusedBy says whether err is the API server's refusal by the named
// ValidatingAdmissionPolicy.
func refusedBy(err error, policy string) bool {
	return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") &&
		strings.Contains(err.Error(), "denied request")
}

// mergePatch is the JSON merge patch of v.
func mergePatch(v map[string]any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// scaleUnchanged writes a Deployment's scale subresource back as it reads
// it, as the autoscaler's SetScale does: admission judges the write, and
// nothing changes whatever the answer.
func scaleUnchanged(cs kubernetes.Interface, ns, name string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			s, err := cs.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, s, metav1.UpdateOptions{})
			return err
		})
	}
}

// TestSwellPoliciesTypeCheck: the API server has compiled every policy of
// deploy/policy.yaml against the kinds it matches and found nothing to
// warn about (a field that does not exist, a type that does not fit).
func TestSwellPoliciesTypeCheck(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	want := []string{policyDeployments, policyEndpoints, policyKubeSystem, policyPods, policyScale, policyServices, policyWebhooks}
	e.eventually("Swell's admission policies checked without warnings", func(ctx context.Context) error {
		list, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		var got []string
		for _, p := range list.Items {
			if !strings.HasPrefix(p.Name, "swell-autoscaler-") {
				continue
			}
			got = append(got, p.Name)
			if p.Status.ObservedGeneration != p.Generation || p.Status.TypeChecking == nil {
				return fmt.Errorf("policy %s not checked yet", p.Name)
			}
			for _, w := range p.Status.TypeChecking.ExpressionWarnings {
				t.Errorf("policy %s: %s: %s", p.Name, w.FieldRef, w.Warning)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("policies %v, want %v", got, want)
		}
		return nil
	})
}

// TestSwellAutoscalerDeploymentWrites: as the autoscaler, a Deployment
// that has not opted in can be neither patched nor scaled, and an opted-in
// one only in its status annotation and its scale.
func TestSwellAutoscalerDeploymentWrites(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	plain := helloDeployment("plain", 0)
	opted := swellHello("opted", int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"})
	for _, d := range []*appsv1.Deployment{plain, opted} {
		if _, err := e.cs.AppsV1().Deployments(e.ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Deployment %s: %v", d.Name, err)
		}
	}

	as := e.asAutoscaler()
	patch := func(name string, p map[string]any) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := as.AppsV1().Deployments(e.ns).Patch(ctx, name, types.MergePatchType, mergePatch(p), metav1.PatchOptions{})
			return err
		}
	}
	annotate := func(key, value string) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}}
	}
	status := annotate(annotationStatus, `{"ready":0,"desired":0,"reason":"e2e"}`)
	template := map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{"e2e.swell.run/rollout": "1"}}}}}
	image := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"containers": []map[string]string{{"name": helloContainer, "image": nodeimages.Box}}}}}}
	replicas := map[string]any{"spec": map[string]any{"replicas": 3}}
	optOut := map[string]any{"metadata": map[string]any{"labels": map[string]any{labelEnabled: nil}}}

	e.try([]attempt{
		{"patch the pod template of Deployment plain, which has not opted in", policyDeployments, patch("plain", template)},
		{"patch the status annotation of Deployment plain, which has not opted in", policyDeployments, patch("plain", status)},
		{"patch the pod template of opted-in Deployment opted", policyDeployments, patch("opted", template)},
		{"patch the image of opted-in Deployment opted", policyDeployments, patch("opted", image)},
		{"patch spec.replicas of opted-in Deployment opted", policyDeployments, patch("opted", replicas)},
		{"remove the label swell.run/enabled of opted-in Deployment opted", policyDeployments, patch("opted", optOut)},
		{"patch another annotation of opted-in Deployment opted", policyDeployments, patch("opted", annotate("e2e.swell.run/other", "x"))},
		{"patch the status annotation of opted-in Deployment opted", "", patch("opted", status)},
		{"write the scale of opted-in Deployment opted", "", scaleUnchanged(as, e.ns, "opted")},
	})
	// The scale policy looks plain up in the API server's informer of
	// Deployments, which has it a moment after its creation.
	e.eventually("the scale of Deployment plain refused to the autoscaler", func(ctx context.Context) error {
		err := scaleUnchanged(as, e.ns, "plain")(ctx)
		if refusedBy(err, policyScale) {
			t.Logf("refused: write the scale of Deployment plain: %v", err)
			return nil
		}
		return fmt.Errorf("update deployments/scale of plain: %v; want it refused by %s", err, policyScale)
	})

	d, err := e.cs.AppsV1().Deployments(e.ns).Get(t.Context(), "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Spec.Template.Annotations["e2e.swell.run/rollout"]; ok || ptrOr(d.Spec.Replicas, 1) != 0 {
		t.Errorf("Deployment plain was changed: template annotations %v, replicas %d", d.Spec.Template.Annotations, ptrOr(d.Spec.Replicas, 1))
	}
}

// TestSwellAutoscalerPodWrites: as the autoscaler, a pod of an opted-in
// Deployment takes a pod-deletion-cost and nothing else; a pod of another
// Deployment takes nothing.
func TestSwellAutoscalerPodWrites(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	for _, d := range []*appsv1.Deployment{helloDeployment("plain", 1), swellHello("opted", int32p(1), nil)} {
		if _, err := e.cs.AppsV1().Deployments(e.ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Deployment %s: %v", d.Name, err)
		}
	}
	podOf := map[string]string{}
	for _, name := range []string{"plain", "opted"} {
		e.eventually("a pod of "+name, func(ctx context.Context) error {
			pods, err := e.pods(ctx, name)
			if err != nil || len(pods) == 0 {
				return fmt.Errorf("%d pods, %v", len(pods), err)
			}
			podOf[name] = pods[0].Name
			return nil
		})
	}

	pods := e.asAutoscaler().CoreV1().Pods(e.ns)
	patch := func(deployment string, p map[string]any) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := pods.Patch(ctx, podOf[deployment], types.MergePatchType, mergePatch(p), metav1.PatchOptions{})
			return err
		}
	}
	annotate := func(key, value string) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}}
	}
	const cost = "controller.kubernetes.io/pod-deletion-cost"
	optOut := map[string]any{"metadata": map[string]any{"labels": map[string]any{labelEnabled: nil}}}
	label := map[string]any{"metadata": map[string]any{"labels": map[string]string{"e2e.swell.run/other": "x"}}}
	e.try([]attempt{
		{"set the deletion cost of a pod of Deployment plain, which has not opted in", policyPods, patch("plain", annotate(cost, "-5"))},
		{"set another annotation of a pod of opted-in Deployment opted", policyPods, patch("opted", annotate("e2e.swell.run/other", "x"))},
		{"set a label of a pod of opted-in Deployment opted", policyPods, patch("opted", label)},
		{"remove the label swell.run/enabled of a pod of opted-in Deployment opted", policyPods, patch("opted", optOut)},
		{"set the deletion cost of a pod of opted-in Deployment opted", "", patch("opted", annotate(cost, "-5"))},
	})

	p, err := e.cs.CoreV1().Pods(e.ns).Get(t.Context(), podOf["plain"], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Annotations[cost]; ok {
		t.Errorf("pod %s of Deployment plain was given a deletion cost: %v", p.Name, p.Annotations)
	}
}

// TestSwellAutoscalerServiceWrites: as the autoscaler, a Service that is
// not Swell's can only be taken over and given back, the way kube/routing
// does it, and only Swell-shaped Services can be created or deleted.
func TestSwellAutoscalerServiceWrites(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	other := helloService("other")
	orphan := helloService("orphan")
	orphan.Spec.Selector = map[string]string{"app": "orphan", "tier": "web"}
	for _, s := range []*corev1.Service{other, orphan} {
		if _, err := e.cs.CoreV1().Services(e.ns).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create Service %s: %v", s.Name, err)
		}
	}

	services := e.asAutoscaler().CoreV1().Services(e.ns)
	// update reads the Service as it is and updates it, changed, as the
	// autoscaler.
	update := func(name string, change func(*corev1.Service)) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			s, err := e.cs.CoreV1().Services(e.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(s)
			_, err = services.Update(ctx, s, metav1.UpdateOptions{})
			return err
		}
	}
	// takeOver is kube/routing's take: the selector into the annotation
	// (JSON, as encoding/json writes it), the label added.
	takeOver := func(d string) func(*corev1.Service) {
		return func(s *corev1.Service) {
			raw, _ := json.Marshal(s.Spec.Selector)
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[annotationSel] = string(raw)
			s.Spec.Selector = nil
			if s.Labels == nil {
				s.Labels = map[string]string{}
			}
			s.Labels[labelDeployment] = d
		}
	}
	create := func(s *corev1.Service) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := services.Create(ctx, s, metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	podsService := func(typ corev1.ServiceType) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name:   "plain-swell-pods",
				Labels: map[string]string{labelManagedBy: "swell", labelDeployment: "plain"},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "apps/v1", Kind: "Deployment", Name: "plain", UID: "00000000-0000-0000-0000-000000000000"}},
			},
			Spec: corev1.ServiceSpec{
				Type:     typ,
				Selector: map[string]string{"app": "plain"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: queueProxyPort, TargetPort: intstr.FromInt32(queueProxyPort)}},
			},
		}
		if typ == corev1.ServiceTypeClusterIP {
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}
		return s
	}

	e.try([]attempt{
		{"label Service other", policyServices, update("other", func(s *corev1.Service) {
			s.Labels = map[string]string{"e2e": "x"}
		})},
		{"give Service other an external IP", policyServices, update("other", func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{"198.19.9.9"}
		})},
		{"select other pods for Service other", policyServices, update("other", func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "plain"}
		})},
		{"drop the selector of Service other without keeping it", policyServices, update("other", func(s *corev1.Service) {
			s.Spec.Selector = nil
			s.Labels = map[string]string{labelDeployment: "other"}
		})},
		{"take Service other over and change its port", policyServices, update("other", func(s *corev1.Service) {
			takeOver("other")(s)
			s.Spec.Ports[0].TargetPort = intstr.FromInt32(9999)
		})},
		{"take Service other over with another selector in the annotation", policyServices, update("other", func(s *corev1.Service) {
			takeOver("other")(s)
			s.Annotations[annotationSel] = `{"app":"plain"}`
		})},
		{"give Service other a selector as if giving it back", policyServices, update("other", func(s *corev1.Service) {
			s.Spec.Selector = map[string]string{"app": "plain"}
			s.Labels = map[string]string{labelDeployment: "other"}
		})},
		{"delete Service other", policyServices, func(ctx context.Context) error {
			return services.Delete(ctx, "other", metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"create a Service not labelled as Swell's", policyServices, create(helloService("rogue"))},
		{"create a pods-Service of type NodePort", policyServices, create(podsService(corev1.ServiceTypeNodePort))},
		{"create a pods-Service", "", create(podsService(corev1.ServiceTypeClusterIP))},
		// As kube/routing does it. The Deployment it names does not exist,
		// which the API server cannot know; Swell gives the Service back.
		{"take Service orphan over as kube/routing does", "", update("orphan", takeOver("gone"))},
	})

	// The give-back is the autoscaler's own write, judged by the same
	// policy.
	e.eventually("Swell gives Service orphan back", func(ctx context.Context) error {
		s, err := e.cs.CoreV1().Services(e.ns).Get(ctx, "orphan", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !maps.Equal(s.Spec.Selector, orphan.Spec.Selector) || s.Labels[labelDeployment] != "" || s.Annotations[annotationSel] != "" {
			return fmt.Errorf("selector %v, labels %v, annotations %v; want selector %v back, no %s, no %s",
				s.Spec.Selector, s.Labels, s.Annotations, orphan.Spec.Selector, labelDeployment, annotationSel)
		}
		return nil
	})
}

// TestSwellAutoscalerEndpointWrites: as the autoscaler, no EndpointSlice
// but one shaped as Swell's own can be written, the API server's own
// endpoints cannot be touched, and a user's Endpoints cannot be deleted.
func TestSwellAutoscalerEndpointWrites(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	other, err := e.cs.CoreV1().Services(e.ns).Create(t.Context(), helloService("other"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	manual := helloService("manual")
	manual.Spec.Selector = nil
	if _, err := e.cs.CoreV1().Services(e.ns).Create(t.Context(), manual, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Endpoints(e.ns).Create(t.Context(), &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "manual"},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: "198.19.9.9"}},
			Ports:     []corev1.EndpointPort{{Name: "http", Port: 80, Protocol: "TCP"}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var theirs *discoveryv1.EndpointSlice
	e.eventually("Kubernetes' EndpointSlice for Service other", func(ctx context.Context) error {
		list, err := e.cs.DiscoveryV1().EndpointSlices(e.ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=other"})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("none yet")
		}
		theirs = &list.Items[0]
		return nil
	})

	as := e.asAutoscaler()
	// slice is an EndpointSlice labelled as Swell's route slice of the
	// Service, listing one address.
	slice := func(ns string, svc *corev1.Service) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:      svc.Name + "-swell",
				Namespace: ns,
				Labels: map[string]string{
					discoveryv1.LabelServiceName: svc.Name,
					discoveryv1.LabelManagedBy:   sliceControllerName,
					labelManagedBy:               "swell",
					labelDeployment:              svc.Name,
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.19.9.9"}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](queueProxyPort)}},
		}
	}
	create := func(s *discoveryv1.EndpointSlice) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := as.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	foreign := slice(e.ns, other)
	foreign.Labels[discoveryv1.LabelManagedBy] = "e2e.example.com"
	unowned := slice(e.ns, other)
	unowned.OwnerReferences = nil
	apiServer, err := e.cs.CoreV1().Services(metav1.NamespaceDefault).Get(t.Context(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	e.try([]attempt{
		{"add an address to Kubernetes' EndpointSlice of Service other", policyEndpoints, func(ctx context.Context) error {
			s := theirs.DeepCopy()
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.19.9.9"}})
			_, err := as.DiscoveryV1().EndpointSlices(e.ns).Update(ctx, s, metav1.UpdateOptions{DryRun: dryRun})
			return err
		}},
		{"create an EndpointSlice for Service other managed by another controller", policyEndpoints, create(foreign)},
		{"create a Swell-labelled EndpointSlice for Service other that no Service owns", policyEndpoints, create(unowned)},
		{"create a Swell-labelled EndpointSlice for the API server's Service default/kubernetes", policyEndpoints,
			create(slice(metav1.NamespaceDefault, apiServer))},
		{"delete the Endpoints a user wrote for Service manual", policyEndpoints, func(ctx context.Context) error {
			return as.CoreV1().Endpoints(e.ns).Delete(ctx, "manual", metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"delete the API server's Endpoints default/kubernetes", policyEndpoints, func(ctx context.Context) error {
			return as.CoreV1().Endpoints(metav1.NamespaceDefault).Delete(ctx, "kubernetes", metav1.DeleteOptions{DryRun: dryRun})
		}},
		{"create Swell's route slice for Service other", "", create(slice(e.ns, other))},
	})

	// In swell-system, only the autoscaler Service's own slices: the
	// leader's, one per bucket when sharded.
	svc, err := e.cs.CoreV1().Services(swellNamespace).Get(t.Context(), "autoscaler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaderSlice := func(name string) *discoveryv1.EndpointSlice {
		s := slice(swellNamespace, svc)
		s.Name = name
		delete(s.Labels, labelDeployment)
		return s
	}
	e.try([]attempt{
		{"create an autoscaler slice of another name in swell-system", policyEndpoints, create(leaderSlice("autoscaler-extra"))},
		{"create the slice of a bucket of an absurd number", policyEndpoints, create(leaderSlice("autoscaler-3-of-1000"))},
		{"create the slice of bucket 3 of 10", "", create(leaderSlice("autoscaler-3-of-10"))},
	})
}

// TestSwellAutoscalerWritesNothingInKubeSystem: as the autoscaler, even
// what it may write elsewhere is refused in kube-system.
func TestSwellAutoscalerWritesNothingInKubeSystem(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	const ns = metav1.NamespaceSystem
	// Opted in, so that only the namespace is wrong. The webhooks never
	// inject in kube-system, and Swell's own writes to it are refused as
	// these are.
	d := swellHello(e.ns, int32p(0), map[string]string{"autoscaling.swell.run/min-scale": "0"})
	if _, err := e.cs.AppsV1().Deployments(ns).Create(t.Context(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), waitTimeout)
		defer cancel()
		if err := e.cs.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete Deployment %s/%s: %v", ns, d.Name, err)
		}
	})

	as := e.asAutoscaler()
	status := mergePatch(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotationStatus: `{"reason":"e2e"}`}}})
	podsService := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:   d.Name + "-swell-pods",
			Labels: map[string]string{labelManagedBy: "swell", labelDeployment: d.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: "00000000-0000-0000-0000-000000000000"}},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app": d.Name},
			Ports:     []corev1.ServicePort{{Name: "http", Port: queueProxyPort}},
		},
	}
	e.try([]attempt{
		{"patch the status annotation of an opted-in Deployment in kube-system", policyKubeSystem, func(ctx context.Context) error {
			_, err := as.AppsV1().Deployments(ns).Patch(ctx, d.Name, types.MergePatchType, status, metav1.PatchOptions{DryRun: dryRun})
			return err
		}},
		{"write the scale of an opted-in Deployment in kube-system", policyKubeSystem, scaleUnchanged(as, ns, d.Name)},
		{"create a pods-Service in kube-system", policyKubeSystem, func(ctx context.Context) error {
			_, err := as.CoreV1().Services(ns).Create(ctx, podsService, metav1.CreateOptions{DryRun: dryRun})
			return err
		}},
		{"create an Event in kube-system", policyKubeSystem, func(ctx context.Context) error {
			_, err := as.CoreV1().Events(ns).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "e2e-"},
				InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Namespace: ns, Name: d.Name},
				Reason:         "ScaledUp", Message: "e2e", Type: corev1.EventTypeNormal,
			}, metav1.CreateOptions{DryRun: dryRun})
			return err
		}},
	})
}

// TestSwellAutoscalerWebhookConfigurations: as the autoscaler, a webhook
// configuration can take a CA bundle and nothing else.
func TestSwellAutoscalerWebhookConfigurations(t *testing.T) {
	t.Parallel()
	e := swellSetup(t)
	mw, err := e.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "swell-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := mw.Webhooks[0]
	configs := e.asAutoscaler().AdmissionregistrationV1().MutatingWebhookConfigurations()
	// jsonPatch tests the first webhook's name, as kube/certs does, and
	// sets one of its fields.
	jsonPatch := func(path string, value any) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			p, _ := json.Marshal([]map[string]any{
				{"op": "test", "path": "/webhooks/0/name", "value": w.Name},
				{"op": "add", "path": "/webhooks/0/" + path, "value": value},
			})
			_, err := configs.Patch(ctx, mw.Name, types.JSONPatchType, p, metav1.PatchOptions{DryRun: dryRun})
			return err
		}
	}
	e.try([]attempt{
		{"make webhook " + w.Name + " fail closed", policyWebhooks, jsonPatch("failurePolicy", "Fail")},
		{"send webhook " + w.Name + " to another path", policyWebhooks, jsonPatch("clientConfig/service/path", "/elsewhere")},
		{"widen the objects webhook " + w.Name + " sees", policyWebhooks, jsonPatch("objectSelector", map[string]any{})},
		{"write the caBundle of webhook " + w.Name, "", jsonPatch("clientConfig/caBundle", w.ClientConfig.CABundle)},
	})
}
