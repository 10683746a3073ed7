//! Plugin mode end to end: the release binary, called as Multus calls a delegate, in real
//! network namespaces, against the agent simulator.

use std::collections::BTreeSet;

use contrail_testkit::*;
use serde_json::{Value, json};

const VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

#[test]
fn three_attachments_with_a_repeated_network_add_check_del() {
    let vmis = vec![
        VmiSpec::new("default", 1).dual_stack(),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ];
    let mut fx = Fixture::new(vmis.clone());
    fx.set("mtu", json!(1400));
    let ns = &fx.ns;

    // Multus: the cluster network delegate (its config's own name) on eth0, then net1, net2.
    let eth0 = fx.add("eth0", "contrail-k8s-cni");
    let net1 = fx.add("net1", "net-a");
    let net2 = fx.add("net2", "net-a");

    assert_eq!(ns.ifnames(), ["eth0", "lo", "net1", "net2"]);
    for (ifname, vmi, v6) in [
        ("eth0", &vmis[0], Some("fd00:1::1a/128")),
        ("net1", &vmis[1], None),
        ("net2", &vmis[2], None),
    ] {
        assert_eq!(ns.mac(ifname), vmi.mac, "{ifname}");
        assert_eq!(ns.mtu(ifname), 1400, "{ifname}");
        let mut want = vec![vmi.addr()];
        want.extend(v6.map(str::to_string));
        assert_eq!(ns.addrs(ifname), want, "{ifname}");
    }
    assert!(
        !ns.v6_tentative("eth0"),
        "IPv6 address must be usable at once"
    );
    // One default route per family, on the cluster network's interface only.
    let mut routes = ns.default_routes();
    routes.sort();
    assert_eq!(
        routes,
        [
            ("-4".into(), "10.1.0.1".into(), "eth0".into()),
            ("-6".into(), "fd00:1::1".into(), "eth0".into())
        ]
    );
    for r in [&eth0, &net1, &net2] {
        assert!(host_link_exists(&host_name(r)));
    }
    assert_eq!(
        fx.registered(),
        [
            (&vmis[0], &eth0, "eth0"),
            (&vmis[1], &net1, "net1"),
            (&vmis[2], &net2, "net2")
        ]
        .iter()
        .map(|(v, r, i)| (v.uuid.clone(), host_name(r), i.to_string()))
        .collect()
    );
    assert_eq!(fx.node.state_files(&fx.pod).len(), 3);
    for (ifname, net, r) in [
        ("eth0", "default", &eth0),
        ("net1", "net-a", &net1),
        ("net2", "net-a", &net2),
    ] {
        fx.check(ifname, net, r).assert_ok();
    }

    // DEL of net1 removes exactly net1, its port included: the others stay registered.
    let mut ports_after = fx.registered();
    ports_after.retain(|p| p.2 != "net1");
    fx.del("net1", "net-a").assert_ok();
    assert_eq!(ns.ifnames(), ["eth0", "lo", "net2"]);
    assert!(!host_link_exists(&host_name(&net1)));
    assert_eq!(ns.addrs("net2"), [vmis[2].addr()]);
    assert_eq!(ns.addrs("eth0")[0], vmis[0].addr());
    assert_eq!(fx.registered(), ports_after);
    assert_eq!(fx.node.state_files(&fx.pod).len(), 2);
    fx.check("net2", "net-a", &net2).assert_ok();
    fx.check("eth0", "default", &eth0).assert_ok();
    assert_eq!(fx.check("net1", "net-a", &net1).code(), 103);

    // Added back, net1 gets its VMI again.
    let again = fx.add("net1", "net-a");
    assert_eq!(ns.mac("net1"), vmis[1].mac);
    assert_eq!(ns.addrs("net1"), [vmis[1].addr()]);
    assert_eq!(host_name(&again), host_name(&net1));
    assert_eq!(fx.registered().len(), 3);
    fx.del("net1", "net-a").assert_ok();

    // DEL of the last one leaves no interface, no state and no port behind.
    fx.del("net2", "net-a").assert_ok();
    fx.del("eth0", "contrail-k8s-cni").assert_ok();
    for r in [&eth0, &net2] {
        assert!(!host_link_exists(&host_name(r)));
    }
    fx.assert_nothing_left();
}

