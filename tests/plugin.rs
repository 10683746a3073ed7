//! Plugin mode end to end: the release binary, called as Multus calls a delegate, in real
//! network namespaces, against the agent simulator.

use std::collections::BTreeSet;

use contrail_testkit::*;
use serde_json::{Value, json};

const VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// ADD one attachment and return the result.
fn add(node: &Node, pod: &PodSpec, cid: &str, ns: &Netns, ifname: &str, network: &str) -> Value {
    node.call(
        "ADD",
        cid,
        &ns.path(),
        ifname,
        &pod.multus_args(cid),
        &node.netconf("1.0.0", network),
    )
    .assert_ok()
    .json()
}

fn del(node: &Node, pod: &PodSpec, cid: &str, ns: &str, ifname: &str, network: &str) -> Output {
    node.call(
        "DEL",
        cid,
        ns,
        ifname,
        &pod.multus_args(cid),
        &node.netconf("1.0.0", network),
    )
}

/// CHECK with the ADD result as prevResult, as libcni sends it.
fn check(
    node: &Node,
    pod: &PodSpec,
    cid: &str,
    ns: &Netns,
    ifname: &str,
    network: &str,
    prev: &Value,
) -> Output {
    let mut conf = node.netconf("1.0.0", network);
    conf["prevResult"] = prev.clone();
    node.call(
        "CHECK",
        cid,
        &ns.path(),
        ifname,
        &pod.multus_args(cid),
        &conf,
    )
}

fn host_name(result: &Value) -> String {
    result["interfaces"][0]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

fn registered(sim: &Sim) -> BTreeSet<(String, String, String)> {
    sim.ports().into_iter().collect()
}

#[test]
fn three_attachments_with_a_repeated_network_add_check_del() {
    let vmis = vec![
        VmiSpec::new("default", 1).dual_stack(),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ];
    let pod = PodSpec::new(vmis.clone());
    let sim = Sim::start(&[&pod], &[]);
    let mut node = Node::new(&sim);
    node.contrail["mtu"] = json!(1400);
    let ns = Netns::new();
    let cid = uuid();

    // Multus: the cluster network delegate (its config's own name) on eth0, then net1, net2.
    let eth0 = add(&node, &pod, &cid, &ns, "eth0", "contrail-k8s-cni");
    let net1 = add(&node, &pod, &cid, &ns, "net1", "net-a");
    let net2 = add(&node, &pod, &cid, &ns, "net2", "net-a");

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
        registered(&sim),
        [
            (&vmis[0], &eth0, "eth0"),
            (&vmis[1], &net1, "net1"),
            (&vmis[2], &net2, "net2")
        ]
        .iter()
        .map(|(v, r, i)| (v.uuid.clone(), host_name(r), i.to_string()))
        .collect()
    );
    assert_eq!(node.state_files(&pod).len(), 3);
    for (ifname, net, r) in [
        ("eth0", "default", &eth0),
        ("net1", "net-a", &net1),
        ("net2", "net-a", &net2),
    ] {
        check(&node, &pod, &cid, &ns, ifname, net, r).assert_ok();
    }

    // DEL of net1 removes exactly net1, its port included: the others stay registered.
    let mut ports_after = registered(&sim);
    ports_after.retain(|p| p.2 != "net1");
    del(&node, &pod, &cid, &ns.path(), "net1", "net-a").assert_ok();
    assert_eq!(ns.ifnames(), ["eth0", "lo", "net2"]);
    assert!(!host_link_exists(&host_name(&net1)));
    assert_eq!(ns.addrs("net2"), [vmis[2].addr()]);
    assert_eq!(ns.addrs("eth0")[0], vmis[0].addr());
    assert_eq!(registered(&sim), ports_after);
    assert_eq!(node.state_files(&pod).len(), 2);
    check(&node, &pod, &cid, &ns, "net2", "net-a", &net2).assert_ok();
    check(&node, &pod, &cid, &ns, "eth0", "default", &eth0).assert_ok();
    assert_eq!(
        check(&node, &pod, &cid, &ns, "net1", "net-a", &net1).code(),
        103
    );

    // Added back, net1 gets its VMI again.
    let again = add(&node, &pod, &cid, &ns, "net1", "net-a");
    assert_eq!(ns.mac("net1"), vmis[1].mac);
    assert_eq!(ns.addrs("net1"), [vmis[1].addr()]);
    assert_eq!(host_name(&again), host_name(&net1));
    assert_eq!(registered(&sim).len(), 3);
    del(&node, &pod, &cid, &ns.path(), "net1", "net-a").assert_ok();

    // DEL of the last one leaves no interface, no state and no port behind.
    del(&node, &pod, &cid, &ns.path(), "net2", "net-a").assert_ok();
    del(&node, &pod, &cid, &ns.path(), "eth0", "contrail-k8s-cni").assert_ok();
    assert_eq!(ns.ifnames(), ["lo"]);
    for r in [&eth0, &net2] {
        assert!(!host_link_exists(&host_name(r)));
    }
    assert!(!node.pod_dir_exists(&pod));
    assert!(registered(&sim).is_empty());
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
    let pod = PodSpec::new(vmis.clone());
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    add(&node, &pod, &cid, &ns, "net2", "net-a");
    add(&node, &pod, &cid, &ns, "net3", "net-a");
    assert_eq!(
        (ns.mac("net2"), ns.addrs("net2")),
        (vmis[1].mac.clone(), vec![vmis[1].addr()])
    );
    assert_eq!(
        (ns.mac("net3"), ns.addrs("net3")),
        (vmis[2].mac.clone(), vec![vmis[2].addr()])
    );
    // Secondary networks never get a default route.
    assert!(ns.default_routes().is_empty());
    for ifname in ["net3", "net2"] {
        del(&node, &pod, &cid, &ns.path(), ifname, "net-a").assert_ok();
    }
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
}

