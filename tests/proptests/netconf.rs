//! `config::parse`: arbitrary bytes, arbitrary JSON and plausible network configs with hostile
//! values, beside a node-wide defaults file; valid sections are accepted and read back, and
//! stdin's node-scoped keys never take effect.

use std::net::IpAddr;
use std::path::{Component, Path};
use std::time::Duration;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Number, Value, json};

use contrail_k8s_cni::cni::{SUPPORTED_VERSIONS, valid_name};
use contrail_k8s_cni::config::{self, NetConf};
use contrail_k8s_cni::error::code;

use crate::config;
use crate::strategies::{
    abs_path, any_field, contrail_keys, hostile_name, json_key, json_value, name, object,
    tricky_string,
};

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
            // The 1.1 name's list, else the older one's; `null` (libcni 1.3's "none in use")
            // and no list at all (cnitool 1.3's gc) list none.
            let list = |k: &str| stdin.get(k).filter(|v| !v.is_null()).map(|v| v.as_array().unwrap().len());
            let listed = match stdin.get("cni.dev/valid-attachments") {
                Some(_) => list("cni.dev/valid-attachments").unwrap_or(0),
                None => list("cni.dev/attachments").unwrap_or(0),
            };
            prop_assert_eq!(c.valid_attachments.len(), listed);
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
        "meta-plugin" => prop_assert_eq!(
            format!("{:?}", k.meta_plugin).to_lowercase(),
            v.as_str().unwrap()
        ),
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
