//! The OpenSDN Go plugin (the legacy Contrail CNI) as it leaves a node: a model of its ADD and
//! DEL under Multus, for the tests of a node this plugin is rolled out onto, and rolled back
//! from. Read from tf-controller `src/container/cni/internal/` (HEAD 2026-04):
//!
//! - ADD (`contrail/cni.go` `CmdAdd`): the pod's VMIs from its cache under Multus
//!   (`<config-dir>/../multus/<vm-name>`, `readVrouterPollResults`), else from
//!   `GET /vm-cfg/<vm-name>`, written there (`writeVrouterPollResults`, the directory made with
//!   mode 0644); the first VMI of the network (in the agent's order) without a file in the pod's
//!   directory; its interface (`common/veth.go`: the host end `tap` + 11 characters of
//!   `<ifname>-<pod uuid>` made up with its peer, which is moved into the pod and renamed there;
//!   nested, `common/macvlan.go`: an 802.1Q link `vlan` + the same 11 characters on the parent,
//!   aliased `contrail-k8s-cni-vlan-<tag>`, and a macvlan `mac` + 11 made in the pod and renamed);
//!   then (`contrail/vrouter.go` `Add`) its file `<config-dir>/<vm-name>/<vmi-uuid>` (the add
//!   message, JSON indented with tabs, `time` Go's text of the time; directory mode 0644) and,
//!   not nested, `POST /vm` with the same message; then the IP configuration
//!   (`GET /vm/<vm-uuid>/<vmi-uuid>`), the VMI's MAC and the addresses.
//! - DEL (`cni.go` `CmdDel`, `vrouter.go` `CanDelete`, `Del`): every file of the pod's
//!   directory is read; one that does not decode, or names another `vm-id`, makes the DEL a
//!   success that does nothing. Else each file's interface goes by the name the Go plugin gives
//!   it (from `vm-ifname` and the pod uuid, never the file's `host-ifname`), every file it read
//!   and the directory go, `DELETE /vm/<vm-uuid>` (not nested), and the cache under Multus.
//!
//! The model makes what the Go plugin makes with iproute2, the files byte for byte as Go writes
//! them, and its requests as the agent receives them. What it leaves out: its logging, its
//! timeouts and polling cadence, IPv6 (which it ignores), its routes beyond the default one on
//! `eth0`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{Netns, Node, PodSpec, Sim, sh, try_sh, wait_for};

/// The Go plugin's host link for an attachment: `tap` (veth) or `vlan` (nested) and the first 11
/// characters of `<ifname>-<pod uuid>` (`CNI_UUID_IFNAME_LEN`).
pub fn link_name(nested: bool, ifname: &str, pod_uuid: &str) -> String {
    let prefix = if nested { "vlan" } else { "tap" };
    let name: String = format!("{ifname}-{pod_uuid}").chars().take(11).collect();
    format!("{prefix}{name}")
}

/// The Go plugin on one node.
pub struct Legacy<'a> {
    pub node: &'a Node,
    pub sim: &'a Sim,
    /// Nested mode (`vif-type` `macvlan`): the node's parent interface.
    pub parent: Option<String>,
}

/// What the Go plugin's DEL did.
#[derive(Debug, PartialEq, Eq)]
pub enum LegacyDel {
    /// It found files of other sandboxes, or one it could not decode: a success that does
    /// nothing (`CanDelete`'s error, logged, then `return nil`).
    Refused(String),
    /// It deleted these interfaces (by its own names) and the files it read.
    Deleted(Vec<String>),
    /// No directory for the pod.
    Nothing,
}

