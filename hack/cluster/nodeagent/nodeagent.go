// Package nodeagent plays the kubelet for one Node of Swell's test cluster:
// it registers the Node and keeps it Ready, binds unscheduled pods to it,
// and runs each pod for real as local processes in a network namespace of
// the pod's own, with probes, restarts, hooks and graceful termination.
package nodeagent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Config is what the node agent needs to run one Node.
type Config struct {
	// Kubeconfig is the node's identity: a client certificate with
	// CN=system:node:<NodeName> and O=system:nodes, so that the Node
	// authorizer and the NodeRestriction admission plugin apply.
	Kubeconfig string
	// SchedulerKubeconfig is the identity (CN=system:kube-scheduler) used
	// only to bind unscheduled pods to the Node through pods/binding.
	SchedulerKubeconfig string
	NodeName            string
	// ClusterNetns is the network namespace the agent runs in; pod
	// namespaces are named <ClusterNetns>-<first 8 hex digits of the UID>.
	ClusterNetns string
	// Bridge is the pod network's bridge in ClusterNetns, holding Gateway.
	Bridge string
	// PodCIDR is the pod network, "198.18.0.0/16" if empty. Pod IPs are
	// allocated outside the gateway's /24.
	PodCIDR string
	// Gateway is the pods' default route and the Node's InternalIP,
	// "198.18.0.1" if empty.
	Gateway string
	// Images maps an image name without tag to the binary that plays it.
	Images map[string]string
	// Unbuilt maps an image name to the package it is built from, for
	// images whose package was absent when the binaries were built: a pod
	// using one waits in ErrImagePull with a message that says so.
	Unbuilt map[string]string
	// StateDir holds per-pod directories with the containers' logs.
	StateDir string
	Log      *slog.Logger
}

const (
	defaultPodCIDR = "198.18.0.0/16"
	defaultGateway = "198.18.0.1"
	// shutdownGrace bounds how long the pods get to stop when Run returns.
	shutdownGrace = 2 * time.Second
)

// Run registers the Node, keeps it Ready, binds unscheduled pods to it and
// runs the pods bound to it until ctx ends. On return every pod's processes
// are stopped (SIGTERM, then SIGKILL after a short bound) and their network
// namespaces removed; the apiserver's objects are left as they are.
func Run(ctx context.Context, cfg Config) error {
	if err := checkConfig(cfg); err != nil {
		return err
	}
	nodeConfig, err := restConfig(cfg.Kubeconfig, "node")
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(nodeConfig)
	if err != nil {
		return err
	}
	schedConfig, err := restConfig(cfg.SchedulerKubeconfig, "scheduler")
	if err != nil {
		return err
	}
	schedClient, err := kubernetes.NewForConfig(schedConfig)
	if err != nil {
		return err
	}
	access, err := podAccess(nodeConfig, cmp.Or(cfg.Gateway, defaultGateway), nodeAPI{client})
	if err != nil {
		return err
	}
	rt, err := newPodRuntime(cfg, access, clock.RealClock{}, (&net.Dialer{}).DialContext)
	if err != nil {
		return err
	}
	log := rt.log
	for _, ns := range rt.net.leftovers() {
		log.Info("removing a pod network namespace of an earlier run", "netns", ns)
		rt.net.removeNetns(context.Background(), ns)
	}

	n := &nodeStatus{client: client, name: cfg.NodeName, ip: rt.hostIP, clock: clock.RealClock{}, log: log}
	if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := n.register(ctx); err != nil {
			log.Warn("register node", "err", err)
			return false, nil
		}
		return true, nil
	}); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before the Node was registered
		}
		return fmt.Errorf("register node %s: %w", cfg.NodeName, err)
	}
	log.Info("node registered", "node", cfg.NodeName)

	var bg sync.WaitGroup
	defer bg.Wait()
	bg.Go(func() { n.heartbeat(ctx) })

	a := newAgent(client, rt, cfg.NodeName)
	if err := a.start(ctx); err != nil {
		a.shutdown()
		return err
	}
	b := newBinder(schedClient, cfg.NodeName, log)
	if err := b.start(ctx); err != nil {
		a.shutdown()
		return err
	}
	bg.Go(func() { b.run(ctx) })
	a.removeStaleStateDirs()
	a.run(ctx) // until ctx ends
	a.shutdown()
	log.Info("node agent stopped", "node", cfg.NodeName)
	return nil
}

func checkConfig(cfg Config) error {
	var missing []string
	for name, v := range map[string]string{"Kubeconfig": cfg.Kubeconfig, "SchedulerKubeconfig": cfg.SchedulerKubeconfig,
		"NodeName": cfg.NodeName, "ClusterNetns": cfg.ClusterNetns, "Bridge": cfg.Bridge, "StateDir": cfg.StateDir} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("node agent config: %s must be set", strings.Join(missing, ", "))
	}
	return nil
}

