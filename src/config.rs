//! Network configuration: the standard CNI fields plus the legacy `contrail` section, merged
//! over node-wide defaults from the CNI config directory.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use log::LevelFilter;
use serde_json::Value;

use crate::cni::{Error, Result, Version, code, valid_name};

pub const DEFAULT_NODE_CONF_DIR: &str = "/etc/cni/net.d";
/// Overrides [`DEFAULT_NODE_CONF_DIR`]; meant for tests and unusual installs.
pub const NODE_CONF_DIR_ENV: &str = "CONTRAIL_CNI_CONF_DIR";
/// Stdin `name` values that mean the cluster pod network.
const DEFAULT_NETWORK_NAMES: [&str; 2] = ["", "contrail-k8s-cni"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One attachment per call (Multus, CNI-Genie): the default.
    Plugin,
    /// All of a pod's interfaces in one call; needs the `thick` build feature.
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
}

impl Contrail {
    /// The whole wait for the agent: poll-timeout x poll-retries, as the legacy plugin bounds it.
    pub fn poll_budget(&self) -> Duration {
        self.poll_timeout * self.poll_retries
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NetConf {
    pub cni_version: Version,
    /// The Contrail network this attachment is for (`default` for the cluster pod network).
    pub network: String,
    pub prev_result: Option<Value>,
    pub runtime_config: Option<Value>,
    /// `args`, where Multus puts a network selection's `cni-args` under `cni`.
    pub args: Option<Value>,
    /// GC's still-valid attachments as (container id, ifname); `None` when not given.
    pub valid_attachments: Option<Vec<(String, String)>>,
    /// Things worth an operator's eye (unknown keys), logged once logging is set up.
    pub warnings: Vec<String>,
    pub contrail: Contrail,
}

/// The node-wide defaults file: the first `*contrail.conf` or `*tf-cni.conf` in `dir`, by name,
/// as the legacy plugin picks it. `Ok(None)` when there is none (or no such directory).
pub fn load_node_defaults(dir: &Path) -> Result<Option<(PathBuf, Value)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(format!(
                "reading node config directory {}: {e}",
                dir.display()
            )));
        }
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
    let bytes = std::fs::read(&path)
        .map_err(|e| Error::io(format!("reading node config {}: {e}", path.display())))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        Error::new(
            code::INVALID_CONFIG,
            format!("node config {} is not valid JSON: {e}", path.display()),
        )
    })?;
    Ok(Some((path, value)))
}

/// Parses stdin over the node defaults. Pure: all I/O happened before.
pub fn parse(stdin: &[u8], node: Option<(&Path, &Value)>) -> Result<NetConf> {
    let conf: Value = serde_json::from_slice(stdin)
        .map_err(|e| Error::decode(format!("network config on stdin is not JSON: {e}")))?;
    let Value::Object(conf) = conf else {
        return Err(Error::config("(top level)", "must be a JSON object"));
    };
    let version = match conf.get("cniVersion") {
        Some(Value::String(v)) => Version::parse(v).ok_or_else(|| {
            Error::new(
                code::INCOMPATIBLE_VERSION,
                format!(
                    "cniVersion {v:?} is not supported; supported: {}",
                    crate::cni::SUPPORTED_VERSIONS.join(", ")
                ),
            )
        })?,
        Some(_) => return Err(Error::config("cniVersion", "must be a string")),
        None => return Err(Error::config("cniVersion", "missing")),
    };
    let name = match conf.get("name") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(Error::config("name", "must be a string")),
    };
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
    let object = |key: &str| match conf.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
        Some(_) => Err(Error::config(key, "must be an object")),
    };
    let prev_result = object("prevResult")?;
    let runtime_config = object("runtimeConfig")?;
    let args = object("args")?;
    let valid_attachments = valid_attachments(&conf)?;

    // Key by key: defaults, then the node file, then stdin; remember where each value came from
    // so an error can point the operator at the right file.
    let mut merged: BTreeMap<String, (Value, String)> = BTreeMap::new();
    let sources = node
        .map(|(path, v)| (v.get("contrail"), path.display().to_string()))
        .into_iter()
        .chain(std::iter::once((conf.get("contrail"), "stdin".to_string())));
    for (section, source) in sources {
        match section {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    merged.insert(k.clone(), (v.clone(), source.clone()));
                }
            }
            Some(_) => {
                return Err(Error::config(
                    &format!("contrail (in {source})"),
                    "must be an object",
                ));
            }
        }
    }
    let (contrail, warnings) = contrail(merged)?;
    Ok(NetConf {
        cni_version: version,
        network,
        prev_result,
        runtime_config,
        args,
        valid_attachments,
        contrail,
        warnings,
    })
}

