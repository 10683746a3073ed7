//! Network configuration: the standard CNI fields plus the legacy `contrail` section, from two
//! sources that are trusted differently. The node-wide file is the node admin's; stdin is the
//! network's config, which whoever may create a NetworkAttachmentDefinition writes (often the
//! namespace's own users). So every key that names a node file, an address, an interface or a
//! budget is the node's ([`KEYS`]): taken from the built-in defaults and the node-wide file only.
//! Stdin may repeat such a key with the node's value (Multus's delegate configs and existing
//! NADs do); any other value is reported in [`NetConf::refused`] and refused by the call.
//!
//! [`parse`] is pure: each source's `contrail` section read by walking [`KEYS`] (so that an
//! error names the key and its source), validated, and merged over the node's settings.
//! [`load_node`] reads the node-wide file first.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use log::LevelFilter;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::cni::{Version, valid_name};
use crate::error::{Error, Result};

pub(crate) const DEFAULT_NODE_CONF_DIR: &str = "/etc/cni/net.d";
/// Overrides [`DEFAULT_NODE_CONF_DIR`]: for tests and unusual installs. The environment is the
/// node's, like the file.
pub(crate) const NODE_CONF_DIR_ENV: &str = "CONTRAIL_CNI_CONF_DIR";
/// Stdin `name` values that mean the cluster pod network.
const DEFAULT_NETWORK_NAMES: [&str; 2] = ["", "contrail-k8s-cni"];
/// The longest a call may wait for the agent in all (poll-timeout x poll-retries): beyond a few
/// minutes the runtime has given up on the call anyway, and a waiting call holds its pod's lock
/// files and the agent's attention.
pub(crate) const MAX_BUDGET: Duration = Duration::from_secs(300);
/// The node's request budget to the agent, requests a second (`agent-requests-per-second`).
/// Each request holds the agent's DB for about 0.25 ms (docs/configuration.md, "Polling and the
/// node's request budget"): 200 a second is 5% of its time, leaving the rest to the config work the waiting
/// calls wait for, and still a poll every 0.55 s for each of 110 waiting calls.
pub const DEFAULT_AGENT_RATE: u32 = 200;
/// A quarter of the agent's time at 0.25 ms a request: beyond, the budget no longer protects it.
pub const MAX_AGENT_RATE: u32 = 1000;
/// Below, a busy node's calls would wait for turns longer than their deadlines.
pub const MIN_AGENT_RATE: u32 = 10;
/// The node-wide file is a few hundred bytes; anything larger is not one.
const MAX_NODE_FILE: u64 = 1 << 20;

mod keys;
pub use keys::{KEYS, KeySpec, Kind, Scope, help, spec};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One attachment per call (Multus, CNI-Genie): the default.
    Plugin,
    /// All of a pod's interfaces in one call (the `thick` build feature).
    #[cfg(feature = "thick")]
    Thick,
}

/// The meta-plugin that calls this node's plugin once per attachment (`meta-plugin`): it decides
/// what a DEL's `CNI_IFNAME` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaPlugin {
    /// Multus (and every caller that DELs an attachment with the `CNI_IFNAME` its ADD had):
    /// a DEL is about the attachment on its `CNI_IFNAME`.
    Multus,
    /// CNI-Genie, which DELs every delegate with the runtime's `CNI_IFNAME` (eth0) and
    /// `CNI_ARGS`, whatever it gave the delegate's ADD: a DEL is about every attachment of its
    /// network in the sandbox.
    Genie,
}