// podAccess is how pods reach the apiserver the node's kubeconfig names:
// at the gateway, on the same port (the apiserver listens on every address
// of the cluster's namespace), trusting the same CA.
func podAccess(node *rest.Config, gateway string, api podAPI) (apiAccess, error) {
	u, err := url.Parse(node.Host)
	if err != nil || u.Port() == "" {
		return apiAccess{}, fmt.Errorf("node kubeconfig: server %q: want https://HOST:PORT", node.Host)
	}
	ca := node.TLSClientConfig.CAData
	if len(ca) == 0 {
		if node.TLSClientConfig.CAFile == "" {
			return apiAccess{}, errors.New("node kubeconfig: no certificate-authority: pods could not verify the apiserver")
		}
		if ca, err = os.ReadFile(node.TLSClientConfig.CAFile); err != nil {
			return apiAccess{}, fmt.Errorf("node kubeconfig: %w", err)
		}
	}
	return apiAccess{api: api, server: "https://" + net.JoinHostPort(gateway, u.Port()), ca: ca}, nil
}

// newPodRuntime builds the part that runs pods.
func newPodRuntime(cfg Config, access apiAccess, clk clock.Clock, dial func(context.Context, string, string) (net.Conn, error)) (*runtime, error) {
	if cfg.PodCIDR == "" {
		cfg.PodCIDR = defaultPodCIDR
	}
	if cfg.Gateway == "" {
		cfg.Gateway = defaultGateway
	}
	pool, err := newIPAM(cfg.PodCIDR, cfg.Gateway)
	if err != nil {
		return nil, err
	}
	ipBin, err := exec.LookPath("ip")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/ip"); serr != nil {
			return nil, fmt.Errorf("iproute2's ip command is required: %w", err)
		}
		ipBin = "/usr/sbin/ip"
	}
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "pods"), 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	gw := netip.MustParseAddr(cfg.Gateway) // validated by newIPAM
	return &runtime{
		net: &podNet{ip: ipBin, clusterNetns: cfg.ClusterNetns, bridge: cfg.Bridge, gateway: gw.String(),
			prefixBits: pool.prefix.Bits()},
		ipam:     pool,
		prober:   &prober{dial: dial, ip: ipBin},
		images:   images{binaries: cfg.Images, unbuilt: cfg.Unbuilt},
		access:   access,
		stateDir: cfg.StateDir,
		hostIP:   gw.String(),
		clock:    clk,
		log:      log,
	}, nil
}

func restConfig(kubeconfig, who string) (*rest.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("%s kubeconfig %s: %w", who, kubeconfig, err)
	}
	rc.QPS, rc.Burst = 100, 200
	rc.UserAgent = "swell-node-agent/" + who
	return rc, nil
}

// agent reconciles the pods bound to the Node with the pod workers that
// run them, and writes their statuses.
type agent struct {
	client kubernetes.Interface
	rt     *runtime
	node   string

	factory informers.SharedInformerFactory
	pods    corelisters.PodLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	entries map[string]*podEntry // by namespace/name
}

type podEntry struct {
	uid        types.UID
	w          *podWorker
	finishing  bool
	lastStatus []byte
}

func newAgent(client kubernetes.Interface, rt *runtime, node string) *agent {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	inf := f.Core().V1().Pods()
	return &agent{
		client:  client,
		rt:      rt,
		node:    node,
		factory: f,
		pods:    inf.Lister(),
		synced:  inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
		entries: map[string]*podEntry{},
	}
}

func (a *agent) start(ctx context.Context) error {
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			a.queue.Add(key)
		}
	}
	if _, err := a.factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	a.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		return fmt.Errorf("pod informer of node %s: %w", a.node, ctx.Err())
	}
	return nil
}

func (a *agent) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for a.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
}

func (a *agent) next(ctx context.Context) bool {
	key, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(key)
	if err := a.sync(ctx, key); err != nil {
		a.rt.log.Warn("sync pod", "pod", key, "err", err)
		a.queue.AddRateLimited(key)
		return true
	}
	a.queue.Forget(key)
	return true
}

