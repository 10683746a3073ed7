//! Network configuration: the standard CNI fields plus the legacy `contrail` section, from two
//! sources that are trusted differently. The node-wide file is the node admin's; stdin is the
//! network's config, which whoever may create a NetworkAttachmentDefinition writes (often the
//! namespace's own users). So every key that names a node file, an address, an interface or a
//! budget is the node's ([`KEYS`]): taken from the built-in defaults and the node-wide file only.
//! Stdin may repeat such a key with the node's value (Multus's delegate configs and existing
//! NADs do); any other value is reported in [`NetConf::refused`] and refused by the call.
//!
//! [`parse`] is pure: the sources decoded by serde into typed settings (so that an error names
//! the key and its source), merged and validated. [`load`] reads the node-wide file first.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use log::LevelFilter;
use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
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
/// Each request holds the agent's DB for about 0.25 ms (README, "Polling and the node's request
/// budget"): 200 a second is 5% of its time, leaving the rest to the config work the waiting
/// calls wait for, and still a poll every 0.55 s for each of 110 waiting calls.
pub const DEFAULT_AGENT_RATE: u32 = 200;
/// A quarter of the agent's time at 0.25 ms a request: beyond, the budget no longer protects it.
pub const MAX_AGENT_RATE: u32 = 1000;
/// Below, a busy node's calls would wait for turns longer than their deadlines.
pub const MIN_AGENT_RATE: u32 = 10;
/// The node-wide file is a few hundred bytes; anything larger is not one.
const MAX_NODE_FILE: u64 = 1 << 20;

/// Who may set a key of the `contrail` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The node-wide file only: it names a node file, an address, an interface or a budget.
    Node,
    /// The network's config too: it changes nothing beyond the pod's own interface.
    Network,
}

/// Every key of the `contrail` section and who may set it (the README's tables follow this).
pub const KEYS: [(&str, Scope); 15] = [
    ("vrouter-ip", Scope::Node),
    ("vrouter-port", Scope::Node),
    ("agent-requests-per-second", Scope::Node),
    ("config-dir", Scope::Node),
    ("poll-timeout", Scope::Node),
    ("poll-retries", Scope::Node),
    ("cluster-name", Scope::Node),
    ("log-file", Scope::Node),
    ("log-level", Scope::Node),
    ("mode", Scope::Node),
    ("metrics-file", Scope::Node),
    ("vif-type", Scope::Node),
    ("parent-interface", Scope::Node),
    ("mtu", Scope::Network),
    // A legacy key with no effect here: meta-plugin detection is not needed.
    ("meta-plugin", Scope::Network),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One attachment per call (Multus, CNI-Genie): the default.
    Plugin,
    /// All of a pod's interfaces in one call (the `thick` build feature).
    #[cfg(feature = "thick")]
    Thick,
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
    /// A Prometheus text file every call adds itself to (node-exporter's textfile collector).
    pub metrics_file: Option<PathBuf>,
    pub vif_type: VifType,
    /// The node's interface that nested mode's VLANs are made on.
    pub parent_interface: String,
}

impl Contrail {
    /// The whole wait for the agent: poll-timeout x poll-retries, as the legacy plugin bounds it
    /// (at most [`MAX_BUDGET`]).
    pub fn poll_budget(&self) -> Duration {
        self.poll_timeout * self.poll_retries
    }
}

/// The built-in defaults: the legacy plugin's.
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
            metrics_file: None,
            vif_type: VifType::Veth,
            parent_interface: "eth0".into(),
        }
    }
}

impl Contrail {
    /// These settings with every key `s` sets.
    fn with(mut self, s: Settings) -> Contrail {
        macro_rules! take {
            ($($field:ident),*) => { $(if let Some(v) = s.$field { self.$field = v; })* };
        }
        take!(
            vrouter_ip,
            vrouter_port,
            agent_rate,
            config_dir,
            poll_timeout,
            poll_retries,
            cluster_name,
            mtu,
            log_file,
            log_level,
            mode,
            metrics_file,
            vif_type,
            parent_interface
        );
        self
    }

