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
