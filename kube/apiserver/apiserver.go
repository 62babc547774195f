// Package apiserver finds the Kubernetes API server for Swell's components.
package apiserver

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig finds the API server: the kubeconfig file named (or by
// $KUBECONFIG, or ~/.kube/config) if there is one, else the pod's in-cluster
// service account. userAgent names the component in the API server's logs.
func RESTConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("find the Kubernetes API server (kubeconfig or in-cluster): %w", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}
