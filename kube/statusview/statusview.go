// Package statusview reads what the autoscaler reports on a cluster's
// opted-in Deployments, their status annotations and its Events, into the
// view `swell status` prints, once or on every change.
//
// It reads only the API server, through client-go's informers: the
// Deployments labelled kube.LabelEnabled and the Events on Deployments
// whose source is the autoscaler (kube.AutoscalerComponent), each with one
// list and one watch, in one namespace or in all (and first a list of one
// item, to fail fast). It needs none of the autoscaler's ports, and the
// permissions it needs are list and watch on Deployments and Events, so
// it works wherever kubectl does.
package statusview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/swell-run/swell/kube"
)

// MaxEvents is how many events a Service keeps, the latest: as many as
// swell local keeps.
const MaxEvents = 20

// View is every opted-in Deployment the client can see, in the shape of
// swell local's status (local.Status): the same field names where they
// mean the same.
type View struct {
	// Time is when the view was read.
	Time time.Time `json:"time"`
	// Namespace is the namespace read; absent for every namespace.
	Namespace string    `json:"namespace,omitempty"`
	Services  []Service `json:"services"`
}

// Service is one Deployment labelled kube.LabelEnabled.
type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Ready and Desired are the Deployment's own: its ready replicas
	// (status.readyReplicas) and those it is asked to run (spec.replicas,
	// which the autoscaler sets), as fresh as the API server.
	Ready   int `json:"ready"`
	Desired int `json:"desired"`
	// Decided says the autoscaler has written its status annotation; the
	// fields below are empty until it has.
	Decided bool `json:"decided"`
	// Recommended is the policy's recommendation at the latest decision,
	// before bounds and scale-to-zero gating.
	Recommended int `json:"recommended"`
	// Route is where traffic goes: "activator" or "pods"; empty until the
	// Deployment is routed.
	Route string `json:"route"`
	// Class, Metric and TargetPerPod are the autoscaling policy, what it
	// scales on and the load one replica should see; empty in a status
	// written by an autoscaler older than them.
	Class        string  `json:"class"`
	Metric       string  `json:"metric"`
	TargetPerPod float64 `json:"targetPerPod"`
	// PanicMode says the latest decision was in panic mode.
	PanicMode bool `json:"panicMode"`
	// LoadsAsOf is the time of the decision the loads below are of: the
	// last one that changed the status annotation (kube.StatusLoads says
	// how fresh that is). Absent when the loads are not known.
	LoadsAsOf time.Time `json:"loadsAsOf,omitzero"`
	// Load is the metric's newest second, Stable and Panic its averages
	// over the stable and panic windows.
	Load   float64 `json:"load"`
	Stable float64 `json:"stable"`
	Panic  float64 `json:"panic"`
	// ExcessBurstCapacity is negative while the activator stays in the
	// path; ±math.MaxFloat64 stands for ±Inf.
	ExcessBurstCapacity float64 `json:"excessBurstCapacity"`
	// Queued is the requests held at the activators.
	Queued int `json:"queued"`
	// Reason is why the latest decision is what it is, or why there is
	// none: "status annotation unreadable: …", "not autoscaled: …".
	Reason string `json:"reason"`
	// Events are the autoscaler's latest Events on the Deployment, oldest
	// first, at most MaxEvents.
	Events []Event `json:"events"`
}

