// Package ports keeps the table of service ports: the port of its own that
// every activator opens for each routed Deployment, so that a connection
// says which service it is for by the port it arrives on, whatever its Host
// and path (docs/routing.md#service-ports).
//
// The table lives in ConfigMaps of Swell's system namespace, labelled
// LabelTable, one per thousand ports (ConfigMapName): each key a port, each
// value the "namespace/name" of the Deployment it belongs to, or "released
// <RFC 3339 time>" for a port given back, which no other Deployment gets
// until Hold has passed, so that an activator still serving the old owner
// from a cache that lags never serves it to the new one. The autoscaler
// writes it (Allocator); the activators read it (Index). Nothing outside
// the system namespace can write it: a port is not a claim a tenant makes.
package ports

import (
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/kube"
	"github.com/swell-run/swell/pkg/service"
)

// LabelTable, set to "true", marks the ConfigMaps of the table.
const LabelTable = kube.Prefix + "service-ports"

// shardSize is how many ports one ConfigMap holds: at about 40 bytes an
// entry, 40 kB, far below the API server's 1 MiB.
const shardSize = 1000

// Hold is how long a released port goes to no other Deployment.
const Hold = 10 * time.Minute

// released starts the value of a released port.
const released = "released "

// Range is the ports the table hands out, First to Last inclusive.
type Range struct{ First, Last int }

// DefaultRange lies below Linux's ephemeral ports (32768 and up), so that
// no outgoing connection of the activator ever holds one, and above the
// ports Swell's own containers use.
var DefaultRange = Range{First: 10000, Last: 29999}

// String is the form ParseRange reads.
func (r Range) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Size is how many ports r holds.
func (r Range) Size() int { return r.Last - r.First + 1 }

// ParseRange reads "first-last". The range must lie within 1024-65535 and
// hold at least 100 ports.
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	last, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("service ports %q: want first-last, e.g. %s", s, DefaultRange)
	}
	r := Range{First: first, Last: last}
	if first < 1024 || last > 65535 || r.Size() < 100 {
		return Range{}, fmt.Errorf("service ports %q: want a range of at least 100 ports within 1024-65535", s)
	}
	return r, nil
}

// ConfigMapName is the name of the ConfigMap that holds port.
func ConfigMapName(port int) string {
	return "swell-service-ports-" + strconv.Itoa(port/shardSize*shardSize)
}

// shardOf returns the first port of the ConfigMap named name, and whether
// name is one of the table's.
func shardOf(name string) (int, bool) {
	n, ok := strings.CutPrefix(name, "swell-service-ports-")
	if !ok {
		return 0, false
	}
	first, err := strconv.Atoi(n)
	if err != nil || first%shardSize != 0 || first < 0 || first > 65535 || strconv.Itoa(first) != n {
		return 0, false
	}
	return first, true
}

// entries is what one ConfigMap of the table says.
type entries struct {
	owned    map[int]service.Key
	released map[int]time.Time
}

// parse reads cm. Entries that are not the table's (a port outside the
// ConfigMap's thousand, a value that is no key) are returned as problems
// and left out.
func parse(cm *corev1.ConfigMap) (entries, []error) {
	e := entries{owned: map[int]service.Key{}, released: map[int]time.Time{}}
	first, ok := shardOf(cm.Name)
	if !ok {
		return e, []error{fmt.Errorf("ConfigMap %s is labelled %s but is not named as the table's are", cm.Name, LabelTable)}
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		v := cm.Data[k]
		port, err := strconv.Atoi(k)
		if err != nil || port < first || port >= first+shardSize || port < 1024 || port > 65535 || strconv.Itoa(port) != k {
			errs = append(errs, fmt.Errorf("ConfigMap %s: %q is not a port it holds", cm.Name, k))
			continue
		}
		if t, ok := strings.CutPrefix(v, released); ok {
			at, err := time.Parse(time.RFC3339, t)
			if err != nil {
				errs = append(errs, fmt.Errorf("ConfigMap %s: port %d: %q is no time", cm.Name, port, t))
				continue
			}
			e.released[port] = at
			continue
		}
		key, err := service.Parse(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("ConfigMap %s: port %d: %w", cm.Name, port, err))
			continue
		}
		e.owned[port] = key
	}
	return e, errs
}