#[test]
fn interface_annotation_picks_the_vmi() {
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("interface", json!("eth5")),
        VmiSpec::new("net-a", 3),
    ];
    let pod = PodSpec::new(vmis.clone());
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    // net-a@eth5 second in the pod's list, but called first for the plain reference.
    add(&node, &pod, &cid, &ns, "net1", "net-a");
    add(&node, &pod, &cid, &ns, "eth5", "net-a");
    assert_eq!(ns.mac("eth5"), vmis[1].mac);
    assert_eq!(ns.mac("net1"), vmis[2].mac);
    for ifname in ["eth5", "net1"] {
        del(&node, &pod, &cid, &ns.path(), ifname, "net-a").assert_ok();
    }
}

#[test]
fn default_gw_annotation_moves_the_default_route() {
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("default-gw", json!(true)),
    ];
    let pod = PodSpec::new(vmis);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    add(&node, &pod, &cid, &ns, "eth0", "default");
    let r = add(&node, &pod, &cid, &ns, "net1", "net-a");
    assert_eq!(
        ns.default_routes(),
        [("-4".into(), "10.2.0.1".into(), "net1".into())]
    );
    assert_eq!(r["routes"], json!([{"dst": "0.0.0.0/0", "gw": "10.2.0.1"}]));
    for ifname in ["net1", "eth0"] {
        del(&node, &pod, &cid, &ns.path(), ifname, "x").assert_ok();
    }
}

#[test]
fn each_cni_version_gets_its_result_shape() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1).dual_stack()]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    for version in VERSIONS {
        let ns = Netns::new();
        let cid = uuid();
        let out = node.call(
            "ADD",
            &cid,
            &ns.path(),
            "eth0",
            &pod.multus_args(&cid),
            &node.netconf(version, ""),
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
        assert_eq!(ifs[1]["mac"], pod.vmis[0].mac);
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
        let mut conf = node.netconf(version, "");
        conf["prevResult"] = r.clone();
        node.call(
            "CHECK",
            &cid,
            &ns.path(),
            "eth0",
            &pod.multus_args(&cid),
            &conf,
        )
        .assert_ok();
        node.call(
            "DEL",
            &cid,
            &ns.path(),
            "eth0",
            &pod.multus_args(&cid),
            &conf,
        )
        .assert_ok();
        assert_eq!(ns.ifnames(), ["lo"]);
    }
}

