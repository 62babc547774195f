package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/swell-run/swell/hack/cluster/netns"
)

// The node's fixed ports, inside the cluster's namespace.
const (
	KubeletPort        = 10250
	KubeletHealthzPort = 10248
	ProxyHealthzPort   = 10256
	ProxyMetricsPort   = 10249
	SchedulerPort      = 10259
)

// Layout is where a node keeps its files, all under Dir but the cgroups.
type Layout struct {
	// Dir is <state dir>/node.
	Dir string
	// Socket is containerd's gRPC socket, which the kubelet, ctr and the
	// harness speak CRI and containerd's API over.
	Socket string
	// Containerd holds containerd's config.toml, root/ and state/.
	Containerd string
	// Runc is runc's state root for the node's containers.
	Runc string
	// CNIConf holds the pod network's CNI configuration; CNIState the
	// host-local IPAM's allocations.
	CNIConf, CNIState string
	// Kubelet is the kubelet's --root-dir: pods' volumes, plugins.
	Kubelet string
	// Pods is the kubelet's podLogsDir: each container's log.
	Pods string
	// CgroupRoot is the kubelet's cgroupRoot: every pod's cgroup is below
	// it, in each cgroup v1 hierarchy, apart from every other node's.
	CgroupRoot string
}

// maxSocketPath is the longest path a Unix socket may have (sun_path, less
// the terminating NUL), less the ".ttrpc" containerd appends for its
// second socket.
const maxSocketPath = 107 - len(".ttrpc")

// NewLayout is the layout of the node of the cluster named name whose
// state directory is stateDir.
func NewLayout(stateDir, name string) Layout {
	dir := stateDir + "/node"
	return Layout{
		Dir:        dir,
		Socket:     dir + "/containerd.sock",
		Containerd: dir + "/containerd",
		Runc:       dir + "/runc",
		CNIConf:    dir + "/cni/net.d",
		CNIState:   dir + "/cni/state",
		Kubelet:    dir + "/kubelet",
		Pods:       dir + "/pods",
		CgroupRoot: "/swell-" + name,
	}
}

func (l Layout) check() error {
	if len(l.Socket) > maxSocketPath {
		return fmt.Errorf("containerd's socket %s is %d bytes long, more than a Unix socket takes (%d): use a shorter state directory (--state)", l.Socket, len(l.Socket), maxSocketPath)
	}
	return nil
}

// Params are what the node's configuration files say besides the layout.
type Params struct {
	NodeName string
	// Kubeconfig of the kubelet and of kube-proxy.
	KubeletKubeconfig, ProxyKubeconfig string
	// CACert verifies clients of the kubelet (the apiserver); KubeletCert
	// and KubeletKey are the kubelet's serving pair.
	CACert, KubeletCert, KubeletKey string
	// CNIBinDir holds the CNI plugins; Runc is the runc binary.
	CNIBinDir, Runc string
	// SandboxImage is every pod's pause image.
	SandboxImage string
}

// ContainerdConfig is containerd's config.toml (version 4, containerd
// 2.4's).
func ContainerdConfig(l Layout, p Params) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return []byte(`# containerd for the test cluster's node: CRI only, overlayfs, runc with
# cgroupfs, CNI from the harness's own directories.
version = 4
root = ` + q(l.Containerd+"/root") + `
state = ` + q(l.Containerd+"/state") + `
imports = []
# Nothing may listen or look outside the node's directory: NRI's socket,
# the opt plugin's and the image verifiers' directories are host-wide.
disabled_plugins = [
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.opt",
  "io.containerd.image-verifier.v1.bindir",
  "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs",
  "io.containerd.differ.v1.erofs",
  "io.containerd.mount-handler.v1.erofs",
  "io.containerd.tracing.processor.v1.otlp",
]

[plugins.'io.containerd.server.v1.grpc']
  address = ` + q(l.Socket) + `

[plugins.'io.containerd.server.v1.ttrpc']
  address = ` + q(l.Socket+".ttrpc") + `

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = ` + q(p.SandboxImage) + `

[plugins.'io.containerd.cri.v1.runtime']
  # runc cannot lower oom_score_adj without CAP_SYS_RESOURCE, which this
  # machine does not grant: without this every sandbox fails to start.
  restrict_oom_score_adj = true
  enable_selinux = false
  cdi_spec_dirs = []
  # Pods' network namespaces under the state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = ` + q(p.Runc) + `
        Root = ` + q(l.Runc) + `
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [` + q(p.CNIBinDir) + `]
    conf_dir = ` + q(l.CNIConf) + `
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`)
}

