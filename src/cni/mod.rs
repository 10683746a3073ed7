//! The CNI protocol: commands, versions, error objects and version-shaped results.
//!
//! Owned here rather than taken from the `cni-plugin` crate, which rejects cniVersion 0.3.x, GC
//! and STATUS and drops 1.1 result fields (see docs/dependencies.md).

pub mod pod;

use std::fmt;
use std::io;
use std::net::IpAddr;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value, json};

use crate::ids::{ContainerId, IfName, PodUid, VmUuid};

/// A CNI_* variable (or a value in CNI_ARGS) the plugin cannot work with: the variable, and
/// what is wrong with its value. The error module turns it into the CNI error (code 4).
#[derive(Debug)]
pub struct BadEnv {
    pub var: String,
    pub problem: EnvProblem,
}

/// What is wrong with a variable of the environment.
#[derive(Debug)]
pub enum EnvProblem {
    /// Its value is not UTF-8.
    NotUtf8,
    /// Absent, or empty.
    Missing,
    /// CNI_COMMAND names no command of the specification.
    UnknownCommand(String),
    /// A container id or a pod's name or namespace (`key` of CNI_ARGS) that is no safe name.
    BadName {
        key: Option<&'static str>,
        value: String,
    },
    /// An interface name Linux or libcni refuses, and why.
    BadIfname { ifname: String, why: &'static str },
    /// CNI_NETNS that is not an absolute path.
    NotAbsolute(String),
    /// CNI_NETNS that cannot be opened as a network namespace.
    Netns { path: String, source: io::Error },
    /// CNI_ARGS without the pod's name, which ADD needs.
    NoPodName,
    /// ADD of a vhost-user attachment without `K8S_POD_UID` (it names the pod's directory).
    NoPodUid,
    /// ADD of a vhost-user attachment whose `K8S_POD_UID` is not the uuid of the pod's VM
    /// (kube-manager makes it the pod's UID).
    UidNotThePods { uid: PodUid, vm_uuid: VmUuid },
}

impl BadEnv {
    pub fn new(var: &str, problem: EnvProblem) -> BadEnv {
        BadEnv {
            var: var.to_string(),
            problem,
        }
    }
}

impl fmt::Display for BadEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.var, self.problem)
    }
}

impl std::error::Error for BadEnv {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            EnvProblem::Netns { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl fmt::Display for EnvProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAME_RULE: &str = "must match [a-zA-Z0-9][a-zA-Z0-9_.-]* (at most 253 bytes)";
        match self {
            EnvProblem::NotUtf8 => f.write_str("is not valid UTF-8"),
            EnvProblem::Missing => f.write_str("missing or empty"),
            EnvProblem::UnknownCommand(command) => write!(f, "unknown command {command:?}"),
            EnvProblem::BadName {
                key: Some(key),
                value,
            } => write!(f, "{key}={value:?} {NAME_RULE}"),
            EnvProblem::BadName { key: None, value } => write!(f, "{value:?} {NAME_RULE}"),
            EnvProblem::BadIfname { ifname, why } => write!(f, "{ifname:?} {why}"),
            EnvProblem::NotAbsolute(path) => write!(f, "{path:?} must be an absolute path"),
            EnvProblem::Netns { path, source } => write!(f, "cannot open {path}: {source}"),
            EnvProblem::NoPodName => {
                f.write_str("K8S_POD_NAME is missing; ADD needs the pod's name")
            }
            EnvProblem::NoPodUid => f.write_str(
                "K8S_POD_UID is missing; a vhost-user attachment needs the pod's UID (it names \
                 the pod's socket directory)",
            ),
            EnvProblem::UidNotThePods { uid, vm_uuid } => write!(
                f,
                "K8S_POD_UID {uid} is not this pod's: its VMIs are of VM {vm_uuid}, which \
                 kube-manager makes with the pod's UID. A vhost-user attachment's directory is \
                 named by the UID, so it must be the pod's own: either the runtime or \
                 meta-plugin passed another pod's (fix it), or the agent still has the VMIs of \
                 an earlier pod of this name (kube-manager replaces them; a retry finds the new \
                 ones)"
            ),
        }
    }
}

/// Every version this plugin speaks, oldest first; VERSION reports them in this order.
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V030,
    V031,
    V040,
    V100,
    V110,
}

