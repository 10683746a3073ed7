// cnitool for the end-to-end tests: the same command line, environment and libcni calls as
// cnitool of CNI 1.1.2 (cnitool/cnitool.go, which Debian's golang-github-appc-cni-dev does not
// ship), built offline against Debian's libcni source:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode go build -o target/cnitool tests/cnitool/main.go
//
// Usage: cnitool add|check|del <net> <netns-path>
//
// Like cnitool:
//   - NETCONFPATH (default /etc/cni/net.d): libcni.LoadConfList(dir, net), which takes a
//     .conflist of that name, else a single .conf/.json of that name up-converted to a list;
//   - CNI_PATH: plugin directories, colon-separated;
//   - CNI_IFNAME: default eth0 (an empty but set value is passed on, as cnitool does);
//   - CNI_ARGS: "K=V;K=V" into [][2]string, refusing pairs without exactly one '=' or with an
//     empty key or value, exactly as cnitool's parseArgs;
//   - CAP_ARGS: a JSON object of capability args (runtimeConfig, filtered by capabilities);
//   - the container id is derived from the absolute netns path as cnitool does it:
//     "cnitool-" + hex of the first 10 bytes of sha512(path), so add, check and del of one
//     netns find the same libcni cache entry;
//   - add/check/del call AddNetworkList / CheckNetworkList / DelNetworkList, so CHECK and DEL
//     get libcni's cached ADD result as prevResult (from cniVersion 0.4.0 on).
//
// Additions for tests:
//   - CNI_CACHE_DIR: libcni's cache dir (default /var/lib/cni, libcni.CacheDir), so each test
//     keeps its results under <dir>/results/<net>-<container id>-<ifname>;
//   - on failure the error text goes to stderr as cnitool prints it, and when a plugin's CNI
//     error object (*types.Error, possibly wrapped by libcni) is inside, its JSON follows as
//     the LAST line of stderr, so tests can assert the code. Plugins' own stderr is passed
//     through before it, as cnitool does.
package main

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

const defaultNetDir = "/etc/cni/net.d"

// parseArgs is cnitool's CNI_ARGS parser.
func parseArgs(args string) ([][2]string, error) {
	var result [][2]string
	for _, pair := range strings.Split(args, ";") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 || kv[0] == "" || kv[1] == "" {
			return nil, fmt.Errorf("invalid CNI_ARGS pair %q", pair)
		}
		result = append(result, [2]string{kv[0], kv[1]})
	}
	return result, nil
}

// containerID is cnitool's: a hash of the netns path.
func containerID(netns string) string {
	s := sha512.Sum512([]byte(netns))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: %s add|check|del <net> <netns-path>\n", filepath.Base(os.Args[0]))
	os.Exit(1)
}

func exit(err error) {
	if err == nil {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "%s\n", err)
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		b, jerr := json.Marshal(cniErr)
		if jerr == nil {
			fmt.Fprintf(os.Stderr, "%s\n", b)
		}
	}
	os.Exit(1)
}

func main() {
	if len(os.Args) != 4 {
		usage()
	}
	cmd, name := os.Args[1], os.Args[2]
	if cmd != "add" && cmd != "check" && cmd != "del" {
		usage()
	}

	netdir := os.Getenv("NETCONFPATH")
	if netdir == "" {
		netdir = defaultNetDir
	}
	netconf, err := libcni.LoadConfList(netdir, name)
	if err != nil {
		exit(err)
	}

	var capabilityArgs map[string]interface{}
	if v := os.Getenv("CAP_ARGS"); v != "" {
		if err := json.Unmarshal([]byte(v), &capabilityArgs); err != nil {
			exit(fmt.Errorf("CAP_ARGS: %w", err))
		}
	}

	var cniArgs [][2]string
	if v := os.Getenv("CNI_ARGS"); v != "" {
		if cniArgs, err = parseArgs(v); err != nil {
			exit(err)
		}
	}

	ifName, ok := os.LookupEnv("CNI_IFNAME")
	if !ok {
		ifName = "eth0"
	}

	netns, err := filepath.Abs(os.Args[3])
	if err != nil {
		exit(err)
	}

	cninet := libcni.NewCNIConfigWithCacheDir(
		filepath.SplitList(os.Getenv("CNI_PATH")), os.Getenv("CNI_CACHE_DIR"), nil)
	rt := &libcni.RuntimeConf{
		ContainerID:    containerID(netns),
		NetNS:          netns,
		IfName:         ifName,
		Args:           cniArgs,
		CapabilityArgs: capabilityArgs,
	}

	ctx := context.Background()
	switch cmd {
	case "add":
		result, err := cninet.AddNetworkList(ctx, netconf, rt)
		if err != nil {
			exit(err)
		}
		if err := result.Print(); err != nil {
			exit(err)
		}
		exit(nil)
	case "check":
		exit(cninet.CheckNetworkList(ctx, netconf, rt))
	case "del":
		exit(cninet.DelNetworkList(ctx, netconf, rt))
	}
}