// Index is the table as the ConfigMaps in a cache say, kept by feeding it
// their events. Safe for concurrent use.
type Index struct {
	mu     sync.RWMutex
	shards map[string]entries // by ConfigMap name
	byKey  map[service.Key]int
	byPort map[int]service.Key
}

// NewIndex returns an empty Index.
func NewIndex() *Index {
	return &Index{shards: map[string]entries{}, byKey: map[service.Key]int{}, byPort: map[int]service.Key{}}
}

// Set records what cm says now, or, when deleted, that it is gone. It
// returns the keys whose port changed (came, went or moved), and what of
// cm was left out.
func (x *Index) Set(cm *corev1.ConfigMap, deleted bool) (changed []service.Key, problems []error) {
	var e entries
	if !deleted {
		e, problems = parse(cm)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	before := maps.Clone(x.byKey)
	if deleted {
		delete(x.shards, cm.Name)
	} else {
		x.shards[cm.Name] = e
	}
	x.rebuild()
	for k, p := range before {
		if x.byKey[k] != p {
			changed = append(changed, k)
		}
	}
	for k := range x.byKey {
		if _, ok := before[k]; !ok {
			changed = append(changed, k)
		}
	}
	slices.SortFunc(changed, service.Key.Compare)
	return changed, problems
}

// rebuild derives the lookups from the shards. A key listed at several
// ports (which the Allocator never writes) has the lowest.
func (x *Index) rebuild() {
	clear(x.byKey)
	clear(x.byPort)
	for _, e := range x.shards {
		for port, key := range e.owned {
			x.byPort[port] = key
			if p, ok := x.byKey[key]; !ok || port < p {
				x.byKey[key] = port
			}
		}
	}
	for port, key := range x.byPort {
		if x.byKey[key] != port {
			delete(x.byPort, port)
		}
	}
}

// Port returns key's port.
func (x *Index) Port(key service.Key) (int, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	p, ok := x.byKey[key]
	return p, ok
}

// Keys returns every key that has a port.
func (x *Index) Keys() []service.Key {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.SortedFunc(maps.Keys(x.byKey), service.Key.Compare)
}

// Len is how many keys have a port.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byKey)
}

// Allocator hands out and takes back ports. It writes the table in
// namespace through client, reading each ConfigMap from the API server
// before it writes it (a write is one key at a time, and rare: one per
// Deployment's lifetime), and guarding the write with the resourceVersion
// read, so that several autoscaler replicas, each routing its own buckets,
// never give one port twice. Lookups read Index, which the caller keeps fed
// from an informer on the table's ConfigMaps. Safe for concurrent use.
type Allocator struct {
	Client    kubernetes.Interface
	Namespace string
	Range     Range
	Index     *Index
	Clock     clock.PassiveClock

	mu sync.Mutex
	// written holds what this allocator wrote that Index may not show
	// yet.
	written map[service.Key]int
}