    /// The node-scoped keys `s` sets to something else than these settings have.
    fn differing(&self, s: &Settings) -> Vec<&'static str> {
        fn differs<T: PartialEq>(theirs: &Option<T>, ours: &T) -> bool {
            theirs.as_ref().is_some_and(|t| t != ours)
        }
        let keys = [
            ("vrouter-ip", differs(&s.vrouter_ip, &self.vrouter_ip)),
            ("vrouter-port", differs(&s.vrouter_port, &self.vrouter_port)),
            (
                "agent-requests-per-second",
                differs(&s.agent_rate, &self.agent_rate),
            ),
            ("config-dir", differs(&s.config_dir, &self.config_dir)),
            ("poll-timeout", differs(&s.poll_timeout, &self.poll_timeout)),
            ("poll-retries", differs(&s.poll_retries, &self.poll_retries)),
            ("cluster-name", differs(&s.cluster_name, &self.cluster_name)),
            ("log-file", differs(&s.log_file, &self.log_file)),
            ("log-level", differs(&s.log_level, &self.log_level)),
            ("mode", differs(&s.mode, &self.mode)),
            ("metrics-file", differs(&s.metrics_file, &self.metrics_file)),
            ("vif-type", differs(&s.vif_type, &self.vif_type)),
            (
                "parent-interface",
                differs(&s.parent_interface, &self.parent_interface),
            ),
        ];
        keys.into_iter()
            .filter_map(|(key, differs)| differs.then_some(key))
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

impl VifType {
    /// Whether the node registers its ports with the agent (`POST /vm`). A nested node never
    /// does: the hypervisor's agent makes a VLAN sub-interface's port from its config alone, and
    /// a registration would turn it into a tap on the hypervisor, which does not exist.
    pub fn registers(self) -> bool {
        self == VifType::Veth
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
    /// GC's still-valid attachments; `None` when not given.
    pub valid_attachments: Option<Vec<ValidAttachment>>,
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
    #[serde(rename = "cni.dev/valid-attachments")]
    valid_attachments: Option<Vec<ValidAttachment>>,
    /// ...and under the older one libcni sends too.
    #[serde(rename = "cni.dev/attachments")]
    attachments: Option<Vec<ValidAttachment>>,
    contrail: Option<Map<String, Value>>,
}

/// A scalar as legacy configs write it: `9091` or `"9091"`, `4` or `"info"`. Kept as text;
/// a numeric key reads it as a number when it is validated.
#[derive(Debug, Clone, PartialEq)]
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Scalar, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Scalar, E> {
                Ok(Scalar(s.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The `contrail` section of one source, as written. `null` counts as absent.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Raw {
    vrouter_ip: Option<String>,
    vrouter_port: Option<Scalar>,
    agent_requests_per_second: Option<Scalar>,
    config_dir: Option<String>,
    poll_timeout: Option<Scalar>,
    poll_retries: Option<Scalar>,
    cluster_name: Option<String>,
    mtu: Option<Scalar>,
    log_file: Option<String>,
    log_level: Option<Scalar>,
    mode: Option<String>,
    metrics_file: Option<String>,
    vif_type: Option<String>,
    parent_interface: Option<String>,
    #[serde(rename = "meta-plugin")]
    _meta_plugin: Option<String>,
    #[serde(flatten)]
    unknown: serde_json::Map<String, Value>,
}

/// The keys one source sets, typed and validated.
#[derive(Debug, Default)]
struct Settings {
    vrouter_ip: Option<IpAddr>,
    vrouter_port: Option<u16>,
    agent_rate: Option<u32>,
    config_dir: Option<PathBuf>,
    poll_timeout: Option<Duration>,
    poll_retries: Option<u32>,
    cluster_name: Option<String>,
    mtu: Option<u32>,
    log_file: Option<Option<PathBuf>>,
    log_level: Option<LevelFilter>,
    mode: Option<Mode>,
    metrics_file: Option<Option<PathBuf>>,
    vif_type: Option<VifType>,
    parent_interface: Option<String>,
    unknown: Vec<String>,
}

impl Settings {
    /// Decodes and validates the `contrail` section of `source`; errors name the key and source.
    fn read(section: Value, source: &str) -> Result<Settings> {
        let raw: Raw = decode(section, "contrail", source)?;
        let key = |k: &'static str| Key { key: k, source };
        let path = |k: &'static str, v: Option<String>, empty: bool| {
            v.map(|v| key(k).path(&v, empty)).transpose()
        };
        let mut unknown: Vec<String> = raw.unknown.into_iter().map(|(k, _)| k).collect();
        unknown.sort();
        Ok(Settings {
            vrouter_ip: raw
                .vrouter_ip
                .map(|v| {
                    v.parse()
                        .map_err(|_| key("vrouter-ip").err(format!("{v:?} is not an IP address")))
                })
                .transpose()?,
            vrouter_port: raw
                .vrouter_port
                .map(|v| key("vrouter-port").integer(&v, 1, 65535).map(|p| p as u16))
                .transpose()?,
            agent_rate: raw
                .agent_requests_per_second
                .map(|v| {
                    key("agent-requests-per-second").integer(&v, MIN_AGENT_RATE, MAX_AGENT_RATE)
                })
                .transpose()?,
            config_dir: path("config-dir", raw.config_dir, false)?.flatten(),
            poll_timeout: raw
                .poll_timeout
                .map(|v| key("poll-timeout").number(&v, 0.01, 60.0))
                .transpose()?
                .map(Duration::from_secs_f64),
            poll_retries: raw
                .poll_retries
                .map(|v| key("poll-retries").integer(&v, 1, 10_000))
                .transpose()?,
            cluster_name: raw
                .cluster_name
                .map(|c| {
                    if valid_name(&c) {
                        Ok(c)
                    } else {
                        Err(key("cluster-name")
                            .err(format!("{c:?} must match [a-zA-Z0-9][a-zA-Z0-9_.-]*")))
                    }
                })
                .transpose()?,
            // 68 is the IPv4 minimum; IPv6 needs 1280, checked once the agent says the VMI has v6.
            mtu: raw
                .mtu
                .map(|v| key("mtu").integer(&v, 68, 65535))
                .transpose()?,
            log_file: path("log-file", raw.log_file, true)?,
            log_level: raw
                .log_level
                .map(|l| {
                    parse_level(&l.0).ok_or_else(|| {
                        key("log-level").err(format!(
                            "{:?} is not 0..6 or error/warn/info/debug/trace",
                            l.0
                        ))
                    })
                })
                .transpose()?,
            mode: raw
                .mode
                .map(|m| parse_mode(&m).map_err(|why| key("mode").err(why)))
                .transpose()?,
            // "" turns it off.
            metrics_file: path("metrics-file", raw.metrics_file, true)?,
            vif_type: raw
                .vif_type
                .map(|v| match v.as_str() {
                    "veth" => Ok(VifType::Veth),
                    "macvlan" => Ok(VifType::Macvlan),
                    _ => Err(key("vif-type").err(format!(
                        "{v:?} must be \"veth\" or \"macvlan\" (nested mode)"
                    ))),
                })
                .transpose()?,
            parent_interface: raw
                .parent_interface
                .map(|i| match crate::cni::check_ifname(&i) {
                    Ok(()) => Ok(i),
                    Err(why) => Err(key("parent-interface").err(format!("{i:?} {why}"))),
                })
                .transpose()?,
            unknown,
        })
    }

    /// The log line about keys this plugin does not know, if there are any: one line, however
    /// many, each key escaped and cut short (they come from whoever wrote the source).
    fn unknown_warning(&self, source: &str) -> Option<String> {
        const SHOWN: usize = 5;
        if self.unknown.is_empty() {
            return None;
        }
        let mut names: Vec<String> = self
            .unknown
            .iter()
            .take(SHOWN)
            .map(|k| format!("contrail.{}", crate::ops::logging::Shown(k)))
            .collect();
        if self.unknown.len() > SHOWN {
            names.push(format!("and {} more", self.unknown.len() - SHOWN));
        }
        Some(format!(
            "ignoring {} unknown key(s) (from {source}): {}",
            self.unknown.len(),
            names.join(", ")
        ))
    }
}

/// A key of one source, for validation and its errors.
struct Key<'a> {
    key: &'static str,
    source: &'a str,
}

impl Key<'_> {
    fn err(&self, why: impl fmt::Display) -> Error {
        Error::config(format!("contrail.{} (from {})", self.key, self.source), why)
    }

    /// A number within `min..=max`.
    fn number(&self, s: &Scalar, min: f64, max: f64) -> Result<f64> {
        match s.0.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && (min..=max).contains(&v) => Ok(v),
            _ => Err(self.err(format!("{:?} must be a number from {min} to {max}", s.0))),
        }
    }

