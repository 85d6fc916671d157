package policy

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestAttachKnownPodOneLockHold: Attach of a pod the model knows attaches it without
// waiting (the check and SetLocalPod share one hold of the agent's lock); Attach of a pod
// not known yet waits until an event brings it, then attaches it; one whose context ends
// first fails with ErrPodUnknown and attaches nothing.
func TestAttachKnownPodOneLockHold(t *testing.T) {
	a := NewAgent()
	a.Update(func(e *Engine) Changes { return e.UpsertNamespace(&Namespace{Name: "x"}) })
	a.Update(func(e *Engine) Changes {
		return e.UpsertPod(&Pod{Namespace: "x", Name: "known", Labels: map[string]string{"app": "a"}, NodeName: "n1"})
	})
	a.MarkSynced()
	ok := func(Changes) func() error { return func() error { return nil } }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Attach(ctx, LocalPod{Namespace: "x", Name: "known", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}, OFPort: 5}, ok); err != nil {
		t.Fatal(err)
	}

	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	err := a.Attach(short, LocalPod{Namespace: "x", Name: "never", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.7")}, OFPort: 7}, ok)
	if !errors.Is(err, ErrPodUnknown) {
		t.Fatalf("Attach of an unknown pod = %v, want ErrPodUnknown", err)
	}

	res := make(chan error, 1)
	go func() {
		res <- a.Attach(ctx, LocalPod{Namespace: "x", Name: "late", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.6")}, OFPort: 6}, ok)
	}()
	time.Sleep(20 * time.Millisecond)
	a.Update(func(e *Engine) Changes {
		return e.UpsertPod(&Pod{Namespace: "x", Name: "late", Labels: map[string]string{"app": "a"}, NodeName: "n1"})
	})
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	var names []string
	a.View(func(e *Engine) {
		for _, lp := range e.LocalPods() {
			names = append(names, lp.Name)
		}
	})
	if len(names) != 2 || names[0] != "known" || names[1] != "late" {
		t.Fatalf("local pods %v, want [known late]", names)
	}
}

// TestWaitPodKnownPodWhileEventHoldsLock: WaitPod of a pod an informer event brought
// answers while another event holds the agent's lock (an ADD does not queue behind the
// engine's work on other pods), and once the pod is deleted it waits again and fails
// with ErrPodUnknown.
func TestWaitPodKnownPodWhileEventHoldsLock(t *testing.T) {
	a := NewAgent()
	a.Update(func(e *Engine) Changes { return e.UpsertNamespace(&Namespace{Name: "x"}) })
	a.UpdatePod("x", "p", func(e *Engine) Changes {
		return e.UpsertPod(&Pod{Namespace: "x", Name: "p", Labels: map[string]string{"app": "a"}, NodeName: "n1"})
	})
	a.MarkSynced()

	held, release := make(chan struct{}), make(chan struct{})
	go a.Update(func(*Engine) Changes { close(held); <-release; return Changes{} })
	<-held
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- a.WaitPod(ctx, "x", "p") }()
	select {
	case err := <-res:
		close(release)
		if err != nil {
			t.Fatalf("WaitPod of a known pod while an event holds the lock: %v", err)
		}
	case <-time.After(2 * time.Second):
		close(release)
		t.Fatal("WaitPod of a known pod waited 2 s for the lock another event holds")
	}

	a.UpdatePod("x", "p", func(e *Engine) Changes { return e.DeletePod("x", "p") })
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if err := a.WaitPod(short, "x", "p"); !errors.Is(err, ErrPodUnknown) {
		t.Fatalf("WaitPod of a deleted pod = %v, want ErrPodUnknown", err)
	}
}