#[test]
fn ifname_number_does_not_imply_index() {
    // Pod networks [macvlan-net, net-a, net-a]: kube-manager numbers only Contrail's networks
    // (default 0, net-a 1, net-a 2); Multus calls us for net2 and net3.
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ];
    let fx = Fixture::new(vmis.clone());
    fx.add("net2", "net-a");
    fx.add("net3", "net-a");
    assert_eq!(
        (fx.ns.mac("net2"), fx.ns.addrs("net2")),
        (vmis[1].mac.clone(), vec![vmis[1].addr()])
    );
    assert_eq!(
        (fx.ns.mac("net3"), fx.ns.addrs("net3")),
        (vmis[2].mac.clone(), vec![vmis[2].addr()])
    );
    // Secondary networks never get a default route.
    assert!(fx.ns.default_routes().is_empty());
    for ifname in ["net3", "net2"] {
        fx.del(ifname, "net-a").assert_ok();
    }
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
}

#[test]
fn interface_annotation_picks_the_vmi() {
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("interface", json!("eth5")),
        VmiSpec::new("net-a", 3),
    ];
    let fx = Fixture::new(vmis.clone());
    // net-a@eth5 second in the pod's list, but called first for the plain reference.
    fx.add("net1", "net-a");
    fx.add("eth5", "net-a");
    assert_eq!(fx.ns.mac("eth5"), vmis[1].mac);
    assert_eq!(fx.ns.mac("net1"), vmis[2].mac);
    for ifname in ["eth5", "net1"] {
        fx.del(ifname, "net-a").assert_ok();
    }
}

#[test]
fn default_gw_annotation_moves_the_default_route() {
    let fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("default-gw", json!(true)),
    ]);
    fx.add("eth0", "default");
    let r = fx.add("net1", "net-a");
    assert_eq!(
        fx.ns.default_routes(),
        [("-4".into(), "10.2.0.1".into(), "net1".into())]
    );
    assert_eq!(r["routes"], json!([{"dst": "0.0.0.0/0", "gw": "10.2.0.1"}]));
    for ifname in ["net1", "eth0"] {
        fx.del(ifname, "x").assert_ok();
    }
}

#[test]
fn each_cni_version_gets_its_result_shape() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1).dual_stack()]);
    for version in VERSIONS {
        // A sandbox of its own for each version.
        let ns = Netns::new();
        let cid = uuid();
        let out = fx.call_in(
            &cid,
            &ns.path(),
            "ADD",
            "eth0",
            &fx.node.netconf(version, ""),
        );
        let r = out.assert_ok().json();
        assert_eq!(r["cniVersion"], version);
        let ifs = r["interfaces"].as_array().unwrap();
        assert_eq!(ifs.len(), 2, "{r}");
        assert!(
            ifs[0].get("sandbox").is_none(),
            "host side has no sandbox: {r}"
        );
        assert_eq!(ifs[1]["name"], "eth0");
        assert_eq!(ifs[1]["sandbox"], ns.path());
        assert_eq!(ifs[1]["mac"], fx.pod.vmis[0].mac);
        let ips = r["ips"].as_array().unwrap();
        assert_eq!(ips.len(), 2);
        assert_eq!(ips[0]["address"], "10.1.0.11/24");
        assert_eq!(ips[0]["gateway"], "10.1.0.1");
        assert_eq!(ips[1]["address"], "fd00:1::1a/128");
        for ip in ips {
            assert_eq!(ip["interface"], 1);
            assert_eq!(
                ip.get("version").is_some(),
                version < "1.0.0",
                "{version}: {ip}"
            );
        }
        assert_eq!(ifs[1].get("mtu").is_some(), version == "1.1.0", "{version}");
        assert_eq!(r["routes"].as_array().unwrap().len(), 2);
        let mut conf = fx.node.netconf(version, "");
        conf["prevResult"] = r.clone();
        fx.call_in(&cid, &ns.path(), "CHECK", "eth0", &conf)
            .assert_ok();
        fx.call_in(&cid, &ns.path(), "DEL", "eth0", &conf)
            .assert_ok();
        assert_eq!(ns.ifnames(), ["lo"]);
    }
}