#[test]
fn del_is_idempotent_and_needs_neither_netns_nor_prev_result_nor_args() {
    let pod = PodSpec::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-b", 3),
    ]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let cid = uuid();
    let ns = Netns::new();
    let eth0 = add(&node, &pod, &cid, &ns, "eth0", "default");
    let net1 = add(&node, &pod, &cid, &ns, "net1", "net-a");
    let net2 = add(&node, &pod, &cid, &ns, "net2", "net-b");

    // Twice the same DEL: the second has nothing to do.
    del(&node, &pod, &cid, &ns.path(), "net1", "net-a").assert_ok();
    del(&node, &pod, &cid, &ns.path(), "net1", "net-a").assert_ok();
    assert!(!host_link_exists(&host_name(&net1)));

    // Empty CNI_NETNS and no CNI_ARGS at all (no pod name): found by container id and ifname.
    node.call("DEL", &cid, "", "net2", "", &node.netconf("0.4.0", "net-b"))
        .assert_ok();
    assert!(!host_link_exists(&host_name(&net2)));
    assert_eq!(ns.ifnames(), ["eth0", "lo"]);

    // The netns is gone (node reboot, runtime already removed it): DEL still cleans up.
    let path = ns.path();
    drop(ns);
    del(&node, &pod, &cid, &path, "eth0", "default").assert_ok();
    assert!(!host_link_exists(&host_name(&eth0)));
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
    del(&node, &pod, &cid, &path, "eth0", "default").assert_ok();

    // DEL for a pod and container never seen.
    del(
        &node,
        &PodSpec::new(vec![]),
        "never-added",
        "/run/netns/none",
        "eth0",
        "default",
    )
    .assert_ok();
}

#[test]
fn late_del_from_an_older_sandbox_leaves_the_new_one_alone() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let (old_cid, new_cid) = (uuid(), uuid());
    let old_ns = Netns::new();
    add(&node, &pod, &old_cid, &old_ns, "eth0", "default");
    // The old sandbox dies without a DEL; the new one takes the VMI over, replacing the
    // leftover host interface of the same name instead of failing with "file exists".
    let new_ns = Netns::new();
    let new = add(&node, &pod, &new_cid, &new_ns, "eth0", "default");
    assert_eq!(new_ns.mac("eth0"), pod.vmis[0].mac);
    assert_eq!(
        old_ns.ifnames(),
        ["lo"],
        "the old sandbox's veth was the leftover"
    );
    // The late DEL of the old sandbox arrives.
    del(&node, &pod, &old_cid, &old_ns.path(), "eth0", "default").assert_ok();
    assert_eq!(new_ns.addrs("eth0"), [pod.vmis[0].addr()]);
    assert!(host_link_exists(&host_name(&new)));
    assert_eq!(node.state_files(&pod), [pod.vmis[0].uuid.clone()]);
    assert_eq!(sim.ports().len(), 1);
    del(&node, &pod, &new_cid, &new_ns.path(), "eth0", "default").assert_ok();
    assert!(!node.pod_dir_exists(&pod));
}

/// After a failed ADD: no interface in the netns, no state, no port.
fn assert_nothing_left(node: &Node, pod: &PodSpec, ns: &Netns, sim: &Sim) {
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(
        !node.pod_dir_exists(pod),
        "state left: {:?}",
        node.state_files(pod)
    );
    assert!(sim.ports().is_empty());
}

#[test]
fn failed_registration_rolls_everything_back() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let sim = Sim::start(&[&pod], &["--fail", "POST:/vm:500"]);
    let mut node = Node::new(&sim);
    node.contrail["poll-timeout"] = json!(0.1);
    node.contrail["poll-retries"] = json!(3);
    let ns = Netns::new();
    let cid = uuid();
    let out = node.call(
        "ADD",
        &cid,
        &ns.path(),
        "eth0",
        &pod.multus_args(&cid),
        &node.netconf("1.0.0", ""),
    );
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("HTTP 500"), "{}", out.msg());
    assert_nothing_left(&node, &pod, &ns, &sim);
    // Multus then sends DEL to the failed delegate: it succeeds.
    del(&node, &pod, &cid, &ns.path(), "eth0", "").assert_ok();
}

