package node

import (
	"bytes"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the code generates")

// testLayout and testParams are a node as a cluster named dev with its
// state in /state would have it.
var (
	testLayout = NewLayout("/state", "dev")
	testParams = Params{
		NodeName:          "swell-node",
		KubeletKubeconfig: "/state/node.kubeconfig",
		ProxyKubeconfig:   "/state/kube-proxy.kubeconfig",
		CACert:            "/state/pki/ca.crt",
		KubeletCert:       "/state/pki/kubelet.crt",
		KubeletKey:        "/state/pki/kubelet.key",
		CNIBinDir:         "/cache/runtime/cni",
		Runc:              "/usr/sbin/runc",
		SandboxImage:      "swell.test/pause:e2e",
	}
)

// TestConfigs compares each configuration file the node writes with its
// golden file, reviewed as a document: go test -update rewrites them.
func TestConfigs(t *testing.T) {
	kubelet, err := KubeletConfig(testLayout, testParams)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := ProxyConfig(testParams)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]byte{
		"containerd.toml":     ContainerdConfig(testLayout, testParams),
		"10-swell.conflist":   CNIConfig(testLayout),
		"kubelet.yaml":        kubelet,
		"kube-proxy.yaml":     proxy,
		"kubelet.args":        []byte(strings.Join(kubeletArgs("/bin/kubelet", "/state/node/kubelet.yaml", testLayout, testParams), "\n") + "\n"),
		"kube-scheduler.args": []byte(strings.Join(schedulerArgs("/bin/kube-scheduler", "/state/scheduler.kubeconfig", "/state/node/scheduler"), "\n") + "\n"),
	} {
		golden := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -update to write it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s (go test -update rewrites it):\n%s", name, golden, got)
		}
	}
}

// TestConfigsStayInTheNode: no file the node's programs write is named
// outside the node's directory, but the runc binary and the plugins they
// run.
func TestConfigsStayInTheNode(t *testing.T) {
	kubelet, _ := KubeletConfig(testLayout, testParams)
	for name, b := range map[string][]byte{
		"containerd.toml": ContainerdConfig(testLayout, testParams),
		"conflist":        CNIConfig(testLayout),
		"kubelet.yaml":    kubelet,
	} {
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.ReplaceAll(line, "unix://", "")
			if c := strings.IndexByte(line, '#'); c >= 0 {
				line = line[:c] // comments may say what is outside
			}
			for _, v := range strings.FieldsFunc(line, func(r rune) bool { return strings.ContainsRune(" \"'=,[]", r) }) {
				if _, err := netip.ParsePrefix(v); err == nil {
					continue // an address range, whose IPv6 colons are not a separator
				}
				for _, f := range strings.Split(v, ":") {
					if strings.HasPrefix(f, "/") && !strings.HasPrefix(f, "/state/") && f != testParams.Runc && f != testParams.CNIBinDir && f != testLayout.CgroupRoot {
						t.Errorf("%s names %s, outside the node's directory: %q", name, f, line)
					}
				}
			}
		}
	}
}

func TestLayoutSocketLength(t *testing.T) {
	if err := NewLayout("/root/.cache/swell-cluster/clusters/e2e0123abcd", "e2e0123abcd").check(); err != nil {
		t.Errorf("the default state directory of an e2e cluster: %v", err)
	}
	err := NewLayout("/"+strings.Repeat("x", 100), "dev").check()
	if err == nil || !strings.Contains(err.Error(), "--state") {
		t.Errorf("a state directory too long for a socket: %v, want an error suggesting --state", err)
	}
}
