//! Thick mode (built with `--features thick`): one call sets up every interface of the pod.
#![cfg(feature = "thick")]

use contrail_testkit::*;
use serde_json::{Value, json};

/// netconf/10-contrail-thick.conf as shipped, pointed at this test's agent and directories,
/// installed as the node-wide file.
fn thick(vmis: Vec<VmiSpec>) -> Fixture {
    let path = repo_file("netconf/10-contrail-thick.conf");
    let conf: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(conf["contrail"]["mode"], "thick");
    let mut fx = Fixture::new(vmis);
    fx.node.install(conf);
    fx
}

/// The config kubelet hands the plugin: the node-wide file itself.
fn thick_conf(node: &Node) -> Value {
    serde_json::from_str(&std::fs::read_to_string(node.node_file()).unwrap()).unwrap()
}

/// One call in the pod's sandbox, with the pod's identity as a runtime passes it.
fn call(fx: &Fixture, cmd: &str) -> Output {
    let pod = &fx.pod;
    fx.node
        .cni(cmd)
        .container(&fx.cid)
        .netns(&fx.ns.path())
        .ifname("eth0")
        .args(&format!(
            "K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
            pod.namespace, pod.name
        ))
        .run(&thick_conf(&fx.node))
}

/// `n` VMIs: index 0 on the cluster network, the rest on net-a.
fn vmis_of(n: u8) -> Vec<VmiSpec> {
    (0..n)
        .map(|i| VmiSpec::new(if i == 0 { "default" } else { "net-a" }, i + 1))
        .collect()
}

fn thick_pod_comes_up_and_goes_away(n: u8) {
    let fx = thick(vmis_of(n));
    let ns = &fx.ns;
    let r = call(&fx, "ADD").assert_ok().json();
    // The runtime knows only the first interface: the result describes eth0 alone.
    assert_eq!(r["interfaces"].as_array().unwrap().len(), 2);
    assert_eq!(r["interfaces"][1]["name"], "eth0");
    assert_eq!(r["ips"].as_array().unwrap().len(), 1);
    for (i, v) in fx.pod.vmis.iter().enumerate() {
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
    assert_eq!(fx.sim.ports().len(), n as usize);
    call(&fx, "CHECK").assert_ok();
    call(&fx, "DEL").assert_ok();
    fx.assert_nothing_left();
    call(&fx, "DEL").assert_ok();
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
    let fx = thick(vmis.clone());
    let ns = &fx.ns;
    call(&fx, "ADD").assert_ok();
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
    call(&fx, "CHECK").assert_ok();
    call(&fx, "DEL").assert_ok();
    assert_eq!(ns.ifnames(), ["lo"]);
}

#[test]
fn clashing_names_fail_before_anything_is_created() {
    let fx = thick(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-b", 3).with("interface", json!("eth1")),
    ]);
    let out = call(&fx, "ADD");
    assert_eq!(out.code(), 102);
    assert!(out.msg().contains("both be eth1"), "{}", out.msg());
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert!(!fx.node.pod_dir_exists(&fx.pod));
}

#[test]
fn failure_on_the_last_interface_rolls_everything_back() {
    let mut vmis = vmis_of(4);
    vmis[3] = vmis[3].clone().with("ip-delay-ms", json!(600_000));
    let mut fx = thick(vmis);
    let out = fx.under((0.1, 3), |fx| call(fx, "ADD"));
    assert_eq!(out.code(), 11);
    assert!(out.msg().contains(&fx.pod.vmis[3].uuid), "{}", out.msg());
    fx.assert_rolled_back();
    // The sandbox keeps its VMIs for the runtime's retry, or its DEL.
    let mut all: Vec<String> = fx.pod.vmis.iter().map(|v| v.uuid.clone()).collect();
    all.sort();
    assert_eq!(fx.node.reservations(&fx.pod), all);
    call(&fx, "DEL").assert_ok();
    fx.assert_nothing_left();
}

#[test]
fn del_after_the_netns_is_gone() {
    let fx = thick(vmis_of(3));
    let r = call(&fx, "ADD").assert_ok().json();
    let host = host_name(&r);
    fx.remove_netns();
    // Without CNI_ARGS either: found by container id.
    let conf = thick_conf(&fx.node);
    fx.node
        .cni("DEL")
        .container(&fx.cid)
        .netns(&fx.ns.path())
        .ifname("eth0")
        .run(&conf)
        .assert_ok();
    assert!(!host_link_exists(&host));
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    assert!(fx.sim.ports().is_empty());
}

#[test]
fn del_then_add_gives_every_interface_its_vmi_back() {
    let fx = thick(vmis_of(3));
    for _ in 0..2 {
        call(&fx, "ADD").assert_ok();
        for (i, v) in fx.pod.vmis.iter().enumerate() {
            assert_eq!(fx.ns.mac(&format!("eth{i}")), v.mac);
        }
        assert_eq!(fx.sim.ports().len(), 3);
        call(&fx, "DEL").assert_ok();
        assert_eq!(fx.ns.ifnames(), ["lo"]);
        assert!(fx.sim.ports().is_empty());
    }
    assert!(!fx.node.pod_dir_exists(&fx.pod));
}
