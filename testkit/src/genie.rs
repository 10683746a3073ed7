//! CNI-Genie, the real binary (`../shared/peers`: CNI-Genie af3e344d, archived upstream), as a
//! runtime calls it on a node. Genie hardcodes its directories, so the test's node has its own:
//! `/etc/cni/net.d` is the node's CNI directory (the node-wide file, which is also the cluster
//! network, Genie's own `00-genie.conf`, and the other networks' files), `/opt/cni/bin` holds
//! Genie, the plugin and the reference plugins 1.9.1, `/var/lib/cni` libcni's cache.
//!
//! What Genie does, as the tests found it (and `e2e/genie.rs` asserts): it reads the pod's
//! annotations from the Kubernetes API; `k8s.v1.cni.cncf.io/networks` (NAD names) or `cni`
//! (config FILE names: `10-contrail.conf` is `contrail`) lists its delegates; it ADDs them in
//! order as eth0, eth1, ... with CNI_ARGS of its own (no `K8S_POD_UID`), filling a missing
//! `cniVersion` with 0.3.0 and a missing `name` with the NAD's; it DELs them in reverse order
//! with the runtime's CNI_IFNAME (eth0) and CNI_ARGS; after a failed ADD it runs the earlier
//! delegates again with CNI_COMMAND=ADD, and answers code 100; it answers CHECK itself and
//! refuses GC and STATUS; a DEL of a pod the API no longer has calls no delegate. Its config and
//! every delegate's must be at cniVersion 0.4.0 or below.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::bins::{peer_bin, plugin_bin, repo_file};
use crate::cni::{Output, run_cni};
use crate::files::TempDir;
use crate::kube::KubeApi;
use crate::netns::{bind_dir, private_dir};
use crate::node::Node;
use crate::pod::PodSpec;

/// Where Genie looks, whatever it is told.
const NET_D: &str = "/etc/cni/net.d";
const BIN: &str = "/opt/cni/bin";
/// The reference plugins a Genie node's pods may use beside Contrail.
const REFERENCE: [&str; 5] = ["bridge", "host-local", "loopback", "macvlan", "ptp"];

/// Genie installed on a node of the test's own.
pub struct Genie {
    conf: Value,
    _bin: TempDir,
    _cache: TempDir,
}

impl Genie {
    /// Genie on `node`, reading pods from `api`, as `examples/genie/` installs it: the node's
    /// node-wide file is the example's `10-contrail.conf` (cniVersion 0.3.1, which Genie can
    /// take; `"meta-plugin": "genie"`) with the node's settings, and is the cluster network (the
    /// first config by name after Genie's own); Genie's config is the example's `00-genie.conf`
    /// with its kubeconfig pointed at `api`.
    pub fn install(node: &mut Node, api: &KubeApi) -> Genie {
        let example = |file: &str| -> Value {
            let text = std::fs::read_to_string(repo_file("examples/genie").join(file)).unwrap();
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("examples/genie/{file}: {e}"))
        };
        node.install(example("10-contrail.conf"));
        bind_dir(&node.conf_dir.0, NET_D);
        let bin = private_dir(BIN);
        let link = |from: &Path, name: &str| {
            std::os::unix::fs::symlink(from, bin.0.join(name)).unwrap();
        };
        link(&peer_bin("cni-genie"), "genie");
        link(&plugin_bin(), "contrail-k8s-cni");
        for p in REFERENCE {
            link(&peer_bin(&format!("cni-{p}")), p);
        }
        let mut conf = example("00-genie.conf");
        conf["kubernetes"]["kubeconfig"] = json!(api.kubeconfig());
        let genie = Genie {
            conf,
            _bin: bin,
            _cache: private_dir("/var/lib/cni"),
        };
        genie.add_conf("00-genie.conf", &genie.conf);
        genie
    }

    /// Another network's config file in the node's CNI directory.
    pub fn add_conf(&self, file: &str, conf: &Value) {
        std::fs::write(Path::new(NET_D).join(file), conf.to_string()).unwrap();
    }

    /// A `command` of the runtime's for `pod`'s sandbox `container` in `netns`, through Genie:
    /// what containerd or CRI-O sends (CNI_IFNAME eth0, their CNI_ARGS with the pod's UID).
    pub fn call(&self, command: &str, pod: &PodSpec, container: &str, netns: &str) -> Output {
        let args = pod.runtime_args(container);
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", container),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", BIN),
            ("CNI_ARGS", args.as_str()),
        ];
        run_cni(
            &PathBuf::from(BIN).join("genie"),
            &env,
            self.conf.to_string().as_bytes(),
        )
    }
}