impl Legacy<'_> {
    /// The Go plugin's directory of pods' caches under Multus: `<config-dir>/../multus`.
    pub fn cache_dir(&self) -> PathBuf {
        self.node.ports_dir().join("..").join("multus")
    }

    pub fn cache(&self, pod: &PodSpec) -> PathBuf {
        self.cache_dir().join(pod.vm_name())
    }

    fn pod_dir(&self, pod: &PodSpec) -> PathBuf {
        self.node.ports_dir().join(pod.vm_name())
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}:{}{path}", self.sim.ip, self.sim.port)
    }

    /// ADD of `ifname` on `network` for sandbox `cid` of `pod` in `ns`, as Multus calls the Go
    /// plugin: the VMI it took.
    pub fn add(&self, pod: &PodSpec, cid: &str, ns: &Netns, ifname: &str, network: &str) -> String {
        let vm_name = pod.vm_name();
        // The pod's VMIs: its cache, or the agent's answer, cached.
        let cache = self.cache(pod);
        let results: Vec<Value> = match std::fs::read(&cache) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap(),
            Err(_) => {
                let cfg = self.sim.get(&format!("/vm-cfg/{vm_name}"));
                let results: Vec<Value> = cfg.as_array().unwrap().iter().map(go_result).collect();
                let dir = self.cache_dir();
                if !dir.exists() {
                    mkdir(&dir, 0o644);
                }
                std::fs::write(&cache, serde_json::to_vec(&results).unwrap()).unwrap();
                chmod(&cache, 0o644);
                results
            }
        };
        let label = |v: &Value, key: &str| v["Annotations"][key].as_str().map(str::to_string);
        // Its network: the cluster network's is "default" when the delegate's name is the
        // plugin's own.
        let wanted = if network == "contrail-k8s-cni" {
            "default"
        } else {
            network
        };
        let dir = self.pod_dir(pod);
        let vmi = results
            .iter()
            .find(|v| {
                label(v, "network").as_deref() == Some(wanted)
                    && !dir.join(v["id"].as_str().unwrap()).exists()
            })
            .unwrap_or_else(|| panic!("no free {wanted} VMI for {vm_name}: {results:?}"));
        let vmi_uuid = vmi["id"].as_str().unwrap().to_string();
        let mac = vmi["mac-address"].as_str().unwrap();
        let nested = self.parent.is_some();
        let host = match &self.parent {
            None => self.make_veth(pod, ns, ifname),
            Some(parent) => {
                let tag = vmi["vlan-id"].as_u64().unwrap();
                self.make_nested(pod, ns, ifname, parent, tag);
                parent.clone()
            }
        };
        // The add message (`contrailAddMsg`, in its fields' order): its file, then (not nested)
        // the same bytes as the registration.
        let vn = vmi["vn-id"].as_str().unwrap();
        let msg = go_indented(&[
            (
                "time",
                "2026-11-20 10:11:12.123456789 +0000 UTC m=+0.012345678",
            ),
            ("vm-id", cid),
            ("vm-uuid", &pod.uuid),
            ("vm-name", &vm_name),
            ("host-ifname", &host),
            ("vm-ifname", ifname),
            ("vm-namespace", &ns.path()),
            ("vn-uuid", vn),
            ("vmi-uuid", &vmi_uuid),
        ]);
        if !dir.exists() {
            mkdir(&dir, 0o644);
        }
        let file = dir.join(&vmi_uuid);
        std::fs::write(&file, &msg).unwrap();
        chmod(&file, 0o644);
        if !nested {
            ureq::post(&self.url("/vm"))
                .header("Content-Type", "application/json")
                .send(msg.as_bytes())
                .unwrap();
        }
        // The IP configuration, then the MAC and the address in the pod.
        let path = format!("/vm/{}/{vmi_uuid}", pod.uuid);
        let mut ip = Value::Null;
        wait_for(
            "the Go plugin's IP configuration",
            Duration::from_secs(30),
            || match ureq::get(&self.url(&path)).call() {
                Ok(mut answer) => {
                    ip =
                        serde_json::from_str(&answer.body_mut().read_to_string().unwrap()).unwrap();
                    true
                }
                Err(_) => false,
            },
        );
        let ip = &ip[0];
        sh(
            "ip",
            &["-n", &ns.name, "link", "set", ifname, "address", mac],
        );
        if let (Some(addr), Some(plen)) = (ip["ip-address"].as_str(), ip["plen"].as_u64()) {
            let cidr = format!("{addr}/{plen}");
            sh("ip", &["-n", &ns.name, "addr", "add", &cidr, "dev", ifname]);
            if ifname == "eth0"
                && let Some(gw) = ip["gateway"].as_str()
            {
                sh(
                    "ip",
                    &[
                        "-n", &ns.name, "route", "add", "default", "via", gw, "dev", ifname,
                    ],
                );
            }
        }
        vmi_uuid
    }

    /// `VEth.Create`: the host end and its peer made on the host, the peer moved into the pod and
    /// renamed there, both up; the host end's name.
    fn make_veth(&self, pod: &PodSpec, ns: &Netns, ifname: &str) -> String {
        let host = link_name(false, ifname, &pod.uuid);
        let tmp = format!("tmp{}", &host[3..]);
        sh(
            "ip",
            &[
                "link", "add", &host, "mtu", "1500", "type", "veth", "peer", "name", &tmp,
            ],
        );
        sh("ip", &["link", "set", &host, "up"]);
        sh("ip", &["link", "set", &tmp, "netns", &ns.name]);
        sh("ip", &["-n", &ns.name, "link", "set", &tmp, "name", ifname]);
        sh("ip", &["-n", &ns.name, "link", "set", ifname, "up"]);
        host
    }

    /// `MacVlan.Create`: the 802.1Q link on the parent with the VMI's tag and the alias that
    /// finds it again, up; the macvlan (VEPA) on it, made in the pod and renamed there.
    fn make_nested(&self, pod: &PodSpec, ns: &Netns, ifname: &str, parent: &str, tag: u64) {
        let vlan = link_name(true, ifname, &pod.uuid);
        let tmp = format!("mac{}", &vlan[4..]);
        let tag = tag.to_string();
        sh(
            "ip",
            &[
                "link", "add", "link", parent, "name", &vlan, "mtu", "1500", "type", "vlan", "id",
                &tag,
            ],
        );
        let alias = format!("contrail-k8s-cni-vlan-{tag}");
        sh("ip", &["link", "set", &vlan, "alias", &alias]);
        sh("ip", &["link", "set", &vlan, "up"]);
        sh(
            "ip",
            &[
                "link", "add", "link", &vlan, "name", &tmp, "netns", &ns.name, "type", "macvlan",
                "mode", "vepa",
            ],
        );
        sh("ip", &["-n", &ns.name, "link", "set", &tmp, "name", ifname]);
        sh("ip", &["-n", &ns.name, "link", "set", ifname, "up"]);
    }

    /// DEL for sandbox `cid` of `pod`, as the Go plugin does it (any CNI_IFNAME: it deletes the
    /// whole sandbox's).
    pub fn del(&self, pod: &PodSpec, cid: &str) -> LegacyDel {
        let dir = self.pod_dir(pod);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return LegacyDel::Nothing;
        };
        let mut names: Vec<String> = entries
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let (mut ifnames, mut vm_uuid) = (Vec::new(), String::new());
        for name in &names {
            let Ok(bytes) = std::fs::read(dir.join(name)) else {
                continue;
            };
            // Go's json.Unmarshal into its message: any JSON object decodes (unknown keys are
            // ignored); a key of its message that is not a string does not.
            let msg: Value = match serde_json::from_slice(&bytes) {
                Ok(v @ Value::Object(_)) => v,
                _ => return LegacyDel::Refused(format!("{name} does not decode")),
            };
            let keys = [
                "time",
                "vm-id",
                "vm-uuid",
                "vm-name",
                "host-ifname",
                "vm-ifname",
                "vm-namespace",
                "vn-uuid",
                "vmi-uuid",
            ];
            if keys
                .iter()
                .any(|k| msg.get(*k).is_some_and(|v| !v.is_string() && !v.is_null()))
            {
                return LegacyDel::Refused(format!("{name} does not decode"));
            }
            let s = |k: &str| msg[k].as_str().unwrap_or("").to_string();
            if s("vm-id") != cid {
                return LegacyDel::Refused(format!("{name} is sandbox {}'s", s("vm-id")));
            }
            ifnames.push(s("vm-ifname"));
            vm_uuid = s("vm-uuid");
        }
        let nested = self.parent.is_some();
        let mut deleted = Vec::new();
        for ifname in &ifnames {
            let link = link_name(nested, ifname, &vm_uuid);
            if try_sh("ip", &["link", "del", &link]).is_ok() {
                deleted.push(link);
            }
        }
        for name in &names {
            let _ = std::fs::remove_file(dir.join(name));
        }
        let _ = std::fs::remove_dir(&dir);
        if !nested && !ifnames.is_empty() {
            let _ = ureq::delete(&self.url(&format!("/vm/{vm_uuid}"))).call();
        }
        if !ifnames.is_empty() {
            let _ = std::fs::remove_file(self.cache(pod));
        }
        LegacyDel::Deleted(deleted)
    }
}

