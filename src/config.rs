//! Network configuration: the standard CNI fields plus the legacy `contrail` section, merged key
//! by key over node-wide defaults from the CNI config directory. Decoded by serde into typed
//! layers (one per source, so that every error names the key and the file it came from), then
//! merged and validated.

use std::collections::BTreeMap;
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

pub const DEFAULT_NODE_CONF_DIR: &str = "/etc/cni/net.d";
/// Overrides [`DEFAULT_NODE_CONF_DIR`]; meant for tests and unusual installs.
pub const NODE_CONF_DIR_ENV: &str = "CONTRAIL_CNI_CONF_DIR";
/// Stdin `name` values that mean the cluster pod network.
const DEFAULT_NETWORK_NAMES: [&str; 2] = ["", "contrail-k8s-cni"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One attachment per call (Multus, CNI-Genie): the default.
    Plugin,
    /// All of a pod's interfaces in one call (the `thick` build feature).
    #[cfg(feature = "thick")]
    Thick,
}

/// The `contrail` section, with the legacy Go plugin's keys and defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Contrail {
    pub vrouter_ip: IpAddr,
    pub vrouter_port: u16,
    pub config_dir: PathBuf,
    /// The longest wait between two polls of the agent, and the unit of the total wait.
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
}

impl Contrail {
    /// The whole wait for the agent: poll-timeout x poll-retries, as the legacy plugin bounds it.
    pub fn poll_budget(&self) -> Duration {
        self.poll_timeout * self.poll_retries
    }
}

/// One entry of GC's list of attachments still in use.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ValidAttachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
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
    /// Things worth an operator's eye (unknown keys), logged once logging is set up.
    pub warnings: Vec<String>,
    pub contrail: Contrail,
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

/// The `contrail` section of one source. `null` counts as absent.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Layer {
    vrouter_ip: Option<String>,
    vrouter_port: Option<Scalar>,
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
    /// Legacy keys with no effect here: meta-plugin detection is not needed,
    /// parent-interface belongs to nested mode.
    #[serde(rename = "meta-plugin")]
    _meta_plugin: Option<String>,
    #[serde(rename = "parent-interface")]
    _parent_interface: Option<String>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
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

/// The node-wide defaults file: the first `*contrail.conf` or `*tf-cni.conf` in `dir`, by name,
/// as the legacy plugin picks it. `Ok(None)` when there is none (or no such directory).
pub fn load_node_defaults(dir: &Path) -> Result<Option<(PathBuf, Value)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
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
    let Some(path) = names.into_iter().next() else {
        return Ok(None);
    };
    let bytes = std::fs::read(&path).map_err(Error::io("reading node config", &path))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        Error::config(
            format!("node config {}", path.display()),
            format!("not valid JSON: {e}"),
        )
    })?;
    Ok(Some((path, value)))
}

/// Parses stdin over the node defaults. Pure: all I/O happened before.
pub fn parse(stdin: &[u8], node: Option<(&Path, &Value)>) -> Result<NetConf> {
    parse_named(stdin, "stdin", node)
}

/// [`parse`] of a config that comes from `source` (a file to install, say) rather than stdin.
pub fn parse_named(stdin: &[u8], source: &str, node: Option<(&Path, &Value)>) -> Result<NetConf> {
    let mut de = serde_json::Deserializer::from_slice(stdin);
    let conf: Stdin = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        if e.is_data() {
            let key = if path == "." { "(top level)" } else { &path };
            Error::config(key, e)
        } else {
            Error::decode(format!("network config on {source} is not JSON: {e}"))
        }
    })?;
    de.end()
        .map_err(|e| Error::decode(format!("network config on {source} is not JSON: {e}")))?;
    let version = match &conf.cni_version {
        Some(v) => Version::parse(v).ok_or_else(|| Error::Version(v.clone()))?,
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

    // Layer by layer: the node file, then stdin; each key's value comes from the last layer
    // that has it, and an error names that layer's source.
    let mut layers = Vec::new();
    if let Some((path, v)) = node {
        let source = path.display().to_string();
        match v.get("contrail") {
            None | Some(Value::Null) => {}
            Some(section) => layers.push((decode(section.clone(), "contrail", &source)?, source)),
        }
    }
    if let Some(section) = conf.contrail {
        layers.push((
            decode(Value::Object(section), "contrail", source)?,
            source.to_string(),
        ));
    }
    let (contrail, warnings) = contrail(&layers)?;
    Ok(NetConf {
        cni_version: version,
        network,
        prev_result: conf.prev_result,
        runtime_config: conf.runtime_config,
        args: conf.args,
        valid_attachments: conf.valid_attachments.or(conf.attachments),
        contrail,
        warnings,
    })
}

