package routing

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/swell-run/swell/autoscaler/plan"
	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/autoscaling"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

// sync moves D's routing one step toward what D asks: routed when D is
// opted in, given back when it is not or is gone. It reads the informer
// caches and writes only what differs from them.
func (r *Router) sync(ctx context.Context, key service.Key) error {
	d, err := r.deployments.Deployments(key.Namespace).Get(key.Name)
	switch {
	case apierrors.IsNotFound(err):
		return r.release(ctx, key, nil)
	case err != nil:
		return err
	case !kube.OptedIn(d):
		return r.release(ctx, key, nil)
	}
	return r.reconcile(ctx, d)
}

// reconcile routes the Services of opted-in d.
func (r *Router) reconcile(ctx context.Context, d *appsv1.Deployment) error {
	key := kube.KeyOf(d)
	app := appOf(d)
	if app.err != nil {
		r.warn(d, d.UID, ReasonNotRouted, "Deployment %s/%s: Swell cannot route its Services: %v", d.Namespace, d.Name, app.err)
	} else {
		r.unwarn(d.UID, ReasonNotRouted)
	}
	cands, err := r.candidates(d, app)
	if err != nil {
		return err
	}
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.svc.Name
	}
	if err := r.ensurePodsService(ctx, d, names); err != nil {
		return err
	}

	var errs []error
	sides := map[discoveryv1.AddressType]*family{}
	// side is what the route slices of one address family choose from,
	// read once per reconcile, and only for the families some Service
	// has.
	side := func(f discoveryv1.AddressType) *family {
		if fs, ok := sides[f]; ok {
			return fs
		}
		fs := &family{}
		fs.pods, fs.podsKnown = r.podEndpointsOf(key, f)
		act, opened, err := r.onServicePort(ctx, key, r.activatorEndpoints(f))
		if err != nil {
			errs = append(errs, err)
		} else if !opened {
			// An activator has yet to open the service port: it is
			// listed once it has.
			r.queue.AddAfter(key, portRecheck)
		}
		fs.act = act
		sides[f] = fs
		return fs
	}
	want := r.requestedRoute(key)
	keep := map[string]bool{}
	for _, c := range cands {
		keep[c.svc.Name] = true
		if err := r.takeOver(ctx, d, c, want, side); err != nil {
			errs = append(errs, fmt.Errorf("Service %s/%s: %w", c.svc.Namespace, c.svc.Name, err))
		}
	}
	errs = append(errs, r.release(ctx, key, keep))
	return errors.Join(errs...)
}

// family is what a route slice of one address family chooses from: D's
// ready pods of that family, whether Kubernetes has listed D's pods yet,
// and the activators of that family that opened D's port.
type family struct {
	pods      []endpoint
	podsKnown bool
	act       activator
}

// families are the address families of svc's cluster IPs, the primary
// first (IPv4 when the API server has not filled them in).
func families(svc *corev1.Service) []discoveryv1.AddressType {
	var out []discoveryv1.AddressType
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			out = append(out, discoveryv1.AddressTypeIPv4)
		case corev1.IPv6Protocol:
			out = append(out, discoveryv1.AddressTypeIPv6)
		}
	}
	if len(out) == 0 {
		out = []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4}
	}
	return out
}

// routeSliceName is the name of svc's route slice of family f.
func routeSliceName(svc string, f discoveryv1.AddressType) string {
	if f == discoveryv1.AddressTypeIPv6 {
		return kube.RouteSliceNameIPv6(svc)
	}
	return kube.RouteSliceName(svc)
}