#[test]
fn existing_interface_name_fails_and_is_left_untouched() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let peer = format!("ck8s{}", tag());
    sh(
        "ip",
        &[
            "link", "add", &peer, "type", "veth", "peer", "name", "eth0", "netns", &ns.name,
        ],
    );
    let mac = ns.mac("eth0");
    let cid = uuid();
    let out = node.call(
        "ADD",
        &cid,
        &ns.path(),
        "eth0",
        &pod.multus_args(&cid),
        &node.netconf("1.0.0", ""),
    );
    assert_eq!(out.code(), 102);
    assert!(out.msg().contains("already exists"), "{}", out.msg());
    assert_eq!(ns.mac("eth0"), mac);
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
    sh("ip", &["link", "del", &peer]);
}

#[test]
fn agent_that_never_gives_an_ip_times_out_with_code_11() {
    let pod = PodSpec::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(600_000)),
    ]);
    let sim = Sim::start(&[&pod], &[]);
    let mut node = Node::new(&sim);
    node.contrail["poll-timeout"] = json!(0.1);
    node.contrail["poll-retries"] = json!(5);
    let ns = Netns::new();
    let cid = uuid();
    let started = std::time::Instant::now();
    let out = node.call(
        "ADD",
        &cid,
        &ns.path(),
        "eth0",
        &pod.multus_args(&cid),
        &node.netconf("1.0.0", ""),
    );
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("IP address"), "{}", out.msg());
    // Bounded by poll-timeout x poll-retries (0.5 s), with slack for process start.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_nothing_left(&node, &pod, &ns, &sim);
}

#[test]
fn incomplete_pod_times_out_saying_how_far_it_got() {
    let pod = PodSpec::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("cfg-delay-ms", json!(600_000)),
    ]);
    let sim = Sim::start(&[&pod], &[]);
    let mut node = Node::new(&sim);
    node.contrail["poll-timeout"] = json!(0.1);
    node.contrail["poll-retries"] = json!(3);
    let ns = Netns::new();
    let cid = uuid();
    let out = node.call(
        "ADD",
        &cid,
        &ns.path(),
        "eth0",
        &pod.multus_args(&cid),
        &node.netconf("1.0.0", ""),
    );
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("1 of 2 interfaces"), "{}", out.msg());
    assert_nothing_left(&node, &pod, &ns, &sim);
}

#[test]
fn unknown_network_names_the_pod_and_known_networks() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    let out = node.call(
        "ADD",
        &cid,
        &ns.path(),
        "net1",
        &pod.multus_args(&cid),
        &node.netconf("1.0.0", "net-z"),
    );
    assert_eq!(out.code(), 101);
    let msg = out.msg();
    assert!(
        msg.contains("net-z") && msg.contains(&pod.vm_name()) && msg.contains("default, net-a"),
        "{msg}"
    );
    // A network attached more often than the pod references it.
    add(&node, &pod, &cid, &ns, "net1", "net-a");
    let out = node.call(
        "ADD",
        &cid,
        &ns.path(),
        "net2",
        &pod.multus_args(&cid),
        &node.netconf("1.0.0", "net-a"),
    );
    assert_eq!(out.code(), 101);
    assert_eq!(ns.ifnames(), ["lo", "net1"]);
    del(&node, &pod, &cid, &ns.path(), "net1", "net-a").assert_ok();
}

#[test]
fn unreachable_agent_fails_with_code_11() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let sim = Sim::start(&[&pod], &[]);
    let mut node = Node::new(&sim);
    drop(sim); // nothing listens on that port any more
    node.contrail["poll-timeout"] = json!(0.1);
    node.contrail["poll-retries"] = json!(3);
    let ns = Netns::new();
    let cid = uuid();
    let out = node.call(
        "ADD",
        &cid,
        &ns.path(),
        "eth0",
        &pod.multus_args(&cid),
        &node.netconf("1.0.0", ""),
    );
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains("did not answer"), "{}", out.msg());
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
}