#[test]
fn del_is_idempotent_and_needs_neither_netns_nor_prev_result_nor_args() {
    let fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-b", 3),
    ]);
    let eth0 = fx.add("eth0", "default");
    let net1 = fx.add("net1", "net-a");
    let net2 = fx.add("net2", "net-b");

    // Twice the same DEL: the second has nothing to do.
    fx.del("net1", "net-a").assert_ok();
    fx.del("net1", "net-a").assert_ok();
    assert!(!host_link_exists(&host_name(&net1)));

    // Empty CNI_NETNS and no CNI_ARGS at all (no pod name): found by container id and ifname.
    let conf = fx.node.netconf("0.4.0", "net-b");
    fx.node
        .call("DEL", &fx.cid, "", "net2", "", &conf)
        .assert_ok();
    assert!(!host_link_exists(&host_name(&net2)));
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo"]);

    // The netns is gone (node reboot, runtime already removed it): DEL still cleans up.
    fx.remove_netns();
    fx.del("eth0", "default").assert_ok();
    assert!(!host_link_exists(&host_name(&eth0)));
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    assert!(fx.sim.ports().is_empty());
    fx.del("eth0", "default").assert_ok();

    // DEL for a pod and container never seen.
    fx.node
        .call(
            "DEL",
            "never-added",
            "/run/netns/none",
            "eth0",
            &PodSpec::new(vec![]).multus_args("never-added"),
            &fx.conf("default"),
        )
        .assert_ok();
}

#[test]
fn late_del_from_an_older_sandbox_leaves_the_new_one_alone() {
    // The fixture's sandbox is the old one.
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    fx.add("eth0", "default");
    // The old sandbox dies without a DEL; the new one takes the VMI over, replacing the
    // leftover host interface of the same name instead of failing with "file exists".
    let (new_cid, new_ns) = (uuid(), Netns::new());
    let new = fx
        .call_in(&new_cid, &new_ns.path(), "ADD", "eth0", &fx.conf("default"))
        .assert_ok()
        .json();
    assert_eq!(new_ns.mac("eth0"), fx.pod.vmis[0].mac);
    assert_eq!(
        fx.ns.ifnames(),
        ["lo"],
        "the old sandbox's veth was the leftover"
    );
    // The late DEL of the old sandbox arrives.
    fx.del("eth0", "default").assert_ok();
    assert_eq!(new_ns.addrs("eth0"), [fx.pod.vmis[0].addr()]);
    assert!(host_link_exists(&host_name(&new)));
    assert_eq!(fx.node.state_files(&fx.pod), [fx.pod.vmis[0].uuid.clone()]);
    assert_eq!(fx.sim.ports().len(), 1);
    fx.call_in(&new_cid, &new_ns.path(), "DEL", "eth0", &fx.conf("default"))
        .assert_ok();
    assert!(!fx.node.pod_dir_exists(&fx.pod));
}

#[test]
fn failed_registration_rolls_everything_back() {
    let mut fx = Fixture::with_sim(
        vec![VmiSpec::new("default", 1)],
        &["--fail", "POST:/vm:500"],
    );
    fx.set("poll-timeout", json!(0.1))
        .set("poll-retries", json!(3));
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("HTTP 500"), "{}", out.msg());
    fx.assert_rolled_back();
    assert_eq!(fx.node.reservations(&fx.pod), [fx.pod.vmis[0].uuid.clone()]);
    // Multus then sends DEL to the failed delegate: it succeeds, and nothing is left.
    fx.del("eth0", "").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn existing_interface_name_fails_and_is_left_untouched() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let peer = format!("ck8s{}", tag());
    sh(
        "ip",
        &[
            "link",
            "add",
            &peer,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &fx.ns.name,
        ],
    );
    let mac = fx.ns.mac("eth0");
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    assert_eq!(out.code(), 102);
    assert!(out.msg().contains("already exists"), "{}", out.msg());
    assert_eq!(fx.ns.mac("eth0"), mac);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    assert!(fx.sim.ports().is_empty());
    sh("ip", &["link", "del", &peer]);
}