// takeOver routes c's Service to d: Swell's EndpointSlices first, one per
// address family the Service has, then the selector goes, then the slices
// Kubernetes wrote for the selector. The selector goes once the slice of
// the Service's primary family lists an endpoint.
func (r *Router) takeOver(ctx context.Context, d *appsv1.Deployment, c candidate, want plan.Route, side func(discoveryv1.AddressType) *family) error {
	svc := c.svc
	taken := len(svc.Spec.Selector) == 0
	fams := families(svc)
	primary := false
	for i, f := range fams {
		listed, err := r.writeFamily(ctx, d, c, f, want, side(f), taken)
		if err != nil {
			return err
		}
		if i == 0 {
			primary = listed
		}
	}
	// A family the Service no longer has (its ipFamilies changed) loses
	// its slice.
	for _, s := range r.routeSlicesOf(svc.Namespace, svc.Name) {
		if s.Labels[kube.LabelDeployment] == d.Name && !slices.Contains(fams, s.AddressType) {
			if err := r.deleteSlice(ctx, s); err != nil {
				return err
			}
		}
	}
	if !primary {
		return nil
	}
	removed, err := r.take(ctx, svc, d.Name)
	if err != nil {
		return err
	}
	return r.clearKubernetesSlices(ctx, svc, removed)
}

// writeFamily writes svc's route slice of family f, as NEVER EMPTY
// chooses, and reports whether the slice lists d's endpoints now (written,
// or kept from before once the Service is taken).
func (r *Router) writeFamily(ctx context.Context, d *appsv1.Deployment, c candidate, f discoveryv1.AddressType, want plan.Route, fs *family, taken bool) (bool, error) {
	svc := c.svc
	name := routeSliceName(svc.Name, f)
	r.mu.Lock()
	delete(r.releasing, types.NamespacedName{Namespace: svc.Namespace, Name: name})
	r.mu.Unlock()

	cur, err := r.slices.EndpointSlices(svc.Namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return false, err
	case !isRouteSlice(cur):
		r.warn(svc, svc.UID, ReasonNotRouted, "Service %s/%s: EndpointSlice %s exists and is not Swell's: Swell does not route the Service while it does",
			svc.Namespace, svc.Name, name)
		return false, nil
	case cur.Labels[kube.LabelDeployment] != d.Name:
		// Another Deployment's, being given back: its deletion brings d
		// here again.
		return false, nil
	}
	if !taken && !fs.podsKnown {
		// Kubernetes has not listed d's pods yet: the pods route would
		// fall back to the activator for nothing.
		return false, nil
	}
	ch, ok := choose(want, fs.pods, fs.act)
	if !ok {
		// Neither the pods nor the activator has a ready endpoint: the
		// slice stays as it is.
		return cur != nil && taken, nil
	}
	if len(ch.endpoints) > maxEndpoints {
		r.log.Warn("a route EndpointSlice holds the first endpoints only", zap.String("service", svc.Namespace+"/"+svc.Name),
			zap.Int("endpoints", len(ch.endpoints)), zap.Int("max", maxEndpoints))
	}
	if err := r.writeSlice(ctx, cur, routeSlice(svc, d.Name, c.ports, ch, f)); err != nil {
		return false, fmt.Errorf("write EndpointSlice %s: %w", name, err)
	}
	return true, nil
}

// take moves svc's selector into its annotation and labels it with d.
// removed says whether svc had a selector.
func (r *Router) take(ctx context.Context, svc *corev1.Service, d string) (removed bool, err error) {
	up := svc.DeepCopy()
	if len(up.Spec.Selector) > 0 {
		raw, err := json.Marshal(up.Spec.Selector)
		if err != nil {
			return false, err
		}
		if up.Annotations == nil {
			up.Annotations = map[string]string{}
		}
		up.Annotations[kube.AnnotationSelector] = string(raw)
		up.Spec.Selector = nil
		removed = true
	}
	if up.Labels == nil {
		up.Labels = map[string]string{}
	}
	up.Labels[kube.LabelDeployment] = d
	if equality.Semantic.DeepEqual(svc, up) {
		return false, nil
	}
	if _, err := r.client.CoreV1().Services(svc.Namespace).Update(ctx, up, metav1.UpdateOptions{}); err != nil {
		return false, fmt.Errorf("take the selector: %w", err)
	}
	if removed {
		r.log.Info("Service taken over", zap.String("service", svc.Namespace+"/"+svc.Name), zap.String("deployment", d))
	}
	return removed, nil
}

