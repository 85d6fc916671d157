package main

import (
	"reflect"
	"testing"

	"github.com/ofsdn/ofsdn/controller"
)

// TestParseGC: the network name and the valid list come from the netconf; a netconf
// without either valid-attachments key is told apart from an empty list (a GC without
// the key must remove nothing, an empty list means nothing of the network is valid).
func TestParseGC(t *testing.T) {
	a := controller.AttachmentID{ContainerID: "c1", IfName: "eth0"}
	b := controller.AttachmentID{ContainerID: "c2", IfName: "net1"}
	for _, c := range []struct {
		conf    string
		network string
		valid   []controller.AttachmentID
		present bool
	}{
		{`{"cniVersion":"1.1.0","name":"n1","type":"ofsdn"}`, "n1", []controller.AttachmentID{}, false},
		{`{"cniVersion":"1.1.0","name":"n1","cni.dev/valid-attachments":null}`, "n1", []controller.AttachmentID{}, false},
		{`{"cniVersion":"1.1.0","name":"n1","cni.dev/valid-attachments":[]}`, "n1", []controller.AttachmentID{}, true},
		{`{"cniVersion":"1.1.0","name":"n2","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}`, "n2", []controller.AttachmentID{a}, true},
		{`{"cniVersion":"1.1.0","name":"n2","cni.dev/attachments":[{"containerID":"c2","ifname":"net1"}]}`, "n2", []controller.AttachmentID{b}, true},
	} {
		network, valid, present, err := parseGC([]byte(c.conf))
		if err != nil {
			t.Fatalf("%s: %v", c.conf, err)
		}
		if network != c.network || present != c.present || !reflect.DeepEqual(valid, c.valid) {
			t.Errorf("%s: got (%q, %v, %v), want (%q, %v, %v)", c.conf, network, valid, present, c.network, c.valid, c.present)
		}
	}
	if _, _, _, err := parseGC([]byte(`{"name":`)); err == nil {
		t.Error("undecodable netconf accepted")
	}
}
