package routing

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/kube/inject"
	"github.com/swell-run/swell/pkg/network"
	"github.com/swell-run/swell/pkg/service"
)

var everything = labels.Everything()

// subset says whether sel is non-empty and every one of its labels is in
// set.
func subset(sel, set map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if w, ok := set[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// podsServiceOf returns the Deployment svc is the pods-Service of.
func podsServiceOf(svc *corev1.Service) (string, bool) {
	d := svc.Labels[kube.LabelDeployment]
	ok := d != "" && svc.Labels[kube.LabelManagedBy] == kube.ManagedBy && svc.Name == kube.PodsServiceName(d)
	return d, ok
}

// isRouteSlice says whether s is an EndpointSlice Swell writes for a
// routed Service.
func isRouteSlice(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == kube.EndpointSliceController
}

// savedSelector is the selector Swell took from svc.
func savedSelector(svc *corev1.Service) (map[string]string, error) {
	raw, ok := svc.Annotations[kube.AnnotationSelector]
	if !ok {
		return nil, fmt.Errorf("annotation %s is missing", kube.AnnotationSelector)
	}
	var sel map[string]string
	if err := json.Unmarshal([]byte(raw), &sel); err != nil || len(sel) == 0 {
		return nil, fmt.Errorf("annotation %s: %q is not a selector; accepted: a JSON object of labels", kube.AnnotationSelector, raw)
	}
	// Anyone who may edit the Service may edit the annotation: what is
	// given back as the Service's selector must be one the API server
	// takes, or giving it back would fail for ever.
	for k, v := range sel {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			return nil, fmt.Errorf("annotation %s: label %q=%q: %s; accepted: a JSON object of valid label keys and values",
				kube.AnnotationSelector, k, v, strings.Join(errs, "; "))
		}
	}
	return sel, nil
}

// selectorOf is the selector svc has, or the one Swell took from it.
func selectorOf(svc *corev1.Service) map[string]string {
	if len(svc.Spec.Selector) > 0 {
		return svc.Spec.Selector
	}
	if svc.Labels[kube.LabelDeployment] == "" {
		return nil
	}
	sel, _ := savedSelector(svc)
	return sel
}

// deploymentsFor returns the Deployments an event on svc may concern: the
// one it is labelled with, and the opted-in ones whose pods it selects.
func (r *Router) deploymentsFor(svc *corev1.Service) []service.Key {
	var keys []service.Key
	if d := svc.Labels[kube.LabelDeployment]; d != "" {
		keys = append(keys, service.Key{Namespace: svc.Namespace, Name: d})
	}
	if _, ok := podsServiceOf(svc); ok {
		return keys
	}
	sel := selectorOf(svc)
	if len(sel) == 0 {
		return keys
	}
	deps, err := r.deployments.Deployments(svc.Namespace).List(everything)
	if err != nil {
		return keys
	}
	for _, d := range deps {
		if kube.OptedIn(d) && subset(sel, d.Spec.Template.Labels) {
			keys = append(keys, kube.KeyOf(d))
		}
	}
	return keys
}

// servicesSelecting returns the Services of d's namespace whose selector,
// or the one Swell took from them, selects d's pods.
func (r *Router) servicesSelecting(d *appsv1.Deployment) []*corev1.Service {
	all, err := r.services.Services(d.Namespace).List(everything)
	if err != nil {
		return nil
	}
	var out []*corev1.Service
	for _, svc := range all {
		if subset(selectorOf(svc), d.Spec.Template.Labels) {
			out = append(out, svc)
		}
	}
	return out
}

// candidate is a Service routed to a Deployment, with the ports that reach
// the app.
type candidate struct {
	svc   *corev1.Service
	ports []corev1.ServicePort
}

// candidates returns, sorted by name, the Services of d's namespace routed
// to d: not ExternalName, not headless, not a pods-Service, not taken by another
// Deployment, whose selector (or the one Swell took) is a non-empty subset
// of d's template labels and of no other Deployment's, with at least one
// port reaching d's app. Services that select d's pods but cannot be
// routed get a Warning event.
func (r *Router) candidates(d *appsv1.Deployment, app appInfo) ([]candidate, error) {
	all, err := r.services.Services(d.Namespace).List(everything)
	if err != nil {
		return nil, err
	}
	deps, err := r.deployments.Deployments(d.Namespace).List(everything)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b *corev1.Service) int { return strings.Compare(a.Name, b.Name) })
	var out []candidate
	for _, svc := range all {
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		if _, ok := podsServiceOf(svc); ok {
			continue
		}
		owner := svc.Labels[kube.LabelDeployment]
		if owner != "" && owner != d.Name {
			continue
		}
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			if subset(svc.Spec.Selector, d.Spec.Template.Labels) {
				r.warn(svc, svc.UID, ReasonNotRouted, "Service %s/%s is headless: its clients dial the pods' addresses on the app's port, which Swell cannot route",
					svc.Namespace, svc.Name)
			}
			continue
		}
		sel := svc.Spec.Selector
		if len(sel) == 0 {
			if owner == "" {
				continue
			}
			saved, err := savedSelector(svc)
			if err != nil {
				// Taken by d but its selector is lost: keep routing it,
				// as giving it back is not possible.
				r.warn(svc, svc.UID, ReasonSelectorLost, "Service %s/%s: %v: Swell cannot give it back its selector", svc.Namespace, svc.Name, err)
				sel = d.Spec.Template.Labels
			} else {
				sel = saved
			}
		}
		if !subset(sel, d.Spec.Template.Labels) {
			continue
		}
		var others []string
		for _, o := range deps {
			if o.Name != d.Name && subset(sel, o.Spec.Template.Labels) {
				others = append(others, o.Name)
			}
		}
		if len(others) > 0 {
			slices.Sort(others)
			r.warn(svc, svc.UID, ReasonNotRouted, "Service %s/%s selects the pods of Deployment %s and also of %s: Swell routes only a Service that selects one Deployment's pods",
				svc.Namespace, svc.Name, d.Name, strings.Join(others, ", "))
			continue
		}
		if app.err != nil {
			r.warn(svc, svc.UID, ReasonNotRouted, "Service %s/%s is not routed: Deployment %s: %v", svc.Namespace, svc.Name, d.Name, app.err)
			continue
		}
		ports, dropped := routePorts(svc, app)
		if len(ports) == 0 {
			r.warn(svc, svc.UID, ReasonNotRouted, "Service %s/%s: no TCP port reaches the app's port %d of Deployment %s: Swell does not route it",
				svc.Namespace, svc.Name, app.port, d.Name)
			continue
		}
		r.unwarn(svc.UID, ReasonNotRouted)
		if len(dropped) > 0 {
			r.warn(svc, svc.UID, ReasonPortsNotRouted, "Service %s/%s: ports %s do not reach the app's port %d of Deployment %s and get no endpoint",
				svc.Namespace, svc.Name, strings.Join(dropped, ", "), app.port, d.Name)
		} else {
			r.unwarn(svc.UID, ReasonPortsNotRouted)
		}
		out = append(out, candidate{svc: svc, ports: ports})
	}
	return out, nil
}

