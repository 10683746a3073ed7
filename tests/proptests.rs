//! Property-based tests of every parser of untrusted input.
//!
//! These stand in for `cargo fuzz`, which needs a nightly toolchain: arbitrary bytes, arbitrary
//! JSON, and structurally plausible inputs with hostile values go through the network config
//! parser, CNI_ARGS, the CNI_* environment and the agent's two answers, and the VMI resolver
//! is exercised over generated pods. Every property is bounded (a few hundred cases) so that
//! the module runs in seconds; `PROPTEST_CASES` raises the count for a longer soak.
//!
//! Failures are not persisted (no `proptest-regressions/` next to the sources): a failing case
//! is printed, shrunk, by the runner.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Component, Path};
use std::time::Duration;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Number, Value, json};

use contrail_k8s_cni::cni::pod::{self, Pod};
use contrail_k8s_cni::cni::{
    Command, Env, EnvProblem, SUPPORTED_VERSIONS, check_ifname, valid_name,
};
use contrail_k8s_cni::config::{self, NetConf};
use contrail_k8s_cni::error::{Error, code};
use contrail_k8s_cni::ids::{VmUuid, VmiUuid, VnUuid};
use contrail_k8s_cni::kernel::names;
use contrail_k8s_cni::vmi::{self, Attachment, Claim, IpConfig, Mac, Unresolved, Vmi, valid_uuid};
use contrail_testkit::uuid_of;

/// `cases` per property, unless `PROPTEST_CASES` asks for more (a soak).
fn config(cases: u32) -> ProptestConfig {
    let soak = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    ProptestConfig {
        cases: soak.map_or(cases, |n| n.max(cases)),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Shared strategies

/// Values that sit on the edges of what the parsers accept: paths, numbers as strings, names,
/// addresses, versions, separators and control characters.
const TRICKY: &[&str] = &[
    "",
    " ",
    ".",
    "..",
    "/",
    "//",
    "/..",
    "/a/..",
    "/a/../b",
    "../etc",
    "a/b",
    "/var/../etc",
    "/var/lib/contrail/ports/vm",
    "/./x",
    "/a/.../b",
    "/a\0b",
    "\0",
    "a\0",
    "\u{b}",
    "a\u{b}b",
    "a\u{a0}b",
    "a\u{85}b",
    "\u{2028}",
    "é",
    "à",
    "\u{202e}x",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "-0",
    "0",
    "1",
    "+5",
    "0x10",
    " 1500 ",
    "1500.0",
    "1500.5",
    "68",
    "67",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "0.001",
    "0.0009",
    "3600",
    "3600.0001",
    "10000",
    "10001",
    "1e3",
    "k8s",
    "default",
    "contrail-k8s-cni",
    "plugin",
    "thick",
    "veth",
    "macvlan",
    "info",
    " TRACE ",
    "off",
    "6",
    "7",
    "127.0.0.1",
    "::1",
    "0.0.0.0",
    "::",
    "localhost",
    "1.0.0",
    "0.3.1",
    "0.2.0",
    "1.1.0",
    "true",
    "false",
    "null",
    ";",
    "=",
    "a=b",
    ";;=;",
    "K8S_POD_NAME=x",
    "{index:0/1}",
    "{interface:eth0}",
];

fn tricky_string() -> BoxedStrategy<String> {
    prop_oneof![
        4 => select(TRICKY).prop_map(String::from),
        2 => any::<String>(),
        2 => "[ -~]{0,24}",
        1 => "[\\x00-\\x1f /.:;={}\u{a0}\u{85}é0-9a-z-]{0,16}",
        1 => any::<f64>().prop_map(|f| f.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
    ]
    .boxed()
}

fn json_number() -> BoxedStrategy<Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-100_000i64..100_000).prop_map(Value::from),
        any::<f64>().prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (-10.0f64..70_000.0).prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
    ]
    .boxed()
}

fn json_leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        json_number(),
        tricky_string().prop_map(Value::String),
    ]
    .boxed()
}

/// Object keys: mostly ones some parser looks for (these and [`contrail_keys`]), so that random
/// documents reach deep code.
const KEYS: &[&str] = &[
    "cniVersion",
    "name",
    "type",
    "contrail",
    "prevResult",
    "runtimeConfig",
    "args",
    "cni.dev/valid-attachments",
    "cni.dev/attachments",
    "containerID",
    "ifname",
    "id",
    "vm-uuid",
    "vn-id",
    "mac-address",
    "annotations",
    "ip-address",
    "plen",
    "v6-ip-address",
    "v6-plen",
    "gateway",
    "system-name",
];

fn json_key() -> BoxedStrategy<String> {
    prop_oneof![
        2 => select(KEYS).prop_map(String::from),
        1 => select(contrail_keys()).prop_map(String::from),
        1 => tricky_string(),
    ]
    .boxed()
}

/// Any JSON value, a few levels deep.
fn json_value() -> BoxedStrategy<Value> {
    json_leaf()
        .prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..6).prop_map(Value::Array),
                vec((json_key(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
        .boxed()
}

/// A value of a random JSON type for one field: mostly scalars, sometimes a whole tree.
fn any_field() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => tricky_string().prop_map(Value::String),
        3 => json_number(),
        1 => prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::Bool)],
        1 => json_value(),
    ]
    .boxed()
}

fn object(pairs: Vec<(String, Value)>) -> Value {
    Value::Object(pairs.into_iter().collect::<Map<String, Value>>())
}

/// A valid libcni name (container id, network, pod, namespace, cluster).
fn name() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-zA-Z0-9][a-zA-Z0-9_.-]{0,20}",
        1 => "[a-z0-9]{253}",
    ]
    .boxed()
}

/// Something that should not be accepted as a name (or that sits just at the limit).
fn hostile_name() -> BoxedStrategy<String> {
    prop_oneof![
        tricky_string(),
        "[a-z0-9]{254}",
        "[._-][a-z0-9]{0,5}",
        "[a-z]{1,4}[/\\\\ \\x00:;=é\u{a0}][a-z]{0,4}",
    ]
    .boxed()
}

fn uuid() -> BoxedStrategy<String> {
    any::<u128>().prop_map(uuid_of).boxed()
}

fn hostile_uuid() -> BoxedStrategy<String> {
    prop_oneof![
        uuid().prop_map(|u| u.to_uppercase()),
        uuid().prop_map(|u| u[1..].to_string()),
        uuid().prop_map(|u| format!("{u}0")),
        uuid().prop_map(|u| u.replace('-', "/")),
        uuid().prop_map(|u| format!("../../../../{}", &u[12..])),
        // 36 bytes, but not 36 ASCII characters.
        uuid().prop_map(|u| format!("é{}", &u[2..])),
        Just("../../../../../../../../../../etc/x".to_string()),
        tricky_string(),
    ]
    .boxed()
}

// ---------------------------------------------------------------------------------------------
// 1. config::parse

fn check_netconf(r: &contrail_k8s_cni::Result<NetConf>) -> Result<(), TestCaseError> {
    let c = match r {
        Err(e) => {
            prop_assert!(
                matches!(
                    e.code(),
                    code::INCOMPATIBLE_VERSION | code::DECODE | code::INVALID_CONFIG
                ),
                "unexpected code: {e}"
            );
            return Ok(());
        }
        Ok(c) => c,
    };
    let k = &c.contrail;
    let safe_path = |p: &Path| {
        p.is_absolute()
            && !p.components().any(|c| c == Component::ParentDir)
            && !p.as_os_str().as_encoded_bytes().contains(&0)
    };
    prop_assert!(safe_path(&k.config_dir), "config-dir {:?}", k.config_dir);
    if let Some(f) = &k.log_file {
        prop_assert!(safe_path(f), "log-file {f:?}");
    }
    prop_assert!((68..=65535).contains(&k.mtu), "mtu {}", k.mtu);
    prop_assert!(k.vrouter_port != 0);
    prop_assert!(k.poll_retries > 0);
    prop_assert!(k.poll_timeout > Duration::ZERO);
    prop_assert!(k.poll_budget() > Duration::ZERO);
    prop_assert!(valid_name(&k.cluster_name), "cluster {:?}", k.cluster_name);
    prop_assert!(
        c.network == "default" || valid_name(&c.network),
        "network {:?}",
        c.network
    );
    Ok(())
}