#[test]
fn agent_that_never_gives_an_ip_times_out_with_code_11() {
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(600_000)),
    ]);
    let started = std::time::Instant::now();
    let out = fx.under((0.1, 5), |fx| fx.call("ADD", "eth0", &fx.conf("")));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("IP address"), "{}", out.msg());
    // Bounded by poll-timeout x poll-retries (0.5 s), with slack for process start.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    fx.assert_rolled_back();
    fx.del("eth0", "").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn incomplete_pod_times_out_saying_how_far_it_got() {
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("cfg-delay-ms", json!(600_000)),
    ]);
    fx.set("poll-timeout", json!(0.1))
        .set("poll-retries", json!(3));
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("1 of 2 interfaces"), "{}", out.msg());
    fx.assert_nothing_left();
}

#[test]
fn unknown_network_names_the_pod_and_known_networks() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let out = fx.call("ADD", "net1", &fx.conf("net-z"));
    assert_eq!(out.code(), 101);
    let msg = out.msg();
    assert!(
        msg.contains("net-z") && msg.contains(&fx.pod.vm_name()) && msg.contains("default, net-a"),
        "{msg}"
    );
    // A network attached more often than the pod references it.
    fx.add("net1", "net-a");
    let out = fx.call("ADD", "net2", &fx.conf("net-a"));
    assert_eq!(out.code(), 101);
    assert_eq!(fx.ns.ifnames(), ["lo", "net1"]);
    fx.del("net1", "net-a").assert_ok();
}

#[test]
fn unreachable_agent_fails_with_code_11() {
    let mut fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    fx.stop_agent(); // nothing listens on that port any more
    fx.set("poll-timeout", json!(0.1))
        .set("poll-retries", json!(3));
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("did not answer"), "{}", out.msg());
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
}

#[test]
fn concurrent_adds_of_one_network_never_share_a_vmi() {
    let mut vmis = vec![VmiSpec::new("default", 1)];
    vmis.extend((2..8).map(|n| VmiSpec::new("net-a", n)));
    let fx = Fixture::new(vmis.clone());
    std::thread::scope(|s| {
        for i in 1..=6 {
            let fx = &fx;
            s.spawn(move || fx.add(&format!("net{i}"), "net-a"));
        }
    });
    let macs: BTreeSet<String> = (1..=6).map(|i| fx.ns.mac(&format!("net{i}"))).collect();
    let want: BTreeSet<String> = vmis[1..].iter().map(|v| v.mac.clone()).collect();
    assert_eq!(macs, want);
    std::thread::scope(|s| {
        for i in 1..=6 {
            let fx = &fx;
            s.spawn(move || {
                fx.del(&format!("net{i}"), "net-a").assert_ok();
            });
        }
    });
    fx.assert_nothing_left();
}

#[test]
fn minimal_nad_config_with_node_wide_defaults() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    // The node-wide file carries the agent's port and the state directory, so the
    // NetworkAttachmentDefinition config is just this, plus the name Multus injects.
    let nad = json!({"cniVersion": "0.3.0", "type": "contrail-k8s-cni", "name": "net-a"});
    let r = fx.call("ADD", "net1", &nad).assert_ok().json();
    assert_eq!(r["cniVersion"], "0.3.0");
    assert_eq!(fx.ns.mac("net1"), fx.pod.vmis[1].mac);
    assert!(fx.node.state_files(&fx.pod).contains(&fx.pod.vmis[1].uuid));
    fx.call("DEL", "net1", &nad).assert_ok();
    assert!(!fx.node.pod_dir_exists(&fx.pod));
}

#[test]
fn logs_go_to_the_log_file_and_stdout_holds_only_the_result() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let out = fx.call("ADD", "eth0", &fx.conf(""));
    let r = out.assert_ok().json(); // the whole of stdout parses as one result
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    let log = std::fs::read_to_string(fx.node.config_dir.0.join("cni.log")).unwrap();
    assert!(
        log.contains(&format!(
            "ADD container={} ifname=eth0 network=default pod=default/{} vmi={}: ok in",
            fx.cid, fx.pod.name, fx.pod.vmis[0].uuid
        )),
        "{log}"
    );
    fx.del("eth0", "").assert_ok();
}

