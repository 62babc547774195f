package routing

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/kube/ports"
	"github.com/swell-run/swell/pkg/service"
)

// watchPorts sets up the service ports: the table's ConfigMaps feed the
// allocator's index, and a key whose port changed is reconciled again.
func (r *Router) watchPorts(cfg Config) error {
	if cfg.SystemInformers == nil {
		return errors.New("routing: ServicePorts without SystemInformers")
	}
	r.ports = &ports.Allocator{
		Client: cfg.Client, Namespace: r.sysNS, Range: cfg.ServicePorts, Index: ports.NewIndex(), Clock: clock.RealClock{},
	}
	r.dial = cfg.Dial
	if r.dial == nil {
		r.dial = dialTCP
	}
	r.opened = map[netip.AddrPort]bool{}
	// The system namespace's ConfigMaps: the table's, and a few others
	// (the defaults, the CA bundle) that the handler passes over.
	inf := cfg.SystemInformers.Core().V1().ConfigMaps().Informer()
	set := func(obj any, deleted bool) {
		cm, ok := unwrap[*corev1.ConfigMap](obj)
		if !ok || cm.Labels[ports.LabelTable] != "true" {
			return
		}
		changed, problems := r.ports.Index.Set(cm, deleted)
		r.ports.Forget()
		if len(problems) > 0 {
			r.log.Warn("the service ports table holds entries Swell did not write; ignored", zap.Errors("problems", problems))
		}
		for _, k := range changed {
			r.queue.Add(k)
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(obj, false) },
		UpdateFunc: func(_, obj any) { set(obj, false) },
		DeleteFunc: func(obj any) { set(obj, true) },
	})
	if err != nil {
		return err
	}
	r.synced = append(r.synced, reg.HasSynced)
	return nil
}

// portRecheck is how soon a Deployment is reconciled again while an
// activator has not opened its service port.
const portRecheck = time.Second

// dialTCP is the default Config.Dial.
func dialTCP(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// onServicePort returns act with the activators that have opened key's
// service port, on that port. Those not known to have are dialled first,
// in parallel; ok is false when some still have not (key is then due
// again shortly), or key has no port yet. Without service ports, act is
// returned as it is.
func (r *Router) onServicePort(ctx context.Context, key service.Key, act activator) (_ activator, ok bool, err error) {
	if r.ports == nil {
		return act, true, nil
	}
	port, err := r.ports.Ensure(ctx, key)
	if err != nil {
		return activator{}, false, err
	}
	out := activator{port: int32(port)}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		missing int
	)
	for _, e := range act.endpoints {
		ap := netip.AddrPortFrom(e.ip, uint16(port))
		r.mu.Lock()
		known := r.opened[ap]
		r.mu.Unlock()
		if known {
			out.endpoints = append(out.endpoints, e)
			continue
		}
		wg.Go(func() {
			derr := r.dial(ctx, ap.String())
			mu.Lock()
			defer mu.Unlock()
			if derr != nil {
				missing++
				r.log.Debug("an activator has not opened a service port yet", zap.Stringer("deployment", key),
					zap.String("activator", ap.String()), zap.Error(derr))
				return
			}
			r.mu.Lock()
			r.opened[ap] = true
			r.mu.Unlock()
			out.endpoints = append(out.endpoints, e)
		})
	}
	wg.Wait()
	slices.SortFunc(out.endpoints, func(a, b endpoint) int { return a.ip.Compare(b.ip) })
	return out, missing == 0, nil
}

// forgetActivators drops what is known of activators no longer at any of
// addrs: an address taken again by a new activator is dialled again.
func (r *Router) forgetActivators(addrs []endpoint) {
	if r.ports == nil {
		return
	}
	live := map[netip.Addr]bool{}
	for _, e := range addrs {
		live[e.ip] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ap := range r.opened {
		if !live[ap.Addr()] {
			delete(r.opened, ap)
		}
	}
}

// releasePort gives key's service port back once nothing of key is
// routed any more.
func (r *Router) releasePort(ctx context.Context, key service.Key) error {
	if r.ports == nil {
		return nil
	}
	return r.ports.Release(ctx, key)
}
