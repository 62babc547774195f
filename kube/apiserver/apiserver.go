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
	cfg, err := ClientConfig(kubeconfig, "", "").ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("find the Kubernetes API server (kubeconfig or in-cluster): %w", err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// ClientConfig finds a cluster as kubectl does: the kubeconfig file named
// (else the files of $KUBECONFIG, else ~/.kube/config) at the context
// named (else its current context), and with no kubeconfig at all, in a
// pod, the pod's service account. Its Namespace is namespace if not empty,
// else the context's (the pod's, in-cluster), else "default". Nothing is
// read until it is asked; clientcmd.IsEmptyConfig tells an error that
// found no cluster at all.
func ClientConfig(kubeconfig, context, namespace string) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	overrides.Context.Namespace = namespace
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
}