    /// A whole number within `min..=max`.
    fn integer(&self, s: &Scalar, min: u32, max: u32) -> Result<u32> {
        let v = self.number(s, min.into(), max.into())?;
        if v.fract() != 0.0 {
            return Err(self.err(format!("{v} must be a whole number")));
        }
        Ok(v as u32)
    }

    /// An absolute path without `..`; "" means none when `allow_empty`.
    fn path(&self, s: &str, allow_empty: bool) -> Result<Option<PathBuf>> {
        if s.is_empty() && allow_empty {
            return Ok(None);
        }
        if !s.starts_with('/') || s.contains('\0') || s.split('/').any(|c| c == "..") {
            return Err(self.err(format!("{s:?} must be an absolute path without '..'")));
        }
        Ok(Some(PathBuf::from(s)))
    }
}

/// Decodes `v` as a `T`, naming the failing key in a code-7 error under `prefix`.
fn decode<T: DeserializeOwned>(v: Value, prefix: &str, source: &str) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let key = match (prefix, path.as_str()) {
            (p, ".") => p.to_string(),
            ("", k) => k.to_string(),
            (p, k) => format!("{p}.{k}"),
        };
        Error::config(format!("{key} (from {source})"), e.into_inner())
    })
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
    let settings = match value.and_then(|v| v.get("contrail")) {
        None | Some(Value::Null) => Settings::default(),
        Some(section) => Settings::read(section.clone(), &source)?,
    };
    let warnings = settings.unknown_warning(&source).into_iter().collect();
    let contrail = Contrail::default().with(settings);
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
            Error::NotJson(e)
        }
    })?;
    de.end().map_err(Error::NotJson)?;
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
    for (key, _) in KEYS.iter().filter(|(_, scope)| *scope == Scope::Node) {
        let Some(value) = section.remove(*key).filter(|v| !v.is_null()) else {
            continue;
        };
        let one = Value::Object(Map::from_iter([(key.to_string(), value)]));
        let same =
            Settings::read(one, &source).is_ok_and(|s| node.contrail.differing(&s).is_empty());
        if !same {
            refused.push(*key);
        }
    }
    let stdin = Settings::read(Value::Object(section), &source)?;
    // What a network may choose: its interfaces' MTU.
    let contrail = Contrail {
        mtu: stdin.mtu.unwrap_or(node.contrail.mtu),
        ..node.contrail.clone()
    };
    Ok(NetConf {
        cni_version: version,
        network,
        prev_result: conf.prev_result,
        runtime_config: conf.runtime_config,
        args: conf.args,
        valid_attachments: conf.valid_attachments.or(conf.attachments),
        warnings: stdin.unknown_warning(&source).into_iter().collect(),
        refused,
        node_file: node.file.clone(),
        contrail,
    })
}