// Event is one Event the autoscaler recorded on a Deployment.
type Event struct {
	// Time is when it last happened.
	Time time.Time `json:"time"`
	// Text is its reason and message, "ScaledUp 1 → 3: stable at target
	// 70".
	Text string `json:"text"`
	// Type is "Normal" or "Warning"; Reason is the Event's (ScaledUp,
	// PanicStarted, …); Count is how many times it happened.
	Type   string `json:"type"`
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// Config says which cluster and namespace to read.
type Config struct {
	Client kubernetes.Interface
	// Namespace is read alone; empty reads every namespace.
	Namespace string
	// Clock stamps the views (default the real clock).
	Clock clock.PassiveClock
}

// Get reads the view once.
func Get(ctx context.Context, cfg Config) (View, error) {
	r, err := start(ctx, cfg)
	if err != nil {
		return View{}, err
	}
	defer r.stop()
	return r.view(), nil
}

// Watch calls emit with the view, then again after each change of it,
// until ctx ends; it returns nil then. Changes that come together are
// shown together. It returns an error only when the cluster cannot be read
// at all at the start (a wrong address, no permission to list). After
// that, a broken watch is listed and watched again by client-go, and the
// views go on.
func Watch(ctx context.Context, cfg Config, emit func(View)) error {
	r, err := start(ctx, cfg)
	if err != nil {
		return err
	}
	defer r.stop()
	var last []Service
	for first := true; ; first = false {
		if v := r.view(); first || !reflect.DeepEqual(v.Services, last) {
			emit(v)
			last = v.Services
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.changed:
		}
	}
}

// byObject indexes Events by the namespace/name of the Deployment they are
// on.
const byObject = "involvedObject"

// reader holds the informers of one Get or Watch.
type reader struct {
	cfg         Config
	deployments appslisters.DeploymentLister
	events      cache.Indexer
	// changed is signalled, without blocking, on every change the
	// informers see; one pending signal stands for any number.
	changed chan struct{}
	stop    func()
}

// start starts the informers and waits for their first lists.
func start(ctx context.Context, cfg Config) (*reader, error) {
	if cfg.Client == nil {
		return nil, errors.New("status view: Config.Client is required")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	opted := labels.SelectorFromSet(labels.Set{kube.LabelEnabled: "true"}).String()
	ours := fields.SelectorFromSet(fields.Set{
		"involvedObject.kind": "Deployment",
		"source":              kube.AutoscalerComponent,
	}).String()

	// A first list of one item of each: a cluster that cannot be read (no
	// route to it, no permission) is an error at once, as with kubectl,
	// where the informers would retry in silence.
	where := "every namespace"
	if cfg.Namespace != "" {
		where = "namespace " + cfg.Namespace
	}
	if _, err := cfg.Client.AppsV1().Deployments(cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: opted, Limit: 1}); err != nil {
		return nil, fmt.Errorf("read %s: list deployments: %w", where, err)
	}
	if _, err := cfg.Client.CoreV1().Events(cfg.Namespace).List(ctx, metav1.ListOptions{FieldSelector: ours, Limit: 1}); err != nil {
		return nil, fmt.Errorf("read %s: list events: %w", where, err)
	}

	// One factory each: their list options differ.
	ctx, cancel := context.WithCancel(ctx)
	dFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = opted }))
	eFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = ours }))
	r := &reader{cfg: cfg, changed: make(chan struct{}, 1)}
	r.stop = func() {
		cancel()
		dFactory.Shutdown()
		eFactory.Shutdown()
	}
	dInf := dFactory.Apps().V1().Deployments()
	eInf := eFactory.Core().V1().Events().Informer()
	if err := eInf.AddIndexers(cache.Indexers{byObject: objectIndex}); err != nil {
		r.stop()
		return nil, fmt.Errorf("status view: index events: %w", err)
	}
	r.deployments, r.events = dInf.Lister(), eInf.GetIndexer()
	signal := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.signal() },
		UpdateFunc: func(any, any) { r.signal() },
		DeleteFunc: func(any) { r.signal() },
	}
	var checkers []cache.DoneChecker
	for what, inf := range map[string]cache.SharedIndexInformer{"deployments": dInf.Informer(), "events": eInf} {
		reg, err := inf.AddEventHandler(signal)
		if err != nil {
			r.stop()
			return nil, fmt.Errorf("status view: watch %s: %w", what, err)
		}
		checkers = append(checkers, reg.HasSyncedChecker())
	}
	dFactory.Start(ctx.Done())
	eFactory.Start(ctx.Done())
	if !cache.WaitFor(ctx, "", checkers...) {
		r.stop()
		return nil, ctx.Err()
	}
	return r, nil
}

func (r *reader) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// objectIndex is the byObject index.
func objectIndex(obj any) ([]string, error) {
	e, ok := obj.(*corev1.Event)
	if !ok || e.InvolvedObject.Kind != "Deployment" {
		return nil, nil
	}
	return []string{e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name}, nil
}