/// The effective `contrail` section, with the legacy Go plugin's keys and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Contrail {
    pub vrouter_ip: IpAddr,
    pub vrouter_port: u16,
    /// The node's request budget to the agent: all calls on the node together send at most
    /// this many requests a second (see [`crate::agent::budget`]).
    pub agent_rate: u32,
    pub config_dir: PathBuf,
    /// Each request's timeout, and the unit of the total wait.
    pub poll_timeout: Duration,
    pub poll_retries: u32,
    pub cluster_name: String,
    pub mtu: u32,
    /// `None` when set to "" (log to stderr only).
    pub log_file: Option<PathBuf>,
    pub log_level: LevelFilter,
    pub mode: Mode,
    pub meta_plugin: MetaPlugin,
    /// A Prometheus text file every call adds itself to (node-exporter's textfile collector).
    pub metrics_file: Option<PathBuf>,
    pub vif_type: VifType,
    /// The node's interface that nested mode's VLANs are made on.
    pub parent_interface: String,
    /// The attachment's kind, a network's choice: a kernel interface or a vhost-user socket.
    pub interface_type: InterfaceType,
    /// vrouter-dpdk's socket directory (`--vr_socket_dir`): where it connects to
    /// `uvh_vif_<system-name>`, and where `dpdk_netlink` says the vRouter is DPDK.
    pub vrouter_socket_dir: PathBuf,
    /// The root of the per-pod directories of vhost-user sockets (one per pod UID).
    pub vhost_dir: PathBuf,
    /// Where a pod mounts its own directory of `vhost-dir` (the socket path as the pod sees it).
    pub vhost_pod_dir: PathBuf,
    /// Whether the node's vRouter is DPDK, or how to tell.
    pub vrouter_mode: VrouterMode,
    /// The one directory where a runtime's `CNIDeviceInfoFile` may be (Multus's device-info
    /// directory): the path comes with a network's config, the directory from the node.
    pub device_info_dir: PathBuf,
}

impl Contrail {
    /// The whole wait for the agent: poll-timeout x poll-retries, as the legacy plugin bounds it
    /// (at most [`MAX_BUDGET`]).
    pub fn poll_budget(&self) -> Duration {
        self.poll_timeout * self.poll_retries
    }
}

/// The built-in defaults: the legacy plugin's, as [`KEYS`] shows them (a unit test checks).
impl Default for Contrail {
    fn default() -> Contrail {
        Contrail {
            vrouter_ip: IpAddr::from([127, 0, 0, 1]),
            vrouter_port: 9091,
            agent_rate: DEFAULT_AGENT_RATE,
            config_dir: PathBuf::from("/var/lib/contrail/ports/vm"),
            poll_timeout: Duration::from_secs(3),
            poll_retries: 20,
            cluster_name: "k8s".into(),
            mtu: 1500,
            log_file: Some(PathBuf::from("/var/log/contrail/cni/opencontrail.log")),
            log_level: LevelFilter::Info,
            mode: Mode::Plugin,
            meta_plugin: MetaPlugin::Multus,
            metrics_file: None,
            vif_type: VifType::Veth,
            parent_interface: "eth0".into(),
            interface_type: InterfaceType::Veth,
            vrouter_socket_dir: PathBuf::from("/var/run/vrouter"),
            vhost_dir: PathBuf::from("/var/run/contrail-k8s-cni/vhost"),
            vhost_pod_dir: PathBuf::from("/var/run/vhost"),
            vrouter_mode: VrouterMode::Auto,
            device_info_dir: PathBuf::from("/var/run/k8s.cni.cncf.io/devinfo/cni"),
        }
    }
}