#[test]
fn version_lists_every_supported_version() {
    for stdin in [&b""[..], br#"{"cniVersion":"0.3.1"}"#] {
        let out = run_plugin(&[("CNI_COMMAND", "VERSION")], stdin);
        let j = out.assert_ok().json();
        assert_eq!(j["supportedVersions"], json!(VERSIONS));
    }
    let out = run_plugin(&[("CNI_COMMAND", "VERSION")], br#"{"cniVersion":"0.3.1"}"#);
    assert_eq!(out.json()["cniVersion"], "0.3.1");
}

#[test]
fn bad_config_and_env_fail_before_anything_is_created() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let args = fx.args();
    let good = fx.conf("");
    let with = |key: &str, v: Value| {
        let mut c = good.clone();
        c["contrail"][key] = v;
        c.to_string()
    };
    let bad_netns = format!("/run/netns/absent-{}", tag());
    // (what, env overrides, stdin, code, words the message must contain)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, String, u64, &'a str);
    let cases: Vec<Case> = vec![
        ("bad JSON", vec![], "{\"cniVersion\":".into(), 6, "not JSON"),
        (
            "old version",
            vec![],
            json!({"cniVersion": "0.2.0"}).to_string(),
            1,
            "0.2.0",
        ),
        ("mtu", vec![], with("mtu", json!(10)), 7, "contrail.mtu"),
        (
            "port",
            vec![],
            with("vrouter-port", json!("x")),
            7,
            "contrail.vrouter-port",
        ),
        (
            "config-dir",
            vec![],
            with("config-dir", json!("etc/x")),
            7,
            "contrail.config-dir",
        ),
        (
            "name",
            vec![],
            json!({"cniVersion": "1.0.0", "name": "../x"}).to_string(),
            7,
            "name",
        ),
        (
            "no ifname",
            vec![("CNI_IFNAME", "")],
            good.to_string(),
            4,
            "CNI_IFNAME",
        ),
        (
            "long ifname",
            vec![("CNI_IFNAME", "a-very-long-name0")],
            good.to_string(),
            4,
            "CNI_IFNAME",
        ),
        (
            "bad container",
            vec![("CNI_CONTAINERID", "../../x")],
            good.to_string(),
            4,
            "CNI_CONTAINERID",
        ),
        (
            "no command",
            vec![("CNI_COMMAND", "FROB")],
            good.to_string(),
            4,
            "CNI_COMMAND",
        ),
        (
            "no pod",
            vec![("CNI_ARGS", "IgnoreUnknown=1")],
            good.to_string(),
            4,
            "K8S_POD_NAME",
        ),
        (
            "path pod",
            vec![("CNI_ARGS", "K8S_POD_NAME=../../etc")],
            good.to_string(),
            4,
            "K8S_POD_NAME",
        ),
        (
            "no netns",
            vec![("CNI_NETNS", &bad_netns)],
            good.to_string(),
            4,
            "CNI_NETNS",
        ),
    ];
    for (what, overrides, stdin, code, words) in cases {
        let mut env = vec![
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", fx.cid.as_str()),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args.as_str()),
            (
                "CONTRAIL_CNI_CONF_DIR",
                fx.node.conf_dir.0.to_str().unwrap(),
            ),
        ];
        let ns_path = fx.ns.path();
        env[2].1 = &ns_path;
        for (k, v) in &overrides {
            env.retain(|(ek, _)| ek != k);
            env.push((k, v));
        }
        let out = run_plugin(&env, stdin.as_bytes());
        assert_eq!(out.code(), code, "{what}: {}", out.stdout);
        assert!(out.msg().contains(words), "{what}: {}", out.msg());
        assert!(!fx.node.ports_dir().exists(), "{what}: state written");
        assert_eq!(fx.ns.ifnames(), ["lo"], "{what}");
    }
    if !cfg!(feature = "thick") {
        let mut fx = fx;
        fx.set("mode", json!("thick"));
        let out = fx.call("ADD", "eth0", &good);
        assert_eq!(out.code(), 7);
        assert!(out.msg().contains("--features thick"), "{}", out.msg());
    }
}