// Port returns key's port, if it has one.
func (a *Allocator) Port(key service.Key) (int, bool) {
	if p, ok := a.Index.Port(key); ok {
		return p, true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.written[key]
	return p, ok
}

// Ensure returns key's port, giving it one when it has none: the first
// port free since Hold at or after a place in the range that key's name
// hashes to, so that keys rarely contend for one.
func (a *Allocator) Ensure(ctx context.Context, key service.Key) (int, error) {
	if p, ok := a.Port(key); ok {
		return p, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.written[key]; ok {
		return p, nil
	}
	if a.written == nil {
		a.written = map[service.Key]int{}
	}
	h := fnv.New32a()
	h.Write([]byte(key.String()))
	start := int(h.Sum32() % uint32(a.Range.Size()))
	mine := map[int]bool{}
	for _, p := range a.written {
		mine[p] = true
	}
	var live *shard
	conflicts := 0
	for i := 0; i < a.Range.Size(); i++ {
		port := a.Range.First + (start+i)%a.Range.Size()
		if _, taken := a.Index.owner(port); taken || mine[port] {
			continue
		}
		if live == nil || live.cm.Name != ConfigMapName(port) {
			sh, err := a.read(ctx, ConfigMapName(port))
			if err != nil {
				return 0, err
			}
			live = sh
		}
		ok, err := a.take(ctx, live, port, key)
		switch {
		case (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && conflicts < maxConflicts:
			// Another replica wrote the ConfigMap since: read it again
			// and look at this port once more.
			conflicts++
			live = nil
			i--
			continue
		case err != nil:
			return 0, fmt.Errorf("service port for %s: %w", key, err)
		case ok:
			a.written[key] = port
			return port, nil
		}
	}
	return 0, fmt.Errorf("service port for %s: all %d ports of %s are taken or held", key, a.Range.Size(), a.Range)
}

// owner returns who owns port.
func (x *Index) owner(port int) (service.Key, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	k, ok := x.byPort[port]
	return k, ok
}

// shard is one ConfigMap of the table as the API server has it.
type shard struct {
	cm *corev1.ConfigMap
	// exists is false for a ConfigMap yet to be created.
	exists bool
}

// read returns the ConfigMap name as the API server has it, or a new one.
func (a *Allocator) read(ctx context.Context, name string) (*shard, error) {
	cm, err := a.Client.CoreV1().ConfigMaps(a.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &shard{cm: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: a.Namespace,
			Labels: map[string]string{LabelTable: "true", kube.LabelManagedBy: kube.ManagedBy},
		}}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ConfigMap %s/%s: %w", a.Namespace, name, err)
	}
	return &shard{cm: cm, exists: true}, nil
}

// take writes port as key's into cm, unless cm says it is taken or held.
// It drops, in the same write, the released entries whose hold is over.
func (a *Allocator) take(ctx context.Context, sh *shard, port int, key service.Key) (bool, error) {
	now := a.Clock.Now()
	cm := sh.cm
	e, _ := parse(cm)
	if _, ok := e.owned[port]; ok {
		return false, nil
	}
	if at, ok := e.released[port]; ok && now.Sub(at) < Hold {
		return false, nil
	}
	up := cm.DeepCopy()
	if up.Data == nil {
		up.Data = map[string]string{}
	}
	for p, at := range e.released {
		if now.Sub(at) >= Hold {
			delete(up.Data, strconv.Itoa(p))
		}
	}
	up.Data[strconv.Itoa(port)] = key.String()
	api := a.Client.CoreV1().ConfigMaps(a.Namespace)
	var err error
	if !sh.exists {
		_, err = api.Create(ctx, up, metav1.CreateOptions{})
	} else {
		_, err = api.Update(ctx, up, metav1.UpdateOptions{})
	}
	return err == nil, err
}

// Release gives key's port back, held from now for Hold. A key with no
// port has nothing to give back.
func (a *Allocator) Release(ctx context.Context, key service.Key) error {
	port, ok := a.Port(key)
	if !ok {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	api := a.Client.CoreV1().ConfigMaps(a.Namespace)
	for {
		cm, err := api.Get(ctx, ConfigMapName(port), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			delete(a.written, key)
			return nil
		}
		if err != nil {
			return fmt.Errorf("release the service port of %s: %w", key, err)
		}
		if cm.Data[strconv.Itoa(port)] != key.String() {
			delete(a.written, key)
			return nil
		}
		up := cm.DeepCopy()
		up.Data[strconv.Itoa(port)] = released + a.Clock.Now().UTC().Format(time.RFC3339)
		_, err = api.Update(ctx, up, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("release the service port of %s: %w", key, err)
		}
		delete(a.written, key)
		return nil
	}
}

// Forget drops what this allocator wrote that Index now shows, so that the
// memory of its writes stays as small as what Index has yet to catch up
// with. Call it after feeding Index.
func (a *Allocator) Forget() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, p := range a.written {
		if q, ok := a.Index.Port(k); ok && q == p {
			delete(a.written, k)
		}
	}
}

// maxConflicts bounds how often one Ensure reads a ConfigMap again after
// another writer changed it; past it, the workqueue's retry takes over.
const maxConflicts = 5