/// GC's list, under its CNI 1.1 name or the older one libcni also sends.
fn valid_attachments(
    conf: &serde_json::Map<String, Value>,
) -> Result<Option<Vec<(String, String)>>> {
    let Some((key, list)) = ["cni.dev/valid-attachments", "cni.dev/attachments"]
        .iter()
        .find_map(|k| conf.get(*k).map(|v| (*k, v)))
    else {
        return Ok(None);
    };
    let bad = || {
        Error::config(
            key,
            "must be a list of {\"containerID\": .., \"ifname\": ..}",
        )
    };
    let items = list.as_array().ok_or_else(bad)?;
    items
        .iter()
        .map(|a| {
            let field = |k: &str| {
                a.get(k)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(bad)
            };
            Ok((field("containerID")?, field("ifname")?))
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Reads typed keys out of the merged section, naming the key and its source on error.
struct Section(BTreeMap<String, (Value, String)>);

impl Section {
    fn source(&self, key: &str) -> String {
        self.0.get(key).map(|(_, s)| s.clone()).unwrap_or_default()
    }

    fn take(&mut self, key: &str) -> Option<(Value, String)> {
        self.0.remove(key).filter(|(v, _)| !v.is_null())
    }

    fn err(key: &str, source: &str, why: impl std::fmt::Display) -> Error {
        Error::config(&format!("contrail.{key} (from {source})"), why)
    }

    fn string(&mut self, key: &str, default: &str) -> Result<String> {
        match self.take(key) {
            None => Ok(default.to_string()),
            Some((Value::String(s), _)) => Ok(s),
            Some((_, src)) => Err(Self::err(key, &src, "must be a string")),
        }
    }

    /// Numbers, also as numeric strings: hand-written legacy configs use both.
    fn number(&mut self, key: &str, default: f64, min: f64, max: f64) -> Result<f64> {
        let Some((v, src)) = self.take(key) else {
            return Ok(default);
        };
        let n = match &v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match n {
            Some(n) if n.is_finite() && (min..=max).contains(&n) => Ok(n),
            _ => Err(Self::err(
                key,
                &src,
                format!("{v} must be a number from {min} to {max}"),
            )),
        }
    }

    fn integer(&mut self, key: &str, default: u32, min: u32, max: u32) -> Result<u32> {
        let src = self.source(key);
        let n = self.number(key, default.into(), min.into(), max.into())?;
        if n.fract() != 0.0 {
            return Err(Self::err(key, &src, format!("{n} must be a whole number")));
        }
        Ok(n as u32)
    }

    fn path(&mut self, key: &str, default: &str, allow_empty: bool) -> Result<Option<PathBuf>> {
        let src = self.source(key);
        let s = self.string(key, default)?;
        if s.is_empty() && allow_empty {
            return Ok(None);
        }
        if !s.starts_with('/') || s.contains('\0') || s.split('/').any(|c| c == "..") {
            return Err(Self::err(
                key,
                &src,
                format!("{s:?} must be an absolute path without '..'"),
            ));
        }
        Ok(Some(PathBuf::from(s)))
    }
}

/// The typed section, and a warning for each key it does not know.
fn contrail(merged: BTreeMap<String, (Value, String)>) -> Result<(Contrail, Vec<String>)> {
    let mut s = Section(merged);
    let ip_src = s.source("vrouter-ip");
    let ip = s.string("vrouter-ip", "127.0.0.1")?;
    let vrouter_ip = ip.parse().map_err(|_| {
        Section::err(
            "vrouter-ip",
            &ip_src,
            format!("{ip:?} is not an IP address"),
        )
    })?;
    let vrouter_port = s.integer("vrouter-port", 9091, 1, 65535)? as u16;
    let config_dir = s
        .path("config-dir", "/var/lib/contrail/ports/vm", false)?
        .unwrap_or_default();
    let poll_timeout = Duration::from_secs_f64(s.number("poll-timeout", 3.0, 0.001, 3600.0)?);
    let poll_retries = s.integer("poll-retries", 20, 1, 10_000)?;
    let cluster_src = s.source("cluster-name");
    let cluster_name = s.string("cluster-name", "k8s")?;
    if !valid_name(&cluster_name) {
        return Err(Section::err(
            "cluster-name",
            &cluster_src,
            format!("{cluster_name:?} must match [a-zA-Z0-9][a-zA-Z0-9_.-]*"),
        ));
    }
    // 68 is the IPv4 minimum; IPv6 needs 1280, checked once the agent says the VMI has v6.
    let mtu = s.integer("mtu", 1500, 68, 65535)?;
    let log_file = s.path("log-file", "/var/log/contrail/cni/opencontrail.log", true)?;
    let level_src = s.source("log-level");
    let level = match s.take("log-level") {
        None => "4".to_string(),
        Some((Value::String(v), _)) => v,
        Some((Value::Number(n), _)) => n.to_string(),
        Some((_, src)) => {
            return Err(Section::err(
                "log-level",
                &src,
                "must be a string or number",
            ));
        }
    };
    let log_level = parse_level(&level).ok_or_else(|| {
        Section::err(
            "log-level",
            &level_src,
            format!("{level:?} is not 0..6 or error/warn/info/debug/trace"),
        )
    })?;
    let mode_src = s.source("mode");
    let mode = match s.string("mode", "plugin")?.as_str() {
        // The legacy plugin's `mode` named the orchestrator; "k8s" is per-interface here.
        "plugin" | "k8s" => Mode::Plugin,
        "thick" => Mode::Thick,
        other => {
            return Err(Section::err(
                "mode",
                &mode_src,
                format!("{other:?} must be \"plugin\" or \"thick\""),
            ));
        }
    };
    let vif_src = s.source("vif-type");
    let vif = s.string("vif-type", "veth")?;
    if vif != "veth" {
        return Err(Section::err(
            "vif-type",
            &vif_src,
            format!(
                "{vif:?} is not supported; only \"veth\" (nested macvlan mode is not implemented)"
            ),
        ));
    }
    // Legacy keys with no effect here: meta-plugin detection is not needed, parent-interface
    // belongs to nested mode.
    for key in ["meta-plugin", "parent-interface"] {
        s.string(key, "")?;
    }

    let warnings =
        s.0.iter()
            .map(|(key, (_, src))| format!("ignoring unknown key contrail.{key} (from {src})"))
            .collect();
    let contrail = Contrail {
        vrouter_ip,
        vrouter_port,
        config_dir,
        poll_timeout,
        poll_retries,
        cluster_name,
        mtu,
        log_file,
        log_level,
        mode,
    };
    Ok((contrail, warnings))
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
            "vrouter-port": "9092", "poll-timeout": 0.25, "poll-retries": "4", "log-level": 5, "log-file": ""}}))
        .unwrap();
        assert_eq!(c.contrail.vrouter_port, 9092);
        assert_eq!(c.contrail.poll_budget(), Duration::from_secs(1));
        assert_eq!(c.contrail.log_level, LevelFilter::Debug);
        assert_eq!(c.contrail.log_file, None);
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
        let c = parse_json(json!({"cniVersion": "0.3.1", "contrail": {"mode": "thick"}})).unwrap();
        assert_eq!(c.contrail.mode, Mode::Thick);
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
            ("mode", json!("fat")),
            ("vif-type", json!("macvlan")),
        ];
        for (key, value) in cases {
            let err =
                parse_json(json!({"cniVersion": "1.0.0", "contrail": {key: value}})).unwrap_err();
            assert_eq!(err.code, code::INVALID_CONFIG, "{key}={value}");
            assert!(
                err.msg.contains(&format!("contrail.{key}")),
                "{key}: {}",
                err.msg
            );
        }
    }

    #[test]
    fn errors_from_the_node_file_name_the_file() {
        let node = json!({"contrail": {"mtu": 1}});
        let err = parse(
            br#"{"cniVersion":"1.0.0"}"#,
            Some((Path::new("/etc/cni/net.d/10-contrail.conf"), &node)),
        )
        .unwrap_err();
        assert!(err.msg.contains("10-contrail.conf"), "{}", err.msg);
    }

    #[test]
    fn top_level_errors() {
        assert_eq!(parse(b"{not json", None).unwrap_err().code, code::DECODE);
        assert_eq!(parse(b"[]", None).unwrap_err().code, code::INVALID_CONFIG);
        assert_eq!(
            parse_json(json!({})).unwrap_err().code,
            code::INVALID_CONFIG
        );
        assert_eq!(
            parse_json(json!({"cniVersion": 1})).unwrap_err().code,
            code::INVALID_CONFIG
        );
        assert_eq!(
            parse_json(json!({"cniVersion": "0.2.0"})).unwrap_err().code,
            code::INCOMPATIBLE_VERSION
        );
        assert_eq!(
            parse_json(json!({"cniVersion": "1.0.0", "name": 3}))
                .unwrap_err()
                .code,
            code::INVALID_CONFIG
        );
        assert_eq!(
            parse_json(json!({"cniVersion": "1.0.0", "name": "a/b"}))
                .unwrap_err()
                .code,
            code::INVALID_CONFIG
        );
        assert_eq!(
            parse_json(json!({"cniVersion": "1.0.0", "contrail": []}))
                .unwrap_err()
                .code,
            code::INVALID_CONFIG
        );
        let err = parse_json(json!({"cniVersion": "1.0.0", "prevResult": "x"})).unwrap_err();
        assert!(err.msg.contains("prevResult"));
    }

    #[test]
    fn gc_lists_under_either_name() {
        let list = json!([{"containerID": "c1", "ifname": "eth0"}]);
        for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
            let c = parse_json(json!({"cniVersion": "1.1.0", key: list})).unwrap();
            assert_eq!(
                c.valid_attachments,
                Some(vec![("c1".to_string(), "eth0".to_string())])
            );
        }
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
            assert_eq!(err.code, code::INVALID_CONFIG);
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
