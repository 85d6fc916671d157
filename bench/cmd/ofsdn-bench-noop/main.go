// Command ofsdn-bench-noop is a CNI plugin that does nothing: the benchmark's measure of
// what a container runtime pays to run any CNI plugin (libcni's work, one fork/exec of a
// small Go binary, stdin and stdout), so that the plugin path's floor is noop + floor.
//
// It reads the network configuration from stdin as every plugin must, then answers each
// CNI verb (CNI spec 1.1, "Section 2: Execution Protocol") with the least valid reply:
// ADD prints a result with no interfaces and no IPs in the netconf's cniVersion (spec
// "Section 5: Result Types"); VERSION prints the versions it supports; DEL, CHECK, STATUS
// and GC print nothing and succeed. It never touches a namespace, a link or a file.
//
// It uses the standard library only, so its start-up is that of a minimal Go program;
// a plugin built on the CNI library (skel, types) starts slower, so this is a lower bound.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(5, "read netconf from stdin: "+err.Error())
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
	}
	if len(in) > 0 {
		if err := json.Unmarshal(in, &conf); err != nil {
			fail(6, "decode netconf: "+err.Error())
		}
	}
	if conf.CNIVersion == "" {
		conf.CNIVersion = "1.1.0"
	}
	switch os.Getenv("CNI_COMMAND") {
	case "ADD":
		fmt.Printf(`{"cniVersion":%q,"interfaces":[],"ips":[],"dns":{}}`+"\n", conf.CNIVersion)
	case "VERSION":
		fmt.Printf(`{"cniVersion":%q,"supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`+"\n", conf.CNIVersion)
	case "DEL", "CHECK", "STATUS", "GC":
	default:
		fail(4, fmt.Sprintf("unknown CNI_COMMAND %q", os.Getenv("CNI_COMMAND")))
	}
}

// fail prints a CNI error (spec "Section 6: Error") and exits 1.
func fail(code int, msg string) {
	fmt.Printf(`{"cniVersion":"1.1.0","code":%d,"msg":%q}`+"\n", code, msg)
	os.Exit(1)
}
