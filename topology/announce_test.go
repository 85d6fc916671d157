package topology

import (
	"encoding/hex"
	"net"
	"testing"
)

// TestGratuitousARP: the announcement is a broadcast ARP request whose sender and target
// protocol addresses are both the node IP (RFC 5227 §3), byte for byte.
func TestGratuitousARP(t *testing.T) {
	mac, _ := net.ParseMAC("3e:41:2d:8d:12:45")
	got := hex.EncodeToString(GratuitousARP(mac, net.ParseIP("172.30.0.41")))
	want := "ffffffffffff" + "3e412d8d1245" + "0806" + // Ethernet: broadcast, from mac, ARP
		"0001" + "0800" + "06" + "04" + "0001" + // Ethernet/IPv4, request
		"3e412d8d1245" + "ac1e0029" + // sender
		"000000000000" + "ac1e0029" // target: the same address
	if got != want {
		t.Errorf("frame\n%s\nwant\n%s", got, want)
	}
}
