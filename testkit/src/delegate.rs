//! Delegates called one by one: a test that is about the plugin's answer to one call (a
//! combination of attachments, a vhost-user attachment beside a veth) runs each delegate
//! itself, as a meta-plugin would run it, in the order the test says. No model of any
//! meta-plugin: no rollback, no reading of annotations, no caching. What Multus itself does is
//! proven against the real one ([`Multus`](crate::Multus)).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::bins::plugin_bin;
use crate::cni::{Output, run_cni};
use crate::node::Node;

/// One delegate: which plugin, its config, and the interface name it is called with.
pub struct Delegate {
    pub bin: PathBuf,
    pub conf: Value,
    pub ifname: String,
}

impl Delegate {
    /// Our plugin, with the config a NetworkAttachmentDefinition of `network` gives.
    pub fn contrail(node: &Node, version: &str, network: &str, ifname: &str) -> Delegate {
        Delegate {
            bin: plugin_bin(),
            conf: node.netconf(version, network),
            ifname: ifname.into(),
        }
    }

    /// A Debian reference plugin from /usr/lib/cni.
    pub fn debian(conf: Value, ifname: &str) -> Delegate {
        let bin = Path::new("/usr/lib/cni").join(conf["type"].as_str().unwrap());
        assert!(
            bin.exists(),
            "{} is missing: install containernetworking-plugins (scripts/test does)",
            bin.display()
        );
        Delegate {
            bin,
            conf,
            ifname: ifname.into(),
        }
    }
}

/// A caller that runs delegates in a pod's sandbox: each call gets the sandbox's container id
/// and netns, the delegate's interface name, the caller's CNI_ARGS and the node's
/// `CONTRAIL_CNI_CONF_DIR`.
pub struct Caller<'a> {
    pub node: &'a Node,
    pub container_id: String,
    pub netns: String,
    pub args: String,
}

impl Caller<'_> {
    /// One `command` call of delegate `d`.
    pub fn call(&self, command: &str, d: &Delegate) -> Output {
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", self.container_id.as_str()),
            ("CNI_NETNS", self.netns.as_str()),
            ("CNI_IFNAME", d.ifname.as_str()),
            ("CNI_ARGS", self.args.as_str()),
            ("CNI_PATH", "/usr/lib/cni"),
            (
                "CONTRAIL_CNI_CONF_DIR",
                self.node.conf_dir.0.to_str().unwrap(),
            ),
        ];
        run_cni(&d.bin, &env, d.conf.to_string().as_bytes())
    }
}
