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
    let c = parse_json(json!({"cniVersion": "0.3.0", "type": "contrail-k8s-cni", "name": "net-a"}))
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
            "meta-plugin",
            json!("genie"),
            json!("genie"),
            json!("multus"),
        ),
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
        (
            "vrouter-socket-dir",
            json!("/var/run/vrouter"),
            json!("/var/run/vrouter/"),
            json!("/tmp"),
        ),
        (
            "vhost-dir",
            json!("/var/run/contrail-k8s-cni/vhost"),
            json!("/var/run/contrail-k8s-cni//vhost"),
            json!("/etc"),
        ),
        (
            "vhost-pod-dir",
            json!("/var/run/vhost"),
            json!("/var/run/vhost"),
            json!("/dev"),
        ),
        (
            "vrouter-mode",
            json!("auto"),
            json!("auto"),
            json!("kernel"),
        ),
        (
            "device-info-dir",
            json!("/var/run/k8s.cni.cncf.io/devinfo/cni"),
            json!("/var/run/k8s.cni.cncf.io/devinfo/cni"),
            json!("/etc"),
        ),
    ]
}

#[test]
fn stdin_may_repeat_node_keys_with_the_nodes_value_and_no_other() {
    let node_keys: Vec<&str> = KEYS
        .iter()
        .filter(|k| k.scope == Scope::Node)
        .map(|k| k.name)
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
    let c =
        parse_json(json!({"cniVersion": "1.0.0", "name": "n", "contrail": {"vrouter-port": 1}}))
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
    let c =
        parse_json(json!({"cniVersion": "0.3.1", "contrail": {"mtu": null, "vrouter-port": null}}))
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
        ("meta-plugin", json!("cni-genie")),
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
        match spec(key).unwrap().scope {
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
        assert_eq!(c.valid_attachments, vec![c1.clone()]);
    }
    // libcni sends both names: the 1.1 one wins.
    let c = parse_json(
        json!({"cniVersion": "1.1.0", "cni.dev/valid-attachments": list,
        "cni.dev/attachments": []}),
    )
    .unwrap();
    assert_eq!(c.valid_attachments, [c1]);
    // No list (cnitool 1.3's gc), and libcni 1.3's "none in use", null (CRI-O 1.36), under
    // either name: none listed.
    assert_eq!(
        parse_json(json!({"cniVersion": "1.1.0"}))
            .unwrap()
            .valid_attachments,
        []
    );
    for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
        let c = parse_json(json!({"cniVersion": "1.1.0", key: null})).unwrap();
        assert_eq!(c.valid_attachments, [], "{key}");
    }
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

/// Valid values of a kind, as a source would write them: at least two that read differently.
fn samples(kind: Kind) -> Vec<Value> {
    match kind {
        Kind::Ip => vec![json!("10.0.0.9"), json!("127.0.0.1"), json!("::1")],
        Kind::Integer { min, max } => vec![json!(min), json!(max), json!(min.to_string())],
        Kind::Seconds { min, max } => vec![json!(min), json!(max), json!(format!(" {min} "))],
        Kind::Path { optional } => {
            let mut v = vec![json!("/var/lib/x"), json!("/etc/y"), json!("/var/lib//x")];
            if optional {
                v.push(json!(""));
            }
            v
        }
        Kind::Name => vec![json!("k8s"), json!("other")],
        Kind::Interface => vec![json!("eth0"), json!("eth1")],
        Kind::Level => vec![json!("info"), json!(4), json!("debug"), json!("off")],
        Kind::Choice(words) => words.iter().map(|w| json!(w)).collect(),
    }
}

/// `value` for `key` read over the built-in defaults.
fn read_one(key: &str, value: &Value) -> Result<Contrail> {
    keys::read(&Contrail::default(), json!({key: value}), "test").map(|(c, _)| c)
}

#[test]
fn every_node_key_is_refused_from_stdin_with_any_other_value() {
    for k in KEYS.iter().filter(|k| k.scope == Scope::Node) {
        let samples = samples(k.kind);
        let node_value = &samples[0];
        let node = json!({k.name: node_value});
        let nodes = read_one(k.name, node_value).unwrap();
        let stdin =
            |v: &Value| json!({"cniVersion": "1.0.0", "name": "net-a", "contrail": {k.name: v}});
        let mut others = 0;
        // Another type of value, then every sample: refused unless it reads as the node's.
        for v in [json!([])].iter().chain(&samples) {
            let c = over(node.clone(), stdin(v)).unwrap();
            let differs = read_one(k.name, v).map_or(true, |c| c != nodes);
            if !differs {
                assert!(c.refused.is_empty(), "{}: {v} is the node's value", k.name);
                continue;
            }
            others += 1;
            assert_eq!(c.refused, [k.name], "{}={v}", k.name);
            assert_eq!(c.contrail, nodes, "{}={v}: the node's value holds", k.name);
            let e = c.refusal().unwrap();
            assert_eq!(e.code(), code::INVALID_CONFIG);
            assert!(
                e.to_string().contains(&format!("contrail.{}", k.name)),
                "{}: {e}",
                k.name
            );
        }
        // A choice may have one reading in a build (mode without thick): then only another type.
        let least = if matches!(k.kind, Kind::Choice(_)) {
            1
        } else {
            2
        };
        assert!(
            others >= least,
            "{}: no valid value other than the node's",
            k.name
        );
    }
}

#[test]
fn the_tables_defaults_are_the_built_in_ones() {
    // Every key set to a value other than its default...
    let mut other = Contrail::default();
    for k in KEYS {
        let v = samples(k.kind)
            .into_iter()
            .find(|v| read_one(k.name, v).unwrap() != Contrail::default());
        let Some(v) = v else {
            // A choice with one reading in this build (mode without thick).
            assert!(
                matches!(k.kind, Kind::Choice(_)),
                "{}: every sample is the default",
                k.name
            );
            continue;
        };
        other = keys::read(&other, json!({k.name: v}), "test").unwrap().0;
        assert!(!k.same(&other, &Contrail::default()), "{}", k.name);
    }
    // ...and back by the table's defaults.
    let defaults = Map::from_iter(KEYS.iter().map(|k| (k.name.to_string(), json!(k.default))));
    let (c, unknown) = keys::read(&other, Value::Object(defaults), "test").unwrap();
    assert_eq!(c, Contrail::default());
    assert!(unknown.is_empty());
    assert_eq!(
        spec("agent-requests-per-second").unwrap().default,
        DEFAULT_AGENT_RATE.to_string()
    );
}

#[test]
fn every_documented_word_and_bound_is_accepted() {
    for k in KEYS {
        for v in samples(k.kind) {
            assert!(read_one(k.name, &v).is_ok(), "{}={v}", k.name);
        }
    }
}

#[test]
fn help_shows_every_key_with_its_scope_and_default() {
    let help = help();
    for k in KEYS {
        let line = help
            .lines()
            .find(|l| l.split_whitespace().next() == Some(k.name))
            .unwrap_or_else(|| panic!("{} is not in --help:\n{help}", k.name));
        let cells: Vec<&str> = line.split_whitespace().collect();
        let default = if k.default.is_empty() {
            "(none)"
        } else {
            k.default
        };
        assert_eq!(cells, [k.name, k.scope.as_str(), default], "{line}");
    }
    assert!(help.lines().all(|l| l.len() <= 80), "{help}");
}