#[test]
fn concurrent_adds_of_one_network_never_share_a_vmi() {
    let mut vmis = vec![VmiSpec::new("default", 1)];
    vmis.extend((2..8).map(|n| VmiSpec::new("net-a", n)));
    let pod = PodSpec::new(vmis.clone());
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    std::thread::scope(|s| {
        for i in 1..=6 {
            let (node, pod, ns, cid) = (&node, &pod, &ns, &cid);
            s.spawn(move || add(node, pod, cid, ns, &format!("net{i}"), "net-a"));
        }
    });
    let macs: BTreeSet<String> = (1..=6).map(|i| ns.mac(&format!("net{i}"))).collect();
    let want: BTreeSet<String> = vmis[1..].iter().map(|v| v.mac.clone()).collect();
    assert_eq!(macs, want);
    std::thread::scope(|s| {
        for i in 1..=6 {
            let (node, pod, ns, cid) = (&node, &pod, &ns, &cid);
            s.spawn(move || {
                del(node, pod, cid, &ns.path(), &format!("net{i}"), "net-a").assert_ok();
            });
        }
    });
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
}

#[test]
fn minimal_nad_config_with_node_wide_defaults() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    // The node-wide file carries the agent's port and the state directory...
    let node_conf = json!({"cniVersion": "0.3.1", "name": "contrail-k8s-cni", "type": "contrail-k8s-cni",
                           "contrail": node.contrail});
    std::fs::write(
        node.conf_dir.0.join("10-contrail.conf"),
        node_conf.to_string(),
    )
    .unwrap();
    // ...so the NetworkAttachmentDefinition config is just this, plus the name Multus injects.
    let nad = json!({"cniVersion": "0.3.0", "type": "contrail-k8s-cni", "name": "net-a"});
    let ns = Netns::new();
    let cid = uuid();
    let r = node
        .call(
            "ADD",
            &cid,
            &ns.path(),
            "net1",
            &pod.multus_args(&cid),
            &nad,
        )
        .assert_ok()
        .json();
    assert_eq!(r["cniVersion"], "0.3.0");
    assert_eq!(ns.mac("net1"), pod.vmis[1].mac);
    assert!(node.state_files(&pod).contains(&pod.vmis[1].uuid));
    node.call(
        "DEL",
        &cid,
        &ns.path(),
        "net1",
        &pod.multus_args(&cid),
        &nad,
    )
    .assert_ok();
    assert!(!node.pod_dir_exists(&pod));
}

#[test]
fn logs_go_to_the_log_file_and_stdout_holds_only_the_result() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    let out = node.call(
        "ADD",
        &cid,
        &ns.path(),
        "eth0",
        &pod.multus_args(&cid),
        &node.netconf("1.0.0", ""),
    );
    let r = out.assert_ok().json(); // the whole of stdout parses as one result
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    let log = std::fs::read_to_string(node.config_dir.0.join("cni.log")).unwrap();
    assert!(
        log.contains(&format!(
            "ADD container={cid} ifname=eth0 network=default pod=default/{} vmi={}: ok in",
            pod.name, pod.vmis[0].uuid
        )),
        "{log}"
    );
    del(&node, &pod, &cid, &ns.path(), "eth0", "").assert_ok();
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
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    let args = pod.multus_args(&cid);
    let good = node.netconf("1.0.0", "");
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
            ("CNI_CONTAINERID", cid.as_str()),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args.as_str()),
            ("CONTRAIL_CNI_CONF_DIR", node.conf_dir.0.to_str().unwrap()),
        ];
        let ns_path = ns.path();
        env[2].1 = &ns_path;
        for (k, v) in &overrides {
            env.retain(|(ek, _)| ek != k);
            env.push((k, v));
        }
        let out = run_plugin(&env, stdin.as_bytes());
        assert_eq!(out.code(), code, "{what}: {}", out.stdout);
        assert!(out.msg().contains(words), "{what}: {}", out.msg());
        assert!(!node.ports_dir().exists(), "{what}: state written");
        assert_eq!(ns.ifnames(), ["lo"], "{what}");
    }
    if !cfg!(feature = "thick") {
        let out = node.call(
            "ADD",
            &cid,
            &ns.path(),
            "eth0",
            &args,
            &with("mode", json!("thick")).parse().unwrap(),
        );
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
    let pod = PodSpec::new(vmis.clone());
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
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
        .map(|(ifname, net)| add(&node, &pod, &cid, &ns, ifname, net))
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
            route_via(&ns, &gw6, ifname),
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
        check(&node, &pod, &cid, &ns, ifname, net, r).assert_ok();
    }
    // DEL of one attachment of each repeated network leaves the others' addresses and routes.
    del(&node, &pod, &cid, &ns.path(), "net2", "net-a").assert_ok();
    del(&node, &pod, &cid, &ns.path(), "net4", "net-b").assert_ok();
    for (i, ((ifname, net), v)) in attachments.iter().zip(&vmis).enumerate() {
        if [2, 4].contains(&i) {
            assert!(ns.link(ifname).is_none(), "{ifname}");
            continue;
        }
        assert_up(ifname, v);
        check(&node, &pod, &cid, &ns, ifname, net, &results[i]).assert_ok();
    }
    assert_eq!(sim.ports().len(), 4);
    for (ifname, net) in attachments.iter().rev() {
        del(&node, &pod, &cid, &ns.path(), ifname, net).assert_ok();
    }
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
}