impl Contrail {
    /// The node-scoped keys on which `other` differs from these settings: every one of
    /// [`KEYS`], so that none can be taken from stdin by omission.
    fn differing(&self, other: &Contrail) -> Vec<&'static str> {
        KEYS.iter()
            .filter(|k| k.scope == Scope::Node && !k.same(self, other))
            .map(|k| k.name)
            .collect()
    }

    /// Limits that span keys, on the node's settings.
    fn check(&self, source: &str) -> Result<()> {
        if self.poll_budget() > MAX_BUDGET {
            return Err(Error::config(
                format!("contrail.poll-timeout x contrail.poll-retries (from {source})"),
                format!(
                    "{:.3} s x {} is more than the {} s a call may wait for the agent",
                    self.poll_timeout.as_secs_f64(),
                    self.poll_retries,
                    MAX_BUDGET.as_secs()
                ),
            ));
        }
        // Everything below config-dir is the state directory's: UUID-named files are read as
        // attachments, and a pod's directory is removed with its last one.
        for (key, file) in [
            ("log-file", &self.log_file),
            ("metrics-file", &self.metrics_file),
        ] {
            if let Some(f) = file.as_ref().filter(|f| f.starts_with(&self.config_dir)) {
                return Err(Error::config(
                    format!("contrail.{key} (from {source})"),
                    format!(
                        "{} is inside config-dir {}, which holds the state files only",
                        f.display(),
                        self.config_dir.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The kind of interface an attachment gets (`vif-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VifType {
    /// A veth pair, its host end registered with the node's vRouter agent.
    Veth,
    /// Nested mode (the node is a VM of the hypervisor's vRouter): an 802.1Q sub-interface of
    /// `parent-interface` with the VMI's tag, and a macvlan on it in the pod. Never registered.
    Macvlan,
}

/// What a network's attachments are, as its config asks (`interface-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterfaceType {
    /// A kernel interface in the pod, of the node's `vif-type`.
    Veth,
    /// A vhost-user socket for a DPDK application, registered with `POST /port` (DPDK
    /// vRouter nodes only; see docs/vhost-user.md).
    VhostUser,
}

/// The node's vRouter, as `vrouter-mode` says or lets the plugin find out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VrouterMode {
    /// DPDK when `<vrouter-socket-dir>/dpdk_netlink` exists, as TF's vrouter-port-control
    /// checks.
    Auto,
    Dpdk,
    Kernel,
}

/// The file whose presence in the vRouter's socket directory says it is vrouter-dpdk.
pub const DPDK_NETLINK: &str = "dpdk_netlink";

impl Contrail {
    /// Whether the node's vRouter is DPDK: as `vrouter-mode` says, or (`auto`) whether
    /// `<vrouter-socket-dir>/dpdk_netlink` exists.
    pub fn vrouter_is_dpdk(&self) -> bool {
        match self.vrouter_mode {
            VrouterMode::Dpdk => true,
            VrouterMode::Kernel => false,
            VrouterMode::Auto => self.vrouter_socket_dir.join(DPDK_NETLINK).exists(),
        }
    }
}

/// One entry of GC's list of attachments still in use.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ValidAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// Where the node-wide file is looked for, and the one found there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFile {
    pub dir: PathBuf,
    pub path: Option<PathBuf>,
}

impl NodeFile {
    /// How an operator finds it, for messages: the file, or where one would go.
    pub fn describe(&self) -> String {
        match &self.path {
            Some(p) => p.display().to_string(),
            None => format!("none: there is no *contrail.conf in {}", self.dir.display()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    pub cni_version: Version,
    /// The Contrail network this attachment is for (`default` for the cluster pod network).
    pub network: String,
    pub prev_result: Option<Map<String, Value>>,
    pub runtime_config: Option<Map<String, Value>>,
    /// `args`, where Multus puts a network selection's `cni-args` under `cni`.
    pub args: Option<Map<String, Value>>,
    /// GC's still-valid attachments: none when not given (cnitool 1.3's `gc` sends no list,
    /// libcni 1.3 an empty one as `null`); GC keeps whatever is not provably gone anyway.
    pub valid_attachments: Vec<ValidAttachment>,
    /// About stdin's unknown keys, for the log: one line, whatever their number.
    pub warnings: Vec<String>,
    /// Node-scoped keys that stdin sets to another value than the node's: the node's values
    /// are in `contrail`; the call decides what to do (see [`NetConf::refusal`]).
    pub refused: Vec<&'static str>,
    pub node_file: NodeFile,
    pub contrail: Contrail,
}

impl NetConf {
    /// The error for stdin's attempt to set node-scoped keys, if it made one.
    pub fn refusal(&self) -> Option<Error> {
        (!self.refused.is_empty()).then(|| Error::NodeKeys {
            keys: self.refused.clone(),
            network: self.network.clone(),
            node_file: self.node_file.describe(),
        })
    }
}

/// What stdin may carry; anything else in it (`type`, `ipam`, `dns`, a runtime's additions)
/// is accepted and ignored.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object")]
struct Stdin {
    #[serde(rename = "cniVersion")]
    cni_version: Option<String>,
    name: Option<String>,
    #[serde(rename = "prevResult")]
    prev_result: Option<Map<String, Value>>,
    #[serde(rename = "runtimeConfig")]
    runtime_config: Option<Map<String, Value>>,
    args: Option<Map<String, Value>>,
    /// GC's list under its CNI 1.1 name...
    #[serde(
        rename = "cni.dev/valid-attachments",
        default,
        deserialize_with = "null_is_none_in_use"
    )]
    valid_attachments: Option<Vec<ValidAttachment>>,
    /// ...and under the older one libcni sends too.
    #[serde(
        rename = "cni.dev/attachments",
        default,
        deserialize_with = "null_is_none_in_use"
    )]
    attachments: Option<Vec<ValidAttachment>>,
    contrail: Option<Map<String, Value>>,
}

/// A GC list that is there: libcni 1.3 encodes "no attachment in use" as `null` (CRI-O sends
/// it to every config no pod uses directly), an empty list; the 1.1 name's wins over the
/// older one's, even so.
fn null_is_none_in_use<'de, D>(d: D) -> std::result::Result<Option<Vec<ValidAttachment>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(Some(
        Option::<Vec<ValidAttachment>>::deserialize(d)?.unwrap_or_default(),
    ))
}

/// The log line about a source's keys this plugin does not know, if there are any: one line,
/// however many, each key escaped and cut short (they come from whoever wrote the source).
fn unknown_warning(unknown: &[String], source: &str) -> Option<String> {
    const SHOWN: usize = 5;
    if unknown.is_empty() {
        return None;
    }
    let mut names: Vec<String> = unknown
        .iter()
        .take(SHOWN)
        .map(|k| format!("contrail.{}", crate::text::Shown(k)))
        .collect();
    if unknown.len() > SHOWN {
        names.push(format!("and {} more", unknown.len() - SHOWN));
    }
    Some(format!(
        "ignoring {} unknown key(s) (from {source}): {}",
        unknown.len(),
        names.join(", ")
    ))
}

/// The directory the node-wide file is looked for in: `CONTRAIL_CNI_CONF_DIR` or the default.
pub(crate) fn node_conf_dir() -> PathBuf {
    std::env::var_os(NODE_CONF_DIR_ENV)
        .map_or_else(|| PathBuf::from(DEFAULT_NODE_CONF_DIR), PathBuf::from)
}

/// The node-wide file in `dir`: the first `*contrail.conf` or `*tf-cni.conf` by name, as the
/// legacy plugin picks it, with its JSON. None when there is none (or no such directory).
pub(crate) fn find_node_file(dir: &Path) -> Result<(NodeFile, Option<Value>)> {
    let none = || NodeFile {
        dir: dir.to_path_buf(),
        path: None,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((none(), None)),
        Err(e) => return Err(Error::io("reading node config directory", dir)(e)),
    };
    let mut names: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with("contrail.conf") || name.ends_with("tf-cni.conf")
        })
        .collect();
    names.sort();
    match names.into_iter().next() {
        None => Ok((none(), None)),
        Some(path) => read_node_file(&path).map(|v| {
            let file = NodeFile {
                dir: dir.to_path_buf(),
                path: Some(path),
            };
            (file, Some(v))
        }),
    }
}