// CNIConfig is the pod network: a bridge on netns.Bridge, whose
// addresses are the pods' gateways, an address of each family for every
// pod, IPv4 first (from netns.PodCIDR above the node's /24, and from
// netns.PodCIDRV6 with the same last digits, fd00:198:18::1:0 beside
// 198.18.1.0), and hostPort mappings.
func CNIConfig(l Layout) []byte {
	type ipRange struct {
		Subnet     string `json:"subnet"`
		RangeStart string `json:"rangeStart"`
		Gateway    string `json:"gateway"`
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "swell",
		"plugins": []map[string]any{
			{
				"type":   "bridge",
				"bridge": netns.Bridge,
				// The bridge already holds the gateway address.
				"isGateway": true,
				"ipMasq":    false,
				// A pod that reaches itself through its Service's
				// ClusterIP gets its own packets back on the same port.
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": l.CNIState,
					// One range set per family; the plugin gives a pod
					// one address from each.
					"ranges": [][]ipRange{
						{{Subnet: netns.PodCIDR, RangeStart: "198.18.1.0", Gateway: netns.Gateway}},
						{{Subnet: netns.PodCIDRV6, RangeStart: "fd00:198:18::1:0", Gateway: netns.GatewayV6}},
					},
					"routes": []map[string]string{{"dst": "0.0.0.0/0"}, {"dst": "::/0"}},
				},
			},
			{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return append(b, '\n')
}

// KubeletConfig is the kubelet's configuration file.
func KubeletConfig(l Layout, p Params) ([]byte, error) {
	endpoint := "unix://" + l.Socket
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		// This machine has cgroups v1 and no systemd to manage them.
		FailCgroupV1:             ptr.To(false),
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               l.CgroupRoot,
		CgroupsPerQOS:            ptr.To(true),
		FailSwapOn:               ptr.To(false),
		OOMScoreAdj:              ptr.To[int32](0), // lowering it needs CAP_SYS_RESOURCE
		ContainerRuntimeEndpoint: endpoint,
		ImageServiceEndpoint:     endpoint,
		PodLogsDir:               l.Pods,
		VolumePluginDir:          l.Kubelet + "/volume-plugins",

		Address:            netns.Gateway,
		Port:               KubeletPort,
		ReadOnlyPort:       0,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To[int32](KubeletHealthzPort),
		TLSCertFile:        p.KubeletCert,
		TLSPrivateKeyFile:  p.KubeletKey,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: p.CACert},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},

		ClusterDomain: "cluster.local",
		// No DNS in the cluster: pods get an empty resolv.conf rather than
		// the host's, whose servers they cannot reach.
		ResolverConfig: ptr.To(""),

		// The machine's disk is shared: evict only when it is really full,
		// and never collect the imported images, which no registry could
		// give back.
		EvictionHard: map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		SerializeImagePulls:         ptr.To(false),
		RotateCertificates:          false,
		ServerTLSBootstrap:          false,
		// Leave the host's kernel settings alone where the kubelet can;
		// those it insists on are restored when the node goes.
		ProtectKernelDefaults: false,
		// Containers that crash are restarted within seconds, so that
		// tests see restarts without waiting out the 5-minute default.
		CrashLoopBackOff: kubeletv1beta1.CrashLoopBackOffConfig{MaxContainerRestartPeriod: &metav1.Duration{Duration: 5 * time.Second}},
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubelet configuration: %w", err)
	}
	return b, nil
}

// ProxyConfig is kube-proxy's configuration file: iptables in the
// cluster's namespace, touching no host-wide setting.
func ProxyConfig(p Params) ([]byte, error) {
	zero := &metav1.Duration{}
	cfg := kubeproxyv1alpha1.KubeProxyConfiguration{
		TypeMeta:         metav1.TypeMeta{APIVersion: "kubeproxy.config.k8s.io/v1alpha1", Kind: "KubeProxyConfiguration"},
		HostnameOverride: p.NodeName,
		Mode:             "iptables",
		// Both families: kube-proxy programs iptables and ip6tables.
		ClusterCIDR:        netns.PodCIDR + "," + netns.PodCIDRV6,
		DetectLocalMode:    "ClusterCIDR",
		BindAddress:        "0.0.0.0",
		HealthzBindAddress: fmt.Sprintf("127.0.0.1:%d", ProxyHealthzPort),
		MetricsBindAddress: fmt.Sprintf("127.0.0.1:%d", ProxyMetricsPort),
		NodePortAddresses:  []string{netns.Gateway + "/32", netns.GatewayV6 + "/128"},
		OOMScoreAdj:        ptr.To[int32](0),
		IPTables: kubeproxyv1alpha1.KubeProxyIPTablesConfiguration{
			// route_localnet is a host-wide sysctl.
			LocalhostNodePorts: ptr.To(false),
		},
		// Zero leaves conntrack's host-wide limits and timeouts as they
		// are.
		Conntrack: kubeproxyv1alpha1.KubeProxyConntrackConfiguration{
			MaxPerCore: ptr.To[int32](0), Min: ptr.To[int32](0),
			TCPEstablishedTimeout: zero, TCPCloseWaitTimeout: zero,
		},
	}
	cfg.ClientConnection.Kubeconfig = p.ProxyKubeconfig
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy configuration: %w", err)
	}
	return b, nil
}

// schedulerArgs is kube-scheduler's command line.
func schedulerArgs(binary, kubeconfig, certDir string) []string {
	return []string{
		binary,
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", SchedulerPort),
		"--cert-dir=" + certDir,
	}
}

// kubeletArgs is the kubelet's command line; the rest is in its
// configuration file.
func kubeletArgs(binary, config string, l Layout, p Params) []string {
	return []string{
		binary,
		"--config=" + config,
		"--kubeconfig=" + p.KubeletKubeconfig,
		"--hostname-override=" + p.NodeName,
		// The namespace has no default route to guess an address from.
		// One per family, IPv4 first: a dual-stack node.
		"--node-ip=" + netns.Gateway + "," + netns.GatewayV6,
		"--root-dir=" + l.Kubelet,
		"--cert-dir=" + l.Kubelet + "/pki",
		"--v=2",
	}
}

// indent is for multi-line values in error messages.
func indent(s string) string { return "  " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n  ") }
