package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/network"
)

// LeaderPorts are the ports a leader publishes: the activators' reports
// (kube.PortNameHTTP) and, when not 0, the pods' pushes
// (kube.PortNamePush).
type LeaderPorts struct {
	Reports, Push int
}

// PublishLeader makes the autoscaler that holds the lead reachable by the
// activators and the pods: it creates the selector-less Service
// kube.AutoscalerService in namespace if it is absent (ports
// kube.PortNameHTTP, network.DefaultAutoscalerPort, and kube.PortNamePush,
// network.DefaultAutoscalerPushPort), and creates or updates its one
// EndpointSlice so that it lists exactly podIP at ports, pointing at the
// pod podName. Calling it again with the same arguments writes nothing.
func PublishLeader(ctx context.Context, client kubernetes.Interface, namespace, podName, podIP string, ports LeaderPorts) error {
	return PublishBucketLeader(ctx, client, namespace, podName, podIP, ports, 0, 1)
}

// PublishBucketLeader is PublishLeader for the leader of bucket b of n
// when the autoscaler is sharded (package kube/buckets): its slice is
// kube.BucketSliceName(b, n), labelled with the bucket and their number,
// and the slices left by another number of buckets are deleted. With one
// bucket it is PublishLeader.
func PublishBucketLeader(ctx context.Context, client kubernetes.Interface, namespace, podName, podIP string, ports LeaderPorts, b, n int) error {
	ip, err := netip.ParseAddr(podIP)
	switch {
	case namespace == "":
		return errors.New("publish leader: no namespace")
	case podName == "":
		return errors.New("publish leader: no pod name")
	case err != nil:
		return fmt.Errorf("publish leader: pod IP %q is not an IP address", podIP)
	case ports.Reports < 1 || ports.Reports > 65535:
		return fmt.Errorf("publish leader: port %d is out of range; accepted: 1 to 65535", ports.Reports)
	case ports.Push < 0 || ports.Push > 65535:
		return fmt.Errorf("publish leader: push port %d is out of range; accepted: 1 to 65535, or 0 for none", ports.Push)
	}
	svc, err := ensureAutoscalerService(ctx, client, namespace)
	if err != nil {
		return fmt.Errorf("publish leader: %w", err)
	}
	if b < 0 || b >= n {
		return fmt.Errorf("publish leader: bucket %d of %d", b, n)
	}
	if err := ensureLeaderSlice(ctx, client, svc, podName, ip.Unmap(), ports, b, n); err != nil {
		return fmt.Errorf("publish leader: %w", err)
	}
	if err := deleteOtherBuckets(ctx, client, namespace, n); err != nil {
		return fmt.Errorf("publish leader: %w", err)
	}
	return nil
}

// deleteOtherBuckets deletes the autoscaler's slices written for a number
// of buckets other than n (none for a single leader's slice), so the
// activators stop reporting to leaders of a division no longer used.
func deleteOtherBuckets(ctx context.Context, client kubernetes.Interface, namespace string, n int) error {
	eps := client.DiscoveryV1().EndpointSlices(namespace)
	list, err := eps.List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + kube.AutoscalerService + "," +
		kube.LabelManagedBy + "=" + kube.ManagedBy})
	if err != nil {
		return fmt.Errorf("list the EndpointSlices of %s/%s: %w", namespace, kube.AutoscalerService, err)
	}
	want := ""
	if n > 1 {
		want = strconv.Itoa(n)
	}
	for _, es := range list.Items {
		if es.Labels[kube.LabelBuckets] == want {
			continue
		}
		err := eps.Delete(ctx, es.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &es.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete EndpointSlice %s/%s of another number of buckets: %w", namespace, es.Name, err)
		}
	}
	return nil
}

