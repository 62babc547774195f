// Package e2e is the end-to-end suite of the test cluster: Go tests that
// drive the real kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet and kube-proxy through client-go, with pods run by containerd
// from the images built from this tree.
//
// The tests run inside the cluster's network namespace, so they reach pod
// IPs and Services' ClusterIPs directly, and read these variables:
//
//	KUBECONFIG     the admin kubeconfig; without it every test skips
//	SWELL_DEPLOY   the directory of the kustomization that installs
//	               Swell's deploy/ with the images the node was given,
//	               and of swell.tgz, its Helm chart packaged with them,
//	               which the suite installs
//	SWELL_HELM     the helm program (hack/helm's version)
//	SWELL_CLI      Swell's command line, built from this tree
//	SWELL_KUBELET_DIR  the kubelet's root directory, where the chaos suite
//	               rotates the activators' tokens as the kubelet does
//	SWELL_GATEWAY_CRDS  the Gateway API CRDs of the release the ingress
//	               controller (Traefik) is built with, installed before it
//
// `make e2e` builds the cluster, starts it, runs this suite in it through
// `swell-cluster e2e` and tears the cluster down. Each test works in a
// namespace of its own with a random name, so the tests run in parallel.
package e2e
