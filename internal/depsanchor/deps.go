// Package depsanchor pins the project's dependencies while the packages that use them are written.
package depsanchor

import (
	_ "github.com/cenkalti/backoff/v4"
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/containernetworking/cni/pkg/types/100"
	_ "github.com/containernetworking/cni/pkg/version"
	_ "github.com/containernetworking/plugins/pkg/ip"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/containernetworking/plugins/pkg/testutils"
	_ "github.com/contiv/libOpenflow/openflow13"
	_ "github.com/contiv/libOpenflow/util"
	_ "github.com/ovn-kubernetes/libovsdb/client"
	_ "github.com/ovn-kubernetes/libovsdb/model"
	_ "github.com/ovn-kubernetes/libovsdb/ovsdb"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/prometheus/common/expfmt"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "golang.org/x/sys/unix"
	_ "sigs.k8s.io/yaml"
	_ "github.com/go-logr/logr"
	_ "github.com/go-logr/stdr"
)
