package controller

// The datapath choice at start (datapathType: auto, the DaemonSet's default since issue 25):
// the kernel datapath where the node's kernel has the openvswitch module, the userspace
// datapath where it has not. The probe is the question ovs-vswitchd's own kernel datapath
// asks first: the generic netlink family ovs_datapath (include/uapi/linux/openvswitch.h
// OVS_DATAPATH_FAMILY). Asking the kernel for a family it does not have makes it load the
// module that provides it, if there is one (genetlink's ctrl_getfamily: request_module of
// "net-pf-16-proto-16-family-ovs_datapath", an alias the openvswitch module declares), so
// no modprobe is executed and no /lib/modules is needed in the container.

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
)

// Datapath types of an Open vSwitch bridge (Bridge.datapath_type) and the "auto" choice.
const (
	// DatapathSystem is the kernel datapath (the openvswitch module).
	DatapathSystem = "system"
	// DatapathNetdev is the userspace datapath (ovs-vswitchd forwards every packet).
	DatapathNetdev = "netdev"
	// DatapathAuto asks ResolveDatapathType to choose: system where the kernel has the
	// openvswitch module, else netdev.
	DatapathAuto = "auto"
)

// kernelDatapathFamily is the openvswitch module's generic netlink family for datapaths.
const kernelDatapathFamily = "ovs_datapath"

// genlFamilyExists reports whether the kernel has the generic netlink family name (after
// loading the module providing it, if one is available). Replaced in tests.
var genlFamilyExists = func(name string) (bool, error) {
	_, err := netlink.GenlFamilyGet(name)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, syscall.ENOENT) {
		return false, nil
	}
	return false, err
}

// ResolveDatapathType returns the bridge datapath_type for a configured datapathType:
// "system" and "netdev" as they are; "auto" gives "system" when the kernel has (or loads)
// the openvswitch module, else "netdev". The reason says what was found, for the log. An
// unknown type, or a netlink error other than "no such family", is an error.
func ResolveDatapathType(configured string) (dpType, reason string, err error) {
	switch configured {
	case DatapathSystem, DatapathNetdev:
		return configured, "set in the config", nil
	case DatapathAuto:
	default:
		return "", "", fmt.Errorf("datapathType %q: want system, netdev or auto", configured)
	}
	ok, err := genlFamilyExists(kernelDatapathFamily)
	if err != nil {
		return "", "", fmt.Errorf("datapathType auto: asking the kernel for the generic netlink family %s (the openvswitch module): %w; set datapathType to system or netdev", kernelDatapathFamily, err)
	}
	if ok {
		return DatapathSystem, "auto: the kernel has the openvswitch module (generic netlink family ovs_datapath)", nil
	}
	return DatapathNetdev, "auto: the kernel has no openvswitch module (no generic netlink family ovs_datapath, none loadable): userspace datapath", nil
}
