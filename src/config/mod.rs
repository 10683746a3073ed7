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
            .map(|k| format!("contrail.{}", crate::text::Shown(k)))
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
mod tests;