/// Reads a node-wide file (followed if a symlink: a ConfigMap mount is made of them).
pub(crate) fn read_node_file(path: &Path) -> Result<Value> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_NODE_FILE + 1).read_to_end(&mut bytes))
        .map_err(Error::io("reading node config", path))?;
    if bytes.len() as u64 > MAX_NODE_FILE {
        return Err(Error::config(
            path.display(),
            format!("is larger than {MAX_NODE_FILE} bytes"),
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        Error::config(
            format!("node config {}", path.display()),
            format!("not valid JSON: {e}"),
        )
    })
}

/// The node's settings: the built-in defaults under the node-wide file.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub file: NodeFile,
    pub contrail: Contrail,
    /// About the node-wide file's unknown keys, for the log.
    pub warnings: Vec<String>,
}

/// The node's settings from the node-wide file in [`node_conf_dir`].
pub(crate) fn load_node() -> Result<Node> {
    let (file, value) = find_node_file(&node_conf_dir())?;
    node(file, value.as_ref())
}

/// The node's settings from the node-wide file at `path` (given by hand: `inspect --config`,
/// `install --conf`).
pub(crate) fn load_node_from(path: &Path) -> Result<Node> {
    let file = NodeFile {
        dir: path.parent().unwrap_or(Path::new("/")).to_path_buf(),
        path: Some(path.to_path_buf()),
    };
    node(file, Some(&read_node_file(path)?))
}