// clearKubernetesSlices deletes what Kubernetes listed for svc while it
// had a selector, which it leaves in place when the selector goes: the
// EndpointSlice controller's slices, and the Endpoints object the
// mirroring controller would copy into slices of its own.
func (r *Router) clearKubernetesSlices(ctx context.Context, svc *corev1.Service, removed bool) error {
	clearEndpoints := removed
	var errs []error
	for _, s := range r.slicesOf(svc.Namespace, svc.Name) {
		switch s.Labels[discoveryv1.LabelManagedBy] {
		case sliceMirroringController:
			clearEndpoints = true
		case sliceController:
		default:
			continue
		}
		errs = append(errs, r.deleteSlice(ctx, s))
	}
	if clearEndpoints {
		// The mirroring controller copies this object into slices of its
		// own while the Service has no selector.
		err := r.client.CoreV1().Endpoints(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete the Endpoints of Service %s/%s: %w", svc.Namespace, svc.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (r *Router) deleteSlice(ctx context.Context, s *discoveryv1.EndpointSlice) error {
	err := r.client.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// routeSlice is the EndpointSlice of family f Swell writes for svc routed
// to d.
func routeSlice(svc *corev1.Service, d string, ports []corev1.ServicePort, ch choice, f discoveryv1.AddressType) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      routeSliceName(svc.Name, f),
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   kube.EndpointSliceController,
				kube.LabelDeployment:         d,
				kube.LabelRoute:              ch.route,
				kube.LabelManagedBy:          kube.ManagedBy,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: ptr.To(true),
			}},
		},
		AddressType: f,
	}
	for _, p := range ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{
			Name:        ptr.To(p.Name),
			Protocol:    ptr.To(proto),
			Port:        ptr.To(ch.port),
			AppProtocol: cloneString(p.AppProtocol),
		})
	}
	eps := ch.endpoints[:min(len(ch.endpoints), maxEndpoints)]
	for _, e := range eps {
		ep := discoveryv1.Endpoint{
			Addresses: []string{e.ip.String()},
			Conditions: discoveryv1.EndpointConditions{
				Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false),
			},
			NodeName: cloneString(e.nodeName),
		}
		if ch.route == kube.RoutePods && e.targetRef != nil {
			ep.TargetRef = e.targetRef.DeepCopy()
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func cloneString(p *string) *string {
	if p == nil {
		return nil
	}
	return ptr.To(*p)
}

// writeSlice creates want, or updates cur (the cached copy) to it when
// they differ. A conflict rereads the slice from the API server.
func (r *Router) writeSlice(ctx context.Context, cur, want *discoveryv1.EndpointSlice) error {
	api := r.client.DiscoveryV1().EndpointSlices(want.Namespace)
	if cur == nil {
		_, err := api.Create(ctx, want, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		if cur, err = api.Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
			return err
		}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !isRouteSlice(cur) || cur.Labels[kube.LabelDeployment] != want.Labels[kube.LabelDeployment] {
			return fmt.Errorf("EndpointSlice %s/%s was taken by another writer", cur.Namespace, cur.Name)
		}
		up := cur.DeepCopy()
		if up.Labels == nil {
			up.Labels = map[string]string{}
		}
		maps.Copy(up.Labels, want.Labels)
		up.OwnerReferences = want.OwnerReferences
		up.AddressType = want.AddressType
		up.Ports = want.Ports
		up.Endpoints = want.Endpoints
		if equality.Semantic.DeepEqual(cur, up) {
			return nil
		}
		_, err := api.Update(ctx, up, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			fresh, gerr := api.Get(ctx, want.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			cur = fresh
		}
		return err
	})
}

// release gives back the Services D took, but those in keep, and deletes
// their route slices once Kubernetes lists their endpoints again. With keep
// nil (D opted out or gone), D's pods-Service goes too once nothing of D is
// routed.
func (r *Router) release(ctx context.Context, key service.Key, keep map[string]bool) error {
	var errs []error
	labelled, err := r.services.Services(key.Namespace).List(labels.SelectorFromSet(labels.Set{kube.LabelDeployment: key.Name}))
	if err != nil {
		return err
	}
	var podsSvc *corev1.Service
	remaining := 0
	for _, svc := range labelled {
		if _, ok := podsServiceOf(svc); ok {
			podsSvc = svc
			continue
		}
		remaining++
		if keep[svc.Name] {
			continue
		}
		if err := r.giveBack(ctx, svc); err != nil {
			errs = append(errs, fmt.Errorf("give back Service %s/%s: %w", svc.Namespace, svc.Name, err))
		}
	}
	routes := r.routeSlicesFor(key)
	for _, s := range routes {
		if keep[s.Labels[discoveryv1.LabelServiceName]] {
			continue
		}
		if err := r.dropSlice(ctx, key, s); err != nil {
			errs = append(errs, err)
		}
	}
	if keep == nil && remaining == 0 && len(routes) == 0 {
		if podsSvc != nil {
			err := r.client.CoreV1().Services(podsSvc.Namespace).Delete(ctx, podsSvc.Name,
				metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &podsSvc.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete pods-Service %s/%s: %w", podsSvc.Namespace, podsSvc.Name, err))
			}
		}
		// No route slice lists the activators on the port any more.
		errs = append(errs, r.releasePort(ctx, key))
	}
	return errors.Join(errs...)
}

// giveBack restores svc's selector and drops Swell's label and annotation.
// A Service whose selector was put back by someone else keeps that one.
func (r *Router) giveBack(ctx context.Context, svc *corev1.Service) error {
	up := svc.DeepCopy()
	if len(up.Spec.Selector) == 0 {
		sel, err := savedSelector(svc)
		if err != nil {
			r.warn(svc, svc.UID, ReasonSelectorLost, "Service %s/%s: %v: Swell cannot give it back its selector; set one to release it",
				svc.Namespace, svc.Name, err)
			return nil
		}
		up.Spec.Selector = sel
	}
	delete(up.Annotations, kube.AnnotationSelector)
	delete(up.Labels, kube.LabelDeployment)
	if _, err := r.client.CoreV1().Services(svc.Namespace).Update(ctx, up, metav1.UpdateOptions{}); err != nil {
		return err
	}
	r.log.Info("Service given back", zap.String("service", svc.Namespace+"/"+svc.Name))
	return nil
}

// dropSlice deletes route slice s of a Service given back, once Kubernetes
// lists the Service's endpoints again, or ReleaseTimeout after the release
// began.
func (r *Router) dropSlice(ctx context.Context, key service.Key, s *discoveryv1.EndpointSlice) error {
	name := s.Labels[discoveryv1.LabelServiceName]
	id := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	svc, err := r.services.Services(s.Namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case svc.Labels[kube.LabelDeployment] == key.Name:
		// Not given back yet (the Service's update brings D here again),
		// or its selector is lost: the slice is all it has.
		return nil
	case !r.kubernetesListed(s):
		r.mu.Lock()
		start, ok := r.releasing[id]
		if !ok {
			start = r.clock.Now()
			r.releasing[id] = start
		}
		r.mu.Unlock()
		if left := r.timeout - r.clock.Since(start); left > 0 {
			r.queue.AddAfter(key, left)
			return nil
		}
		r.log.Warn("Kubernetes lists no endpoint for a Service given back; deleting Swell's EndpointSlice anyway",
			zap.String("service", s.Namespace+"/"+name), zap.Duration("after", r.timeout))
	}
	if err := r.deleteSlice(ctx, s); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.releasing, id)
	r.mu.Unlock()
	return nil
}