/// The `contrail` section's keys, as the table has them, and one it does not know.
fn contrail_keys() -> Vec<&'static str> {
    let mut keys: Vec<&str> = config::KEYS.iter().map(|k| k.name).collect();
    keys.push("unknown-key");
    keys
}

/// The table's entry for `key`.
fn spec(key: &str) -> &'static config::KeySpec {
    config::spec(key).unwrap_or_else(|| panic!("{key} is not in config::KEYS"))
}

fn num_or_string(n: impl Into<Number>) -> BoxedStrategy<Value> {
    let n: Number = n.into();
    prop_oneof![
        Just(Value::Number(n.clone())),
        Just(Value::String(n.to_string())),
        Just(Value::String(format!(" {n} "))),
    ]
    .boxed()
}

fn abs_path() -> BoxedStrategy<String> {
    vec("[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,8}", 0..4)
        .prop_map(|parts| format!("/{}", parts.join("/")))
        .boxed()
}

/// A value the key accepts, from its kind in the table (any string for a key it does not know).
fn valid_field(key: &'static str) -> BoxedStrategy<Value> {
    match key {
        // The budget keys within the budget's ceiling (300 s) whatever the other key says.
        "poll-timeout" => {
            return (10u32..=15_000)
                .prop_flat_map(|ms| {
                    let f = f64::from(ms) / 1000.0;
                    prop_oneof![Just(json!(f)), Just(json!(f.to_string()))]
                })
                .boxed();
        }
        "poll-retries" => return (1u32..=5).prop_flat_map(num_or_string).boxed(),
        "unknown-key" => return tricky_string().prop_map(Value::String).boxed(),
        _ => {}
    }
    match spec(key).kind {
        config::Kind::Ip => any::<IpAddr>().prop_map(|a| json!(a.to_string())).boxed(),
        config::Kind::Integer { min, max } => (min..=max).prop_flat_map(num_or_string).boxed(),
        config::Kind::Seconds { min, max } => ((min * 1000.0) as u32..=(max * 1000.0) as u32)
            .prop_map(|ms| json!(f64::from(ms) / 1000.0))
            .boxed(),
        config::Kind::Path { optional: false } => abs_path().prop_map(Value::String).boxed(),
        config::Kind::Path { optional: true } => {
            prop_oneof![Just(json!("")), abs_path().prop_map(Value::String)].boxed()
        }
        config::Kind::Name => name().prop_map(Value::String).boxed(),
        config::Kind::Interface => "[a-z][a-z0-9_.-]{0,14}".prop_map(Value::String).boxed(),
        config::Kind::Level => prop_oneof![
            (0u32..=6).prop_map(|n| json!(n)),
            select(
                &[
                    "0", "2", "3", "4", "5", "6", "error", "warn", "warning", "info", "debug",
                    "trace", "off", " INFO ",
                ][..]
            )
            .prop_map(|s| json!(s)),
        ]
        .boxed(),
        config::Kind::Choice(words) => select(words).prop_map(|s| json!(s)).boxed(),
        config::Kind::Ignored => tricky_string().prop_map(Value::String).boxed(),
    }
}

/// A `contrail` section: known keys with valid or random values of random types, or sometimes
/// not an object at all.
fn contrail_section() -> BoxedStrategy<Value> {
    let entry = select(contrail_keys()).prop_flat_map(|k| {
        (
            Just(k.to_string()),
            prop_oneof![2 => valid_field(k), 1 => any_field()],
        )
    });
    prop_oneof![
        10 => vec(entry, 0..10).prop_map(object),
        1 => json_value(),
    ]
    .boxed()
}

fn network_name() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => name().prop_map(Value::String),
        1 => select(&["", "contrail-k8s-cni", "default"][..]).prop_map(|s| json!(s)),
        1 => Just(Value::Null),
        2 => hostile_name().prop_map(Value::String),
        1 => any_field(),
    ]
    .boxed()
}

/// GC's list of attachments still in use: mostly well-formed.
fn gc_list() -> BoxedStrategy<Value> {
    let s = || prop_oneof![3 => name().prop_map(Value::String), 1 => any_field()];
    let entry = prop_oneof![
        6 => (s(), s()).prop_map(|(c, i)| json!({"containerID": c, "ifname": i})),
        1 => json_value(),
    ];
    prop_oneof![6 => vec(entry, 0..4).prop_map(Value::Array), 1 => any_field()].boxed()
}

