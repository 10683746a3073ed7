//! The keys of the `contrail` section, in one table ([`KEYS`]): each key's name, kind (what a
//! value must be), default, scope and help, and the [`Contrail`] field it sets. Reading a source,
//! merging stdin over the node, the trust check, `--help` and the docs' tests all walk this
//! table: a key is added here, to [`Contrail`] and its `Default` (a unit test holds the table's
//! default to it), and to the tables of docs/configuration.md and docs/security.md
//! (`tests/readme.rs` compares them).

use std::fmt::{self, Write as _};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use log::LevelFilter;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_json::{Map, Value};

use super::{
    Contrail, InterfaceType, MAX_AGENT_RATE, MIN_AGENT_RATE, MetaPlugin, Mode, VifType, VrouterMode,
};
use crate::cni::{check_ifname, valid_name};
use crate::error::{Error, Result};

/// Who may set a key of the `contrail` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The node-wide file only: it names a node file, an address, an interface or a budget.
    Node,
    /// The network's config too: it changes nothing beyond the pod's own interface.
    Network,
}

impl Scope {
    /// As the docs' tables and `--help` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Node => "node",
            Scope::Network => "network",
        }
    }
}

/// What a key's value must be. Numbers may also be written as strings (`"9091"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// An IPv4 or IPv6 address.
    Ip,
    /// A whole number within `min..=max`.
    Integer { min: u32, max: u32 },
    /// A number of seconds within `min..=max`.
    Seconds { min: f64, max: f64 },
    /// An absolute path without `..`; when `optional`, `""` means none.
    Path { optional: bool },
    /// A name as the agent's VM names take it: `[a-zA-Z0-9][a-zA-Z0-9_.-]*`.
    Name,
    /// A network interface's name (the `CNI_IFNAME` rule).
    Interface,
    /// A log level: the legacy plugin's 0..6 or a name.
    Level,
    /// One of these words (as this build accepts them).
    Choice(&'static [&'static str]),
}

impl Kind {
    /// Whether a value is written as a number (or a numeric string) rather than a string.
    fn numeric(self) -> bool {
        matches!(
            self,
            Kind::Integer { .. } | Kind::Seconds { .. } | Kind::Level
        )
    }

    /// Validates a value as written, naming `key` in the error.
    fn read(self, key: &Key, raw: Written) -> Result<Parsed> {
        let text = |raw: Written| match raw {
            Written::Text(s) => s,
            Written::Scalar(s) => s.0,
        };
        Ok(match self {
            Kind::Ip => {
                let v = text(raw);
                Parsed::Ip(
                    v.parse()
                        .map_err(|_| key.err(format!("{v:?} is not an IP address")))?,
                )
            }
            Kind::Integer { min, max } => Parsed::Whole(key.integer(&text(raw), min, max)?),
            Kind::Seconds { min, max } => Parsed::Seconds(key.number(&text(raw), min, max)?),
            Kind::Path { optional } => Parsed::Path(key.path(&text(raw), optional)?),
            Kind::Name => {
                let c = text(raw);
                if !valid_name(&c) {
                    return Err(key.err(format!("{c:?} must match [a-zA-Z0-9][a-zA-Z0-9_.-]*")));
                }
                Parsed::Text(c)
            }
            Kind::Interface => {
                let i = text(raw);
                if let Err(why) = check_ifname(&i) {
                    return Err(key.err(format!("{i:?} {why}")));
                }
                Parsed::Text(i)
            }
            Kind::Level => {
                let l = text(raw);
                Parsed::Level(parse_level(&l).ok_or_else(|| {
                    key.err(format!("{l:?} is not 0..6 or error/warn/info/debug/trace"))
                })?)
            }
            // The key's own reading checks the word, with its own message.
            Kind::Choice(_) => Parsed::Text(text(raw)),
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Kind::Ip => f.write_str("an IP address"),
            Kind::Integer { min, max } => write!(f, "a whole number, {min} to {max}"),
            Kind::Seconds { min, max } => write!(f, "seconds, {min} to {max}"),
            Kind::Path { optional: false } => f.write_str("an absolute path"),
            Kind::Path { optional: true } => f.write_str("an absolute path, or \"\" for none"),
            Kind::Name => f.write_str("a name, [a-zA-Z0-9][a-zA-Z0-9_.-]*"),
            Kind::Interface => f.write_str("an interface name"),
            Kind::Level => f.write_str("0..6 or error/warn/info/debug/trace/off"),
            Kind::Choice(words) => write!(f, "one of {}", words.join(", ")),
        }
    }
}

/// One key of the `contrail` section.
pub struct KeySpec {
    pub name: &'static str,
    pub scope: Scope,
    pub kind: Kind,
    /// The built-in default as a source would write it (`""`: none). [`Contrail::default`]
    /// reads as it (a unit test checks).
    pub default: &'static str,
    /// One line for operators (`--help`).
    pub help: &'static str,
    /// Sets the key's field of a [`Contrail`] to a validated value.
    set: for<'a> fn(&mut Contrail, Parsed, &Key<'a>) -> Result<()>,
    /// Whether two settings agree on the key.
    same: fn(&Contrail, &Contrail) -> bool,
}

