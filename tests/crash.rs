//! Crash safety (built with `--features crash-points`): the plugin is killed with SIGKILL at
//! every step of ADD and DEL; a DEL afterwards removes all of it, and a fresh ADD succeeds.
#![cfg(feature = "crash-points")]

mod common;

use common::*;

/// The steps of ADD, in order (see `crash::point` calls in src/). The container end is created
/// directly in the pod's netns, so there is no separate "moved" step.
const ADD_STEPS: [&str; 5] = ["claimed", "ip", "veth", "addressed", "registered"];

fn host_ifname_of(node: &Node, pod: &PodSpec) -> Option<String> {
    let f = node.state_files(pod).into_iter().next()?;
    let v: serde_json::Value = serde_json::from_slice(
        &std::fs::read(node.ports_dir().join(pod.vm_name()).join(f)).unwrap(),
    )
    .unwrap();
    Some(v["host-ifname"].as_str().unwrap().to_string())
}

#[test]
fn killed_at_every_step_of_add_then_del_cleans_up_and_add_works_again() {
    for step in ADD_STEPS {
        let pod = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
        let sim = Sim::start(&[&pod], &[]);
        let node = Node::new(&sim);
        let ns = Netns::new();
        let cid = uuid();
        let (args, conf) = (pod.multus_args(&cid), node.netconf("1.0.0", "net-a"));
        let out = node.call_with(
            &[("CONTRAIL_CNI_CRASH_AT", step)],
            "ADD",
            &cid,
            &ns.path(),
            "net1",
            &args,
            &conf,
        );
        assert!(
            !out.ok && out.stdout.is_empty(),
            "{step}: the plugin was not killed: {out:?}"
        );
        let host = host_ifname_of(&node, &pod)
            .unwrap_or_else(|| panic!("{step}: the claim must be recorded"));
        node.call("DEL", &cid, &ns.path(), "net1", &args, &conf)
            .assert_ok();
        assert_eq!(ns.ifnames(), ["lo"], "{step}");
        assert!(!host_link_exists(&host), "{step}: {host} leaked");
        assert!(!node.pod_dir_exists(&pod), "{step}");
        assert!(sim.ports().is_empty(), "{step}");
        let r = node
            .call("ADD", &cid, &ns.path(), "net1", &args, &conf)
            .assert_ok()
            .json();
        assert_eq!(ns.mac("net1"), pod.vmis[1].mac, "{step}");
        assert_eq!(r["interfaces"][0]["name"], host.as_str());
        node.call("DEL", &cid, &ns.path(), "net1", &args, &conf)
            .assert_ok();
        assert_eq!(ns.ifnames(), ["lo"], "{step}");
    }
}

#[test]
fn killed_during_del_then_del_again_finishes() {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1)]);
    let sim = Sim::start(&[&pod], &[]);
    let node = Node::new(&sim);
    let ns = Netns::new();
    let cid = uuid();
    let (args, conf) = (pod.multus_args(&cid), node.netconf("1.0.0", ""));
    node.call("ADD", &cid, &ns.path(), "eth0", &args, &conf)
        .assert_ok();
    let out = node.call_with(
        &[("CONTRAIL_CNI_CRASH_AT", "unlinked")],
        "DEL",
        &cid,
        &ns.path(),
        "eth0",
        &args,
        &conf,
    );
    assert!(!out.ok && out.stdout.is_empty(), "{out:?}");
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(
        node.pod_dir_exists(&pod),
        "the record outlives a crash after the link went"
    );
    node.call("DEL", &cid, &ns.path(), "eth0", &args, &conf)
        .assert_ok();
    assert!(!node.pod_dir_exists(&pod));
    assert!(sim.ports().is_empty());
}