// ensureAutoscalerService returns the autoscaler's Service, creating it if
// it is absent. An existing one is left as it is: deploy/ may have made it.
func ensureAutoscalerService(ctx context.Context, client kubernetes.Interface, namespace string) (*corev1.Service, error) {
	services := client.CoreV1().Services(namespace)
	svc, err := services.Get(ctx, kube.AutoscalerService, metav1.GetOptions{})
	if err == nil || !apierrors.IsNotFound(err) {
		if err != nil {
			err = fmt.Errorf("read Service %s/%s: %w", namespace, kube.AutoscalerService, err)
		}
		return svc, err
	}
	svc = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name:      kube.AutoscalerService,
			Namespace: namespace,
			Labels:    map[string]string{kube.LabelManagedBy: kube.ManagedBy},
		},
		Spec: corev1.ServiceSpec{
			// No selector: the leader writes the one endpoint.
			Ports: []corev1.ServicePort{{
				Name:       kube.PortNameHTTP,
				Protocol:   corev1.ProtocolTCP,
				Port:       network.DefaultAutoscalerPort,
				TargetPort: intstr.FromString(kube.PortNameHTTP),
			}, {
				Name:       kube.PortNamePush,
				Protocol:   corev1.ProtocolTCP,
				Port:       network.DefaultAutoscalerPushPort,
				TargetPort: intstr.FromString(kube.PortNamePush),
			}},
		},
	}
	created, err := services.Create(ctx, svc, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		created, err = services.Get(ctx, kube.AutoscalerService, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create Service %s/%s: %w", namespace, kube.AutoscalerService, err)
	}
	return created, nil
}

// ensureLeaderSlice creates or updates the Service's EndpointSlice so it
// lists exactly the leader.
func ensureLeaderSlice(ctx context.Context, client kubernetes.Interface, svc *corev1.Service, podName string, ip netip.Addr, ports LeaderPorts, b, n int) error {
	sliceName := kube.BucketSliceName(b, n)
	addressType := discoveryv1.AddressTypeIPv4
	if ip.Is6() {
		addressType = discoveryv1.AddressTypeIPv6
	}
	ready := true
	want := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      sliceName,
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: kube.AutoscalerService,
				discoveryv1.LabelManagedBy:   kube.EndpointSliceController,
				kube.LabelManagedBy:          kube.ManagedBy,
			},
		},
		AddressType: addressType,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: podName},
		}},
		Ports: []discoveryv1.EndpointPort{{
			Name:     new(kube.PortNameHTTP),
			Protocol: new(corev1.ProtocolTCP),
			Port:     new(int32(ports.Reports)),
		}},
	}
	if ports.Push > 0 {
		want.Ports = append(want.Ports, discoveryv1.EndpointPort{
			Name:     new(kube.PortNamePush),
			Protocol: new(corev1.ProtocolTCP),
			Port:     new(int32(ports.Push)),
		})
	}
	if svc.UID != "" {
		// Deleting the Service deletes its slice.
		want.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}}
	}

	if n > 1 {
		want.Labels[kube.LabelBucket], want.Labels[kube.LabelBuckets] = strconv.Itoa(b), strconv.Itoa(n)
	}
	eps := client.DiscoveryV1().EndpointSlices(svc.Namespace)
	name := svc.Namespace + "/" + sliceName
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := eps.Get(ctx, sliceName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = eps.Create(ctx, &want, metav1.CreateOptions{FieldManager: fieldManager})
			if apierrors.IsAlreadyExists(err) {
				// Made meanwhile: update it on the next attempt.
				return apierrors.NewConflict(discoveryv1.Resource("endpointslices"), sliceName, err)
			}
			if err != nil {
				return fmt.Errorf("create EndpointSlice %s: %w", name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read EndpointSlice %s: %w", name, err)
		}
		if cur.AddressType != want.AddressType {
			// The address type is immutable: the pod changed IP family.
			err := eps.Delete(ctx, sliceName, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &cur.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete EndpointSlice %s of address type %s: %w", name, cur.AddressType, err)
			}
			return apierrors.NewConflict(discoveryv1.Resource("endpointslices"), sliceName,
				errors.New("recreate with address type "+string(want.AddressType)))
		}
		next := cur.DeepCopy()
		if next.Labels == nil {
			next.Labels = map[string]string{}
		}
		maps.Copy(next.Labels, want.Labels)
		if want.OwnerReferences != nil {
			next.OwnerReferences = want.OwnerReferences
		}
		next.Endpoints = want.Endpoints
		next.Ports = want.Ports
		if equality.Semantic.DeepEqual(cur, next) {
			return nil
		}
		if _, err := eps.Update(ctx, next, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("update EndpointSlice %s: %w", name, err)
		}
		return nil
	})
}
