package nodeagent

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
)

// A kubelet mounts a pod's bound service account token at
// /var/run/secrets/kubernetes.io/serviceaccount. The pods here share the
// host's filesystem, so the node agent writes the same files into the pod's
// directory instead, with a kubeconfig that names them, and points every
// container at it with KUBECONFIG.
const (
	// tokenExpiration is the life asked of each token.
	tokenExpiration = time.Hour
	// refreshAfter is the part of a token's life after which the kubelet
	// replaces it.
	refreshAfter = 0.8
	// minRefresh bounds how soon a token is replaced, whatever life the
	// apiserver gave it.
	minRefresh = time.Second
	// credentialsDir is below the pod's directory. A container's
	// directory is its name, a DNS label, which never holds a dot.
	credentialsDir = "kubernetes.io/serviceaccount"
)

// podAPI is what running a pod asks of the apiserver, with the node's
// identity: the Node authorizer lets a node read only what the pods bound
// to it refer to.
type podAPI interface {
	refReader
	serviceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error)
	// token requests a token of the pod's service account bound to the
	// pod, and returns it with its expiry.
	token(ctx context.Context, pod *corev1.Pod, expiration time.Duration) (string, time.Time, error)
}

// apiAccess is how the pods reach the apiserver.
type apiAccess struct {
	api podAPI
	// server is the apiserver's URL as a pod dials it.
	server string
	// ca is the PEM of the CA that signed the apiserver's certificate.
	ca []byte
}

// nodeAPI is podAPI through the node's client.
type nodeAPI struct{ client kubernetes.Interface }

func (a nodeAPI) secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return a.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (a nodeAPI) configMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	return a.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (a nodeAPI) serviceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return a.client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (a nodeAPI) token(ctx context.Context, pod *corev1.Pod, expiration time.Duration) (string, time.Time, error) {
	seconds := int64(expiration / time.Second)
	tr, err := a.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, serviceAccountName(pod), &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &seconds,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, err
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

func serviceAccountName(pod *corev1.Pod) string {
	if pod.Spec.ServiceAccountName == "" {
		return "default"
	}
	return pod.Spec.ServiceAccountName
}

// automount reports whether the pod gets its service account's token: the
// pod's automountServiceAccountToken, else its ServiceAccount's, else yes.
func automount(ctx context.Context, api podAPI, pod *corev1.Pod) (bool, error) {
	if a := pod.Spec.AutomountServiceAccountToken; a != nil {
		return *a, nil
	}
	sa, err := api.serviceAccount(ctx, pod.Namespace, serviceAccountName(pod))
	if err != nil {
		return false, fmt.Errorf("read ServiceAccount %s/%s: %w", pod.Namespace, serviceAccountName(pod), err)
	}
	return sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken, nil
}

// credentials are the files of a pod's service account: token, ca.crt,
// namespace, as a kubelet mounts them, and a kubeconfig naming them.
type credentials struct{ dir string }

func newCredentials(podDir string) credentials {
	return credentials{dir: filepath.Join(podDir, filepath.FromSlash(credentialsDir))}
}

func (c credentials) token() string      { return filepath.Join(c.dir, "token") }
func (c credentials) ca() string         { return filepath.Join(c.dir, "ca.crt") }
func (c credentials) kubeconfig() string { return filepath.Join(c.dir, "kubeconfig") }

// writeStatic writes what does not change during the pod's life: the CA,
// the namespace and the kubeconfig. The kubeconfig names the token file, so
// a client reads each replaced token.
func (c credentials) writeStatic(pod *corev1.Pod, server string, ca []byte) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return fmt.Errorf("service account files: %w", err)
	}
	for name, data := range map[string][]byte{"ca.crt": ca, "namespace": []byte(pod.Namespace)} {
		if err := writeFileAtomic(filepath.Join(c.dir, name), data); err != nil {
			return err
		}
	}
	const name = "serviceaccount"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: c.ca()}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{TokenFile: c.token()}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: pod.Namespace}
	cfg.CurrentContext = name
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("service account kubeconfig: %w", err)
	}
	return writeFileAtomic(c.kubeconfig(), b)
}

// writeToken replaces the token.
func (c credentials) writeToken(token string) error {
	return writeFileAtomic(c.token(), []byte(token))
}

// remove deletes the files, and their parent directory once empty.
func (c credentials) remove() {
	_ = os.RemoveAll(c.dir)
	_ = os.Remove(filepath.Dir(c.dir))
}