/// ADD of `ifname` that fails after its registration, next to eth0, which is up: nothing of it
/// is left (interface, state, registration) and eth0 stays registered and passes CHECK.
#[track_caller]
fn fails_after_registration(
    node: &Node,
    sim: &Sim,
    pod: &PodSpec,
    cid: &str,
    ns: &Netns,
    conf: &Value,
    eth0: &Value,
) -> Output {
    let out = node.call("ADD", cid, &ns.path(), "net1", &pod.multus_args(cid), conf);
    assert!(!out.ok, "{out:?}");
    assert_eq!(ns.ifnames(), ["eth0", "lo"]);
    for v in &pod.vmis[1..] {
        assert!(!host_link_exists(&host_ifname(&v.uuid)));
    }
    assert_eq!(node.state_files(pod), [pod.vmis[0].uuid.clone()]);
    let ports: Vec<String> = sim.ports().into_iter().map(|p| p.2).collect();
    assert_eq!(ports, ["eth0"]);
    check(node, pod, cid, ns, "eth0", "default", eth0).assert_ok();
    out
}

#[test]
fn an_add_that_fails_after_its_registration_leaves_nothing_and_its_sibling_works() {
    // net-a's first VMI never gets its IP configuration; the second is fine.
    let pod = PodSpec::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("ip-delay-ms", json!(600_000)),
        VmiSpec::new("net-a", 3),
    ]);
    let sim = Sim::start(&[&pod], &[]);
    let mut node = Node::new(&sim);
    node.contrail["poll-timeout"] = json!(0.1);
    node.contrail["poll-retries"] = json!(3);
    let ns = Netns::new();
    let cid = uuid();
    let eth0 = add(&node, &pod, &cid, &ns, "eth0", "default");
    let conf = node.netconf("1.0.0", "net-a");
    let out = fails_after_registration(&node, &sim, &pod, &cid, &ns, &conf, &eth0);
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains(&pod.vmis[1].uuid), "{}", out.msg());
    // A retry of the same ADD is for the same VMI again (and fails the same way).
    let out = fails_after_registration(&node, &sim, &pod, &cid, &ns, &conf, &eth0);
    assert!(out.msg().contains(&pod.vmis[1].uuid), "{}", out.msg());
    // Multus DELs the failed delegate and every earlier one: nothing is left anywhere.
    del(&node, &pod, &cid, &ns.path(), "net1", "net-a").assert_ok();
    del(&node, &pod, &cid, &ns.path(), "eth0", "default").assert_ok();
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
}

#[test]
fn an_add_whose_addresses_fail_after_registration_leaves_nothing() {
    // An MTU below IPv6's minimum shows only once the agent gives the IPv6 configuration,
    // which it does only after the registration.
    let pod = PodSpec::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).dual_stack(),
    ]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    let eth0 = add(&node, &pod, &cid, &ns, "eth0", "default");
    let mut conf = node.netconf("1.0.0", "net-a");
    conf["contrail"]["mtu"] = json!(1279);
    let out = fails_after_registration(&node, &sim, &pod, &cid, &ns, &conf, &eth0);
    assert_eq!(out.code(), 7);
    assert!(out.msg().contains("1280"), "{}", out.msg());
    // With the MTU fixed, the retry gets the same VMI and comes up.
    add(&node, &pod, &cid, &ns, "net1", "net-a");
    assert_eq!(ns.mac("net1"), pod.vmis[1].mac);
    for (ifname, net) in [("net1", "net-a"), ("eth0", "default")] {
        del(&node, &pod, &cid, &ns.path(), ifname, net).assert_ok();
    }
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
}