/// VMI `j` of network number `n`, sharing the network's gateways with its other VMIs: IPv4
/// 10.n.0.(10+j)/24 via 10.n.0.1 when `v4`, IPv6 fd00:n::(10+j) via fd00:n::1 when `v6`.
fn on_network(network: &str, n: u8, j: u8, v4: bool, v6: bool) -> VmiSpec {
    let mut v = VmiSpec::new(network, n);
    v.ip = v4.then(|| format!("10.{n}.0.{}/24", 10 + j));
    v.gateway = v4.then(|| format!("10.{n}.0.1"));
    v.ip6 = v6.then(|| format!("fd00:{n}::{}", 10 + j));
    v.v6_gateway = v6.then(|| format!("fd00:{n}::1"));
    v
}

/// The route the pod's kernel picks for `dst` when told to leave by `ifname`: (gateway, dev).
fn route_via(ns: &Netns, dst: &str, ifname: &str) -> (String, String) {
    let fam = if dst.contains(':') { "-6" } else { "-4" };
    let out = sh(
        "ip",
        &[
            "-n", &ns.name, "-j", fam, "route", "get", dst, "oif", ifname,
        ],
    );
    let r: Vec<Value> = serde_json::from_str(&out).unwrap();
    let s = |k: &str| r[0][k].as_str().unwrap_or("").to_string();
    (s("gateway"), s("dev"))
}

#[test]
fn ipv6_on_a_network_attached_three_times_and_one_attached_twice() {
    // eth0 on the cluster network (dual stack); net-a three times, dual stack; net-b twice,
    // IPv6 only. Each network's VMIs share its gateways; every IPv6 address is a /128, so every
    // interface needs its own host route to its gateway.
    let vmis = vec![
        on_network("default", 1, 0, true, true),
        on_network("net-a", 2, 1, true, true),
        on_network("net-a", 2, 2, true, true),
        on_network("net-a", 2, 3, true, true),
        on_network("net-b", 3, 1, false, true),
        on_network("net-b", 3, 2, false, true),
    ];
    let fx = Fixture::new(vmis.clone());
    let ns = &fx.ns;
    let attachments = [
        ("eth0", "default"),
        ("net1", "net-a"),
        ("net2", "net-a"),
        ("net3", "net-a"),
        ("net4", "net-b"),
        ("net5", "net-b"),
    ];
    let results: Vec<Value> = attachments
        .iter()
        .map(|(ifname, net)| fx.add(ifname, net))
        .collect();
    let addresses = |v: &VmiSpec| -> Vec<String> {
        v.ip.iter()
            .cloned()
            .chain(v.ip6.iter().map(|a| format!("{a}/128")))
            .collect()
    };
    let assert_up = |ifname: &str, v: &VmiSpec| {
        assert_eq!(ns.mac(ifname), v.mac, "{ifname}");
        assert_eq!(ns.addrs(ifname), addresses(v), "{ifname}");
        assert!(!ns.v6_tentative(ifname), "{ifname}");
        let gw6 = v.v6_gateway.clone().unwrap();
        assert_eq!(
            route_via(ns, &gw6, ifname),
            (String::new(), ifname.to_string())
        );
    };
    for ((ifname, _), v) in attachments.iter().zip(&vmis) {
        assert_up(ifname, v);
    }
    // The pod's default routes, one per family, on the cluster network's interface only.
    let mut routes = ns.default_routes();
    routes.sort();
    assert_eq!(
        routes,
        [
            ("-4".into(), "10.1.0.1".into(), "eth0".into()),
            ("-6".into(), "fd00:1::1".into(), "eth0".into())
        ]
    );
    for ((ifname, net), r) in attachments.iter().zip(&results) {
        fx.check(ifname, net, r).assert_ok();
    }
    // DEL of one attachment of each repeated network leaves the others' addresses and routes.
    fx.del("net2", "net-a").assert_ok();
    fx.del("net4", "net-b").assert_ok();
    for (i, ((ifname, net), v)) in attachments.iter().zip(&vmis).enumerate() {
        if [2, 4].contains(&i) {
            assert!(ns.link(ifname).is_none(), "{ifname}");
            continue;
        }
        assert_up(ifname, v);
        fx.check(ifname, net, &results[i]).assert_ok();
    }
    assert_eq!(fx.sim.ports().len(), 4);
    for (ifname, net) in attachments.iter().rev() {
        fx.del(ifname, net).assert_ok();
    }
    fx.assert_nothing_left();
}

