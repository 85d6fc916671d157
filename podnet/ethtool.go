package podnet

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Transmit checksum offload is switched with the legacy ethtool ioctl
// (linux/ethtool.h: struct ethtool_value with ETHTOOL_GTXCSUM /
// ETHTOOL_STXCSUM through SIOCETHTOOL), as Antrea's pkg/agent/util/ethtool
// does, so that no ethtool binary is needed.
//
// Why: a veth computes no checksum for packets it sends with
// CHECKSUM_PARTIAL; the OVS userspace datapath (datapath_type=netdev) reads
// such packets from the host end with an AF_PACKET socket and forwards them
// with the checksum still unfilled, so the receiving pod drops every TCP
// segment (ICMP works because it is checksummed in software). Turning TX
// checksum offload off on the pod end makes the pod's stack fill it in.

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqData is struct ifreq with ifr_data, padded to sizeof(struct ifreq)
// because the kernel copies the whole structure. Keeping the pointer as
// unsafe.Pointer (not uintptr) keeps the ethtoolValue alive and unmoved.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [unsafe.Sizeof(unix.Ifreq{}) - unix.IFNAMSIZ - unsafe.Sizeof(uintptr(0))]byte
}

// ethtoolValueIoctl runs one ETHTOOL_[GS]* command carrying a 32-bit value
// on the interface name in the calling thread's network namespace.
func ethtoolValueIoctl(name string, cmd, value uint32) (uint32, error) {
	if err := validIfName(name); err != nil {
		return 0, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("socket for ethtool ioctl on %s: %w", name, err)
	}
	defer unix.Close(fd)
	ev := ethtoolValue{cmd: cmd, data: value}
	var req ifreqData
	copy(req.name[:], name)
	req.data = unsafe.Pointer(&ev)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return 0, errno
	}
	return ev.data, nil
}

// setTxChecksum turns transmit checksum offload of the interface name (in
// the calling thread's network namespace) on or off.
func setTxChecksum(name string, on bool) error {
	v := uint32(0)
	if on {
		v = 1
	}
	if _, err := ethtoolValueIoctl(name, unix.ETHTOOL_STXCSUM, v); err != nil {
		return fmt.Errorf("set TX checksum offload of %s to %v (ETHTOOL_STXCSUM): %w", name, on, err)
	}
	return nil
}

// txChecksum reports whether transmit checksum offload of the interface
// name (in the calling thread's network namespace) is on.
func txChecksum(name string) (bool, error) {
	v, err := ethtoolValueIoctl(name, unix.ETHTOOL_GTXCSUM, 0)
	if err != nil {
		return false, fmt.Errorf("read TX checksum offload of %s (ETHTOOL_GTXCSUM): %w", name, err)
	}
	return v != 0, nil
}