impl NetConf {
    /// A DEL's config when its stdin cannot be read (a NAD edited into nonsense, a runtime's
    /// cache cut short): the node's settings alone, which are all a DEL needs besides its
    /// environment. A pod must be able to go whatever its network's config became.
    pub fn node_only(node: &Node) -> NetConf {
        NetConf {
            cni_version: Version::NEWEST,
            network: "?".into(),
            prev_result: None,
            runtime_config: None,
            args: None,
            valid_attachments: None,
            warnings: Vec::new(),
            refused: Vec::new(),
            node_file: node.file.clone(),
            contrail: node.contrail.clone(),
        }
    }
}

fn parse_mode(s: &str) -> std::result::Result<Mode, String> {
    match s {
        // The legacy plugin's `mode` named the orchestrator; "k8s" is per-interface here.
        "plugin" | "k8s" => Ok(Mode::Plugin),
        #[cfg(feature = "thick")]
        "thick" => Ok(Mode::Thick),
        #[cfg(not(feature = "thick"))]
        "thick" => Err(
            "\"thick\" needs a build with thick mode: cargo build --release --features thick"
                .to_string(),
        ),
        other => Err(format!("{other:?} must be \"plugin\" or \"thick\"")),
    }
}

/// The legacy plugin's numeric levels (logrus: 2 error .. 6 trace) or names.
fn parse_level(s: &str) -> Option<LevelFilter> {
    Some(match s.trim().to_ascii_lowercase().as_str() {
        "0" | "1" | "2" | "error" => LevelFilter::Error,
        "3" | "warn" | "warning" => LevelFilter::Warn,
        "4" | "info" => LevelFilter::Info,
        "5" | "debug" => LevelFilter::Debug,
        "6" | "trace" => LevelFilter::Trace,
        "off" => LevelFilter::Off,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::code;
    use serde_json::json;

    fn no_file() -> NodeFile {
        NodeFile {
            dir: PathBuf::from("/etc/cni/net.d"),
            path: None,
        }
    }

    fn file() -> NodeFile {
        NodeFile {
            dir: PathBuf::from("/etc/cni/net.d"),
            path: Some(PathBuf::from("/etc/cni/net.d/10-contrail.conf")),
        }
    }

    fn parse_json(v: Value) -> Result<NetConf> {
        parse(v.to_string().as_bytes(), &node(no_file(), None).unwrap())
    }

    /// stdin's config over a node-wide file with this `contrail` section.
    fn over(section: Value, stdin: Value) -> Result<NetConf> {
        let value = json!({"cniVersion": "1.0.0", "contrail": section});
        let node = node(file(), Some(&value))?;
        let mut conf = parse(stdin.to_string().as_bytes(), &node)?;
        conf.warnings.splice(0..0, node.warnings);
        Ok(conf)
    }

    #[test]
    fn minimal_nad_config_gets_legacy_defaults() {
        let c =
            parse_json(json!({"cniVersion": "0.3.0", "type": "contrail-k8s-cni", "name": "net-a"}))
                .unwrap();
        assert_eq!(c.cni_version, Version::V030);
        assert_eq!(c.network, "net-a");
        assert_eq!(c.contrail, Contrail::default());
        let k = &c.contrail;
        assert_eq!(k.vrouter_ip.to_string(), "127.0.0.1");
        assert_eq!(k.vrouter_port, 9091);
        assert_eq!(k.config_dir, PathBuf::from("/var/lib/contrail/ports/vm"));
        assert_eq!(k.poll_budget(), Duration::from_secs(60));
        assert_eq!(k.cluster_name, "k8s");
        assert_eq!(k.mtu, 1500);
        assert_eq!(
            k.log_file,
            Some(PathBuf::from("/var/log/contrail/cni/opencontrail.log"))
        );
        assert_eq!(k.log_level, LevelFilter::Info);
        assert!(c.warnings.is_empty() && c.refused.is_empty());
    }

    #[test]
    fn empty_or_plugin_name_means_the_default_network() {
        for name in [json!(""), json!("contrail-k8s-cni"), Value::Null] {
            let c = parse_json(json!({"cniVersion": "1.0.0", "name": name})).unwrap();
            assert_eq!(c.network, "default");
        }
        let c = parse_json(json!({"cniVersion": "1.0.0"})).unwrap();
        assert_eq!(c.network, "default");
    }

    #[test]
    fn the_node_file_sets_node_keys_and_stdin_only_the_mtu() {
        let c = over(
            json!({"vrouter-port": 9999, "mtu": 1400, "poll-retries": 15}),
            json!({"cniVersion": "0.4.0", "name": "n", "contrail": {"mtu": 9000}}),
        )
        .unwrap();
        let k = &c.contrail;
        assert_eq!((k.vrouter_port, k.mtu, k.poll_retries), (9999, 9000, 15));
        assert!(c.refused.is_empty());
    }

    /// A value for every node-scoped key: the node's (as the node file says it, or another
    /// spelling of it) and another one.
    fn node_values() -> Vec<(&'static str, Value, Value, Value)> {
        vec![
            (
                "vrouter-ip",
                json!("127.0.0.1"),
                json!("127.0.0.1"),
                json!("10.0.0.9"),
            ),
            ("vrouter-port", json!(9091), json!("9091"), json!(9999)),
            (
                "agent-requests-per-second",
                json!(200),
                json!("200"),
                json!(1000),
            ),
            (
                "config-dir",
                json!("/var/lib/x"),
                json!("/var/lib/x"),
                json!("/etc"),
            ),
            ("poll-timeout", json!(3), json!("3.0"), json!(0.01)),
            ("poll-retries", json!(20), json!(20.0), json!(10_000)),
            ("cluster-name", json!("k8s"), json!("k8s"), json!("other")),
            (
                "log-file",
                json!("/var/log/c.log"),
                json!("/var/log//c.log"),
                json!(""),
            ),
            ("log-level", json!(4), json!("info"), json!("off")),
            ("mode", json!("plugin"), json!("k8s"), json!("plugin-x")),
            (
                "metrics-file",
                json!("/m/x.prom"),
                json!("/m/x.prom"),
                json!("/etc/passwd"),
            ),
            ("vif-type", json!("veth"), json!("veth"), json!("macvlan")),
            (
                "parent-interface",
                json!("eth0"),
                json!("eth0"),
                json!("eth1"),
            ),
        ]
    }

    #[test]
    fn stdin_may_repeat_node_keys_with_the_nodes_value_and_no_other() {
        let node_keys: Vec<&str> = KEYS
            .iter()
            .filter(|(_, s)| *s == Scope::Node)
            .map(|(k, _)| *k)
            .collect();
        let cases = node_values();
        assert_eq!(
            cases.iter().map(|c| c.0).collect::<Vec<_>>(),
            node_keys,
            "every node-scoped key is tried"
        );
        for (key, node, same, other) in cases {
            let node = json!({key: node});
            let stdin =
                |v: &Value| json!({"cniVersion": "1.0.0", "name": "net-a", "contrail": {key: v}});
            let c = over(node.clone(), stdin(&same)).unwrap();
            assert!(c.refused.is_empty(), "{key}: {same} is the node's value");
            // Another value is refused (or invalid: code 7 either way), and the node's wins.
            match over(node.clone(), stdin(&other)) {
                Ok(c) => {
                    assert_eq!(c.refused, [key], "{key}");
                    assert_eq!(
                        c.contrail,
                        over(node, json!({"cniVersion": "1.0.0"})).unwrap().contrail
                    );
                    let e = c.refusal().unwrap();
                    assert_eq!(e.code(), code::INVALID_CONFIG);
                    let msg = e.to_string();
                    for words in [
                        &format!("contrail.{key}"),
                        "\"net-a\"",
                        "/etc/cni/net.d/10-contrail.conf",
                    ] {
                        assert!(msg.contains(words), "{key}: {msg}");
                    }
                }
                Err(e) => assert_eq!(e.code(), code::INVALID_CONFIG, "{key}: {e}"),
            }
            // Without a node-wide file, stdin cannot change the defaults either.
            let c = parse_json(stdin(&other));
            assert!(
                c.as_ref().map_or(true, |c| !c.refused.is_empty()
                    || c.contrail == Contrail::default()),
                "{key}"
            );
        }
    }

    #[test]
    fn a_refusal_without_a_node_file_says_where_one_goes() {
        let c = parse_json(
            json!({"cniVersion": "1.0.0", "name": "n", "contrail": {"vrouter-port": 1}}),
        )
        .unwrap();
        let msg = c.refusal().unwrap().to_string();
        assert!(msg.contains("*contrail.conf in /etc/cni/net.d"), "{msg}");
    }

    #[test]
    fn numeric_strings_and_fractional_timeouts_are_accepted() {
        let c = over(
            json!({"vrouter-port": "9092", "poll-timeout": 0.25, "poll-retries": " 4 ", "log-level": 5, "log-file": ""}),
            json!({"cniVersion": "0.3.1"}),
        )
        .unwrap();
        assert_eq!(c.contrail.vrouter_port, 9092);
        assert_eq!(c.contrail.poll_budget(), Duration::from_secs(1));
        assert_eq!(c.contrail.log_level, LevelFilter::Debug);
        assert_eq!(c.contrail.log_file, None);
    }

    #[test]
    fn null_counts_as_absent() {
        let c = parse_json(
            json!({"cniVersion": "0.3.1", "contrail": {"mtu": null, "vrouter-port": null}}),
        )
        .unwrap();
        assert_eq!(c.contrail.mtu, 1500);
        assert!(c.refused.is_empty());
    }

    #[test]
    fn unknown_keys_become_one_warning_per_source() {
        let mut keys = Map::new();
        for i in 0..9000 {
            keys.insert(format!("k{i:04}\n\u{1b}[31mforged line"), json!(1));
        }
        let c = over(
            json!({"vrouter_ip": "127.0.0.1"}),
            json!({"cniVersion": "0.4.0", "name": "net-a", "contrail": keys}),
        )
        .unwrap();
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert_eq!(
            c.warnings[0],
            "ignoring 1 unknown key(s) (from /etc/cni/net.d/10-contrail.conf): contrail.vrouter_ip"
        );
        let w = &c.warnings[1];
        assert!(w.starts_with("ignoring 9000 unknown key(s) (from stdin: network \"net-a\"): contrail.k0000\\n\\u{1b}[31mforged line"), "{w}");
        assert!(
            w.ends_with("and 8995 more") && w.len() < 1000 && !w.contains('\n'),
            "{w}"
        );
    }

    #[test]
    fn legacy_mode_k8s_is_plugin_mode() {
        let c = over(
            json!({"mode": "k8s", "meta-plugin": "multus"}),
            json!({"cniVersion": "0.3.1"}),
        )
        .unwrap();
        assert_eq!(c.contrail.mode, Mode::Plugin);
        let thick = over(json!({"mode": "thick"}), json!({"cniVersion": "0.3.1"}));
        #[cfg(feature = "thick")]
        assert_eq!(thick.unwrap().contrail.mode, Mode::Thick);
        #[cfg(not(feature = "thick"))]
        assert!(thick.unwrap_err().to_string().contains("--features thick"));
    }

    #[test]
    fn invalid_values_name_their_key_and_source_with_code_7() {
        let cases = [
            ("vrouter-ip", json!("localhost")),
            ("vrouter-ip", json!(1)),
            ("vrouter-port", json!(0)),
            ("vrouter-port", json!(70000)),
            ("vrouter-port", json!("x")),
            ("config-dir", json!("relative")),
            ("config-dir", json!("/var/../etc")),
            ("poll-timeout", json!(0)),
            ("poll-timeout", json!(-1)),
            ("poll-timeout", json!(61)),
            ("poll-retries", json!(1.5)),
            ("poll-retries", json!(0)),
            ("cluster-name", json!("a/b")),
            ("cluster-name", json!("")),
            ("mtu", json!(67)),
            ("mtu", json!(65536)),
            ("mtu", json!(true)),
            ("log-file", json!("rel.log")),
            ("log-level", json!("loud")),
            ("log-level", json!([])),
            ("mode", json!("fat")),
            ("vif-type", json!("ipvlan")),
            ("parent-interface", json!("a/b")),
            ("meta-plugin", json!(1)),
        ];
        for (key, value) in cases {
            let err = over(json!({key: value}), json!({"cniVersion": "1.0.0"})).unwrap_err();
            assert_eq!(err.code(), code::INVALID_CONFIG, "{key}={value}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!(
                    "contrail.{key} (from /etc/cni/net.d/10-contrail.conf)"
                )),
                "{key}: {msg}"
            );
            // On stdin, a node-scoped key is refused whatever its value; the network's own keys
            // are checked.
            let stdin = json!({"cniVersion": "1.0.0", "contrail": {key: value}});
            match KEYS.iter().find(|(k, _)| *k == key).unwrap().1 {
                Scope::Node => assert_eq!(over(json!({}), stdin).unwrap().refused, [key]),
                Scope::Network => {
                    let msg = over(json!({}), stdin).unwrap_err().to_string();
                    assert!(
                        msg.contains(&format!("contrail.{key} (from stdin: network \"default\")")),
                        "{msg}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_nodes_budget_and_files_are_bounded() {
        let too_long = over(
            json!({"poll-timeout": 60, "poll-retries": 6}),
            json!({"cniVersion": "1.0.0"}),
        );
        let msg = too_long.unwrap_err().to_string();
        assert!(
            msg.contains("poll-timeout x contrail.poll-retries") && msg.contains("300 s"),
            "{msg}"
        );
        assert!(
            over(
                json!({"poll-timeout": 60, "poll-retries": 5}),
                json!({"cniVersion": "1.0.0"})
            )
            .is_ok()
        );
        for key in ["log-file", "metrics-file"] {
            let inside = over(
                json!({"config-dir": "/var/lib/c", key: "/var/lib/c/k8s__a__b/x"}),
                json!({"cniVersion": "1.0.0"}),
            );
            let msg = inside.unwrap_err().to_string();
            assert!(
                msg.contains(&format!("contrail.{key}")) && msg.contains("inside config-dir"),
                "{msg}"
            );
        }
    }

    #[test]
    fn errors_from_the_node_file_name_the_file() {
        for node in [
            json!({"contrail": {"mtu": 1}}),
            json!({"contrail": {"mtu": "x"}}),
            json!({"contrail": []}),
        ] {
            let err = super::node(file(), Some(&node)).unwrap_err();
            assert_eq!(err.code(), code::INVALID_CONFIG, "{node}");
            assert!(err.to_string().contains("10-contrail.conf"), "{err}");
        }
    }

    #[test]
    fn top_level_errors() {
        let parse_bytes = |b: &[u8]| parse(b, &node(no_file(), None).unwrap());
        assert_eq!(parse_bytes(b"{not json").unwrap_err().code(), code::DECODE);
        assert_eq!(parse_bytes(b"{} x").unwrap_err().code(), code::DECODE);
        let err = parse_bytes(b"[]").unwrap_err();
        assert_eq!(err.code(), code::INVALID_CONFIG);
        assert!(err.to_string().contains("a JSON object"), "{err}");
        for (conf, key) in [
            (json!({}), "cniVersion"),
            (json!({"cniVersion": 1}), "cniVersion"),
            (json!({"cniVersion": "1.0.0", "name": 3}), "name"),
            (json!({"cniVersion": "1.0.0", "name": "a/b"}), "name"),
            (json!({"cniVersion": "1.0.0", "contrail": []}), "contrail"),
            (
                json!({"cniVersion": "1.0.0", "prevResult": "x"}),
                "prevResult",
            ),
        ] {
            let err = parse_json(conf.clone()).unwrap_err();
            assert_eq!(err.code(), code::INVALID_CONFIG, "{conf}");
            assert!(err.to_string().contains(key), "{conf}: {err}");
        }
        assert_eq!(
            parse_json(json!({"cniVersion": "0.2.0"}))
                .unwrap_err()
                .code(),
            code::INCOMPATIBLE_VERSION
        );
    }

    #[test]
    fn gc_lists_under_either_name() {
        let list = json!([{"containerID": "c1", "ifname": "eth0"}]);
        let c1 = ValidAttachment {
            container_id: "c1".into(),
            ifname: "eth0".into(),
        };
        for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
            let c = parse_json(json!({"cniVersion": "1.1.0", key: list})).unwrap();
            assert_eq!(c.valid_attachments, Some(vec![c1.clone()]));
        }
        // libcni sends both names: the 1.1 one wins.
        let c = parse_json(
            json!({"cniVersion": "1.1.0", "cni.dev/valid-attachments": list,
            "cni.dev/attachments": []}),
        )
        .unwrap();
        assert_eq!(c.valid_attachments, Some(vec![c1]));
        assert_eq!(
            parse_json(json!({"cniVersion": "1.1.0"}))
                .unwrap()
                .valid_attachments,
            None
        );
        for bad in [
            json!("x"),
            json!([{"containerID": 1, "ifname": "eth0"}]),
            json!([{"ifname": "eth0"}]),
        ] {
            let err = parse_json(json!({"cniVersion": "1.1.0", "cni.dev/valid-attachments": bad}))
                .unwrap_err();
            assert_eq!(err.code(), code::INVALID_CONFIG);
            assert!(
                err.to_string().contains("cni.dev/valid-attachments"),
                "{err}"
            );
        }
    }

    #[test]
    fn multus_additions_are_accepted() {
        let c = parse_json(json!({"cniVersion": "0.3.1", "name": "net-a", "type": "contrail-k8s-cni",
            "args": {"cni": {"x": 1}}, "runtimeConfig": {"mac": "02:00:00:00:00:09"}, "dns": {}, "ipam": {}}))
        .unwrap();
        assert!(c.runtime_config.is_some());
    }
}