/// ADD of `ifname` that fails after its registration (under `budget`), next to eth0, which is
/// up: nothing of it is left (interface, state, registration) and eth0 stays registered and
/// passes CHECK. A rollback the deadline cut short leaves its deregistration pending, and the
/// next call for the pod (the CHECK) finishes it.
#[track_caller]
fn fails_after_registration(
    fx: &mut Fixture,
    budget: (f64, u32),
    conf: &Value,
    eth0: &Value,
) -> Output {
    let out = fx.under(budget, |fx| fx.call("ADD", "net1", conf));
    assert!(!out.ok, "{out:?}");
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo"]);
    for v in &fx.pod.vmis[1..] {
        assert!(!host_link_exists(&host_ifname(&v.uuid)));
    }
    assert_eq!(fx.node.state_files(&fx.pod), [fx.pod.vmis[0].uuid.clone()]);
    fx.assert_registrations_explained();
    fx.check("eth0", "default", eth0).assert_ok();
    let ports: Vec<String> = fx.sim.ports().into_iter().map(|p| p.2).collect();
    assert_eq!(ports, ["eth0"]);
    out
}

#[test]
fn an_add_that_fails_after_its_registration_leaves_nothing_and_its_sibling_works() {
    // net-a's first VMI never gets its IP configuration; the second is fine.
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("ip-delay-ms", json!(600_000)),
        VmiSpec::new("net-a", 3),
    ]);
    let eth0 = fx.add("eth0", "default");
    let conf = fx.conf("net-a");
    let out = fails_after_registration(&mut fx, (0.1, 3), &conf, &eth0);
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains(&fx.pod.vmis[1].uuid), "{}", out.msg());
    // A retry of the same ADD is for the same VMI again (and fails the same way).
    let out = fails_after_registration(&mut fx, (0.1, 3), &conf, &eth0);
    assert!(out.msg().contains(&fx.pod.vmis[1].uuid), "{}", out.msg());
    // Multus DELs the failed delegate and every earlier one: nothing is left anywhere.
    fx.del("net1", "net-a").assert_ok();
    fx.del("eth0", "default").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn an_add_whose_addresses_fail_after_registration_leaves_nothing() {
    // An MTU below IPv6's minimum shows only once the agent gives the IPv6 configuration,
    // which it does only after the registration.
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).dual_stack(),
    ]);
    let eth0 = fx.add("eth0", "default");
    let mut conf = fx.conf("net-a");
    conf["contrail"]["mtu"] = json!(1279);
    let out = fails_after_registration(&mut fx, (1.0, 20), &conf, &eth0);
    assert_eq!(out.code(), 7);
    assert!(out.msg().contains("1280"), "{}", out.msg());
    // With the MTU fixed, the retry gets the same VMI and comes up.
    fx.add("net1", "net-a");
    assert_eq!(fx.ns.mac("net1"), fx.pod.vmis[1].mac);
    for (ifname, net) in [("net1", "net-a"), ("eth0", "default")] {
        fx.del(ifname, net).assert_ok();
    }
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    assert!(fx.sim.ports().is_empty());
}