// sync moves one pod a step toward what its object asks: start it, stop
// it, write its status, or finish its deletion.
func (a *agent) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := a.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		pod = nil
	} else if err != nil {
		return err
	}
	if pod != nil && pod.Spec.NodeName != a.node {
		pod = nil
	}
	a.mu.Lock()
	e := a.entries[key]
	a.mu.Unlock()

	if e != nil && (pod == nil || pod.UID != e.uid) {
		// Deleted without us (forced) or replaced by a new pod of the
		// same name: stop what runs now; the new one starts afterwards.
		if !e.finishing {
			e.finishing = true
			e.w.terminate(0)
		}
		select {
		case <-e.w.Done():
			a.forget(key, e)
			if pod != nil {
				a.queue.Add(key)
			}
		default:
			a.requeueWhenDone(key, e)
		}
		return nil
	}
	if pod == nil {
		return nil
	}
	if e == nil {
		if pod.DeletionTimestamp != nil {
			return a.finishDeletion(ctx, pod)
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return nil
		}
		e = &podEntry{uid: pod.UID}
		e.w = a.rt.start(pod, func() { a.queue.Add(key) })
		a.mu.Lock()
		a.entries[key] = e
		a.mu.Unlock()
		a.rt.log.Info("pod started", "pod", key, "uid", pod.UID)
	}
	if pod.DeletionTimestamp != nil && !e.finishing {
		e.finishing = true
		grace := 30 * time.Second
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		} else if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = time.Duration(*g) * time.Second
		}
		a.rt.log.Info("pod terminating", "pod", key, "grace", grace)
		e.w.terminate(grace)
		a.requeueWhenDone(key, e)
	}
	if err := a.writeStatus(ctx, pod, e); err != nil {
		return err
	}
	if pod.DeletionTimestamp != nil {
		select {
		case <-e.w.Done():
			if err := a.finishDeletion(ctx, pod); err != nil {
				return err
			}
			a.forget(key, e)
		default:
		}
	}
	return nil
}

func (a *agent) requeueWhenDone(key string, e *podEntry) {
	go func() {
		<-e.w.Done()
		a.queue.Add(key)
	}()
}

func (a *agent) forget(key string, e *podEntry) {
	a.mu.Lock()
	if a.entries[key] == e {
		delete(a.entries, key)
	}
	a.mu.Unlock()
	// The pod's logs stay until the agent starts again, for debugging.
}

// finishDeletion deletes a pod whose containers stopped, as the kubelet
// does: grace period 0, only this very pod.
func (a *agent) finishDeletion(ctx context.Context, pod *corev1.Pod) error {
	err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	a.rt.log.Info("pod deleted", "pod", pod.Namespace+"/"+pod.Name)
	return nil
}

// writeStatus patches the pod's status when it differs from the one last
// written.
func (a *agent) writeStatus(ctx context.Context, pod *corev1.Pod, e *podEntry) error {
	var scheduled *corev1.PodCondition
	var others []corev1.PodCondition
	for _, c := range pod.Status.Conditions {
		switch c.Type {
		case corev1.PodScheduled:
			scheduled = &c
		case corev1.PodReady, corev1.ContainersReady, corev1.PodInitialized, corev1.PodReadyToStartContainers:
		default:
			others = append(others, c)
		}
	}
	st := e.w.status(scheduled)
	st.ObservedGeneration = pod.Generation
	for i := range st.Conditions {
		st.Conditions[i].ObservedGeneration = pod.Generation
	}
	st.Conditions = append(st.Conditions, others...)
	body, err := statusPatch(st)
	if err != nil {
		return err
	}
	if string(body) == string(e.lastStatus) {
		return nil
	}
	_, err = a.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	e.lastStatus = body
	return nil
}

// statusPatch is the JSON merge patch that sets the pod's status to st.
// Fields that became empty are cleared explicitly: a merge patch keeps
// whatever it does not mention.
func statusPatch(st corev1.PodStatus) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for _, k := range []string{"message", "reason"} {
		if _, ok := m[k]; !ok {
			m[k] = nil
		}
	}
	return json.Marshal(map[string]any{"status": m})
}

// removeStaleStateDirs removes pod directories of pods that no longer
// exist, left by an earlier run.
func (a *agent) removeStaleStateDirs() {
	dir := filepath.Join(a.rt.stateDir, "pods")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	live := map[string]bool{}
	pods, _ := a.pods.List(labels.Everything())
	for _, p := range pods {
		live[p.Namespace+"_"+p.Name+"_"+string(p.UID)] = true
	}
	for _, e := range entries {
		if !live[e.Name()] {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// shutdown stops every pod the agent runs and waits until they are gone.
func (a *agent) shutdown() {
	a.queue.ShutDown()
	a.factory.Shutdown()
	a.mu.Lock()
	var ws []*podWorker
	for _, e := range a.entries {
		ws = append(ws, e.w)
	}
	a.mu.Unlock()
	for _, w := range ws {
		w.terminate(shutdownGrace)
	}
	for _, w := range ws {
		<-w.Done()
	}
}