impl Version {
    pub const NEWEST: Version = Version::V110;

    pub fn parse(s: &str) -> Option<Version> {
        Some(match s {
            "0.3.0" => Version::V030,
            "0.3.1" => Version::V031,
            "0.4.0" => Version::V040,
            "1.0.0" => Version::V100,
            "1.1.0" => Version::V110,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        SUPPORTED_VERSIONS[self as usize]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Version,
    /// CNI 1.1: release what no valid attachment needs any more.
    Gc,
    /// CNI 1.1: is the plugin ready for ADD?
    Status,
}

impl Command {
    pub fn parse(s: &str) -> Option<Command> {
        Some(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "VERSION" => Command::Version,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Version => "VERSION",
            Command::Gc => "GC",
            Command::Status => "STATUS",
        }
    }
}

/// The VERSION answer.
pub(crate) fn version_info(requested: Option<&str>) -> Value {
    json!({
        "cniVersion": requested.unwrap_or(Version::NEWEST.as_str()),
        "supportedVersions": SUPPORTED_VERSIONS,
    })
}

/// One interface of a result; `sandbox` is set only on the container side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub mac: String,
    pub mtu: u32,
    pub sandbox: Option<String>,
    /// A vhost-user attachment: the socket as the pod sees it (CNI 1.1's `socketPath`).
    pub socket_path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    pub address: IpNetwork,
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    pub interface: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNetwork,
    pub gw: Option<IpAddr>,
}

/// A version-independent result; [`Outcome::to_json`] shapes it for the caller's version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub interfaces: Vec<Interface>,
    pub ips: Vec<IpConfig>,
    pub routes: Vec<Route>,
    pub nameservers: Vec<String>,
}

impl Outcome {
    pub fn to_json(&self, version: Version) -> Value {
        let interfaces: Vec<Value> = self
            .interfaces
            .iter()
            .map(|i| {
                let mut v = json!({"name": i.name, "mac": i.mac});
                if version >= Version::V110 {
                    v["mtu"] = json!(i.mtu);
                }
                if let Some(s) = &i.sandbox {
                    v["sandbox"] = json!(s);
                }
                if let Some(p) = i.socket_path.as_ref().filter(|_| version >= Version::V110) {
                    v["socketPath"] = json!(p);
                }
                v
            })
            .collect();
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut v = json!({"address": ip.address.to_string(), "interface": ip.interface});
                if let Some(gw) = ip.gateway {
                    v["gateway"] = json!(gw.to_string());
                }
                // 1.0.0 dropped `version`; older results require it.
                if version < Version::V100 {
                    v["version"] = json!(if ip.address.is_ipv4() { "4" } else { "6" });
                }
                v
            })
            .collect();
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|r| {
                let mut v = json!({"dst": r.dst.to_string()});
                if let Some(gw) = r.gw {
                    v["gw"] = json!(gw.to_string());
                }
                v
            })
            .collect();
        let mut out = json!({
            "cniVersion": version.as_str(),
            "interfaces": interfaces,
            "ips": ips,
            "routes": routes,
        });
        out["dns"] = if self.nameservers.is_empty() {
            json!({})
        } else {
            json!({"nameservers": self.nameservers})
        };
        out
    }
}

/// Appends this plugin's result to the previous plugin's in a chain: its interfaces, IPs (their
/// `interface` indexes shifted past the earlier interfaces), routes and nameservers. The earlier
/// entries are re-shaped for `version` (`ips[].version` before 1.0.0 only).
pub fn chain(prev: &Map<String, Value>, ours: Value, version: Version) -> Value {
    let list = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
    let mut interfaces = list(prev.get("interfaces"));
    let offset = interfaces.len() as u64;
    interfaces.extend(list(ours.get("interfaces")));
    let mut ips = list(prev.get("ips"));
    for ip in &mut ips {
        if version >= Version::V100 {
            ip.as_object_mut().map(|o| o.remove("version"));
        } else if ip.get("version").is_none() {
            let v6 = ip
                .get("address")
                .and_then(Value::as_str)
                .is_some_and(|a| a.contains(':'));
            ip["version"] = json!(if v6 { "6" } else { "4" });
        }
    }
    for mut ip in list(ours.get("ips")) {
        if let Some(i) = ip.get("interface").and_then(Value::as_u64) {
            ip["interface"] = json!(i + offset);
        }
        ips.push(ip);
    }
    let mut routes = list(prev.get("routes"));
    routes.extend(list(ours.get("routes")));
    let mut dns = prev
        .get("dns")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let mut servers = list(dns.get("nameservers"));
    for s in list(ours["dns"].get("nameservers")) {
        if !servers.contains(&s) {
            servers.push(s);
        }
    }
    if !servers.is_empty() {
        dns["nameservers"] = Value::Array(servers);
    }
    json!({"cniVersion": version.as_str(), "interfaces": interfaces, "ips": ips, "routes": routes, "dns": dns})
}

