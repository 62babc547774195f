package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cri is a client of containerd's CRI service, as the kubelet speaks it.
type cri struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
}

func dialCRI(socket string) (*cri, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("CRI at %s: %w", socket, err)
	}
	return &cri{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

func (c *cri) Close() error { return c.conn.Close() }

// ready says why the runtime is not ready for pods, or nil: it reports
// both the runtime and its network (the CNI configuration) ready, as the
// kubelet requires. Other conditions, such as containerd's deprecation
// warnings, are for people.
func (c *cri) ready(ctx context.Context) error {
	st, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	var errs []error
	for _, want := range []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady} {
		found := false
		for _, cond := range st.GetStatus().GetConditions() {
			if cond.Type != want {
				continue
			}
			found = true
			if !cond.Status {
				errs = append(errs, fmt.Errorf("%s: %s %s", cond.Type, cond.Reason, cond.Message))
			}
		}
		if !found {
			errs = append(errs, fmt.Errorf("no %s condition reported", want))
		}
	}
	return errors.Join(errs...)
}

// removeSandboxes stops and removes every pod sandbox with its containers,
// a few at a time: containerd kills them, runs the CNI plugins' DEL (which
// frees the pod's address and link) and ends their shims. It returns how
// many it removed.
func (c *cri) removeSandboxes(ctx context.Context) (int, error) {
	list, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	var (
		mu   sync.Mutex
		errs []error
		n    int
		g    errgroup.Group
	)
	g.SetLimit(8)
	for _, sb := range list.Items {
		g.Go(func() error {
			// Stopping kills the containers at once: the pods' grace
			// periods were the kubelet's to give, and it is gone.
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err := c.rt.StopPodSandbox(sctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
			if err == nil {
				_, err = c.rt.RemovePodSandbox(sctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("remove pod sandbox %s (%s/%s): %w", sb.Id, sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), err))
				return nil
			}
			n++
			return nil
		})
	}
	g.Wait()
	return n, errors.Join(errs...)
}
