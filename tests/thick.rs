//! Thick mode (built with `--features thick`): one call sets up every interface of the pod.
#![cfg(feature = "thick")]

use contrail_testkit::*;
use serde_json::{Value, json};

/// netconf/10-contrail-thick.conf as shipped, pointed at this test's agent and directories.
fn thick_conf(node: &Node) -> Value {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("netconf/10-contrail-thick.conf");
    let mut conf: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(conf["contrail"]["mode"], "thick");
    for (k, v) in node.contrail.as_object().unwrap() {
        conf["contrail"][k] = v.clone();
    }
    conf
}

fn call(node: &Node, cmd: &str, pod: &PodSpec, cid: &str, netns: &str) -> Output {
    node.call(
        cmd,
        cid,
        netns,
        "eth0",
        &format!(
            "K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
            pod.namespace, pod.name
        ),
        &thick_conf(node),
    )
}

/// A pod of `n` VMIs: index 0 on the cluster network, the rest on net-a.
fn pod_of(n: u8) -> PodSpec {
    PodSpec::new(
        (0..n)
            .map(|i| VmiSpec::new(if i == 0 { "default" } else { "net-a" }, i + 1))
            .collect(),
    )
}

fn thick_pod_comes_up_and_goes_away(n: u8) {
    let pod = pod_of(n);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    let r = call(&node, "ADD", &pod, &cid, &ns.path())
        .assert_ok()
        .json();
    // The runtime knows only the first interface: the result describes eth0 alone.
    assert_eq!(r["interfaces"].as_array().unwrap().len(), 2);
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    assert_eq!(r["ips"].as_array().unwrap().len(), 1);
    for (i, v) in pod.vmis.iter().enumerate() {
        let ifname = format!("eth{i}");
        assert_eq!(
            (ns.mac(&ifname), ns.addrs(&ifname)),
            (v.mac.clone(), vec![v.addr()]),
            "{ifname}"
        );
    }
    assert_eq!(ns.ifnames().len(), n as usize + 1);
    assert_eq!(
        ns.default_routes(),
        [("-4".to_string(), "10.1.0.1".to_string(), "eth0".to_string())]
    );
    assert_eq!(sim.ports().len(), n as usize);
    call(&node, "CHECK", &pod, &cid, &ns.path()).assert_ok();
    call(&node, "DEL", &pod, &cid, &ns.path()).assert_ok();
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
    call(&node, "DEL", &pod, &cid, &ns.path()).assert_ok();
}

#[test]
fn one_interface() {
    thick_pod_comes_up_and_goes_away(1);
}

#[test]
fn three_interfaces() {
    thick_pod_comes_up_and_goes_away(3);
}

#[test]
fn sixteen_interfaces() {
    thick_pod_comes_up_and_goes_away(16);
}

#[test]
fn dual_stack_default_gw_on_a_later_vmi_and_an_interface_annotation() {
    let vmis = vec![
        VmiSpec::new("default", 1).dual_stack(),
        VmiSpec::new("net-a", 2)
            .dual_stack()
            .with("default-gw", json!(true)),
        VmiSpec::new("net-b", 3).with("interface", json!("data0")),
    ];
    let pod = PodSpec::new(vmis.clone());
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    call(&node, "ADD", &pod, &cid, &ns.path()).assert_ok();
    assert_eq!(ns.ifnames(), ["data0", "eth0", "eth1", "lo"]);
    assert_eq!(
        ns.addrs("eth0"),
        [vmis[0].addr(), "fd00:1::1a/128".to_string()]
    );
    assert_eq!(
        ns.addrs("eth1"),
        [vmis[1].addr(), "fd00:2::2a/128".to_string()]
    );
    assert_eq!(ns.mac("data0"), vmis[2].mac);
    let mut routes = ns.default_routes();
    routes.sort();
    assert_eq!(
        routes,
        [
            ("-4".into(), "10.2.0.1".into(), "eth1".into()),
            ("-6".into(), "fd00:2::1".into(), "eth1".into())
        ]
    );
    call(&node, "CHECK", &pod, &cid, &ns.path()).assert_ok();
    call(&node, "DEL", &pod, &cid, &ns.path()).assert_ok();
    assert_eq!(ns.ifnames(), ["lo"]);
}

#[test]
fn clashing_names_fail_before_anything_is_created() {
    let pod = PodSpec::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-b", 3).with("interface", json!("eth1")),
    ]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let out = call(&node, "ADD", &pod, &uuid(), &ns.path());
    assert_eq!(out.code(), 102);
    assert!(out.msg().contains("both be eth1"), "{}", out.msg());
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
}

#[test]
fn failure_on_the_last_interface_rolls_everything_back() {
    let mut pod = pod_of(4);
    pod.vmis[3] = pod.vmis[3].clone().with("ip-delay-ms", json!(600_000));
    let sim = Sim::start(&[&pod], &[]);
    let mut node = Node::new(&sim);
    node.contrail["poll-timeout"] = json!(0.1);
    node.contrail["poll-retries"] = json!(3);
    let ns = Netns::new();
    let cid = uuid();
    let out = call(&node, "ADD", &pod, &cid, &ns.path());
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains(&pod.vmis[3].uuid), "{}", out.msg());
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(!node.pod_dir_exists(&pod));
    assert!(
        sim.ports().is_empty(),
        "ports of the first three were deregistered"
    );
    call(&node, "DEL", &pod, &cid, &ns.path()).assert_ok();
}

#[test]
fn del_after_the_netns_is_gone() {
    let pod = pod_of(3);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    let r = call(&node, "ADD", &pod, &cid, &ns.path())
        .assert_ok()
        .json();
    let host = r["interfaces"][0]["name"].as_str().unwrap().to_string();
    let path = ns.path();
    drop(ns);
    // Without CNI_ARGS either: found by container id.
    node.call("DEL", &cid, &path, "eth0", "", &thick_conf(&node))
        .assert_ok();
    assert!(!host_link_exists(&host));
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
}

#[test]
fn del_then_add_gives_every_interface_its_vmi_back() {
    let pod = pod_of(3);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    for _ in 0..2 {
        call(&node, "ADD", &pod, &cid, &ns.path()).assert_ok();
        for (i, v) in pod.vmis.iter().enumerate() {
            assert_eq!(ns.mac(&format!("eth{i}")), v.mac);
        }
        assert_eq!(sim.ports().len(), 3);
        call(&node, "DEL", &pod, &cid, &ns.path()).assert_ok();
        assert_eq!(ns.ifnames(), ["lo"]);
        assert!(sim.ports().is_empty());
    }
    assert!(!node.pod_dir_exists(&pod));
}