impl fmt::Debug for KeySpec {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_struct("KeySpec")
            .field("name", &self.name)
            .field("scope", &self.scope)
            .field("kind", &self.kind)
            .field("default", &self.default)
            .finish_non_exhaustive()
    }
}

impl KeySpec {
    /// Whether `a` and `b` agree on this key.
    pub fn same(&self, a: &Contrail, b: &Contrail) -> bool {
        (self.same)(a, b)
    }
}

/// A key that sets the [`Contrail`] field `$field` to `$value`, an expression of the validated
/// value `$v` (and the key `$k`, for errors).
macro_rules! field {
    ($field:ident, |$v:ident, $k:tt| $value:expr) => {
        (
            |c: &mut Contrail, $v: Parsed, $k: &Key| -> Result<()> {
                c.$field = $value;
                Ok(())
            },
            |a: &Contrail, b: &Contrail| a.$field == b.$field,
        )
    };
}

/// The table's rows: name, scope, kind, default, help, and the field set.
macro_rules! keys {
    ($($name:literal, $scope:ident, $kind:expr, $default:literal, $help:literal, $field:expr;)*) => {
        /// Every key of the `contrail` section, in the order of docs/configuration.md.
        pub static KEYS: &[KeySpec] = &[$(KeySpec {
            name: $name,
            scope: Scope::$scope,
            kind: $kind,
            default: $default,
            help: $help,
            set: $field.0,
            same: $field.1,
        }),*];
    };
}

/// The modes this build accepts (`k8s` is the legacy plugin's name for `plugin`).
const MODES: &[&str] = if cfg!(feature = "thick") {
    &["plugin", "k8s", "thick"]
} else {
    &["plugin", "k8s"]
};