/// The CNI_* environment of one invocation, validated as libcni's skel does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Env {
    pub command: Command,
    /// CNI_CONTAINERID: ADD, DEL and CHECK have one ([`Env::container_id`]); VERSION, GC and
    /// STATUS act on the node and have none.
    pub sandbox: Option<ContainerId>,
    /// Empty when the runtime passed none (allowed on DEL).
    pub netns: String,
    /// CNI_IFNAME, as `sandbox`.
    pub interface: Option<IfName>,
    pub args: String,
}

impl Env {
    /// The process's environment. A value that is not UTF-8 is refused, naming its variable: a
    /// lossy conversion would turn an interface name into another, valid one.
    pub fn from_process() -> Result<Env, BadEnv> {
        for var in [
            "CNI_COMMAND",
            "CNI_CONTAINERID",
            "CNI_NETNS",
            "CNI_IFNAME",
            "CNI_ARGS",
        ] {
            if std::env::var_os(var).is_some_and(|v| v.to_str().is_none()) {
                return Err(BadEnv::new(var, EnvProblem::NotUtf8));
            }
        }
        Env::parse(|k| std::env::var(k).ok())
    }

    /// Reads and validates the environment through `get`.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Env, BadEnv> {
        let command = get("CNI_COMMAND").unwrap_or_default();
        let command = Command::parse(&command)
            .ok_or_else(|| BadEnv::new("CNI_COMMAND", EnvProblem::UnknownCommand(command)))?;
        // These act on the node, not on one container: they carry no container or interface.
        if matches!(command, Command::Version | Command::Gc | Command::Status) {
            return Ok(Env {
                command,
                sandbox: None,
                netns: String::new(),
                interface: None,
                args: String::new(),
            });
        }
        let required = |var: &str| {
            get(var)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| BadEnv::new(var, EnvProblem::Missing))
        };
        let container_id = required("CNI_CONTAINERID")?;
        let container_id = ContainerId::parse(container_id.as_str()).map_err(|_| {
            BadEnv::new(
                "CNI_CONTAINERID",
                EnvProblem::BadName {
                    key: None,
                    value: container_id,
                },
            )
        })?;
        let ifname = required("CNI_IFNAME")?;
        let ifname = IfName::parse(ifname.as_str()).map_err(|e| {
            BadEnv::new(
                "CNI_IFNAME",
                EnvProblem::BadIfname {
                    ifname,
                    why: e.rule,
                },
            )
        })?;
        let netns = match command {
            Command::Del => get("CNI_NETNS").unwrap_or_default(),
            _ => required("CNI_NETNS")?,
        };
        if netns.contains('\0') || (!netns.is_empty() && !netns.starts_with('/')) {
            return Err(BadEnv::new("CNI_NETNS", EnvProblem::NotAbsolute(netns)));
        }
        Ok(Env {
            command,
            sandbox: Some(container_id),
            netns,
            interface: Some(ifname),
            args: get("CNI_ARGS").unwrap_or_default(),
        })
    }

    /// CNI_CONTAINERID of an ADD, DEL or CHECK ([`Env::parse`] requires one for them).
    pub fn container_id(&self) -> Result<&ContainerId, BadEnv> {
        self.sandbox
            .as_ref()
            .ok_or_else(|| BadEnv::new("CNI_CONTAINERID", EnvProblem::Missing))
    }

    /// CNI_IFNAME of an ADD, DEL or CHECK ([`Env::parse`] requires one for them).
    pub fn ifname(&self) -> Result<&IfName, BadEnv> {
        self.interface
            .as_ref()
            .ok_or_else(|| BadEnv::new("CNI_IFNAME", EnvProblem::Missing))
    }
}