/// A network config that looks like what Multus or a conflist sends, with hostile values.
fn plausible_conf() -> BoxedStrategy<Value> {
    let version = prop_oneof![
        8 => select(&SUPPORTED_VERSIONS[..]).prop_map(|s| json!(s)),
        1 => any_field(),
    ];
    let extra = || {
        option::weighted(
            0.3,
            prop_oneof![
                3 => vec((json_key(), json_value()), 0..4).prop_map(object),
                1 => json_value(),
            ],
        )
    };
    (
        option::weighted(0.95, version),
        option::weighted(0.8, network_name()),
        option::weighted(0.9, contrail_section()),
        extra(),
        extra(),
        extra(),
        vec((json_key(), any_field()), 0..3),
        option::weighted(
            0.2,
            (
                select(&["cni.dev/valid-attachments", "cni.dev/attachments"][..]),
                gc_list(),
            ),
        ),
    )
        .prop_map(|(version, name, contrail, prev, rc, args, junk, gc)| {
            let mut m = Map::new();
            // Unknown top-level keys first, so that the known ones below win.
            for (k, v) in junk {
                m.insert(k, v);
            }
            m.insert("type".into(), json!("contrail-k8s-cni"));
            if let Some((k, v)) = gc {
                m.insert(k.into(), v);
            }
            let fields = [
                ("cniVersion", version),
                ("name", name),
                ("contrail", contrail),
                ("prevResult", prev),
                ("runtimeConfig", rc),
                ("args", args),
            ];
            for (k, v) in fields {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
        .boxed()
}

/// A node-wide defaults file, when there is one.
fn node_file() -> BoxedStrategy<Option<Value>> {
    option::weighted(
        0.4,
        prop_oneof![
            4 => contrail_section().prop_map(|c| json!({"contrail": c})),
            1 => json_value(),
        ],
    )
    .boxed()
}

fn parse_conf(stdin: &[u8], node: &Option<Value>) -> contrail_k8s_cni::Result<NetConf> {
    let file = config::NodeFile {
        dir: "/etc/cni/net.d".into(),
        path: node
            .as_ref()
            .map(|_| "/etc/cni/net.d/10-contrail.conf".into()),
    };
    config::parse(stdin, &config::node(file, node.as_ref())?)
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn config_never_panics_on_bytes(
        bytes in prop_oneof![
            vec(any::<u8>(), 0..256),
            // Near-JSON: a valid document with a few bytes flipped or cut.
            (plausible_conf(), vec((any::<prop::sample::Index>(), any::<u8>()), 0..4), any::<prop::sample::Index>())
                .prop_map(|(v, flips, cut)| {
                    let mut b = v.to_string().into_bytes();
                    for (i, x) in flips {
                        if !b.is_empty() {
                            let i = i.index(b.len());
                            b[i] = x;
                        }
                    }
                    let keep = cut.index(b.len() + 1);
                    if keep % 3 == 0 {
                        b.truncate(keep);
                    }
                    b
                }),
        ],
    ) {
        check_netconf(&parse_conf(&bytes, &None))?;
    }

    #[test]
    fn config_never_panics_on_any_json(stdin in json_value(), node in option::of(json_value())) {
        check_netconf(&parse_conf(stdin.to_string().as_bytes(), &node))?;
    }

    #[test]
    fn config_plausible_with_hostile_values(stdin in plausible_conf(), node in node_file()) {
        let c = parse_conf(stdin.to_string().as_bytes(), &node);
        check_netconf(&c)?;
        if let Ok(c) = c {
            // A null list counts as absent (GC then refuses, code 7), like every null.
            let gc = ["cni.dev/valid-attachments", "cni.dev/attachments"]
                .iter()
                .any(|k| stdin.get(k).is_some_and(|v| !v.is_null()));
            prop_assert_eq!(c.valid_attachments.is_some(), gc);
        }
    }
}

/// A fully valid `contrail` section: some of the table's keys, each with a valid value (a
/// metrics-file or log-file may be inside config-dir: the node refuses those).
fn valid_section() -> BoxedStrategy<Vec<(String, Value)>> {
    let keys: Vec<&str> = config::KEYS.iter().map(|k| k.name).collect();
    let n = keys.len();
    proptest::sample::subsequence(keys, 0..=n)
        .prop_flat_map(|keys| {
            keys.into_iter()
                .map(|k| valid_field(k).prop_map(move |v| (k.to_string(), v)))
                .collect::<Vec<_>>()
        })
        .prop_shuffle()
        .boxed()
}

fn number_of(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => s.trim().parse().unwrap(),
        _ => unreachable!("{v}"),
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Valid values are always accepted: the node's read back; stdin's node-scoped keys are
    /// refused exactly when they differ from the node's, and never take effect; only the MTU
    /// and the interface type are stdin's to choose.
    #[test]
    fn config_valid_sections_are_accepted_and_read_back(
        version in select(&SUPPORTED_VERSIONS[..]),
        net in name(),
        section in valid_section(),
        node_section in valid_section(),
    ) {
        let stdin = json!({"cniVersion": version, "name": net, "contrail": object(section.clone())});
        let node_value = json!({"contrail": object(node_section.clone())});
        let nodes_value = |key: &str| node_section.iter().find(|(k, _)| k == key).map_or(spec(key).default, |(_, v)| v.as_str().unwrap());
        let inside = |key: &str| {
            let file = nodes_value(key);
            !file.is_empty() && Path::new(file).starts_with(nodes_value("config-dir"))
        };
        let c = parse_conf(stdin.to_string().as_bytes(), &Some(node_value.clone()));
        check_netconf(&c)?;
        let c = match c {
            Ok(c) => c,
            Err(e) if (inside("log-file") || inside("metrics-file")) && e.to_string().contains("inside config-dir") => return Ok(()),
            Err(e) => return Err(TestCaseError::fail(format!("refused: {e}"))),
        };
        prop_assert_eq!(c.cni_version.as_str(), version);
        prop_assert_eq!(&c.network, if net == "contrail-k8s-cni" { "default" } else { net.as_str() });
        // The node's settings alone, as stdin with nothing of its own sees them.
        let nodes = parse_conf(br#"{"cniVersion":"1.0.0"}"#, &Some(node_value)).unwrap().contrail;
        let k = &c.contrail;
        prop_assert_eq!(&nodes, &config::Contrail { mtu: nodes.mtu, interface_type: nodes.interface_type, ..k.clone() }, "stdin changed a node key");
        for (key, v) in &node_section {
            check_read_back(&nodes, key, v)?;
        }
        for (key, v) in &section {
            match spec(key).scope {
                config::Scope::Network => {
                    prop_assert!(!c.refused.contains(&key.as_str()), "{}={}", key, v);
                    check_read_back(k, key, v)?;
                }
                // Refused exactly when its value reads as another than the node's.
                config::Scope::Node => {
                    let differs = check_read_back(&nodes, key, v).is_err();
                    prop_assert_eq!(c.refused.contains(&key.as_str()), differs, "{}={}", key, v);
                }
            }
        }
    }
}

/// Whether `k` reads `key` as `v` says. Every key of the table has its model here.
fn check_read_back(k: &config::Contrail, key: &str, v: &Value) -> Result<(), TestCaseError> {
    let path = |p: &Option<std::path::PathBuf>| p.as_deref().unwrap_or(Path::new("")).to_owned();
    match key {
        "vrouter-ip" => prop_assert_eq!(k.vrouter_ip.to_string(), v.as_str().unwrap()),
        "vrouter-port" => prop_assert_eq!(f64::from(k.vrouter_port), number_of(v)),
        "agent-requests-per-second" => prop_assert_eq!(f64::from(k.agent_rate), number_of(v)),
        "config-dir" => prop_assert_eq!(k.config_dir.as_path(), Path::new(v.as_str().unwrap())),
        "log-file" => prop_assert_eq!(path(&k.log_file), Path::new(v.as_str().unwrap())),
        "metrics-file" => prop_assert_eq!(path(&k.metrics_file), Path::new(v.as_str().unwrap())),
        "vif-type" => prop_assert_eq!(
            format!("{:?}", k.vif_type).to_lowercase(),
            v.as_str().unwrap()
        ),
        "parent-interface" => prop_assert_eq!(&k.parent_interface, v.as_str().unwrap()),
        "vrouter-socket-dir" => prop_assert_eq!(
            k.vrouter_socket_dir.as_path(),
            Path::new(v.as_str().unwrap())
        ),
        "vhost-dir" => prop_assert_eq!(k.vhost_dir.as_path(), Path::new(v.as_str().unwrap())),
        "vhost-pod-dir" => {
            prop_assert_eq!(k.vhost_pod_dir.as_path(), Path::new(v.as_str().unwrap()))
        }
        "device-info-dir" => {
            prop_assert_eq!(k.device_info_dir.as_path(), Path::new(v.as_str().unwrap()))
        }
        "vrouter-mode" => prop_assert_eq!(
            format!("{:?}", k.vrouter_mode).to_lowercase(),
            v.as_str().unwrap()
        ),
        "interface-type" => prop_assert_eq!(
            match k.interface_type {
                config::InterfaceType::Veth => "veth",
                config::InterfaceType::VhostUser => "vhost-user",
            },
            v.as_str().unwrap()
        ),
        // Accepted and ignored.
        "meta-plugin" => {}
        "poll-timeout" => {
            let want = Duration::from_secs_f64(number_of(v));
            prop_assert!(k.poll_timeout.abs_diff(want) < Duration::from_micros(1));
        }
        "poll-retries" => prop_assert_eq!(f64::from(k.poll_retries), number_of(v)),
        "cluster-name" => prop_assert_eq!(&k.cluster_name, v.as_str().unwrap()),
        "mtu" => prop_assert_eq!(f64::from(k.mtu), number_of(v)),
        "mode" => prop_assert_eq!(
            format!("{:?}", k.mode).to_lowercase(),
            match v.as_str().unwrap() {
                "k8s" => "plugin",
                other => other,
            }
        ),
        "log-level" => {
            let level = match v {
                Value::Number(n) => n.to_string(),
                v => v.as_str().unwrap().trim().to_lowercase(),
            };
            let want = match level.as_str() {
                "0" | "1" | "2" | "error" => "ERROR",
                "3" | "warn" | "warning" => "WARN",
                "4" | "info" => "INFO",
                "5" | "debug" => "DEBUG",
                "6" | "trace" => "TRACE",
                _ => "OFF",
            };
            prop_assert_eq!(k.log_level.to_string(), want);
        }
        other => panic!("{other} has no model in check_read_back"),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. pod::from_args

/// An independent reading of CNI_ARGS: pairs split at `;`, key up to the first `=`, the last
/// non-empty value wins.
fn model_lookup(args: &str, key: &str) -> Option<String> {
    let mut found = None;
    for pair in args.split(';') {
        if let Some(eq) = pair.find('=') {
            let (k, v) = (&pair[..eq], &pair[eq + 1..]);
            if k == key && !v.is_empty() {
                found = Some(v.to_string());
            }
        }
    }
    found
}

const POD_KEYS: &[&str] = &[
    "K8S_POD_NAME",
    "K8S_POD_NAMESPACE",
    "K8S_POD_UID",
    "K8S_POD_INFRA_CONTAINER_ID",
    "IgnoreUnknown",
    "k8s_pod_name",
    "K8S_POD_NAME ",
    " K8S_POD_NAME",
    "",
];

fn args_value() -> BoxedStrategy<String> {
    prop_oneof![
        3 => name(),
        3 => hostile_name(),
        1 => Just(String::new()),
        1 => "[a-z]{0,3}[=;/\\x00][a-z=]{0,3}",
    ]
    .boxed()
}

/// CNI_ARGS-shaped strings whose values may hold anything (`;` and `=` included).
fn hostile_args() -> BoxedStrategy<String> {
    let pair = prop_oneof![
        3 => args_value().prop_map(|v| format!("K8S_POD_NAME={v}")),
        2 => (select(POD_KEYS), args_value()).prop_map(|(k, v)| format!("{k}={v}")),
        1 => tricky_string(),
    ];
    prop_oneof![
        6 => vec(pair, 1..8).prop_map(|p| p.join(";")),
        1 => any::<String>(),
        1 => "[K8S_POD_NAME=;/.\\x00é]{0,40}",
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn pod_args_never_panic_and_names_are_path_safe(args in hostile_args()) {
        let got = pod::from_args(&args);
        let name = model_lookup(&args, "K8S_POD_NAME");
        let namespace = model_lookup(&args, "K8S_POD_NAMESPACE").unwrap_or_else(|| "default".into());
        match got {
            Ok(None) => prop_assert_eq!(name, None),
            Ok(Some(p)) => {
                for v in [&p.name, &p.namespace] {
                    prop_assert!(valid_name(v), "{v:?}");
                    prop_assert!(!v.contains('/') && v != "." && v != "..", "{v:?}");
                }
                prop_assert_eq!(Some(&p.name), name.as_ref());
                prop_assert_eq!(&p.namespace, &namespace);
            }
            Err(e) => {
                prop_assert_eq!(e.var.as_str(), "CNI_ARGS");
                prop_assert!(matches!(&e.problem, EnvProblem::BadName { key: Some(_), .. }), "{}", e);
                let name = name.unwrap_or_default();
                prop_assert!(!valid_name(&name) || !valid_name(&namespace), "refused {name:?} in {namespace:?}: {e}");
            }
        }
    }
}

/// One `K=V` of a Multus CNI_ARGS string.
#[derive(Debug, Clone)]
enum ArgPair {
    Name(String),
    Namespace(String),
    Uid(String),
    Extra(String, String),
    Bare(String),
}

fn arg_pair() -> BoxedStrategy<ArgPair> {
    let value_or_empty = || prop_oneof![4 => name(), 1 => Just(String::new())];
    prop_oneof![
        2 => value_or_empty().prop_map(ArgPair::Name),
        2 => value_or_empty().prop_map(ArgPair::Namespace),
        1 => prop_oneof![3 => "[a-f0-9-]{1,36}", 1 => Just(String::new())].prop_map(ArgPair::Uid),
        3 => ("[A-Za-z_][A-Za-z0-9_]{0,20}", "[^;]{0,12}")
            .prop_filter("not a pod key", |(k, _)| {
                !["K8S_POD_NAME", "K8S_POD_NAMESPACE", "K8S_POD_UID"].contains(&k.as_str())
            })
            .prop_map(|(k, v)| ArgPair::Extra(k, v)),
        1 => "[^;=]{0,8}".prop_map(ArgPair::Bare),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config(512))]

    /// Multus prepends its own keys to the runtime's: keys repeat, the last non-empty wins.
    #[test]
    fn pod_multus_args_last_non_empty_value_wins(
        multus in vec(arg_pair(), 0..8),
        runtime in vec(arg_pair(), 0..8),
        last_name in name(),
    ) {
        let mut pairs = multus;
        pairs.extend(runtime);
        // At least one non-empty name, somewhere.
        let at = pairs.len() / 2;
        pairs.insert(at, ArgPair::Name(last_name));
        let (mut name, mut namespace) = (None, None);
        let mut text = Vec::new();
        for p in &pairs {
            match p {
                ArgPair::Name(v) => {
                    text.push(format!("K8S_POD_NAME={v}"));
                    if !v.is_empty() { name = Some(v.clone()); }
                }
                ArgPair::Namespace(v) => {
                    text.push(format!("K8S_POD_NAMESPACE={v}"));
                    if !v.is_empty() { namespace = Some(v.clone()); }
                }
                // Not needed, and not kept: the agent gives the pod's uuid.
                ArgPair::Uid(v) => text.push(format!("K8S_POD_UID={v}")),
                ArgPair::Extra(k, v) => text.push(format!("{k}={v}")),
                ArgPair::Bare(s) => text.push(s.clone()),
            }
        }
        let args = text.join(";");
        let want = Pod {
            namespace: namespace.unwrap_or_else(|| "default".into()),
            name: name.unwrap(),
        };
        prop_assert_eq!(pod::from_args(&args).ok(), Some(Some(want)), "{}", args);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. cni::Env::parse

fn command_value() -> BoxedStrategy<String> {
    prop_oneof![
        6 => select(&["ADD", "DEL", "CHECK", "VERSION", "GC", "STATUS"][..]).prop_map(String::from),
        1 => select(&["add", "", " ADD", "ADD\0", "DELETE"][..]).prop_map(String::from),
        1 => tricky_string(),
    ]
    .boxed()
}

fn ifname_value() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-z][a-z0-9]{0,14}",
        1 => "[a-z0-9]{16,18}",
        2 => tricky_string(),
        1 => "[a-z]{0,3}[/: \\t\\n\\x0b\\x0c\\r\\x00\u{85}\u{a0}\u{2000}\u{3000}éàŠ.][a-z]{0,3}",
    ]
    .boxed()
}

fn netns_value() -> BoxedStrategy<String> {
    prop_oneof![
        4 => abs_path(),
        1 => Just("/proc/1234/ns/net".to_string()),
        1 => Just(String::new()),
        2 => tricky_string(),
    ]
    .boxed()
}

fn env_map() -> BoxedStrategy<HashMap<String, String>> {
    let var = |name: &'static str, s: BoxedStrategy<String>| {
        option::weighted(0.9, s).prop_map(move |v| v.map(|v| (name.to_string(), v)))
    };
    (
        var("CNI_COMMAND", command_value()),
        var(
            "CNI_CONTAINERID",
            prop_oneof![3 => name(), 1 => hostile_name()].boxed(),
        ),
        var("CNI_NETNS", netns_value()),
        var("CNI_IFNAME", ifname_value()),
        var("CNI_ARGS", hostile_args()),
        var("CNI_PATH", abs_path()),
    )
        .prop_map(|(a, b, c, d, e, f)| [a, b, c, d, e, f].into_iter().flatten().collect())
        .boxed()
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn env_never_panics_and_accepts_only_safe_values(vars in env_map()) {
        match Env::parse(|k| vars.get(k).cloned()) {
            Err(e) => prop_assert_eq!(Error::from(e).code(), code::INVALID_ENV),
            Ok(env) => {
                prop_assert_eq!(Some(env.command.as_str()), vars.get("CNI_COMMAND").map(String::as_str));
                prop_assert!(env.sandbox.as_ref().is_none_or(|c| valid_name(c)), "{:?}", env.sandbox);
                prop_assert!(env.interface.as_ref().is_none_or(|i| check_ifname(i).is_ok()), "{:?}", env.interface);
                prop_assert!(env.netns.is_empty() || env.netns.starts_with('/'), "{:?}", env.netns);
                prop_assert!(!env.netns.contains('\0'));
                if matches!(env.command, Command::Add | Command::Del | Command::Check) {
                    prop_assert!(env.container_id().is_ok_and(|c| valid_name(c)));
                    prop_assert!(env.ifname().is_ok_and(|i| check_ifname(i).is_ok()));
                    prop_assert_eq!(&env.args, vars.get("CNI_ARGS").map_or("", String::as_str));
                }
                if matches!(env.command, Command::Add | Command::Check) {
                    prop_assert!(!env.netns.is_empty());
                }
            }
        }
    }
}

/// What Linux's `dev_valid_name` and libcni's `ValidateInterfaceName` both accept: 1 to 15
/// bytes, not `.`/`..`, no `/`, `:` or NUL; libcni refuses every Unicode space
/// (`unicode.IsSpace`, the White_Space property), the kernel every byte its `isspace` knows
/// (`\t\n\v\f\r`, space and 0xa0, Latin-1's no-break space).
fn linux_and_libcni_accept(s: &str) -> bool {
    let kernel = !s.is_empty()
        && s.len() < 16
        && s != "."
        && s != ".."
        && !s
            .bytes()
            .any(|c| matches!(c, b'/' | b':' | 0 | b'\t'..=b'\r' | b' ' | 0xa0));
    let libcni = !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
    kernel && libcni
}

/// What a name shown in the node's log may hold besides: no control characters.
fn loggable(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

proptest! {
    #![proptest_config(config(512))]

    /// check_ifname accepts only what the kernel and libcni accept (and no control
    /// characters), so that a bad CNI_IFNAME is refused up front with code 4, not by netlink
    /// half-way through ADD with code 102.
    #[test]
    fn check_ifname_accepts_only_what_linux_and_libcni_accept(s in ifname_value()) {
        if check_ifname(&s).is_ok() {
            prop_assert!(linux_and_libcni_accept(&s) && loggable(&s), "{:?} accepted", s);
        }
    }

    /// ...and refuses nothing they accept that is fit for a log line.
    #[test]
    fn check_ifname_refuses_nothing_linux_and_libcni_accept(s in ifname_value()) {
        if linux_and_libcni_accept(&s) && loggable(&s) {
            prop_assert!(check_ifname(&s).is_ok(), "{:?} refused", s);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. vmi::parse_cfg and vmi::parse_ip

fn mac_string() -> BoxedStrategy<String> {
    let fmt = |m: [u8; 6]| Mac(m).to_string();
    prop_oneof![
        6 => any::<[u8; 6]>().prop_map(move |mut m| { m[0] &= 0xfe; fmt(m) }),
        1 => any::<[u8; 6]>().prop_map(move |m| fmt(m).to_uppercase()),
        1 => any::<[u8; 6]>().prop_map(fmt),
        1 => select(&[
            "00:00:00:00:00:00",
            "ff:ff:ff:ff:ff:ff",
            "01:00:5e:00:00:01",
            "02:00:00:00:00",
            "02:00:00:00:00:01:",
            "02:00:00:00:00:01:02",
            "02-00-00-00-00-01",
            "2:0:0:0:0:1",
            "+2:00:00:00:00:01",
            "02:+0:00:00:00:01",
            "02:00:00:00:00:0g",
            "é2:00:00:00:00",
            "020000000001",
            "",
        ][..]).prop_map(String::from),
        1 => tricky_string(),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(config(512))]

    /// A MAC is accepted only in `aa:bb:cc:dd:ee:ff` form, unicast and non-zero, and prints back
    /// as it was written (up to case).
    #[test]
    fn mac_parse_accepts_only_the_colon_hex_form(s in mac_string()) {
        if let Some(m) = Mac::parse(&s) {
            prop_assert!(m.0[0] & 1 == 0 && m.0 != [0; 6], "{:?}", s);
            prop_assert_eq!(m.to_string(), s.to_ascii_lowercase());
        }
    }

    #[test]
    fn mac_parse_round_trips_unicast_macs(m in any::<[u8; 6]>()) {
        let s = Mac(m).to_string();
        let unicast = m[0] & 1 == 0 && m != [0; 6];
        prop_assert_eq!(Mac::parse(&s), unicast.then_some(Mac(m)));
        prop_assert_eq!(Mac::parse(&s.to_uppercase()), unicast.then_some(Mac(m)));
    }
}

fn uuid_value() -> BoxedStrategy<Value> {
    prop_oneof![
        8 => uuid().prop_map(Value::String),
        1 => hostile_uuid().prop_map(Value::String),
        1 => any_field(),
    ]
    .boxed()
}

fn index_annotation() -> BoxedStrategy<String> {
    let part = || {
        prop_oneof![
            any::<u32>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            select(&["", "x", "+1", "-0", " 1", "4294967296", "1.0"][..]).prop_map(String::from),
        ]
    };
    prop_oneof![
        6 => (1u32..8).prop_flat_map(|n| (0..n, Just(n))).prop_map(|(k, n)| format!("{k}/{n}")),
        1 => (part(), part()).prop_map(|(k, n)| format!("{k}/{n}")),
        1 => tricky_string(),
    ]
    .boxed()
}

fn annotation() -> BoxedStrategy<Value> {
    let s = prop_oneof![
        3 => name().prop_map(|n| format!("{{network:{n}}}")),
        1 => hostile_name().prop_map(|n| format!("{{network:{n}}}")),
        3 => index_annotation().prop_map(|i| format!("{{index:{i}}}")),
        3 => ifname_value().prop_map(|i| format!("{{interface:{i}}}")),
        1 => select(&["true", "false", "", "False", "no"][..]).prop_map(|b| format!("{{default-gw:{b}}}")),
        1 => Just("{cluster:k8s}".to_string()),
        1 => ("[a-z:{}-]{0,10}", tricky_string()).prop_map(|(k, v)| format!("{{{k}:{v}}}")),
        1 => tricky_string(),
    ];
    prop_oneof![9 => s.prop_map(Value::String), 1 => any_field()].boxed()
}

/// One VMI of a `GET /vm-cfg` answer: the agent's fields, each mostly valid, sometimes hostile
/// or missing, plus random extra fields.
fn cfg_item() -> BoxedStrategy<Value> {
    let field = |s: BoxedStrategy<Value>| option::weighted(0.95, s);
    (
        field(uuid_value()),
        field(uuid_value()),
        field(uuid_value()),
        field(prop_oneof![4 => name().prop_map(|n| json!(format!("default-domain:k8s-default:{n}"))), 1 => any_field()].boxed()),
        field(prop_oneof![9 => mac_string().prop_map(Value::String), 1 => any_field()].boxed()),
        option::weighted(
            0.9,
            prop_oneof![9 => vec(annotation(), 0..7).prop_map(Value::Array), 1 => any_field()],
        ),
        vec((json_key(), any_field()), 0..2),
    )
        .prop_map(|(id, vm, vn, vn_name, mac, ann, junk)| {
            let mut m: Map<String, Value> = junk.into_iter().collect();
            let fields = [
                ("id", id),
                ("vm-uuid", vm),
                ("vn-id", vn),
                ("vn-name", vn_name),
                ("mac-address", mac),
                ("annotations", ann),
            ];
            for (k, v) in fields {
                match v {
                    Some(v) => m.insert(k.into(), v),
                    None => m.remove(k),
                };
            }
            m.insert("sub-interface".into(), json!(false));
            m.insert("vlan-id".into(), json!(65535));
            Value::Object(m)
        })
        .boxed()
}

fn cfg_body() -> BoxedStrategy<Vec<u8>> {
    prop_oneof![
        6 => vec(cfg_item(), 0..5).prop_map(|a| Value::Array(a).to_string().into_bytes()),
        1 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => vec(any::<u8>(), 0..128),
    ]
    .boxed()
}

fn check_vmis(r: &vmi::Parsed<Vec<Vmi>>) -> Result<(), TestCaseError> {
    let vmis = match r {
        // A refusal is by type (code 6 once the agent client wraps it); its message names
        // fields and kinds, so the answer's control characters never reach a log.
        Err(e) => {
            prop_assert!(!e.to_string().chars().any(char::is_control), "{}", e);
            return Ok(());
        }
        Ok(v) => v,
    };
    for v in vmis {
        prop_assert!(valid_uuid(&v.uuid), "id {:?}", v.uuid);
        prop_assert!(valid_uuid(&v.vm_uuid), "vm-uuid {:?}", v.vm_uuid);
        prop_assert!(valid_uuid(&v.vn_uuid), "vn-id {:?}", v.vn_uuid);
        prop_assert!(v.mac.0[0] & 1 == 0 && v.mac.0 != [0; 6], "mac {}", v.mac);
        prop_assert!(v.index < v.count, "index {}/{}", v.index, v.count);
        if let Some(i) = &v.interface {
            prop_assert!(check_ifname(i).is_ok(), "interface {:?}", i);
        }
        let host = names::host_ifname(&v.uuid);
        prop_assert!(check_ifname(&host).is_ok());
    }
    // The consumers of a parsed answer must not panic on it either.
    if vmi::complete(vmis) == Ok(true) {
        let mut idx: Vec<u32> = vmis.iter().map(|v| v.index).collect();
        idx.sort_unstable();
        prop_assert!(idx.iter().copied().eq(0..vmis.len() as u32));
    }
    if let Some(gw) = vmi::default_gw(vmis) {
        prop_assert!(vmis.contains(gw));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn vmi_cfg_never_panics_and_accepts_only_sane_vmis(body in cfg_body()) {
        check_vmis(&vmi::parse_cfg(&body))?;
    }
}

fn addr_value<T: std::fmt::Display + std::fmt::Debug + Arbitrary + 'static>(
    unspecified: &'static str,
) -> BoxedStrategy<Value> {
    prop_oneof![
        6 => any::<T>().prop_map(|a| json!(a.to_string())),
        1 => any::<T>().prop_map(|a| json!(format!(" {a} "))),
        1 => select(vec!["", " ", "0.0.0.0", " 0.0.0.0", "::", "::ffff:10.1.1.1", unspecified])
            .prop_map(|s| json!(s)),
        1 => select(&["300.1.1.1", "1.2.3", "10.1.1.1/24", "fe80::1%eth0", "localhost", "0"][..])
            .prop_map(|s| json!(s)),
        1 => any_field(),
    ]
    .boxed()
}

fn plen_value(max: u64) -> BoxedStrategy<Value> {
    prop_oneof![
        6 => (0..=max + 8).prop_map(|n| json!(n)),
        2 => (0..=max + 8).prop_map(|n| json!(n.to_string())),
        1 => select(&["", " 24 ", "+24", "-1", "1.5", "x", "18446744073709551616"][..]).prop_map(|s| json!(s)),
        1 => any_field(),
    ]
    .boxed()
}

/// One entry of a `GET /vm/<vm>/<vmi>` answer, for `id`.
fn ip_item(id: Value) -> BoxedStrategy<Value> {
    let f = |s: BoxedStrategy<Value>| option::weighted(0.85, s);
    (
        option::weighted(0.97, prop_oneof![9 => mac_string().prop_map(Value::String), 1 => any_field()]),
        f(addr_value::<Ipv4Addr>("0.0.0.0")),
        f(plen_value(32)),
        f(addr_value::<Ipv6Addr>("::")),
        f(plen_value(128)),
        f(addr_value::<Ipv4Addr>("0.0.0.0")),
        f(addr_value::<Ipv4Addr>("0.0.0.0")),
        f(addr_value::<Ipv6Addr>("::")),
        f(addr_value::<Ipv6Addr>("::")),
        f(prop_oneof![2 => "tap[0-9a-f]{12}".prop_map(Value::String), 1 => ifname_value().prop_map(Value::String), 1 => any_field()].boxed()),
        vec((json_key(), any_field()), 0..2),
    )
        .prop_map(move |(mac, v4, plen, v6, v6plen, gw, dns, v6gw, v6dns, sys, junk)| {
            let mut m: Map<String, Value> = junk.into_iter().collect();
            let fields = [
                ("mac-address", mac),
                ("ip-address", v4),
                ("plen", plen),
                ("v6-ip-address", v6),
                ("v6-plen", v6plen),
                ("gateway", gw),
                ("dns-server", dns),
                ("v6-gateway", v6gw),
                ("v6-dns-server", v6dns),
                ("system-name", sys),
            ];
            for (k, v) in fields {
                match v {
                    Some(v) => m.insert(k.into(), v),
                    None => m.remove(k),
                };
            }
            m.insert("id".into(), id.clone());
            Value::Object(m)
        })
        .boxed()
}

fn ip_body() -> BoxedStrategy<(String, Vec<u8>)> {
    uuid()
        .prop_flat_map(|want| {
            // Mostly the VMI asked for among others; sometimes not there at all.
            let items = (
                option::weighted(0.9, ip_item(json!(want.clone()))),
                vec(uuid_value().prop_flat_map(ip_item), 0..3),
                any::<prop::sample::Index>(),
            )
                .prop_map(|(ours, mut others, at)| {
                    if let Some(ours) = ours {
                        others.insert(at.index(others.len() + 1), ours);
                    }
                    others
                });
            let body = prop_oneof![
                8 => items.prop_map(|a| Value::Array(a).to_string().into_bytes()),
                1 => json_value().prop_map(|v| v.to_string().into_bytes()),
                1 => vec(any::<u8>(), 0..128),
            ];
            (Just(want), body)
        })
        .boxed()
}

fn check_ip(r: &vmi::Parsed<IpConfig>) -> Result<(), TestCaseError> {
    let ip = match r {
        // A refusal is by type (code 6 once the agent client wraps it); its message names
        // fields and kinds, so the answer's control characters never reach a log.
        Err(e) => {
            prop_assert!(!e.to_string().chars().any(char::is_control), "{}", e);
            return Ok(());
        }
        Ok(ip) => ip,
    };
    prop_assert!(ip.v4.is_some() || ip.v6.is_some());
    if let Some(n) = ip.v4 {
        prop_assert!((1..=32).contains(&n.prefix()), "{n}");
        prop_assert!(!n.ip().is_unspecified(), "{n}");
    }
    if let Some(n) = ip.v6 {
        prop_assert!((1..=128).contains(&n.prefix()), "{n}");
        prop_assert!(!n.ip().is_unspecified(), "{n}");
    }
    for a in [ip.v4_gateway, ip.v4_dns].into_iter().flatten() {
        prop_assert!(!a.is_unspecified());
    }
    for a in [ip.v6_gateway, ip.v6_dns].into_iter().flatten() {
        prop_assert!(!a.is_unspecified());
    }
    prop_assert!(ip.mac.0[0] & 1 == 0 && ip.mac.0 != [0; 6], "mac {}", ip.mac);
    if let Some(r) = &ip.registered_as {
        prop_assert!(check_ifname(r).is_ok(), "{r:?}");
    }
    prop_assert_eq!(
        ip.addresses().len(),
        usize::from(ip.v4.is_some()) + usize::from(ip.v6.is_some())
    );
    for s in ip.nameservers() {
        prop_assert!(s.parse::<IpAddr>().is_ok());
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn vmi_ip_never_panics_and_accepts_only_sane_configs((want, body) in ip_body()) {
        check_ip(&vmi::parse_ip(&body, VM_UUID, &want))?;
    }

    #[test]
    fn vmi_parsers_never_panic_on_bytes(body in vec(any::<u8>(), 0..512), want in uuid()) {
        check_vmis(&vmi::parse_cfg(&body))?;
        check_ip(&vmi::parse_ip(&body, VM_UUID, &want))?;
    }
}

// ---------------------------------------------------------------------------------------------
// 5. vmi::resolve

const NETWORKS: &[&str] = &["default", "net-a", "net-b"];
const IFNAMES: &[&str] = &["eth0", "net1", "net2", "net3", "eth5"];
const THIS: &str = "sandbox-this";
const OLD: &str = "sandbox-old";

const VM_UUID: &str = "40936d96-cf0e-11e8-9892-002590aaa964";

fn test_vmi(uuid: String, network: &str, index: u32, count: u32, interface: Option<&str>) -> Vmi {
    Vmi {
        mac: Mac([2, 0, 0, 0, (index >> 8) as u8, index as u8]),
        vm_uuid: VmUuid::parse(VM_UUID).unwrap(),
        vn_uuid: VnUuid::parse("f95af4cc-e4ba-44c8-9936-269d891e0ee9").unwrap(),
        uuid: VmiUuid::parse(uuid).unwrap(),
        network: network.into(),
        index,
        count,
        interface: interface.map(str::to_string),
        default_gw: false,
        ignored: None,
        namespace: Some("default".into()),
        name: Some("p".into()),
        vlan: None,
    }
}

/// Resolution with the agent's registrations known: the VMI, and the VMIs the agent was asked
/// about, in order.
fn resolved<'a>(
    at: Attachment<'_>,
    vmis: &'a [Vmi],
    claims: &[Claim],
    registered: &[String],
) -> (Result<&'a Vmi, Unresolved>, Vec<String>) {
    let mut asked = Vec::new();
    let got = vmi::resolve(at, vmis, claims).and_then(|choice| {
        choice
            .take(|v| {
                asked.push(v.uuid.to_string());
                registered.iter().any(|r| *r == v.uuid)
            })
            .ok_or(Unresolved::AllTaken {
                count: vmis.iter().filter(|v| v.network == at.network).count(),
            })
    });
    (got, asked)
}

/// Distinct, kube-manager-like (shared prefix) VMI uuids.
fn sibling_uuids(n: usize) -> BoxedStrategy<Vec<String>> {
    any::<u64>()
        .prop_map(move |base| {
            (0..n as u128)
                .map(|i| uuid_of((u128::from(base) << 64) | (0xb196_0025_9000_0000 + i)))
                .collect()
        })
        .boxed()
}

#[derive(Debug, Clone)]
struct Scenario {
    vmis: Vec<Vmi>,
    claims: Vec<Claim>,
    registered: Vec<String>,
    network: &'static str,
    ifname: &'static str,
    /// A permutation of the VMIs and one of the claims, for the order-independence check.
    vmi_order: Vec<usize>,
    claim_order: Vec<usize>,
}

fn holder() -> BoxedStrategy<Option<String>> {
    prop_oneof![
        3 => Just(Some(THIS.to_string())),
        2 => Just(Some(OLD.to_string())),
        1 => Just(None),
    ]
    .boxed()
}

fn scenario() -> BoxedStrategy<Scenario> {
    (1usize..=7)
        .prop_flat_map(|n| {
            (
                sibling_uuids(n + 2),
                vec(select(NETWORKS), n),
                Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle(),
                vec(option::weighted(0.25, select(IFNAMES)), n),
                // One state file per VMI at most (files are named by VMI uuid); two stray
                // claims on VMIs the agent no longer lists.
                vec(option::weighted(0.5, (holder(), select(IFNAMES))), n + 2),
                vec(any::<bool>(), n + 2),
                // Mostly a network the pod has; sometimes one it may not, or none it has.
                (any::<prop::sample::Index>(), 0u8..8),
                select(IFNAMES),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
                any::<prop::sample::Index>(),
            )
        })
        .prop_map(
            |(uuids, nets, idx, ifs, claims, reg, (pick, how), ifname, vmi_order, rot)| {
                let n = nets.len();
                let network = match how {
                    0 => "net-z",
                    1 => NETWORKS[pick.index(NETWORKS.len())],
                    _ => nets[pick.index(n)],
                };
                let vmis: Vec<Vmi> = (0..n)
                    .map(|i| test_vmi(uuids[i].clone(), nets[i], idx[i], n as u32, ifs[i]))
                    .collect();
                let claims: Vec<Claim> = claims
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, c)| {
                        c.map(|(container_id, ifname)| Claim {
                            vmi: uuids[i].clone(),
                            container_id,
                            ifname: ifname.to_string(),
                        })
                    })
                    .collect();
                let registered = uuids
                    .iter()
                    .zip(reg)
                    .filter(|(_, r)| *r)
                    .map(|(u, _)| u.clone())
                    .collect();
                let mut claim_order: Vec<usize> = (0..claims.len()).collect();
                if !claim_order.is_empty() {
                    let k = rot.index(claim_order.len());
                    claim_order.rotate_left(k);
                    claim_order.reverse();
                }
                Scenario {
                    vmis,
                    claims,
                    registered,
                    network,
                    ifname,
                    vmi_order,
                    claim_order,
                }
            },
        )
        .boxed()
}

fn claims_on<'c>(claims: &'c [Claim], v: &'c Vmi) -> impl Iterator<Item = &'c Claim> {
    claims.iter().filter(move |c| c.vmi == v.uuid)
}

fn check_resolve(s: &Scenario) -> Result<(), TestCaseError> {
    let at = Attachment {
        network: s.network,
        container_id: THIS,
        ifname: s.ifname,
    };
    let (got, asked) = resolved(at, &s.vmis, &s.claims, &s.registered);

    // Order independence: the agent's order and the directory order do not matter.
    let vmis2: Vec<Vmi> = s.vmi_order.iter().map(|&i| s.vmis[i].clone()).collect();
    let claims2: Vec<Claim> = s.claim_order.iter().map(|&i| s.claims[i].clone()).collect();
    let (got2, _) = resolved(at, &vmis2, &claims2, &s.registered);
    prop_assert_eq!(
        got.as_ref().map(|v| &v.uuid),
        got2.as_ref().map(|v| &v.uuid),
        "order changed the answer"
    );

    let mut candidates: Vec<&Vmi> = s.vmis.iter().filter(|v| v.network == s.network).collect();
    candidates.sort_by_key(|v| v.index);
    let annotated_for_us = candidates
        .iter()
        .find(|v| v.interface.as_deref() == Some(s.ifname));
    let not_for_another = |v: &Vmi| v.interface.as_deref().is_none_or(|i| i == s.ifname);
    let held = candidates.iter().find(|v| {
        not_for_another(v)
            && claims_on(&s.claims, v)
                .any(|c| c.container_id.as_deref() == Some(THIS) && c.ifname == s.ifname)
    });
    // The agent is asked only about VMIs no state file names, of a network attached more than
    // once, in index order, and about none after the one taken.
    let asked_vmis: Vec<&Vmi> = asked
        .iter()
        .map(|u| *candidates.iter().find(|v| &v.uuid == u).unwrap())
        .collect();
    prop_assert!(
        asked_vmis.windows(2).all(|w| w[0].index < w[1].index),
        "asked out of order"
    );
    for v in &asked_vmis {
        prop_assert!(
            candidates.len() > 1 && claims_on(&s.claims, v).next().is_none(),
            "asked about {}",
            v.uuid
        );
    }
    if let (Ok(v), Some(last)) = (&got, asked_vmis.last()) {
        prop_assert!(last.index <= v.index, "asked beyond the one taken");
    }

    match got {
        Ok(v) => {
            prop_assert_eq!(&v.network, s.network);
            prop_assert!(
                not_for_another(v),
                "VMI {} (index {}) is annotated for {:?}, not {}",
                v.uuid,
                v.index,
                v.interface,
                s.ifname
            );
            if v.interface.as_deref() != Some(s.ifname) {
                for c in claims_on(&s.claims, v) {
                    prop_assert!(
                        !(c.container_id.as_deref() == Some(THIS) && c.ifname != s.ifname),
                        "VMI {} is held by {} of this sandbox",
                        v.uuid,
                        c.ifname
                    );
                }
            }
            if let Some(named) = annotated_for_us {
                prop_assert_eq!(
                    &v.uuid,
                    &named.uuid,
                    "the VMI annotated for this ifname wins"
                );
            } else if let Some(held) = held {
                prop_assert_eq!(&v.uuid, &held.uuid, "a retried ADD gets its own VMI back");
            }
        }
        Err(Unresolved::NoSuchNetwork { known }) => {
            prop_assert!(candidates.is_empty());
            let want: BTreeSet<&str> = s.vmis.iter().map(|v| v.network.as_str()).collect();
            prop_assert!(known.iter().map(String::as_str).eq(want));
        }
        Err(Unresolved::NoVmis) => prop_assert!(false, "plugin mode never finds no VMIs"),
        Err(Unresolved::AllTaken { count }) => {
            prop_assert_eq!(count, candidates.len());
            prop_assert!(!candidates.is_empty());
            prop_assert!(annotated_for_us.is_none() && held.is_none());
            // Nothing free was overlooked.
            for v in &candidates {
                let claims: Vec<&Claim> = claims_on(&s.claims, v).collect();
                let live = claims
                    .iter()
                    .any(|c| c.container_id.as_deref().is_none_or(|id| id == THIS));
                let unexplained = candidates.len() > 1
                    && s.registered.iter().any(|r| *r == v.uuid)
                    && claims.is_empty();
                prop_assert!(
                    v.interface.is_some() || live || unexplained,
                    "VMI {} (index {}) was free",
                    v.uuid,
                    v.index
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn resolve_picks_a_fitting_vmi(s in scenario()) {
        check_resolve(&s)?;
    }

    /// K attachments of one network, one after another, each recording its claim (replacing
    /// an older sandbox's): K distinct VMIs in index order; a retry gets the same VMI again;
    /// one more is refused.
    #[test]
    fn resolve_sequential_attachments_take_indexes_in_order(
        (vmis, old, ifnames) in (1usize..=6, 0usize..=3).prop_flat_map(|(k, others)| {
            let n = k + others;
            (
                sibling_uuids(n),
                Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle(),
                vec(select(&["default", "net-b"][..]), others),
                vec(any::<bool>(), n),
                proptest::sample::subsequence(
                    vec!["eth0", "net1", "net2", "net3", "net4", "net5", "net6", "eth5"], k,
                ).prop_shuffle(),
            )
                .prop_map(move |(uuids, idx, other_nets, old, ifnames)| {
                    let vmis: Vec<Vmi> = (0..n)
                        .map(|i| {
                            let net = if i < k { "net-a" } else { other_nets[i - k] };
                            test_vmi(uuids[i].clone(), net, idx[i], n as u32, None)
                        })
                        .collect();
                    (vmis, old, ifnames)
                })
        }),
    ) {
        // An older sandbox of the pod left state files (and the agent still has them
        // registered) on some VMIs.
        let mut claims: Vec<Claim> = vmis
            .iter()
            .zip(&old)
            .filter(|(_, o)| **o)
            .map(|(v, _)| Claim { vmi: v.uuid.to_string(), container_id: Some(OLD.into()), ifname: "eth0".into() })
            .collect();
        let registered: Vec<String> = claims.iter().map(|c| c.vmi.clone()).collect();
        let mut on_net: Vec<&Vmi> = vmis.iter().filter(|v| v.network == "net-a").collect();
        on_net.sort_by_key(|v| v.index);
        let mut got = Vec::new();
        for ifname in &ifnames {
            let at = Attachment { network: "net-a", container_id: THIS, ifname };
            let v = match resolved(at, &vmis, &claims, &registered).0 {
                Ok(v) => v,
                Err(e) => return Err(TestCaseError::fail(format!("{ifname}: {e:?} after {got:?}"))),
            };
            claims.retain(|c| c.vmi != v.uuid);
            claims.push(Claim { vmi: v.uuid.to_string(), container_id: Some(THIS.into()), ifname: ifname.to_string() });
            got.push(v.uuid.clone());
        }
        let want: Vec<String> = on_net.iter().map(|v| v.uuid.to_string()).collect();
        prop_assert_eq!(&got, &want);
        for (ifname, uuid) in ifnames.iter().zip(&got) {
            let at = Attachment { network: "net-a", container_id: THIS, ifname };
            prop_assert_eq!(resolved(at, &vmis, &claims, &registered).0.map(|v| &v.uuid), Ok(uuid));
        }
        let at = Attachment { network: "net-a", container_id: THIS, ifname: "extra0" };
        prop_assert_eq!(
            resolved(at, &vmis, &claims, &registered).0.map(|v| &v.uuid),
            Err(Unresolved::AllTaken { count: ifnames.len() })
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 6. vmi::host_ifname

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn host_ifname_is_a_short_deterministic_tap_name(s in prop_oneof![uuid(), tricky_string()]) {
        let h = names::host_ifname(&s);
        prop_assert_eq!(h.len(), 15);
        prop_assert!(check_ifname(&h).is_ok());
        prop_assert!(linux_and_libcni_accept(&h));
        prop_assert!(h.starts_with("tap"));
        prop_assert!(h[3..].bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "{}", h);
        prop_assert_eq!(names::host_ifname(&s.clone()), h);
    }
}

proptest! {
    #![proptest_config(config(16))]

    /// No two of a few thousand uuids share a host name, random or kube-manager-like siblings.
    #[test]
    fn host_ifname_has_no_collisions(random in vec(any::<u128>(), 3000), base in any::<u64>()) {
        let random: BTreeSet<String> = random.into_iter().map(uuid_of).collect();
        let siblings = (0..3000u128).map(|i| uuid_of((u128::from(base) << 64) | (0x0025_9000_0000 + i)));
        let uuids: BTreeSet<String> = random.into_iter().chain(siblings).collect();
        let mut names = BTreeMap::new();
        for u in &uuids {
            if let Some(other) = names.insert(names::host_ifname(u), u) {
                return Err(TestCaseError::fail(format!("{u} and {other} share {}", names::host_ifname(u))));
            }
        }
    }
}
