// Package cni holds what the ofsdn CNI plugin binary (cmd/ofsdn) and the
// ofsdn-node daemon's CNI server (cni/server) share: the wire format of a
// forwarded CNI request, the ofsdn netconf, CNI_ARGS parsing and the client
// that carries a request over the daemon's unix socket.
//
// The plugin is a thin forwarder. The container runtime executes it as the CNI
// specification 1.1.0 describes (SPEC.md "Section 2: Execution Protocol":
// parameters in CNI_* environment variables, the netconf on stdin); the plugin
// packs both into a [Request], POSTs it as JSON to the daemon on
// [DefaultSocketPath], and turns the daemon's [Response] back into a CNI result
// (SPEC.md "Section 5: Result Types") or a CNI error (SPEC.md "Section 5:
// Result Types", "Error", with the well-known error codes of its table).
package cni

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/containernetworking/cni/pkg/version"
)

// DefaultSocketPath is the unix socket the ofsdn-node daemon serves CNI
// requests on, and the plugin's default when the netconf has no "socket" key.
// Its directory is root-only (mode 0700) and the socket itself mode 0600.
const DefaultSocketPath = "/var/run/ofsdn/cni.sock"

// RequestPath is the HTTP path of the daemon's CNI endpoint: the plugin sends
// every forwarded operation as "POST /cni" with a JSON [Request] body.
const RequestPath = "/cni"

// The CNI operations the plugin forwards to the daemon, as spelled in
// CNI_COMMAND (SPEC.md "Section 2: Execution Protocol", "CNI operations").
// VERSION is answered by the plugin itself and never forwarded.
const (
	CmdAdd    = "ADD"
	CmdDel    = "DEL"
	CmdCheck  = "CHECK"
	CmdStatus = "STATUS"
	CmdGC     = "GC"
)

// Request is one CNI operation forwarded from the plugin to the daemon. Its
// fields are the protocol parameters of SPEC.md "Section 2: Execution
// Protocol", "Parameters", copied verbatim from the plugin's environment
// (empty when the runtime did not set them), plus the netconf the runtime
// wrote on the plugin's stdin.
type Request struct {
	// Command is CNI_COMMAND: one of CmdAdd, CmdDel, CmdCheck, CmdStatus,
	// CmdGC.
	Command string `json:"command"`
	// ContainerID is CNI_CONTAINERID; required for ADD, DEL and CHECK.
	ContainerID string `json:"containerID,omitempty"`
	// Netns is CNI_NETNS, a path such as /var/run/netns/NAME or
	// /proc/PID/ns/net; required for ADD and CHECK, optional for DEL.
	Netns string `json:"netns,omitempty"`
	// IfName is CNI_IFNAME, the interface name inside the pod (at most 15
	// bytes); required for ADD, DEL and CHECK.
	IfName string `json:"ifName,omitempty"`
	// Args is CNI_ARGS unparsed ("K1=V1;K2=V2"); see ParseArgs.
	Args string `json:"args,omitempty"`
	// Path is CNI_PATH, the plugin search path (":"-separated).
	Path string `json:"path,omitempty"`
	// Config is the netconf exactly as the runtime sent it on stdin,
	// including any prevResult (CHECK, DEL; SPEC.md "Section 3: Execution of
	// Network Configurations") and, for GC, "cni.dev/valid-attachments".
	// JSON-encoded as base64, so any bytes survive the trip.
	Config []byte `json:"config"`
}

// Response is the daemon's answer to a [Request]. Exactly one of Result and
// Error is set.
type Response struct {
	// Result is the ADD success result in the CNI 1.1.0 format (SPEC.md
	// "Section 5: Result Types", "ADD Success"); empty for the other
	// commands. The plugin converts it to the netconf's cniVersion.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the CNI error (SPEC.md "Section 5: Result Types", "Error"),
	// whose Code follows the spec's error code table (4, 6, 7, 11, 50, 999,
	// ...).
	Error *types.Error `json:"error,omitempty"`
}

// SupportedVersions are the CNI specification versions ofsdn accepts in a
// netconf's "cniVersion" and reports for VERSION (SPEC.md "Section 2:
// Execution Protocol", "VERSION"): every version the CNI library knows and
// can convert a 1.1.0 result to, 0.1.0 through 1.1.0. Any other version is
// refused with code 1 (ErrIncompatibleCNIVersion).
var SupportedVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// MaxNetConfBytes bounds the netconf the plugin accepts on stdin: 640 KiB.
// Base64-encoded inside a [Request] (4/3 growth) it stays below the daemon's
// 1 MiB request limit with room for the other CNI_* parameters.
const MaxNetConfBytes = 640 << 10

// NetConf is the ofsdn plugin configuration (SPEC.md "Section 1: Network
// configuration format", "Plugin configuration objects"): the standard keys
// plus the ofsdn-specific ones below.
type NetConf struct {
	types.NetConf
	// Socket is the absolute path of the daemon's CNI socket; LoadNetConf
	// sets DefaultSocketPath when the key is absent.
	Socket string `json:"socket,omitempty"`
}

// MarshalJSON encodes the netconf with its ofsdn keys. It exists because the
// embedded types.NetConf has its own MarshalJSON, which encoding/json would
// otherwise promote, silently dropping "socket".
func (n *NetConf) MarshalJSON() ([]byte, error) {
	base, err := n.NetConf.MarshalJSON()
	if err != nil {
		return nil, err
	}
	obj := map[string]json.RawMessage{}
	if err := json.Unmarshal(base, &obj); err != nil {
		return nil, err
	}
	if n.Socket != "" {
		s, err := json.Marshal(n.Socket)
		if err != nil {
			return nil, err
		}
		obj["socket"] = s
	}
	return json.Marshal(obj)
}