keys! {
    "vrouter-ip", Node, Kind::Ip, "127.0.0.1",
        "the agent's address (IPv4 or IPv6)",
        field!(vrouter_ip, |v, _| v.ip());
    "vrouter-port", Node, Kind::Integer { min: 1, max: 65535 }, "9091",
        "the agent's port",
        field!(vrouter_port, |v, _| v.whole() as u16);
    "agent-requests-per-second", Node,
        Kind::Integer { min: MIN_AGENT_RATE, max: MAX_AGENT_RATE }, "200",
        "the node's request budget to the agent: all calls on the node together send at most \
         this many requests a second",
        field!(agent_rate, |v, _| v.whole());
    "config-dir", Node, Kind::Path { optional: false }, "/var/lib/contrail/ports/vm",
        "state directory, shared with the agent",
        field!(config_dir, |v, _| v.path().expect("config-dir is not optional"));
    "poll-timeout", Node, Kind::Seconds { min: 0.01, max: 60.0 }, "3",
        "each request's timeout, and the unit of the wait",
        field!(poll_timeout, |v, _| Duration::from_secs_f64(v.seconds()));
    "poll-retries", Node, Kind::Integer { min: 1, max: 10_000 }, "20",
        "the whole wait for the agent is poll-timeout x poll-retries, at most 300 seconds",
        field!(poll_retries, |v, _| v.whole());
    "cluster-name", Node, Kind::Name, "k8s",
        "first part of the agent's VM name <cluster>__<ns>__<pod>",
        field!(cluster_name, |v, _| v.text());
    "log-file", Node, Kind::Path { optional: true }, "/var/log/contrail/cni/opencontrail.log",
        "appended to; \"\" logs to stderr only; not inside config-dir",
        field!(log_file, |v, _| v.path());
    "log-level", Node, Kind::Level, "4",
        "legacy numbers 0..6 (2 error, 3 warn, 4 info, 5 debug, 6 trace) or names; RUST_LOG \
         (the node's environment) overrides",
        field!(log_level, |v, _| v.level());
    "mode", Node, Kind::Choice(MODES), "plugin",
        "plugin (the legacy value k8s means the same) or thick (needs the thick build feature)",
        field!(mode, |v, k| parse_mode(&v.text()).map_err(|why| k.err(why))?);
    "meta-plugin", Node, Kind::Choice(&["multus", "genie"]), "multus",
        "who calls the plugin once per attachment: multus (a DEL names its attachment by \
         CNI_IFNAME) or genie (CNI-Genie DELs with the runtime's CNI_IFNAME: a DEL releases \
         every attachment of its network in the sandbox)",
        field!(meta_plugin, |v, k| parse_meta_plugin(&v.text()).map_err(|why| k.err(why))?);
    "metrics-file", Node, Kind::Path { optional: true }, "",
        "a Prometheus text file every call adds itself to, for node-exporter's textfile \
         collector; not inside config-dir",
        field!(metrics_file, |v, _| v.path());
    "vif-type", Node, Kind::Choice(&["veth", "macvlan"]), "veth",
        "veth: a veth pair per attachment, the agent on this node; macvlan: nested mode",
        field!(vif_type, |v, k| parse_vif_type(&v.text()).map_err(|why| k.err(why))?);
    "parent-interface", Node, Kind::Interface, "eth0",
        "nested mode: the node VM's NIC that carries the pods' VLANs (unused with veth)",
        field!(parent_interface, |v, _| v.text());
    "vrouter-socket-dir", Node, Kind::Path { optional: false }, "/var/run/vrouter",
        "vrouter-dpdk's socket directory (its --vr_socket_dir): vhost-user links uvh_vif_<name> \
         are made there; never mounted into a pod",
        field!(vrouter_socket_dir, |v, _| v.path().expect("vrouter-socket-dir is not optional"));
    "vhost-dir", Node, Kind::Path { optional: false }, "/var/run/contrail-k8s-cni/vhost",
        "root of the per-pod directories (named by the pod's UID) that hold vhost-user \
         sockets; must be on a nosymfollow mount (docs/vhost-user.md)",
        field!(vhost_dir, |v, _| v.path().expect("vhost-dir is not optional"));
    "vhost-pod-dir", Node, Kind::Path { optional: false }, "/var/run/vhost",
        "where pods mount their own directory of vhost-dir (hostPath with subPathExpr: \
         $(POD_UID)): the socket path as the application sees it",
        field!(vhost_pod_dir, |v, _| v.path().expect("vhost-pod-dir is not optional"));
    "vrouter-mode", Node, Kind::Choice(&["auto", "dpdk", "kernel"]), "auto",
        "auto: DPDK when <vrouter-socket-dir>/dpdk_netlink exists; dpdk or kernel say it",
        field!(vrouter_mode, |v, k| parse_vrouter_mode(&v.text()).map_err(|why| k.err(why))?);
    "device-info-dir", Node, Kind::Path { optional: false }, "/var/run/k8s.cni.cncf.io/devinfo/cni",
        "the only directory a vhost-user attachment's device-info file (runtimeConfig \
         CNIDeviceInfoFile, Multus's) is written in, under the name Multus gives it \
         (<network>-<CNI_CONTAINERID>_<CNI_IFNAME>); any other path is refused",
        field!(device_info_dir, |v, _| v.path().expect("device-info-dir is not optional"));
    "interface-type", Network, Kind::Choice(&["veth", "vhost-user"]), "veth",
        "veth: a kernel interface in the pod; vhost-user: a socket for a DPDK application \
         (DPDK vRouter nodes only)",
        field!(interface_type, |v, k| parse_interface_type(&v.text()).map_err(|why| k.err(why))?);
    // 68 is the IPv4 minimum; IPv6 needs 1280, checked once the agent says the VMI has v6.
    "mtu", Network, Kind::Integer { min: 68, max: 65535 }, "1500",
        "MTU of the pod's interface and its host side (1280 or more when the VMI has IPv6; in \
         nested mode at most the parent's)",
        field!(mtu, |v, _| v.whole());
}

