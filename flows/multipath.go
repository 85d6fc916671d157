package flows

// The multipath action (a Nicira extension): the endpoint choice of UDP Service ports
// (service.go, "UDP Service ports").

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/contiv/libOpenflow/openflow13"
)

// HashFields are the packet fields a multipath action hashes (nicira-ext.h
// enum nx_hash_fields; ovs-actions(7) "The multipath action").
type HashFields uint16

// Hash field sets.
const (
	// HashSymmetricL3L4UDP hashes the IPv4/IPv6 source and destination addresses
	// (symmetrically), the IP protocol and the TCP, SCTP or UDP source and destination
	// ports (symmetrically): OVS's flow_hash_symmetric_l3l4 with UDP ports included
	// (NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP, 3). Printed "symmetric_l3l4+udp".
	HashSymmetricL3L4UDP HashFields = 3
)

// MultipathAlgorithm maps a multipath hash to a link number (nicira-ext.h
// enum nx_mp_algorithm).
type MultipathAlgorithm uint16

// Multipath algorithms.
const (
	// MultipathModuloN is hash mod n (NX_MP_ALG_MODULO_N, 0): every link gets an equal
	// share of hash values, to within one in 2^32/n. Printed "modulo_n".
	MultipathModuloN MultipathAlgorithm = 0
)

// MaxMultipathLinks is the most links one multipath action chooses among
// (nx_action_multipath.max_link is 16 bits: links - 1).
const MaxMultipathLinks = 1 << 16

// Multipath hashes Fields of the packet with Basis and writes a link number,
// 0..Links-1, chosen from the hash by Algorithm, into Dst (NXAST_MULTIPATH, ovs-actions(7)
// "The multipath action"). The hash is computed by ovs-vswitchd when it translates the
// flow, and the datapath flow it installs matches every hashed field exactly, so packets
// that differ in a hashed field are translated (and hashed) apart. Links is
// 1..MaxMultipathLinks and must fit Dst (Dst.Bits() >= log2(Links)). Printed as OVS's
// multipath_format:
//
//	multipath(symmetric_l3l4+udp,0,modulo_n,4,0,NXM_NX_REG6[0..15])
type Multipath struct {
	Fields    HashFields
	Basis     uint16
	Algorithm MultipathAlgorithm
	Links     uint32
	// Arg is the algorithm's argument (unused by modulo_n: 0).
	Arg uint32
	Dst FieldRange
}

func (a Multipath) format(b *strings.Builder, _ PortNames) {
	fields := map[HashFields]string{HashSymmetricL3L4UDP: "symmetric_l3l4+udp"}[a.Fields]
	if fields == "" {
		fields = fmt.Sprintf("<unknown %d>", a.Fields)
	}
	alg := map[MultipathAlgorithm]string{MultipathModuloN: "modulo_n"}[a.Algorithm]
	if alg == "" {
		alg = fmt.Sprintf("<unknown %d>", a.Algorithm)
	}
	fmt.Fprintf(b, "multipath(%s,%d,%s,%d,%d,%s)", fields, a.Basis, alg, a.Links, a.Arg, a.Dst)
}

func (a Multipath) ofAction() openflow13.Action {
	return &rawNXAction{subtype: nxastMultipath, body: a.encode()}
}

// encode returns nx_action_multipath after the 10-byte NX action header (nicira-ext.h):
// fields, basis, pad, algorithm, max_link, arg, pad, ofs_nbits, dst (22 bytes; 32 in all).
func (a Multipath) encode() []byte {
	d := make([]byte, 22)
	binary.BigEndian.PutUint16(d[0:], uint16(a.Fields))
	binary.BigEndian.PutUint16(d[2:], a.Basis)
	binary.BigEndian.PutUint16(d[6:], uint16(a.Algorithm))
	binary.BigEndian.PutUint16(d[8:], uint16(a.Links-1))
	binary.BigEndian.PutUint32(d[10:], a.Arg)
	binary.BigEndian.PutUint16(d[16:], a.Dst.ofsNbits())
	binary.BigEndian.PutUint32(d[18:], a.Dst.Field.nxmHeader())
	return d
}

// check returns what is wrong with a, or "".
func (a Multipath) check() string {
	switch {
	case a.Links == 0 || a.Links > MaxMultipathLinks:
		return fmt.Sprintf("multipath over %d links: 1..%d", a.Links, MaxMultipathLinks)
	case a.Dst.Bits() < 32 && uint64(a.Links) > uint64(1)<<a.Dst.Bits():
		return fmt.Sprintf("multipath over %d links does not fit %s", a.Links, a.Dst)
	}
	return ""
}
