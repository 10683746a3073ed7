//! Multus's side: a pod's delegates (ours or Debian's plugins) called in order, rolled back as
//! Multus does.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::bins::plugin_bin;
use crate::cni::{Output, run_cni};
use crate::node::Node;

/// One delegate of a Multus-style pod: which plugin, its config, and the interface name.
pub struct Delegate {
    pub bin: PathBuf,
    pub conf: Value,
    pub ifname: String,
}

impl Delegate {
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

/// What Multus (thin plugin, v4) does with a pod's delegates: ADD them in order and, when one
/// fails, DEL the failed one and every earlier one; DEL them in reverse order.
pub struct Multus<'a> {
    pub node: &'a Node,
    pub container_id: String,
    pub netns: String,
    pub args: String,
}

impl Multus<'_> {
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

    /// ADD every delegate; on the first failure, roll back as Multus does and return its index.
    pub fn add_all(&self, delegates: &[Delegate]) -> Result<Vec<Value>, (usize, Output)> {
        let mut results = Vec::new();
        for (i, d) in delegates.iter().enumerate() {
            let out = self.call("ADD", d);
            if !out.ok {
                for earlier in delegates[..=i].iter().rev() {
                    self.call("DEL", earlier).assert_ok();
                }
                return Err((i, out));
            }
            results.push(out.json());
        }
        Ok(results)
    }

    pub fn del_all(&self, delegates: &[Delegate]) {
        for d in delegates.iter().rev() {
            self.call("DEL", d).assert_ok();
        }
    }
}