// LoadNetConf decodes and validates a netconf as the runtime passes it on
// stdin (SPEC.md "Section 1: Network configuration format"), and parses its
// prevResult, if any, into NetConf.PrevResult (any result version the CNI
// library knows; SPEC.md "Section 5: Result Types").
//
// Errors are *types.Error with the spec's codes:
//   - 6 (ErrDecodingFailure): the bytes are not a JSON object, or prevResult
//     cannot be decoded;
//   - 7 (ErrInvalidNetworkConfig): "name" or "cniVersion" missing or
//     invalid, or "socket" not an absolute path; the message names the key;
//   - 1 (ErrIncompatibleCNIVersion): "cniVersion" is a well-formed version
//     that is not one of SupportedVersions (e.g. "2.0.0"); the message names
//     the version and lists the supported ones.
func LoadNetConf(data []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(data, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure,
			"cannot decode the netconf as a JSON object", err.Error())
	}
	if conf.Name == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			`netconf key "name" is missing: set the network name`, "")
	}
	if e := utils.ValidateNetworkName(conf.Name); e != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf(`netconf key "name" is invalid: %q must start with a letter or digit and contain only letters, digits, '_', '.' and '-'`, conf.Name), "")
	}
	if conf.CNIVersion == "" {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			`netconf key "cniVersion" is missing: set it, e.g. "1.1.0"`, "")
	}
	if _, _, _, err := version.ParseVersion(conf.CNIVersion); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf(`netconf key "cniVersion" is invalid: %q is not a version such as "1.1.0"`, conf.CNIVersion), err.Error())
	}
	if !slices.Contains(SupportedVersions, conf.CNIVersion) {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion,
			fmt.Sprintf(`netconf key "cniVersion" is %q, which ofsdn does not support: use one of %s`, conf.CNIVersion, strings.Join(SupportedVersions, ", ")), "")
	}
	if conf.Socket == "" {
		conf.Socket = DefaultSocketPath
	} else if !filepath.IsAbs(conf.Socket) {
		return nil, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf(`netconf key "socket" is invalid: %q is not an absolute path (default %s)`, conf.Socket, DefaultSocketPath), "")
	}
	if conf.RawPrevResult != nil {
		if err := version.ParsePrevResult(&conf.NetConf); err != nil {
			return nil, types.NewError(types.ErrDecodingFailure,
				`cannot decode netconf key "prevResult"`, err.Error())
		}
	}
	return conf, nil
}

// Well-known CNI_ARGS keys set by Kubernetes container runtimes (containerd,
// CRI-O) for pods.
const (
	ArgPodNamespace        = "K8S_POD_NAMESPACE"
	ArgPodName             = "K8S_POD_NAME"
	ArgPodInfraContainerID = "K8S_POD_INFRA_CONTAINER_ID"
	ArgPodUID              = "K8S_POD_UID"
	ArgIgnoreUnknown       = "IgnoreUnknown"
)

// ParseArgs splits CNI_ARGS ("K1=V1;K2=V2", SPEC.md "Section 2: Execution
// Protocol", "Parameters") into a map. Empty segments (";;", a trailing ";")
// are skipped, a value may contain '=', and when a key repeats the last value
// wins. The empty string gives an empty map.
//
// Errors are *types.Error with code 4 (ErrInvalidEnvironmentVariables) naming
// CNI_ARGS and the bad pair: a segment without '=' or with an empty key.
func ParseArgs(cniArgs string) (map[string]string, error) {
	out := map[string]string{}
	if cniArgs == "" {
		return out, nil
	}
	for _, pair := range strings.Split(cniArgs, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("CNI_ARGS: invalid pair %q: want KEY=VALUE pairs separated by ';'", pair), "")
		}
		if k == "" {
			return nil, types.NewError(types.ErrInvalidEnvironmentVariables,
				fmt.Sprintf("CNI_ARGS: invalid pair %q: empty key", pair), "")
		}
		out[k] = v
	}
	return out, nil
}

// PodIdentity is the Kubernetes pod a CNI request is for, from CNI_ARGS. All
// fields are empty when the runtime is not a Kubernetes one (e.g. cnitool).
type PodIdentity struct {
	Namespace        string // K8S_POD_NAMESPACE
	Name             string // K8S_POD_NAME
	InfraContainerID string // K8S_POD_INFRA_CONTAINER_ID (the sandbox)
	UID              string // K8S_POD_UID
}

// PodIdentityFromArgs reads the pod's identity from parsed CNI_ARGS (see
// ParseArgs). Missing keys leave fields empty.
func PodIdentityFromArgs(args map[string]string) PodIdentity {
	return PodIdentity{
		Namespace:        args[ArgPodNamespace],
		Name:             args[ArgPodName],
		InfraContainerID: args[ArgPodInfraContainerID],
		UID:              args[ArgPodUID],
	}
}

// IsZero reports whether no pod identity was given (no namespace and no name).
func (p PodIdentity) IsZero() bool { return p.Namespace == "" && p.Name == "" }

// String is "namespace/name", or "" for a zero identity.
func (p PodIdentity) String() string {
	if p.IsZero() {
		return ""
	}
	return p.Namespace + "/" + p.Name
}

// PodIdentity parses the request's CNI_ARGS and returns the pod it names.
// Errors are those of ParseArgs (code 4).
func (r *Request) PodIdentity() (PodIdentity, error) {
	args, err := ParseArgs(r.Args)
	if err != nil {
		return PodIdentity{}, err
	}
	return PodIdentityFromArgs(args), nil
}