// appInfo is what routing needs of a Deployment's pod template.
type appInfo struct {
	// port is the app container's serving port.
	port int32
	// named maps the template's container port names to their numbers.
	named map[string]int32
	// err says why the Deployment's Services cannot be routed.
	err error
}

// appOf finds d's app port as injection does: the app container is
// inject.AppContainer's (the swell.run/container annotation names it);
// its first port is the app's, network.DefaultUserPort if it declares
// none.
func appOf(d *appsv1.Deployment) appInfo {
	spec := &d.Spec.Template.Spec
	info := appInfo{named: map[string]int32{}}
	injected := false
	for _, c := range spec.Containers {
		for _, p := range c.Ports {
			if p.Name != "" {
				info.named[p.Name] = p.ContainerPort
			}
		}
		injected = injected || c.Name == inject.ContainerName
	}
	if !injected {
		info.err = fmt.Errorf("its pod template has no %s container (is Swell's webhook installed?)", inject.ContainerName)
		return info
	}
	name := d.Annotations[inject.AnnotationContainer]
	if name == "" {
		name = d.Spec.Template.Annotations[inject.AnnotationContainer]
	}
	app, err := inject.AppContainer(spec, name)
	if err != nil {
		info.err = err
		return info
	}
	info.port = network.DefaultUserPort
	if c := &spec.Containers[app]; len(c.Ports) > 0 {
		info.port = c.Ports[0].ContainerPort
	}
	return info
}

// routePorts splits svc's ports into those that reach the app's port (TCP,
// targetPort the app's port by number or by a container port's name) and
// the names of the others.
func routePorts(svc *corev1.Service, app appInfo) (routed []corev1.ServicePort, dropped []string) {
	for _, p := range svc.Spec.Ports {
		if reaches(p, app) {
			routed = append(routed, p)
			continue
		}
		name := p.Name
		if name == "" {
			name = fmt.Sprint(p.Port)
		}
		dropped = append(dropped, fmt.Sprintf("%s (%d→%s)", name, p.Port, p.TargetPort.String()))
	}
	return routed, dropped
}

func reaches(p corev1.ServicePort, app appInfo) bool {
	if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
		return false
	}
	target := p.Port
	switch {
	case p.TargetPort.Type == intstr.Int && p.TargetPort.IntVal != 0:
		target = p.TargetPort.IntVal
	case p.TargetPort.Type == intstr.String && p.TargetPort.StrVal != "":
		n, ok := app.named[p.TargetPort.StrVal]
		if !ok {
			return false
		}
		target = n
	}
	return target == app.port
}