/// The key named `name`, if the section has one.
pub fn spec(name: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|k| k.name == name)
}

/// The keys of the `contrail` section for an operator (`--help`): name, scope, default, what a
/// value must be, and what it does.
pub fn help() -> String {
    const WIDTH: usize = 78;
    const INDENT: &str = "      ";
    let mut out = wrap(
        "Keys of the `contrail` section. node: from the node-wide file only (a network's config \
         may repeat the node's value and no other); network: a network's config may set it too.",
        "",
        WIDTH,
    );
    out.push('\n');
    let name_width = KEYS.iter().map(|k| k.name.len()).max().unwrap_or(0);
    let _ = writeln!(out, "  {:name_width$}  {:7}  DEFAULT", "KEY", "SCOPE");
    for k in KEYS {
        let default = match k.default {
            "" => "(none)",
            d => d,
        };
        let _ = writeln!(
            out,
            "  {:name_width$}  {:7}  {default}",
            k.name,
            k.scope.as_str()
        );
        out.push_str(&wrap(
            &format!("{}. Value: {}.", k.help, k.kind),
            INDENT,
            WIDTH,
        ));
    }
    out
}

/// `text` cut into lines of at most `width` columns at spaces, each line after `indent`.
fn wrap(text: &str, indent: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::from(indent);
    for word in text.split_whitespace() {
        if line.len() > indent.len() && line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            line = String::from(indent);
        }
        if line.len() > indent.len() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// One source's `contrail` section read over `base`, and the keys it has that this plugin does
/// not know (sorted). Errors name the key and `source`; `null` counts as absent.
pub(super) fn read(
    base: &Contrail,
    section: Value,
    source: &str,
) -> Result<(Contrail, Vec<String>)> {
    let section = Map::<String, Value>::deserialize(section)
        .map_err(|e| Error::config(format!("contrail (from {source})"), e))?;
    // As written first, in the section's order (a value of the wrong JSON type)...
    let mut written: Vec<(&KeySpec, Written)> = Vec::new();
    let mut unknown = Vec::new();
    for (name, value) in section {
        let Some(spec) = spec(&name) else {
            unknown.push(name);
            continue;
        };
        if value.is_null() {
            continue;
        }
        let key = Key {
            key: spec.name,
            source,
        };
        let raw = if spec.kind.numeric() {
            Scalar::deserialize(value).map(Written::Scalar)
        } else {
            String::deserialize(value).map(Written::Text)
        };
        written.push((spec, raw.map_err(|e| key.err(e))?));
    }
    // ...then validated, in the table's order.
    let mut contrail = base.clone();
    for spec in KEYS {
        let Some(at) = written.iter().position(|(s, _)| s.name == spec.name) else {
            continue;
        };
        let (_, raw) = written.swap_remove(at);
        let key = Key {
            key: spec.name,
            source,
        };
        (spec.set)(&mut contrail, spec.kind.read(&key, raw)?, &key)?;
    }
    unknown.sort();
    Ok((contrail, unknown))
}

/// A value as written: a string, or a number or numeric string.
enum Written {
    Text(String),
    Scalar(Scalar),
}

/// A value checked against its key's [`Kind`].
#[derive(Debug)]
enum Parsed {
    Ip(IpAddr),
    Whole(u32),
    Seconds(f64),
    Path(Option<PathBuf>),
    Text(String),
    Level(LevelFilter),
}

impl Parsed {
    fn ip(self) -> IpAddr {
        match self {
            Parsed::Ip(v) => v,
            other => unreachable!("{other:?} for an IP address"),
        }
    }
    fn whole(self) -> u32 {
        match self {
            Parsed::Whole(v) => v,
            other => unreachable!("{other:?} for a whole number"),
        }
    }
    fn seconds(self) -> f64 {
        match self {
            Parsed::Seconds(v) => v,
            other => unreachable!("{other:?} for seconds"),
        }
    }
    fn path(self) -> Option<PathBuf> {
        match self {
            Parsed::Path(v) => v,
            other => unreachable!("{other:?} for a path"),
        }
    }
    fn text(self) -> String {
        match self {
            Parsed::Text(v) => v,
            other => unreachable!("{other:?} for a string"),
        }
    }
    fn level(self) -> LevelFilter {
        match self {
            Parsed::Level(v) => v,
            other => unreachable!("{other:?} for a log level"),
        }
    }
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

/// A key of one source, for validation and its errors.
pub(super) struct Key<'a> {
    pub(super) key: &'static str,
    pub(super) source: &'a str,
}

impl Key<'_> {
    pub(super) fn err(&self, why: impl fmt::Display) -> Error {
        Error::config(format!("contrail.{} (from {})", self.key, self.source), why)
    }

    /// A number within `min..=max`.
    fn number(&self, s: &str, min: f64, max: f64) -> Result<f64> {
        match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && (min..=max).contains(&v) => Ok(v),
            _ => Err(self.err(format!("{s:?} must be a number from {min} to {max}"))),
        }
    }

    /// A whole number within `min..=max`.
    fn integer(&self, s: &str, min: u32, max: u32) -> Result<u32> {
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

fn parse_meta_plugin(v: &str) -> std::result::Result<MetaPlugin, String> {
    match v {
        "multus" => Ok(MetaPlugin::Multus),
        "genie" => Ok(MetaPlugin::Genie),
        _ => Err(format!("{v:?} must be \"multus\" or \"genie\"")),
    }
}

fn parse_vif_type(v: &str) -> std::result::Result<VifType, String> {
    match v {
        "veth" => Ok(VifType::Veth),
        "macvlan" => Ok(VifType::Macvlan),
        _ => Err(format!(
            "{v:?} must be \"veth\" or \"macvlan\" (nested mode)"
        )),
    }
}

fn parse_vrouter_mode(v: &str) -> std::result::Result<VrouterMode, String> {
    match v {
        "auto" => Ok(VrouterMode::Auto),
        "dpdk" => Ok(VrouterMode::Dpdk),
        "kernel" => Ok(VrouterMode::Kernel),
        _ => Err(format!("{v:?} must be \"auto\", \"dpdk\" or \"kernel\"")),
    }
}

fn parse_interface_type(v: &str) -> std::result::Result<InterfaceType, String> {
    match v {
        "veth" => Ok(InterfaceType::Veth),
        "vhost-user" => Ok(InterfaceType::VhostUser),
        _ => Err(format!("{v:?} must be \"veth\" or \"vhost-user\"")),
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