// kubernetesListed says whether Kubernetes has listed the endpoints of
// route slice s's Service: it has written a slice for it, with a ready
// endpoint unless s has none.
func (r *Router) kubernetesListed(s *discoveryv1.EndpointSlice) bool {
	var theirs []*discoveryv1.EndpointSlice
	for _, o := range r.slicesOf(s.Namespace, s.Labels[discoveryv1.LabelServiceName]) {
		switch o.Labels[discoveryv1.LabelManagedBy] {
		case kube.EndpointSliceController, sliceMirroringController:
		default:
			theirs = append(theirs, o)
		}
	}
	if len(theirs) == 0 {
		return false
	}
	return len(s.Endpoints) == 0 || len(readyEndpoints(theirs, anyFamily, nil)) > 0
}

// ensurePodsService creates or updates d's pods-Service.
func (r *Router) ensurePodsService(ctx context.Context, d *appsv1.Deployment, services []string) error {
	api := r.client.CoreV1().Services(d.Namespace)
	name := kube.PodsServiceName(d.Name)
	cur, err := r.services.Services(d.Namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return err
	}
	copied := r.copiedAnnotations(d, cur)
	copied[kube.AnnotationClusterIPs] = r.clusterIPs(d.Namespace, services)
	want := podsService(d, services, copied)
	if cur == nil {
		_, err := api.Create(ctx, want, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create pods-Service %s/%s: %w", d.Namespace, name, err)
		}
		// Already there: created by an earlier reconcile the cache has not
		// shown yet; its event brings d here again.
		return nil
	}
	if owner, ok := podsServiceOf(cur); !ok || owner != d.Name || cur.Spec.ClusterIP != corev1.ClusterIPNone {
		err := fmt.Errorf("Service %s/%s exists and is not a headless Service labelled %s=%s, %s=%s: remove it so that Swell can create its pods-Service",
			d.Namespace, name, kube.LabelDeployment, d.Name, kube.LabelManagedBy, kube.ManagedBy)
		r.warn(d, d.UID, ReasonNotRouted, "Deployment %s/%s: %v", d.Namespace, d.Name, err)
		return err
	}
	up := cur.DeepCopy()
	maps.Copy(up.Labels, want.Labels)
	if up.Annotations == nil {
		up.Annotations = map[string]string{}
	}
	maps.Copy(up.Annotations, want.Annotations)
	up.OwnerReferences = want.OwnerReferences
	up.Spec.Selector = want.Spec.Selector
	up.Spec.PublishNotReadyAddresses = false
	if up.Spec.IPFamilyPolicy == nil || *up.Spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack {
		// Upgraded in place; the API server adds the other family.
		up.Spec.IPFamilyPolicy = want.Spec.IPFamilyPolicy
	}
	if !samePorts(cur.Spec.Ports, want.Spec.Ports) {
		up.Spec.Ports = want.Spec.Ports
	}
	if equality.Semantic.DeepEqual(cur, up) {
		return nil
	}
	if _, err := api.Update(ctx, up, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update pods-Service %s/%s: %w", d.Namespace, name, err)
	}
	return nil
}

