// Command libcni-driver runs one CNI operation through the libcni of the containernetworking/cni
// version its go.mod pins, as a container runtime built on that library does: the
// compatibility test (test/compat) builds one per libcni generation. It prints one JSON
// object on stdout: the libcni module version, the version libcni chose from the
// conflist, and for ADD the result's version and the result.
//
// Usage: libcni-driver -conf FILE -path DIR -cache DIR -netns PATH -id ID -ifname NAME ADD|CHECK|DEL
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	conf := flag.String("conf", "", "network configuration list file")
	path := flag.String("path", "", "plugin directory (CNI_PATH)")
	cache := flag.String("cache", "", "libcni result cache directory")
	netns := flag.String("netns", "", "network namespace path")
	id := flag.String("id", "", "container ID")
	ifName := flag.String("ifname", "eth0", "interface name")
	flag.Parse()
	if err := run(*conf, *path, *cache, *netns, *id, *ifName, flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "libcni-driver:", err)
		os.Exit(1)
	}
}

type output struct {
	Libcni      string          `json:"libcni"`
	ConfVersion string          `json:"confVersion"`
	Version     string          `json:"resultVersion,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
}

func run(conf, path, cache, netns, id, ifName, op string) error {
	list, err := libcni.ConfListFromFile(conf)
	if err != nil {
		return err
	}
	out := output{Libcni: libcniVersion(), ConfVersion: list.CNIVersion}
	c := libcni.NewCNIConfigWithCacheDir([]string{path}, cache, nil)
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: netns, IfName: ifName,
		Args: [][2]string{{"K8S_POD_NAMESPACE", "compat"}, {"K8S_POD_NAME", id}}}
	ctx := context.Background()
	switch op {
	case "ADD":
		res, err := c.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		out.Version = res.Version()
		if out.Result, err = json.Marshal(res); err != nil {
			return err
		}
	case "CHECK":
		err = c.CheckNetworkList(ctx, list, rt)
	case "DEL":
		err = c.DelNetworkList(ctx, list, rt)
	default:
		return fmt.Errorf("operation %q: want ADD, CHECK or DEL", op)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// libcniVersion is the containernetworking/cni module version this binary was built with.
func libcniVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/containernetworking/cni" {
				return d.Version
			}
		}
	}
	return "unknown"
}
