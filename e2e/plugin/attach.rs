//! Plugin mode's working calls, as Multus calls a delegate: three attachments with a repeated
//! network, an interface name's number that is not the VMI's index, the `interface` and
//! `default-gw` annotations, each CNI version's result, DEL's idempotency and a late DEL from
//! an older sandbox, concurrent ADDs of one network, a minimal NAD config with the node-wide
//! defaults, the log file and VERSION; IPv6 on networks attached more than once.

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
    dual_stack_defaults_on_eth0(ns);
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
    for (ifname, network) in [("net1", "net-a"), ("eth0", "default")] {
        fx.del(ifname, network).assert_ok();
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
        .cni("DEL")
        .container(&fx.cid)
        .ifname("net2")
        .run(&conf)
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
        .cni("DEL")
        .container("never-added")
        .netns("/run/netns/none")
        .ifname("eth0")
        .args(&PodSpec::new(vec![]).multus_args("never-added"))
        .run(&fx.conf("default"))
        .assert_ok();
}

#[test]
fn a_del_releases_only_an_attachment_of_the_network_it_names() {
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ];
    let fx = Fixture::new(vmis.clone());
    let eth0 = fx.add("eth0", "contrail-k8s-cni");
    let net1 = fx.add("net1", "net-a");
    let net2 = fx.add("net2", "net-a");
    // A DEL of net-a on eth0 (CNI-Genie's teardown on a node not set for it): eth0 holds the
    // cluster network's attachment, which is not net-a's. Nothing goes; the log says why.
    fx.del("eth0", "net-a").assert_ok();
    fx.del("net2", "contrail-k8s-cni").assert_ok();
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net1", "net2"]);
    assert_eq!(fx.node.state_files(&fx.pod).len(), 3);
    assert_eq!(fx.sim.ports().len(), 3);
    let log = std::fs::read_to_string(fx.node.config_dir.0.join("cni.log")).unwrap();
    assert!(
        log.contains("DEL of network net-a on eth0: eth0 holds network default's attachment"),
        "{log}"
    );
    // Multus's DEL of net1, then the same DEL again (a runtime's second teardown): the second
    // finds nothing of net-a on net1 and leaves net2, of the same network, alone.
    fx.del("net1", "net-a").assert_ok();
    fx.del("net1", "net-a").assert_ok();
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net2"]);
    assert!(!host_link_exists(&host_name(&net1)));
    assert!(host_link_exists(&host_name(&net2)));
    assert_eq!(
        fx.node.state_files(&fx.pod),
        sorted([vmis[0].uuid.clone(), vmis[2].uuid.clone()])
    );
    fx.assert_registrations_follow_files();
    for (ifname, net) in [("net2", "net-a"), ("eth0", "contrail-k8s-cni")] {
        fx.del(ifname, net).assert_ok();
    }
    assert!(!host_link_exists(&host_name(&eth0)));
    fx.assert_nothing_left();
}

#[test]
fn on_a_genie_node_each_del_releases_every_attachment_of_its_network() {
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
        VmiSpec::new("net-b", 4),
    ];
    let mut fx = Fixture::new(vmis.clone());
    fx.set("meta-plugin", json!("genie"));
    // CNI-Genie names the interfaces eth0, eth1, ... and DELs every delegate with the
    // runtime's CNI_IFNAME (eth0), in reverse order.
    let added: Vec<Value> = [
        ("eth0", "contrail-k8s-cni"),
        ("eth1", "net-a"),
        ("eth2", "net-a"),
        ("eth3", "net-b"),
    ]
    .iter()
    .map(|(ifname, net)| fx.add(ifname, net))
    .collect();
    fx.del("eth0", "net-b").assert_ok();
    assert_eq!(fx.ns.ifnames(), ["eth0", "eth1", "eth2", "lo"]);
    fx.assert_registrations_follow_files();
    // The first DEL of net-a releases both of its attachments, the second finds nothing.
    fx.del("eth0", "net-a").assert_ok();
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo"]);
    assert_eq!(fx.node.state_files(&fx.pod), [vmis[0].uuid.clone()]);
    fx.assert_registrations_follow_files();
    fx.del("eth0", "net-a").assert_ok();
    fx.del("eth0", "contrail-k8s-cni").assert_ok();
    for r in &added {
        assert!(!host_link_exists(&host_name(r)));
    }
    fx.assert_nothing_left();
}

fn sorted<const N: usize>(mut v: [String; N]) -> Vec<String> {
    v.sort();
    v.to_vec()
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
/// The pod's default routes: one per family, on the cluster network's interface (`eth0`) only.
#[track_caller]
fn dual_stack_defaults_on_eth0(ns: &Netns) {
    let mut routes = ns.default_routes();
    routes.sort();
    assert_eq!(
        routes,
        [
            ("-4".into(), "10.1.0.1".into(), "eth0".into()),
            ("-6".into(), "fd00:1::1".into(), "eth0".into())
        ]
    );
}

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
    dual_stack_defaults_on_eth0(ns);
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