// view reads the view from the caches.
func (r *reader) view() View {
	list, _ := r.deployments.List(labels.Everything()) // a cache list does not fail
	slices.SortFunc(list, func(a, b *appsv1.Deployment) int { return kube.KeyOf(a).Compare(kube.KeyOf(b)) })
	v := View{Time: r.cfg.Clock.Now(), Namespace: r.cfg.Namespace, Services: make([]Service, 0, len(list))}
	for _, d := range list {
		// The server selects on the label; a cache fed by another could
		// hold more.
		if d.Labels[kube.LabelEnabled] != "true" || d.DeletionTimestamp != nil {
			continue
		}
		s := serviceOf(d)
		s.Events = r.eventsOn(d)
		v.Services = append(v.Services, s)
	}
	return v
}

// serviceOf is what Deployment d's own fields and status annotation say,
// without its events. A status annotation that does not read is shown as
// the reason; it hides nothing else.
func serviceOf(d *appsv1.Deployment) Service {
	s := Service{Namespace: d.Namespace, Name: d.Name, Ready: int(d.Status.ReadyReplicas), Desired: 1, Events: []Event{}}
	if d.Spec.Replicas != nil {
		s.Desired = int(*d.Spec.Replicas)
	}
	if !kube.OptedIn(d) {
		// Its annotation, if any, is the last one written while it was
		// opted in: stale.
		s.Reason = fmt.Sprintf("not autoscaled: its pod template is not labelled %s: \"true\"", kube.LabelEnabled)
		return s
	}
	text, ok := d.Annotations[kube.AnnotationStatus]
	if !ok {
		return s
	}
	var st kube.Status
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		s.Reason = "status annotation unreadable: " + err.Error()
		return s
	}
	s.Decided = true
	s.Recommended, s.Route, s.PanicMode, s.Reason = st.Recommended, st.Route, st.Panic, st.Reason
	s.Class, s.Metric, s.TargetPerPod = st.Class, st.Metric, st.TargetPerPod
	if l := st.Loads; !l.Time.IsZero() {
		s.LoadsAsOf, s.Load, s.Stable, s.Panic = l.Time, l.Load, l.Stable, l.Panic
		s.ExcessBurstCapacity, s.Queued = l.ExcessBurstCapacity, l.Queued
	}
	return s
}

// eventsOn returns the autoscaler's latest Events on d, oldest first.
func (r *reader) eventsOn(d *appsv1.Deployment) []Event {
	objs, _ := r.events.ByIndex(byObject, d.Namespace+"/"+d.Name) // the index exists
	out := make([]Event, 0, len(objs))
	for _, obj := range objs {
		e := obj.(*corev1.Event)
		if !fromAutoscaler(e) || e.InvolvedObject.UID != "" && d.UID != "" && e.InvolvedObject.UID != d.UID {
			// Another component's (the server may not have selected on
			// the source), or on an earlier Deployment of that name.
			continue
		}
		out = append(out, eventOf(e))
	}
	slices.SortStableFunc(out, func(a, b Event) int { return a.Time.Compare(b.Time) })
	if len(out) > MaxEvents {
		out = out[len(out)-MaxEvents:]
	}
	return out
}

func fromAutoscaler(e *corev1.Event) bool {
	return e.InvolvedObject.Kind == "Deployment" &&
		(e.Source.Component == kube.AutoscalerComponent || e.ReportingController == kube.AutoscalerComponent)
}

// eventOf is one Event as the view shows it.
func eventOf(e *corev1.Event) Event {
	ev := Event{Type: e.Type, Reason: e.Reason, Text: e.Reason + " " + e.Message, Count: max(int(e.Count), 1)}
	if e.Series != nil {
		ev.Count = max(int(e.Series.Count), 1)
	}
	switch {
	case !e.LastTimestamp.IsZero():
		ev.Time = e.LastTimestamp.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		ev.Time = e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		ev.Time = e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		ev.Time = e.FirstTimestamp.Time
	default:
		ev.Time = e.CreationTimestamp.Time
	}
	return ev
}