// env is what every container of the pod gets unless it sets it itself:
// the kubeconfig, and the apiserver's address as in-cluster clients look
// for it.
func (c credentials) env(server string) ([]envVar, error) {
	u, err := url.Parse(server)
	if err != nil || u.Hostname() == "" || u.Port() == "" {
		return nil, fmt.Errorf("apiserver URL %q for pods: want https://HOST:PORT", server)
	}
	return []envVar{
		{"KUBECONFIG", c.kubeconfig()},
		{"KUBERNETES_SERVICE_HOST", u.Hostname()},
		{"KUBERNETES_SERVICE_PORT", u.Port()},
	}, nil
}

// writeFileAtomic writes data to path readable by its owner only, through a
// rename, so that a reader sees the old content or the new, never part.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("service account files: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("service account files: %w", err)
	}
	return nil
}

// tokenKeeper keeps a pod's token file fresh: a new token when 80% of the
// current one's life has passed, as the kubelet does.
type tokenKeeper struct {
	api   podAPI
	pod   *corev1.Pod
	creds credentials
	clock clock.Clock
	log   *slog.Logger
}

// fetch requests a token, writes it, and returns when it is due for
// replacement.
func (k *tokenKeeper) fetch(ctx context.Context) (time.Time, error) {
	issued := k.clock.Now()
	token, expires, err := k.api.token(ctx, k.pod, tokenExpiration)
	if err != nil {
		return time.Time{}, fmt.Errorf("request a token of ServiceAccount %s/%s: %w", k.pod.Namespace, serviceAccountName(k.pod), err)
	}
	if err := k.creds.writeToken(token); err != nil {
		return time.Time{}, err
	}
	return refreshAt(issued, expires), nil
}

// keepFresh replaces the token from next on, retrying failures with
// backoff, until ctx ends. A failed refresh leaves the current token,
// which stays valid for a while.
func (k *tokenKeeper) keepFresh(ctx context.Context, next time.Time) {
	var b crashBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.clock.After(next.Sub(k.clock.Now())):
		}
		due, err := k.fetch(ctx)
		if err == nil {
			b, next = crashBackoff{}, due
			continue
		}
		if ctx.Err() != nil {
			return
		}
		now := k.clock.Now()
		next = now.Add(b.delay(now, now))
		k.log.Warn("refresh service account token", "err", err, "retryAt", next)
	}
}

// refreshAt is when a token issued at issued and expiring at expires is
// replaced.
func refreshAt(issued, expires time.Time) time.Time {
	life := expires.Sub(issued)
	return issued.Add(max(time.Duration(float64(life)*refreshAfter), minRefresh))
}

// setUpServiceAccount gives the pod its service account's credentials
// before any of its containers starts, as the kubelet mounts the token
// before it starts them. It retries with backoff until the pod has them
// (true) or stops (false); meanwhile the containers' waiting states say
// why. The token is then kept fresh in bg until the pod stops.
func (w *podWorker) setUpServiceAccount(bg *sync.WaitGroup) bool {
	var b crashBackoff
	for {
		err := w.fetchCredentials(bg)
		msg := ""
		if err != nil {
			w.log.Warn("service account token", "err", err)
			msg = "service account token: " + err.Error()
		}
		w.mu.Lock()
		for _, c := range slices.Concat(w.inits, w.containers) {
			if c.state.Waiting != nil {
				c.state = waiting(c.state.Waiting.Reason, msg)
			}
		}
		w.mu.Unlock()
		if err == nil {
			return true
		}
		w.changed()
		now := w.rt.clock.Now()
		if !w.sleep(b.delay(now, now)) {
			return false
		}
	}
}

// fetchCredentials writes the pod's service account files and its first
// token, unless the pod has automounting off.
func (w *podWorker) fetchCredentials(bg *sync.WaitGroup) error {
	api := w.rt.access.api
	mount, err := automount(w.ctx, api, w.pod)
	if err != nil || !mount {
		return err
	}
	creds := newCredentials(w.dir)
	env, err := creds.env(w.rt.access.server)
	if err != nil {
		return err
	}
	if err := creds.writeStatic(w.pod, w.rt.access.server, w.rt.access.ca); err != nil {
		return err
	}
	w.creds = &creds
	k := &tokenKeeper{api: api, pod: w.pod, creds: creds, clock: w.rt.clock, log: w.log}
	next, err := k.fetch(w.ctx)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.podEnv = env
	w.mu.Unlock()
	bg.Go(func() { k.keepFresh(w.ctx, next) })
	return nil
}