/// The rule libcni applies to container ids and network names ([`crate::ids::check_name`]).
pub fn valid_name(s: &str) -> bool {
    crate::ids::check_name(s).is_ok()
}

pub use crate::ids::check_ifname;

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    const ADD_ENV: [(&str, &str); 5] = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "abc123"),
        ("CNI_NETNS", "/run/netns/x"),
        ("CNI_IFNAME", "net1"),
        ("CNI_ARGS", "K8S_POD_NAME=p"),
    ];

    fn env_with(var: &str, value: Option<&str>) -> Result<Env, BadEnv> {
        let mut pairs: Vec<(&str, &str)> =
            ADD_ENV.iter().copied().filter(|(k, _)| *k != var).collect();
        if let Some(v) = value {
            pairs.push((var, v));
        }
        Env::parse(env_of(&pairs))
    }

    #[test]
    fn env_parses_a_runtime_call() {
        let e = env_with("", None).unwrap();
        assert_eq!(
            (
                e.command,
                e.container_id().unwrap().as_str(),
                e.ifname().unwrap().as_str()
            ),
            (Command::Add, "abc123", "net1")
        );
    }

    #[test]
    fn env_errors_name_the_variable_with_code_4() {
        let cases = [
            ("CNI_COMMAND", Some("FOO")),
            ("CNI_COMMAND", None),
            ("CNI_CONTAINERID", None),
            ("CNI_CONTAINERID", Some("../etc")),
            ("CNI_CONTAINERID", Some("a/b")),
            ("CNI_IFNAME", None),
            ("CNI_IFNAME", Some("a-very-long-ifname0")),
            ("CNI_IFNAME", Some("..")),
            ("CNI_IFNAME", Some("a/b")),
            ("CNI_IFNAME", Some("a:b")),
            ("CNI_IFNAME", Some("a b")),
            ("CNI_NETNS", None),
            ("CNI_NETNS", Some("relative/path")),
        ];
        for (var, value) in cases {
            let err = env_with(var, value).unwrap_err();
            assert_eq!(err.var, var, "{var}={value:?}");
            let kind_fits = match (&err.problem, value) {
                (EnvProblem::Missing, None) => true,
                (EnvProblem::UnknownCommand(c), v) => c == v.unwrap_or_default(),
                (
                    EnvProblem::BadName {
                        key: None,
                        value: got,
                    },
                    Some(v),
                ) => got == v,
                (EnvProblem::BadIfname { ifname, .. }, Some(v)) => ifname == v,
                (EnvProblem::NotAbsolute(path), Some(v)) => path == v,
                _ => false,
            };
            assert!(kind_fits, "{var}={value:?}: {err:?}");
            // The message names the variable first; the code comes from the error module.
            assert!(err.to_string().starts_with(var), "{var}: {err}");
            assert_eq!(
                crate::error::Error::from(err).code(),
                crate::error::code::INVALID_ENV
            );
        }
    }

    #[test]
    fn del_accepts_an_empty_netns_and_version_needs_nothing() {
        let del = Env::parse(env_of(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_IFNAME", "eth0"),
        ]));
        assert_eq!(del.unwrap().netns, "");
        assert_eq!(
            Env::parse(env_of(&[("CNI_COMMAND", "VERSION")]))
                .unwrap()
                .command,
            Command::Version
        );
    }

    #[test]
    fn names_follow_libcni() {
        for ok in ["a", "A1", "k8s_pod.x-y", &"a".repeat(253)] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "-a",
            "_a",
            "a/b",
            "a b",
            "a\0",
            &"a".repeat(254),
            "é",
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn chained_results_append_and_shift_interface_indexes() {
        let prev = json!({"cniVersion": "0.4.0",
            "interfaces": [{"name": "br0", "mac": "aa:aa:aa:aa:aa:aa"}, {"name": "eth0", "mac": "bb:bb:bb:bb:bb:bb", "sandbox": "/x"}],
            "ips": [{"version": "4", "address": "10.244.0.2/24", "gateway": "10.244.0.1", "interface": 1}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.0.1"}],
            "dns": {"nameservers": ["10.1.0.2"], "search": ["svc"]}});
        let merged = chain(
            prev.as_object().unwrap(),
            outcome().to_json(Version::V100),
            Version::V100,
        );
        assert_eq!(merged["interfaces"].as_array().unwrap().len(), 4);
        assert_eq!(merged["interfaces"][3]["name"], "net1");
        let ips = merged["ips"].as_array().unwrap();
        assert_eq!(
            ips.iter()
                .map(|i| i["interface"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [1, 3, 3]
        );
        assert!(
            ips.iter().all(|i| i.get("version").is_none()),
            "1.0.0 has no ips[].version"
        );
        assert_eq!(merged["routes"].as_array().unwrap().len(), 2);
        assert_eq!(
            merged["dns"],
            json!({"nameservers": ["10.1.0.2"], "search": ["svc"]})
        );
        let old = chain(
            json!({"ips": [{"address": "fd00::2/64", "interface": 0}]})
                .as_object()
                .unwrap(),
            outcome().to_json(Version::V031),
            Version::V031,
        );
        assert_eq!(old["ips"][0]["version"], "6");
        assert_eq!(old["cniVersion"], "0.3.1");
    }

    fn outcome() -> Outcome {
        Outcome {
            interfaces: vec![
                Interface {
                    name: "tap0".into(),
                    mac: "aa:bb:cc:dd:ee:ff".into(),
                    mtu: 1500,
                    sandbox: None,
                    socket_path: None,
                },
                Interface {
                    name: "net1".into(),
                    mac: "02:00:00:00:00:01".into(),
                    mtu: 1500,
                    sandbox: Some("/run/netns/x".into()),
                    socket_path: None,
                },
            ],
            ips: vec![
                IpConfig {
                    address: "10.1.0.3/24".parse().unwrap(),
                    gateway: Some("10.1.0.1".parse().unwrap()),
                    interface: 1,
                },
                IpConfig {
                    address: "fd00::3/128".parse().unwrap(),
                    gateway: None,
                    interface: 1,
                },
            ],
            routes: vec![Route {
                dst: "0.0.0.0/0".parse().unwrap(),
                gw: Some("10.1.0.1".parse().unwrap()),
            }],
            nameservers: vec!["10.1.0.2".into()],
        }
    }

    #[test]
    fn versions_round_trip_and_unknown_ones_are_refused() {
        for s in SUPPORTED_VERSIONS {
            assert_eq!(Version::parse(s).unwrap().as_str(), s);
        }
        for s in ["0.2.0", "0.1.0", "1.2.0", "", "1.0"] {
            assert_eq!(Version::parse(s), None, "{s}");
        }
    }

    #[test]
    fn pre_1_0_results_carry_ip_version_and_no_mtu() {
        for v in [Version::V030, Version::V031, Version::V040] {
            let j = outcome().to_json(v);
            assert_eq!(j["cniVersion"], v.as_str());
            assert_eq!(j["ips"][0]["version"], "4");
            assert_eq!(j["ips"][1]["version"], "6");
            assert!(j["interfaces"][1].get("mtu").is_none());
        }
    }

    #[test]
    fn v1_results_drop_ip_version_and_1_1_adds_mtu() {
        let j = outcome().to_json(Version::V100);
        assert!(j["ips"][0].get("version").is_none());
        assert!(j["interfaces"][1].get("mtu").is_none());
        let j = outcome().to_json(Version::V110);
        assert!(j["ips"][0].get("version").is_none());
        assert_eq!(j["interfaces"][1]["mtu"], 1500);
    }

    #[test]
    fn sandbox_only_on_container_side_and_ips_point_at_it() {
        let j = outcome().to_json(Version::V100);
        assert!(j["interfaces"][0].get("sandbox").is_none());
        assert_eq!(j["interfaces"][1]["sandbox"], "/run/netns/x");
        assert_eq!(j["ips"][0]["interface"], 1);
        assert_eq!(j["ips"][0]["gateway"], "10.1.0.1");
        assert!(j["ips"][1].get("gateway").is_none());
        assert_eq!(
            j["routes"][0],
            json!({"dst": "0.0.0.0/0", "gw": "10.1.0.1"})
        );
        assert_eq!(j["dns"]["nameservers"][0], "10.1.0.2");
    }

    #[test]
    fn version_answer_lists_everything() {
        let j = version_info(Some("0.3.0"));
        assert_eq!(j["cniVersion"], "0.3.0");
        assert_eq!(j["supportedVersions"].as_array().unwrap().len(), 5);
        assert_eq!(version_info(None)["cniVersion"], "1.1.0");
    }
}