// clusterIPs is the value of kube.AnnotationClusterIPs for the Services
// named services in namespace ns: their cluster IPs, sorted, each once.
// A Service not in the cache yet adds none; its event brings the
// Deployment here again.
func (r *Router) clusterIPs(ns string, services []string) string {
	var ips []string
	for _, name := range services {
		svc, err := r.services.Services(ns).Get(name)
		if err != nil {
			continue
		}
		addrs := svc.Spec.ClusterIPs
		if len(addrs) == 0 {
			addrs = []string{svc.Spec.ClusterIP}
		}
		for _, ip := range addrs {
			if a, err := netip.ParseAddr(ip); err == nil {
				ips = append(ips, a.String())
			}
		}
	}
	slices.Sort(ips)
	return strings.Join(slices.Compact(ips), ",")
}

// copiedAnnotations are the annotations of d the activator reads, as the
// pods-Service carries them for it, validated: container concurrency, the
// callers allowed and the extra hosts. One that does not parse keeps the
// value the pods-Service had (its default when it had none that parses),
// with one warning on d for every problem.
func (r *Router) copiedAnnotations(d *appsv1.Deployment, cur *corev1.Service) map[string]string {
	var prev map[string]string
	if cur != nil {
		prev = cur.Annotations
	}
	out := map[string]string{}
	var errs []error
	var kept []string

	cc, err := autoscaling.ParseContainerConcurrency(d.Annotations)
	if err == nil {
		out[kube.AnnotationContainerConcurrency] = strconv.Itoa(cc)
	} else {
		v := "0"
		if n, perr := strconv.Atoi(prev[kube.AnnotationContainerConcurrency]); perr == nil && n >= 0 {
			v = prev[kube.AnnotationContainerConcurrency]
		}
		out[kube.AnnotationContainerConcurrency] = v
		errs = append(errs, err)
		kept = append(kept, "container concurrency "+v)
	}

	callers, err := kube.ParseAllowedCallers(d.Annotations[kube.AnnotationAllowedCallers])
	if err == nil {
		out[kube.AnnotationAllowedCallers] = callers.String()
	} else {
		// Fails closed: the previous value if it still parses, else
		// nothing beyond what the pods' NetworkPolicies admit.
		v := ""
		if c, perr := kube.ParseAllowedCallers(prev[kube.AnnotationAllowedCallers]); perr == nil {
			v = c.String()
		}
		out[kube.AnnotationAllowedCallers] = v
		errs = append(errs, err)
		shown := v
		if shown == "" {
			shown = "none beyond what its pods' NetworkPolicies admit"
		}
		kept = append(kept, "callers "+shown)
	}

	hosts, err := kube.ParseHosts(d.Annotations[kube.AnnotationHosts])
	if err == nil {
		out[kube.AnnotationHosts] = strings.Join(hosts, ",")
	} else {
		v := ""
		if h, perr := kube.ParseHosts(prev[kube.AnnotationHosts]); perr == nil {
			v = strings.Join(h, ",")
		}
		out[kube.AnnotationHosts] = v
		errs = append(errs, err)
		kept = append(kept, "hosts "+cmp.Or(v, "none"))
	}

	if len(errs) == 0 {
		r.unwarn(d.UID, ReasonInvalidAnnotations)
	} else {
		r.warn(d, d.UID, ReasonInvalidAnnotations, "Deployment %s/%s: %v; the activator keeps %s",
			d.Namespace, d.Name, errors.Join(errs...), strings.Join(kept, " and "))
	}
	return out
}