#[test]
fn a_failed_attachment_keeps_its_vmi_from_its_siblings_until_its_del() {
    // A pod on net-a three times; the second VMI's IP configuration does not come (the agent
    // answers 500 for it), so ADD net2 fails and is rolled back.
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
        VmiSpec::new("net-a", 4),
    ];
    let pod = PodSpec::new(vmis.clone());
    let agent_files = TempDir::new();
    let state = agent_files.0.to_str().unwrap().to_string();
    let fail = format!("GET:/vm/{}/{}:500", pod.uuid, vmis[2].uuid);
    let mut fx = Fixture::with_pod(pod, &["--state-dir", &state, "--fail", &fail]);
    fx.add("eth0", "default");
    fx.add("net1", "net-a");
    let tight = (0.1, 3);
    let out = fx.under(tight, |fx| fx.call("ADD", "net2", &fx.conf("net-a")));
    assert_eq!(out.code(), 11, "{}", out.stdout);
    assert!(out.msg().contains(&vmis[2].uuid), "{}", out.msg());
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net1"]);
    assert_eq!(fx.node.reservations(&fx.pod), [vmis[2].uuid.clone()]);
    fx.assert_registrations_explained();
    // A sibling gets its own VMI, not net2's (and its ADD finishes what net2's rollback may
    // have left pending: net2 is not registered)...
    fx.add("net3", "net-a");
    assert_eq!(fx.ns.mac("net3"), vmis[3].mac);
    fx.assert_registrations_follow_files();
    // ...and net2's retry gets net2's, once the agent has its IP configuration.
    fx.restart_agent(&["--state-dir", &state]);
    fx.add("net2", "net-a");
    assert_eq!(fx.ns.mac("net2"), vmis[2].mac);
    assert!(fx.node.reservations(&fx.pod).is_empty());
    // A failure kept again, then its DEL releases it.
    fx.restart_agent(&["--state-dir", &state, "--fail", &fail]);
    fx.del("net2", "net-a").assert_ok();
    let out = fx.under(tight, |fx| fx.call("ADD", "net2", &fx.conf("net-a")));
    assert_eq!(out.code(), 11);
    assert_eq!(fx.node.reservations(&fx.pod), [vmis[2].uuid.clone()]);
    fx.del("net2", "net-a").assert_ok();
    assert!(fx.node.reservations(&fx.pod).is_empty());
    for (ifname, network) in [("net3", "net-a"), ("net1", "net-a"), ("eth0", "default")] {
        fx.del(ifname, network).assert_ok();
    }
    fx.assert_nothing_left();
}

#[test]
fn check_fails_when_prev_result_lists_what_the_pod_lacks() {
    let vmis = vec![VmiSpec::new("default", 1).dual_stack()];
    let mut fx = Fixture::new(vmis.clone());
    fx.set("mtu", json!(1400));
    let conf = fx.node.netconf("1.1.0", "default");
    let r = fx.call("ADD", "eth0", &conf).assert_ok().json();
    let check = |prev: &Value| {
        let mut c = conf.clone();
        c["prevResult"] = prev.clone();
        fx.call("CHECK", "eth0", &c)
    };
    check(&r).assert_ok();
    let edits: [(&str, Value); 5] = [
        ("/interfaces/1/mac", json!("02:00:00:00:00:99")),
        ("/interfaces/1/mtu", json!(1500)),
        ("/interfaces/0/mtu", json!(9000)),
        ("/ips/0/address", json!("10.1.0.99/24")),
        ("/interfaces/1/name", json!("eth9")),
    ];
    for (at, value) in edits {
        let mut prev = r.clone();
        *prev.pointer_mut(at).unwrap() = value.clone();
        let out = check(&prev);
        let wants = if at == "/interfaces/1/name" {
            // An interface the result does not name as ours: another plugin's, not ours to
            // check; the one ADD made is still there as the config says.
            0
        } else {
            103
        };
        if wants == 0 {
            out.assert_ok();
        } else {
            assert_eq!(out.code(), 103, "{at}={value}: {}", out.stdout);
            assert!(
                out.msg().contains("prevResult lists"),
                "{at}: {}",
                out.msg()
            );
        }
    }
    // An address listed for the interface that the pod does not have.
    let mut extra = r.clone();
    extra["ips"]
        .as_array_mut()
        .unwrap()
        .push(json!({"address": "10.1.0.77/24", "interface": 1}));
    assert_eq!(check(&extra).code(), 103);
    // The MTU the config says, on both ends.
    sh(
        "ip",
        &["-n", &fx.ns.name, "link", "set", "eth0", "mtu", "1300"],
    );
    let out = check(&r);
    assert_eq!(out.code(), 103);
    assert!(
        out.msg().contains("has MTU 1300, the config says 1400"),
        "{}",
        out.msg()
    );
    fx.call("DEL", "eth0", &conf).assert_ok();
    fx.assert_nothing_left();
}