/// The node's settings from `value`, the node-wide file found as `file`. Pure.
pub fn node(file: NodeFile, value: Option<&Value>) -> Result<Node> {
    let source = file.describe();
    let (contrail, unknown) = match value.and_then(|v| v.get("contrail")) {
        None | Some(Value::Null) => (Contrail::default(), Vec::new()),
        Some(section) => keys::read(&Contrail::default(), section.clone(), &source)?,
    };
    let warnings = unknown_warning(&unknown, &source).into_iter().collect();
    contrail.check(&source)?;
    Ok(Node {
        file,
        contrail,
        warnings,
    })
}

/// Parses a call's stdin over the node's settings. Pure.
pub fn parse(stdin: &[u8], node: &Node) -> Result<NetConf> {
    let mut de = serde_json::Deserializer::from_slice(stdin);
    let conf: Stdin = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        if e.is_data() {
            let key = if path == "." { "(top level)" } else { &path };
            Error::config(key, e)
        } else {
            Error::NotJson(e.to_string())
        }
    })?;
    de.end().map_err(|e| Error::NotJson(e.to_string()))?;
    let version = match &conf.cni_version {
        Some(v) => Version::parse(v).ok_or_else(|| Error::Version(v.to_string()))?,
        None => return Err(Error::config("cniVersion", "missing")),
    };
    let name = conf.name.as_deref().unwrap_or("");
    let network = if DEFAULT_NETWORK_NAMES.contains(&name) {
        "default".to_string()
    } else if valid_name(name) {
        name.to_string()
    } else {
        return Err(Error::config(
            "name",
            format!("{name:?} must match [a-zA-Z0-9][a-zA-Z0-9_.-]*"),
        ));
    };
    let source = format!("stdin: network {network:?}");
    let mut section = conf.contrail.unwrap_or_default();
    // The node's keys: any value that does not read as the node's own (an invalid one
    // included) is refused as the node's to set, whatever it is.
    let mut refused = Vec::new();
    for key in KEYS.iter().filter(|k| k.scope == Scope::Node) {
        let Some(value) = section.remove(key.name).filter(|v| !v.is_null()) else {
            continue;
        };
        let one = Value::Object(Map::from_iter([(key.name.to_string(), value)]));
        let same = keys::read(&node.contrail, one, &source)
            .is_ok_and(|(c, _)| node.contrail.differing(&c).is_empty());
        if !same {
            refused.push(key.name);
        }
    }
    // What a network may choose (its interfaces' MTU): the rest of the section, now without a
    // node-scoped key, over the node's settings.
    let (contrail, unknown) = keys::read(&node.contrail, Value::Object(section), &source)?;
    debug_assert!(node.contrail.differing(&contrail).is_empty());
    Ok(NetConf {
        cni_version: version,
        network,
        prev_result: conf.prev_result,
        runtime_config: conf.runtime_config,
        args: conf.args,
        valid_attachments: conf
            .valid_attachments
            .or(conf.attachments)
            .unwrap_or_default(),
        warnings: unknown_warning(&unknown, &source).into_iter().collect(),
        refused,
        node_file: node.file.clone(),
        contrail,
    })
}

/// The network of a DEL whose config could not be read: no network's name (one starts with
/// `[a-zA-Z0-9]`).
const UNREAD_NETWORK: &str = "?";

impl NetConf {
    /// The network on stdin; `None` for a DEL whose config could not be read.
    pub fn read_network(&self) -> Option<&str> {
        (self.network != UNREAD_NETWORK).then_some(self.network.as_str())
    }

    /// A DEL's config when its stdin cannot be read (a NAD edited into nonsense, a runtime's
    /// cache cut short): the node's settings alone, which are all a DEL needs besides its
    /// environment. A pod must be able to go whatever its network's config became.
    pub fn node_only(node: &Node) -> NetConf {
        NetConf {
            cni_version: Version::NEWEST,
            network: UNREAD_NETWORK.into(),
            prev_result: None,
            runtime_config: None,
            args: None,
            valid_attachments: Vec::new(),
            warnings: Vec::new(),
            refused: Vec::new(),
            node_file: node.file.clone(),
            contrail: node.contrail.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