/// One key's value and where it came from.
struct Sourced<'a, T> {
    value: T,
    key: &'static str,
    from: &'a str,
}

impl<T> Sourced<'_, T> {
    fn err(&self, why: impl fmt::Display) -> Error {
        Error::config(format!("contrail.{} (from {})", self.key, self.from), why)
    }
}

/// The value of `key` from the last layer that sets it.
fn pick<'a, T: Clone>(
    layers: &'a [(Layer, String)],
    key: &'static str,
    field: impl Fn(&Layer) -> &Option<T>,
) -> Option<Sourced<'a, T>> {
    layers.iter().rev().find_map(|(layer, from)| {
        field(layer)
            .clone()
            .map(|value| Sourced { value, key, from })
    })
}

/// A number within `min..=max`, or `default` when no layer sets it.
fn number(
    layers: &[(Layer, String)],
    key: &'static str,
    field: impl Fn(&Layer) -> &Option<Scalar>,
    (default, min, max): (f64, f64, f64),
) -> Result<f64> {
    let Some(n) = pick(layers, key, field) else {
        return Ok(default);
    };
    match n.value.0.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (min..=max).contains(&v) => Ok(v),
        _ => Err(n.err(format!(
            "{:?} must be a number from {min} to {max}",
            n.value.0
        ))),
    }
}

/// A whole number within `min..=max`.
fn integer(
    layers: &[(Layer, String)],
    key: &'static str,
    field: impl Fn(&Layer) -> &Option<Scalar> + Copy,
    (default, min, max): (u32, u32, u32),
) -> Result<u32> {
    let v = number(layers, key, field, (default.into(), min.into(), max.into()))?;
    if v.fract() != 0.0 {
        let n = pick(layers, key, field).expect("a fraction was read from some layer");
        return Err(n.err(format!("{v} must be a whole number")));
    }
    Ok(v as u32)
}

/// An absolute path without `..`; "" means none when `allow_empty`.
fn path(
    layers: &[(Layer, String)],
    key: &'static str,
    field: impl Fn(&Layer) -> &Option<String>,
    default: &str,
    allow_empty: bool,
) -> Result<Option<PathBuf>> {
    let Some(p) = pick(layers, key, field) else {
        return Ok(Some(PathBuf::from(default)));
    };
    let s = &p.value;
    if s.is_empty() && allow_empty {
        return Ok(None);
    }
    if !s.starts_with('/') || s.contains('\0') || s.split('/').any(|c| c == "..") {
        return Err(p.err(format!("{s:?} must be an absolute path without '..'")));
    }
    Ok(Some(PathBuf::from(s)))
}

