// Package e2e is the end-to-end suite of the test cluster: Go tests that
// drive the real kube-apiserver and kube-controller-manager through client-go
// and check what the node agent does with the pods they schedule.
//
// The tests run inside the cluster's network namespace, so they reach pod IPs
// directly, and read two variables:
//
//	KUBECONFIG            the admin kubeconfig; without it every test skips
//	SWELL_CLUSTER_STATE   the cluster's state directory, where the node agent
//	                      keeps container logs
//
// `make e2e` builds the cluster, starts it, runs this suite in it through
// `swell-cluster e2e` and tears the cluster down. Each test works in a
// namespace of its own with a random name, so the tests run in parallel.
package e2e
