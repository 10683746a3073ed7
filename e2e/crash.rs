//! Crash safety (built with `--features crash-points`): the plugin is killed with SIGKILL at
//! every step of ADD and DEL, next to a sibling attachment that is up; the runtime's DEL
//! afterwards removes all of the killed attachment (link, state, registration), the sibling
//! stays registered and passes CHECK, and a fresh ADD gets the right VMI.
#![cfg(feature = "crash-points")]

use contrail_testkit::*;

/// A pod with eth0 (cluster network) and net1 (net-a, whose first poll for its IP
/// configuration is answered "not yet", so that there is a wait to be killed in, however late
/// a busy machine makes that poll).
fn pod() -> Fixture {
    let pod = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let not_yet = format!("GET:/vm/{}/{}:1", pod.uuid, pod.vmis[1].uuid);
    Fixture::with_pod(pod, &["--not-yet", &not_yet])
}

/// eth0's network or net1's.
fn network(ifname: &str) -> &'static str {
    if ifname == "eth0" { "default" } else { "net-a" }
}

/// CHECK without a prevResult.
fn check(p: &Fixture, ifname: &str) -> Output {
    p.call("CHECK", ifname, &p.conf(network(ifname)))
}

#[track_caller]
fn killed(p: &Fixture, command: &str, ifname: &str, step: &str) {
    let out = p
        .node
        .cni(command)
        .container(&p.cid)
        .netns(&p.ns.path())
        .ifname(ifname)
        .args(&p.args())
        .env("CONTRAIL_CNI_CRASH_AT", step)
        .run(&p.conf(network(ifname)));
    assert!(
        !out.ok && out.stdout.is_empty(),
        "{command} {step}: the plugin was not killed: {out:?}"
    );
}

fn registered_ifnames(p: &Fixture) -> Vec<String> {
    let mut v: Vec<String> = p.sim.ports().into_iter().map(|p| p.2).collect();
    v.sort();
    v
}

/// net1 is gone everywhere; eth0 is up, registered and passes CHECK.
#[track_caller]
fn only_eth0_left(p: &Fixture, step: &str) {
    assert_eq!(p.ns.ifnames(), ["eth0", "lo"], "{step}");
    let net1 = host_ifname(&p.pod.vmis[1].uuid);
    assert!(!host_link_exists(&net1), "{step}: {net1} leaked");
    // eth0's state file and nothing else: no temp file, no pending resync.
    let dir = p.node.ports_dir().join(p.pod.vm_name());
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, [p.pod.vmis[0].uuid.clone()], "{step}");
    assert_eq!(registered_ifnames(p), ["eth0"], "{step}");
    check(p, "eth0").assert_ok();
}

/// Multus deletes the pod: nothing is left anywhere, not even a temp file or a lock.
#[track_caller]
fn delete_all(p: &Fixture, step: &str) {
    for ifname in ["net1", "eth0"] {
        p.del(ifname, network(ifname)).assert_ok();
    }
    p.assert_nothing_left();
    assert_eq!(p.node.leftovers(), [] as [String; 0], "{step}");
}

#[test]
fn a_step_that_does_not_exist_fails_the_call_rather_than_pass_without_a_crash() {
    let p = pod();
    let out = p
        .node
        .cni("ADD")
        .container(&p.cid)
        .netns(&p.ns.path())
        .ifname("eth0")
        .args(&p.args())
        .env("CONTRAIL_CNI_CRASH_AT", "registred")
        .run(&p.conf("default"));
    assert!(!out.ok, "{out:?}");
    let msg = out.json()["msg"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains("\"registred\" is no crash point"), "{msg}");
    for step in ADD_STEPS.iter().chain(&DEL_STEPS) {
        assert!(msg.contains(step), "{step} is not among {msg}");
    }
    assert_eq!(p.ns.ifnames(), ["lo"]);
    assert!(p.sim.ports().is_empty());
}

#[test]
fn killed_at_every_step_of_add_then_del_cleans_up_and_add_works_again() {
    for step in ADD_STEPS {
        let p = pod();
        p.add("eth0", "default");
        killed(&p, "ADD", "net1", step);
        let recorded = p.node.state_files(&p.pod).contains(&p.pod.vmis[1].uuid);
        assert_eq!(
            recorded,
            !["locked", "renaming"].contains(&step),
            "{step}: the claim is recorded from the rename on"
        );
        // The runtime's DEL of the killed attachment.
        p.del("net1", "net-a").assert_ok();
        only_eth0_left(&p, step);
        // A fresh ADD gets net-a's VMI, with its MAC, address and host end.
        let r = p.add("net1", "net-a");
        assert_eq!(p.ns.mac("net1"), p.pod.vmis[1].mac, "{step}");
        assert_eq!(p.ns.addrs("net1"), [p.pod.vmis[1].addr()], "{step}");
        assert_eq!(
            r["interfaces"][0]["name"],
            host_ifname(&p.pod.vmis[1].uuid).as_str()
        );
        assert_eq!(registered_ifnames(&p), ["eth0", "net1"], "{step}");
        delete_all(&p, step);
    }
}

/// The pod's first attachment killed: its DEL leaves nothing, not even the pod's lock file
/// (a call killed holding the lock before it wrote the pod's first file left one that no DEL
/// removed: the pod has no directory, so nothing is recorded).
#[test]
fn killed_at_every_step_of_a_pods_first_add_then_del_leaves_nothing() {
    for step in ADD_STEPS {
        let p = pod();
        killed(&p, "ADD", "net1", step);
        p.del("net1", "net-a").assert_ok();
        p.assert_nothing_left();
        assert_eq!(p.node.leftovers(), [] as [String; 0], "{step}");
    }
}

#[test]
fn killed_at_every_step_of_add_then_a_retry_of_the_same_add_gets_the_same_vmi() {
    for step in ADD_STEPS {
        let p = pod();
        p.add("eth0", "default");
        killed(&p, "ADD", "net1", step);
        // The runtime retries the ADD instead (its DEL never came).
        p.add("net1", "net-a");
        assert_eq!(p.ns.mac("net1"), p.pod.vmis[1].mac, "{step}");
        assert_eq!(registered_ifnames(&p), ["eth0", "net1"], "{step}");
        check(&p, "net1").assert_ok();
        delete_all(&p, step);
    }
}

#[test]
fn killed_at_every_step_of_del_then_del_again_finishes() {
    for step in DEL_STEPS {
        let p = pod();
        p.add("eth0", "default");
        p.add("net1", "net-a");
        killed(&p, "DEL", "net1", step);
        assert!(
            !host_link_exists(&host_ifname(&p.pod.vmis[1].uuid)),
            "{step}: the veth goes first"
        );
        p.del("net1", "net-a").assert_ok();
        only_eth0_left(&p, step);
        // DEL then ADD of the same attachment gives it its VMI back.
        p.add("net1", "net-a");
        assert_eq!(p.ns.mac("net1"), p.pod.vmis[1].mac, "{step}");
        delete_all(&p, step);
    }
}

#[test]
fn killed_during_the_last_del_of_a_pod_then_del_again_finishes() {
    for step in DEL_STEPS {
        let p = pod();
        p.add("eth0", "default");
        killed(&p, "DEL", "eth0", step);
        assert_eq!(p.ns.ifnames(), ["lo"], "{step}");
        p.del("eth0", "default").assert_ok();
        p.assert_nothing_left();
        assert_eq!(p.node.leftovers(), [] as [String; 0], "{step}");
    }
}
