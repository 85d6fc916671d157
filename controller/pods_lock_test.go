package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLockPodSerialisesOnePod: operations on one pod, by container ID or by pod
// namespace/name, wait for each other; a waiter gives up when its context ends, saying
// why; other pods are not blocked.
func TestLockPodSerialisesOnePod(t *testing.T) {
	n := &Node{}
	held := PodRequest{ContainerID: "c1", IfName: "eth0", PodNamespace: "ns", PodName: "web-0"}
	unlock, err := n.lockPod(context.Background(), held)
	if err != nil {
		t.Fatal(err)
	}
	blocked := func(req PodRequest) error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		u, err := n.lockPod(ctx, req)
		if err == nil {
			u()
		}
		return err
	}
	for _, req := range []PodRequest{
		{ContainerID: "c1", IfName: "eth0"},                                       // same container, e.g. GC
		{ContainerID: "c2", IfName: "eth0", PodNamespace: "ns", PodName: "web-0"}, // new sandbox, same pod
		{ContainerID: "c1", IfName: "net1", PodNamespace: "ns", PodName: "other"}, // same container
	} {
		err := blocked(req)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "another operation on this pod is still running") {
			t.Errorf("%s while %s is held: %v, want to wait and give up with the deadline", req, held, err)
		}
	}
	for _, req := range []PodRequest{
		{ContainerID: "c3", IfName: "eth0", PodNamespace: "ns", PodName: "web-1"},
		{ContainerID: "c4", IfName: "eth0", PodNamespace: "other", PodName: "web-0"},
		{ContainerID: "c5", IfName: "eth0"},
	} {
		if err := blocked(req); err != nil {
			t.Errorf("%s blocked by %s: %v", req, held, err)
		}
	}
	// Once released, the waiters' abandoned locks are gone too: everything is free.
	unlock()
	for _, req := range []PodRequest{held, {ContainerID: "c2", IfName: "eth0", PodNamespace: "ns", PodName: "web-0"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		u, err := n.lockPod(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("%s after release: %v", req, err)
		}
		u()
	}
}