/// The typed section, and a warning for each key it does not know.
fn contrail(layers: &[(Layer, String)]) -> Result<(Contrail, Vec<String>)> {
    let vrouter_ip = match pick(layers, "vrouter-ip", |l| &l.vrouter_ip) {
        None => IpAddr::from([127, 0, 0, 1]),
        Some(ip) => ip
            .value
            .parse()
            .map_err(|_| ip.err(format!("{:?} is not an IP address", ip.value)))?,
    };
    let vrouter_port = integer(
        layers,
        "vrouter-port",
        |l| &l.vrouter_port,
        (9091, 1, 65535),
    )?;
    let config_dir = path(
        layers,
        "config-dir",
        |l| &l.config_dir,
        "/var/lib/contrail/ports/vm",
        false,
    )?
    .unwrap_or_default();
    let poll_timeout = number(
        layers,
        "poll-timeout",
        |l| &l.poll_timeout,
        (3.0, 0.001, 3600.0),
    )?;
    let poll_retries = integer(layers, "poll-retries", |l| &l.poll_retries, (20, 1, 10_000))?;
    let cluster_name = match pick(layers, "cluster-name", |l| &l.cluster_name) {
        None => "k8s".to_string(),
        Some(c) if valid_name(&c.value) => c.value,
        Some(c) => {
            return Err(c.err(format!(
                "{:?} must match [a-zA-Z0-9][a-zA-Z0-9_.-]*",
                c.value
            )));
        }
    };
    // 68 is the IPv4 minimum; IPv6 needs 1280, checked once the agent says the VMI has v6.
    let mtu = integer(layers, "mtu", |l| &l.mtu, (1500, 68, 65535))?;
    let log_file = path(
        layers,
        "log-file",
        |l| &l.log_file,
        "/var/log/contrail/cni/opencontrail.log",
        true,
    )?;
    let log_level = match pick(layers, "log-level", |l| &l.log_level) {
        None => LevelFilter::Info,
        Some(l) => parse_level(&l.value.0).ok_or_else(|| {
            l.err(format!(
                "{:?} is not 0..6 or error/warn/info/debug/trace",
                l.value.0
            ))
        })?,
    };
    // Off unless set; "" turns it off again in a later layer.
    let metrics_file = match pick(layers, "metrics-file", |l| &l.metrics_file) {
        None => None,
        Some(_) => path(layers, "metrics-file", |l| &l.metrics_file, "", true)?,
    };
    let mode = match pick(layers, "mode", |l| &l.mode) {
        None => Mode::Plugin,
        Some(m) => parse_mode(&m.value).map_err(|why| m.err(why))?,
    };
    if let Some(v) = pick(layers, "vif-type", |l| &l.vif_type).filter(|v| v.value != "veth") {
        return Err(v.err(format!(
            "{:?} is not supported; only \"veth\" (nested macvlan mode is not implemented)",
            v.value
        )));
    }
    // Unknown keys, each from the last layer that has it.
    let mut unknown: BTreeMap<&str, &str> = BTreeMap::new();
    for (layer, from) in layers {
        for key in layer.unknown.keys() {
            unknown.insert(key, from);
        }
    }
    let warnings = unknown
        .iter()
        .map(|(key, from)| format!("ignoring unknown key contrail.{key} (from {from})"))
        .collect();
    let contrail = Contrail {
        vrouter_ip,
        vrouter_port: vrouter_port as u16,
        config_dir,
        poll_timeout: Duration::from_secs_f64(poll_timeout),
        poll_retries,
        cluster_name,
        mtu,
        log_file,
        log_level,
        mode,
        metrics_file,
    };
    Ok((contrail, warnings))
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

    fn parse_json(v: Value) -> Result<NetConf> {
        parse(v.to_string().as_bytes(), None)
    }

    #[test]
    fn minimal_nad_config_gets_legacy_defaults() {
        let c =
            parse_json(json!({"cniVersion": "0.3.0", "type": "contrail-k8s-cni", "name": "net-a"}))
                .unwrap();
        assert_eq!(c.cni_version, Version::V030);
        assert_eq!(c.network, "net-a");
        let k = &c.contrail;
        assert_eq!(k.vrouter_ip.to_string(), "127.0.0.1");
        assert_eq!(k.vrouter_port, 9091);
        assert_eq!(k.config_dir, PathBuf::from("/var/lib/contrail/ports/vm"));
        assert_eq!(k.poll_timeout, Duration::from_secs(3));
        assert_eq!(k.poll_retries, 20);
        assert_eq!(k.poll_budget(), Duration::from_secs(60));
        assert_eq!(k.cluster_name, "k8s");
        assert_eq!(k.mtu, 1500);
        assert_eq!(
            k.log_file,
            Some(PathBuf::from("/var/log/contrail/cni/opencontrail.log"))
        );
        assert_eq!(k.log_level, LevelFilter::Info);
        assert_eq!(k.mode, Mode::Plugin);
        assert!(c.warnings.is_empty());
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
    fn stdin_wins_over_node_file_key_by_key() {
        let node = json!({"contrail": {"vrouter-port": 9999, "mtu": 1400, "poll-retries": 15}});
        let stdin = json!({"cniVersion": "0.4.0", "name": "n", "contrail": {"mtu": 9000}});
        let c = parse(
            stdin.to_string().as_bytes(),
            Some((Path::new("/x/10-contrail.conf"), &node)),
        )
        .unwrap();
        assert_eq!(
            (
                c.contrail.vrouter_port,
                c.contrail.mtu,
                c.contrail.poll_retries
            ),
            (9999, 9000, 15)
        );
    }

    #[test]
    fn numeric_strings_and_fractional_timeouts_are_accepted() {
        let c = parse_json(json!({"cniVersion": "0.3.1", "contrail": {
            "vrouter-port": "9092", "poll-timeout": 0.25, "poll-retries": " 4 ", "log-level": 5, "log-file": ""}}))
        .unwrap();
        assert_eq!(c.contrail.vrouter_port, 9092);
        assert_eq!(c.contrail.poll_budget(), Duration::from_secs(1));
        assert_eq!(c.contrail.log_level, LevelFilter::Debug);
        assert_eq!(c.contrail.log_file, None);
    }

    #[test]
    fn null_counts_as_absent() {
        let c = parse_json(json!({"cniVersion": "0.3.1", "contrail": {"mtu": null}})).unwrap();
        assert_eq!(c.contrail.mtu, 1500);
    }

    #[test]
    fn unknown_keys_become_warnings_naming_their_file() {
        let node = json!({"contrail": {"vrouter_ip": "127.0.0.1"}});
        let stdin = json!({"cniVersion": "0.4.0", "contrail": {"mtu": 1400, "poll-timout": 5}});
        let c = parse(
            stdin.to_string().as_bytes(),
            Some((Path::new("/n/10-contrail.conf"), &node)),
        )
        .unwrap();
        assert_eq!(
            c.warnings,
            [
                "ignoring unknown key contrail.poll-timout (from stdin)",
                "ignoring unknown key contrail.vrouter_ip (from /n/10-contrail.conf)"
            ]
        );
    }

    #[test]
    fn legacy_mode_k8s_is_plugin_mode() {
        let c = parse_json(
            json!({"cniVersion": "0.3.1", "contrail": {"mode": "k8s", "meta-plugin": "multus"}}),
        )
        .unwrap();
        assert_eq!(c.contrail.mode, Mode::Plugin);
        let thick = parse_json(json!({"cniVersion": "0.3.1", "contrail": {"mode": "thick"}}));
        #[cfg(feature = "thick")]
        assert_eq!(thick.unwrap().contrail.mode, Mode::Thick);
        #[cfg(not(feature = "thick"))]
        assert!(thick.unwrap_err().to_string().contains("--features thick"));
    }

    #[test]
    fn invalid_values_name_their_key_with_code_7() {
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
            ("vif-type", json!("macvlan")),
            ("meta-plugin", json!(1)),
        ];
        for (key, value) in cases {
            let err =
                parse_json(json!({"cniVersion": "1.0.0", "contrail": {key: value}})).unwrap_err();
            assert_eq!(err.code(), code::INVALID_CONFIG, "{key}={value}");
            let msg = err.to_string();
            assert!(
                msg.contains(&format!("contrail.{key} (from stdin)")),
                "{key}: {msg}"
            );
        }
    }

    #[test]
    fn errors_from_the_node_file_name_the_file() {
        let file = Path::new("/etc/cni/net.d/10-contrail.conf");
        for node in [
            json!({"contrail": {"mtu": 1}}),
            json!({"contrail": {"mtu": "x"}}),
            json!({"contrail": []}),
        ] {
            let err = parse(br#"{"cniVersion":"1.0.0"}"#, Some((file, &node))).unwrap_err();
            assert_eq!(err.code(), code::INVALID_CONFIG, "{node}");
            assert!(err.to_string().contains("10-contrail.conf"), "{err}");
        }
    }

    #[test]
    fn top_level_errors() {
        assert_eq!(parse(b"{not json", None).unwrap_err().code(), code::DECODE);
        assert_eq!(parse(b"{} x", None).unwrap_err().code(), code::DECODE);
        let err = parse(b"[]", None).unwrap_err();
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
