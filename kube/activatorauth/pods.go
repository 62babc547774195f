package activatorauth

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// byActivatorIP indexes the activator pods by address.
const byActivatorIP = "swell.run/activator-ip"

// Pods is Activators from a pod informer of the activators' namespace: the
// pods that run as the activators' service account and have not ended,
// by their addresses. Only an administrator of that namespace can start
// such a pod.
type Pods struct {
	pods cache.Indexer
}

var _ Activators = (*Pods)(nil)

// NewPods indexes inf, which must not have started, by the addresses of
// the pods of service account serviceAccount.
func NewPods(inf coreinformers.PodInformer, serviceAccount string) (*Pods, error) {
	err := inf.Informer().AddIndexers(cache.Indexers{byActivatorIP: func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.ServiceAccountName != serviceAccount || p.Spec.HostNetwork ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return nil, nil
		}
		var out []string
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				out = append(out, a.Unmap().String())
			}
		}
		return out, nil
	}})
	if err != nil {
		return nil, err
	}
	return &Pods{pods: inf.Informer().GetIndexer()}, nil
}

// ActivatorAt implements Activators. An address two pods hold (one
// leaving as the other arrives) is neither's.
func (p *Pods) ActivatorAt(ip netip.Addr) (string, bool) {
	objs, err := p.pods.ByIndex(byActivatorIP, ip.Unmap().String())
	if err != nil || len(objs) != 1 {
		return "", false
	}
	pod, ok := objs[0].(*corev1.Pod)
	if !ok {
		return "", false
	}
	return pod.Name, true
}
