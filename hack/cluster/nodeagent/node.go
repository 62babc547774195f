package nodeagent

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
)

const (
	kubeletVersion = "v1.37.2"
	// leaseRenew is the kubelet's default lease renewal; leaseDuration is
	// its default node lease duration.
	leaseRenew    = 10 * time.Second
	leaseDuration = 40
	// statusEvery keeps the Ready condition's heartbeat well inside the
	// node lifecycle controller's 40s grace period.
	statusEvery = 20 * time.Second
	// maxPods is the kubelet's default.
	maxPods = 110
)

// nodeStatus registers the Node and keeps it Ready: lease renewals and
// Ready heartbeats, as the kubelet sends them.
type nodeStatus struct {
	client kubernetes.Interface
	name   string
	ip     string
	clock  clock.WithTicker
	log    *slog.Logger
	uid    metav1.OwnerReference
}

func (n *nodeStatus) register(ctx context.Context) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.name,
			Labels: map[string]string{
				"kubernetes.io/hostname": n.name,
				"kubernetes.io/os":       goruntime.GOOS,
				"kubernetes.io/arch":     goruntime.GOARCH,
				"beta.kubernetes.io/os":  goruntime.GOOS,
			},
		},
	}
	n.setStatus(node)
	created, err := n.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	n.uid = metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: created.Name, UID: created.UID}
	if err := n.updateStatus(ctx); err != nil {
		return err
	}
	return n.renewLease(ctx)
}

// heartbeat renews the lease and the Ready condition until ctx ends.
func (n *nodeStatus) heartbeat(ctx context.Context) {
	lease := n.clock.NewTicker(leaseRenew)
	defer lease.Stop()
	status := n.clock.NewTicker(statusEvery)
	defer status.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lease.C():
			if err := n.renewLease(ctx); err != nil && ctx.Err() == nil {
				n.log.Warn("renew node lease", "err", err)
			}
		case <-status.C():
			if err := n.updateStatus(ctx); err != nil && ctx.Err() == nil {
				n.log.Warn("update node status", "err", err)
			}
		}
	}
}

func (n *nodeStatus) updateStatus(ctx context.Context) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.setStatus(node)
		_, err = n.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

// setStatus fills the node's status, keeping its conditions' transition
// times.
func (n *nodeStatus) setStatus(node *corev1.Node) {
	now := metav1.NewTime(n.clock.Now())
	res := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(memTotal(), resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(maxPods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
	node.Status.Capacity = res
	node.Status.Allocatable = res.DeepCopy()
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: n.ip},
		{Type: corev1.NodeHostName, Address: n.name},
	}
	node.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion:          kubeletVersion,
		OperatingSystem:         goruntime.GOOS,
		Architecture:            goruntime.GOARCH,
		ContainerRuntimeVersion: "swell://" + kubeletVersion,
		OSImage:                 "Swell test cluster node agent",
		KernelVersion:           kernelVersion(),
		MachineID:               n.name,
		SystemUUID:              n.name,
		BootID:                  n.name,
	}
	want := []struct {
		t      corev1.NodeConditionType
		status corev1.ConditionStatus
		reason string
		msg    string
	}{
		{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
	}
	conds := make([]corev1.NodeCondition, 0, len(want))
	for _, w := range want {
		c := corev1.NodeCondition{Type: w.t, Status: w.status, Reason: w.reason, Message: w.msg,
			LastHeartbeatTime: now, LastTransitionTime: now}
		for _, old := range node.Status.Conditions {
			if old.Type == w.t && old.Status == w.status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		conds = append(conds, c)
	}
	node.Status.Conditions = conds
}

func (n *nodeStatus) renewLease(ctx context.Context) error {
	leases := n.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(n.clock.Now())
	l, err := leases.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder, dur := n.name, int32(leaseDuration)
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: corev1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{n.uid}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 8 << 30
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 8 << 30
}

func kernelVersion() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