// podsService is d's pods-Service.
func podsService(d *appsv1.Deployment, services []string, copied map[string]string) *corev1.Service {
	sel := d.Spec.Template.Labels
	if d.Spec.Selector != nil && len(d.Spec.Selector.MatchLabels) > 0 {
		sel = d.Spec.Selector.MatchLabels
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      kube.PodsServiceName(d.Name),
			Namespace: d.Namespace,
			Labels: map[string]string{
				kube.LabelDeployment: d.Name,
				kube.LabelManagedBy:  kube.ManagedBy,
			},
			Annotations: map[string]string{
				kube.AnnotationServices:             strings.Join(services, ","),
				kube.AnnotationContainerConcurrency: copied[kube.AnnotationContainerConcurrency],
				kube.AnnotationAllowedCallers:       copied[kube.AnnotationAllowedCallers],
				kube.AnnotationHosts:                copied[kube.AnnotationHosts],
				kube.AnnotationClusterIPs:           copied[kube.AnnotationClusterIPs],
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true),
			}},
		},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: corev1.ClusterIPNone,
			Selector:  maps.Clone(sel),
			Ports: []corev1.ServicePort{
				{Name: kube.PortNameHTTP, Protocol: corev1.ProtocolTCP, Port: network.DefaultQueueServingPort,
					TargetPort: intstr.FromInt32(network.DefaultQueueServingPort)},
				{Name: kube.PortNameStats, Protocol: corev1.ProtocolTCP, Port: network.DefaultQueueMetricsPort,
					TargetPort: intstr.FromInt32(network.DefaultQueueMetricsPort)},
			},
			PublishNotReadyAddresses: false,
			// Both families where the cluster has both, so that
			// Kubernetes lists D's pods by their IPv6 addresses too, for
			// the route slices of dual-stack Services.
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
		},
	}
}

// samePorts compares Service ports on what Swell sets, ignoring what the
// API server fills in.
func samePorts(a, b []corev1.ServicePort) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		pa, pb := a[i].Protocol, b[i].Protocol
		if pa == "" {
			pa = corev1.ProtocolTCP
		}
		if pb == "" {
			pb = corev1.ProtocolTCP
		}
		if a[i].Name != b[i].Name || a[i].Port != b[i].Port || pa != pb || a[i].TargetPort != b[i].TargetPort {
			return false
		}
	}
	return true
}
