package podnet

import (
	"fmt"
	"net"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
)

// BenchmarkSetupTeardown measures one pod interface's Setup (veth with the
// peer born in the pod netns, address, route, TX checksum off) followed by
// its Teardown, in test-created namespaces.
func BenchmarkSetupTeardown(b *testing.B) {
	var nss []ns.NetNS
	for i := 0; i < 2; i++ {
		n, err := testutils.NewNS()
		if err != nil {
			b.Fatal(err)
		}
		nss = append(nss, n)
		defer func() { n.Close(); testutils.UnmountNS(n) }()
	}
	host, pod := nss[0], nss[1]
	_, subnet, _ := net.ParseCIDR("10.200.0.0/24")
	err := host.Do(func(ns.NetNS) error {
		for i := 0; i < b.N; i++ {
			spec := Spec{
				Netns: pod.Path(), IfName: "eth0", HostVeth: HostVethName(fmt.Sprint("bench", i), "eth0"), MTU: 1400,
				Addr: &net.IPNet{IP: net.IPv4(10, 200, 0, 5).To4(), Mask: subnet.Mask}, Gateway: net.IPv4(10, 200, 0, 1),
				DisableTxChecksum: true,
			}
			if _, err := Setup(spec); err != nil {
				return err
			}
			if err := Teardown(spec.HostVeth, pod.Path(), "eth0"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