/// Go's `json.MarshalIndent(msg, "", "\t")` of a struct of strings, in its fields' order.
fn go_indented(fields: &[(&str, &str)]) -> String {
    let lines: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("\t{}: {}", json!(k), json!(v)))
        .collect();
    format!("{{\n{}\n}}", lines.join(",\n"))
}

/// One VMI of `GET /vm-cfg` as the Go plugin caches it: its `Result` struct, marshalled
/// (`contrail/vrouter.go`), the annotations parsed into `Annotations` as well.
fn go_result(v: &Value) -> Value {
    let mut parsed = serde_json::Map::new();
    for a in v["annotations"].as_array().into_iter().flatten() {
        let text = a.as_str().unwrap_or("");
        if let Some((k, value)) = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .and_then(|t| t.split_once(':'))
        {
            parsed.insert(k.to_string(), json!(value));
        }
    }
    let field = |k: &str| parsed.get(k).cloned().unwrap_or(json!(""));
    json!({
        "vm-uuid": v["vm-uuid"], "network-label": "", "ip-address": "", "plen": 0,
        "gateway": "", "dns-server": "", "mac-address": v["mac-address"],
        "vlan-id": v["vlan-id"], "vn-id": v["vn-id"], "vn-name": v["vn-name"], "id": v["id"],
        "annotations": v["annotations"],
        "Annotations": {
            "cluster": field("cluster"), "kind": field("kind"), "name": field("name"),
            "namespace": field("namespace"), "network": field("network"), "owner": field("owner"),
            "project": field("project"), "index": field("index"), "interface": field("interface"),
        },
    })
}

fn mkdir(path: &std::path::Path, mode: u32) {
    std::fs::create_dir_all(path).unwrap();
    chmod(path, mode);
}

fn chmod(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
