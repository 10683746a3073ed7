//! A node the OpenSDN Go plugin attached, this plugin rolled out onto it (and back): every way a
//! Go plugin's attachment can end (its DEL, GC, the sweep, a reboot, a new sandbox of its pod)
//! leaves no link, file or registration of it, through the same ledger as this plugin's; and
//! what the Go plugin's DEL does with this plugin's files on the way back. The Go plugin's state
//! is made as it makes it (`contrail_testkit::legacy`, read from tf-controller
//! `src/container/cni`). Nested nodes' Go plugin attachments: `e2e/nested.rs`.

use contrail_testkit::legacy::{Legacy, LegacyDel, link_name};
use contrail_testkit::*;
use serde_json::json;

/// A pod on the cluster network and twice on net-a.
fn pod() -> PodSpec {
    PodSpec::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ])
}

/// The Go plugin's Multus sequence for a whole pod: eth0 on the cluster network, net1 and net2
/// on net-a. The VMIs each took, in that order.
fn attach_legacy(legacy: &Legacy, pod: &PodSpec, cid: &str, ns: &Netns) -> Vec<String> {
    [
        ("eth0", "contrail-k8s-cni"),
        ("net1", "net-a"),
        ("net2", "net-a"),
    ]
    .iter()
    .map(|(ifname, network)| legacy.add(pod, cid, ns, ifname, network))
    .collect()
}

/// A node reboot as this node's state sees it: every sandbox's namespace is gone (with its veths),
/// the state files were last written before the boot, and the agent, started again, registered
/// every UUID-named file of its state directory again.
fn reboot(fx: &mut Fixture, pods: &[&PodSpec], spaces: Vec<Netns>) {
    drop(spaces);
    let before = boot_time() - std::time::Duration::from_secs(600);
    for pod in pods {
        let dir = fx.node.ports_dir().join(pod.vm_name());
        for f in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = f.unwrap().path();
            let content = std::fs::read_to_string(&path).unwrap();
            write_dated(&path, &content, before);
        }
    }
    let state = fx.node.ports_dir().to_str().unwrap().to_string();
    fx.restart_agent(&["--state-dir", &state]);
}

/// Nothing of `pod` is left on the node: no host link of either plugin's naming, no state file,
/// no registration, no Go plugin's cache.
#[track_caller]
fn gone(fx: &Fixture, legacy: &Legacy, pod: &PodSpec) {
    for ifname in ["eth0", "net1", "net2"] {
        let link = link_name(false, ifname, &pod.uuid);
        assert!(!host_link_exists(&link), "{link} left behind");
    }
    for v in &pod.vmis {
        assert!(!host_link_exists(&host_ifname(&v.uuid)));
    }
    assert!(!fx.node.pod_dir_exists(pod), "{:?}", fx.node.leftovers());
    let registered: Vec<String> = fx.sim.ports().into_iter().map(|p| p.0).collect();
    for v in &pod.vmis {
        assert!(!registered.contains(&v.uuid), "{} still registered", v.uuid);
    }
    assert!(!legacy.cache(pod).exists(), "the Go plugin's cache is left");
}

#[test]
fn a_legacy_attachments_del_releases_it_and_check_and_inspect_see_it_as_it_is() {
    let fx = Fixture::with_pod(pod(), &[]);
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    let taken = attach_legacy(&legacy, &fx.pod, &fx.cid, &fx.ns);
    assert_eq!(taken[0], fx.pod.vmis[0].uuid);
    assert_eq!(fx.sim.ports().len(), 3);
    // The file is the Go plugin's: no marker of this plugin's.
    let file = fx.node.ports_dir().join(fx.pod.vm_name()).join(&taken[1]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("{\n\t\"time\""), "{text}");
    assert!(!text.contains("contrail-k8s-cni-state"));
    // CHECK of a Go plugin's attachment: what it made is there, and the agent has it.
    fx.call("CHECK", "net1", &fx.conf("net-a")).assert_ok();
    // inspect: who made it, its host link as the Go plugin named it.
    let rows = fx.node.inspect();
    let net1 = rows.iter().find(|r| r["ifname"] == "net1").unwrap();
    assert_eq!(net1["made_by"], "opensdn-go-cni", "{net1}");
    assert_eq!(net1["host"], link_name(false, "net1", &fx.pod.uuid));
    assert_eq!(net1["health"], "ok", "{net1}");
    // Multus's DELs, in reverse: each releases its attachment alone, the others stay
    // registered.
    fx.del("net2", "net-a").assert_ok();
    assert!(!host_link_exists(&link_name(false, "net2", &fx.pod.uuid)));
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net1"]);
    let registered: Vec<String> = fx.sim.ports().into_iter().map(|p| p.2).collect();
    assert_eq!(registered.len(), 2, "{registered:?}");
    fx.del("net1", "net-a").assert_ok();
    fx.del("eth0", "").assert_ok();
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    gone(&fx, &legacy, &fx.pod);
    assert_eq!(fx.ns.ifnames(), ["lo"]);
    assert_eq!(fx.node.leftovers(), [] as [String; 0]);
}

#[test]
fn after_a_reboot_gc_releases_every_legacy_sandbox_whatever_list_it_gets() {
    // Two pods the Go plugin attached; the node reboots (no DEL ever comes for their
    // sandboxes); the agent, started again, registered their files again. A GC of a runtime that
    // knows none of those sandboxes (an empty list) releases them all.
    let (a, b) = (pod(), pod());
    let sim = Sim::start(&[&a, &b], &[]);
    let mut fx = Fixture {
        pod: a.clone(),
        node: Node::new(&sim),
        sim,
        ns: Netns::new(),
        cid: uuid(),
    };
    let b_ns = Netns::new();
    let b_cid = uuid();
    {
        let legacy = Legacy {
            node: &fx.node,
            sim: &fx.sim,
            parent: None,
        };
        attach_legacy(&legacy, &a, &fx.cid, &fx.ns);
        attach_legacy(&legacy, &b, &b_cid, &b_ns);
    }
    let a_ns = std::mem::replace(&mut fx.ns, Netns::new());
    reboot(&mut fx, &[&a, &b], vec![a_ns, b_ns]);
    assert_eq!(
        fx.sim.ports().len(),
        6,
        "the agent registered the files again"
    );
    // inspect sees sandboxes that are gone, and says who releases them.
    let rows = fx.node.inspect();
    assert!(
        rows.iter()
            .filter(|r| r["made_by"] == "opensdn-go-cni")
            .all(|r| r["health"] == "stale sandbox" && r["fix"].as_str().unwrap().contains("GC")),
        "{rows:?}"
    );
    fx.node.gc(json!([])).assert_ok();
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    gone(&fx, &legacy, &a);
    gone(&fx, &legacy, &b);
    assert_eq!(fx.sim.ports(), []);
    assert_eq!(fx.node.leftovers(), [] as [String; 0]);
}

#[test]
fn after_a_reboot_the_sweep_releases_a_legacy_sandbox_even_by_a_proc_path() {
    // dockershim's sandboxes were `/proc/<pid>/ns/net`, a path that proves nothing (the pid may
    // be another process's now): the files' age, from before the boot, proves the sandbox gone.
    let mut fx = Fixture::with_pod(pod(), &[]);
    {
        let legacy = Legacy {
            node: &fx.node,
            sim: &fx.sim,
            parent: None,
        };
        attach_legacy(&legacy, &fx.pod, &fx.cid, &fx.ns);
    }
    let dir = fx.node.ports_dir().join(fx.pod.vm_name());
    for f in std::fs::read_dir(&dir).unwrap() {
        let path = f.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let proc_path = format!("/proc/{}/ns/net", std::process::id());
        std::fs::write(&path, text.replace(&fx.ns.path(), &proc_path)).unwrap();
    }
    let ns = std::mem::replace(&mut fx.ns, Netns::new());
    let pod = fx.pod.clone();
    reboot(&mut fx, &[&pod], vec![ns]);
    let dir = TempDir::new();
    let watch = Watch::start(
        &dir.0.join("bin"),
        &dir.0.join("net.d"),
        &fx.node.node_file(),
        &["--sweep-interval", "1", "--sweep-grace", "0"],
    );
    wait_for("the sweep", std::time::Duration::from_secs(60), || {
        watch.log().contains("sweep released 3 attachment(s)")
    });
    watch.terminate();
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    gone(&fx, &legacy, &pod);
    assert_eq!(fx.node.leftovers(), [] as [String; 0]);
}

#[test]
fn gc_keeps_a_live_legacy_sandbox_it_is_not_told_of() {
    // A runtime that sends GC to each config it loads gives a Contrail config beside Multus's
    // the attachments of the pods that use it directly: none (CRI-O's ocicni). The pods of the
    // node are all alive, attached through Multus.
    let legacy_pod = pod();
    let ours = PodSpec::new(vec![VmiSpec::new("default", 4)]);
    let sim = Sim::start(&[&legacy_pod, &ours], &[]);
    let fx = Fixture {
        pod: legacy_pod,
        node: Node::new(&sim),
        sim,
        ns: Netns::new(),
        cid: uuid(),
    };
    {
        let legacy = Legacy {
            node: &fx.node,
            sim: &fx.sim,
            parent: None,
        };
        attach_legacy(&legacy, &fx.pod, &fx.cid, &fx.ns);
    }
    let (ours_ns, ours_cid) = (Netns::new(), uuid());
    let conf = fx.node.netconf("1.0.0", "contrail-k8s-cni");
    fx.node
        .cni("ADD")
        .container(&ours_cid)
        .netns(&ours_ns.path())
        .ifname("eth0")
        .args(&ours.multus_args(&ours_cid))
        .run(&conf)
        .assert_ok();
    fx.node.gc(json!([])).assert_ok();
    assert_eq!(fx.sim.ports().len(), 4, "GC released a live sandbox");
    assert_eq!(fx.node.state_files(&fx.pod).len(), 3);
    assert_eq!(fx.node.state_files(&ours).len(), 1);
    fx.call("CHECK", "net2", &fx.conf("net-a")).assert_ok();
    // A mixed node: the Go plugin's sandbox goes without a DEL, this plugin's lives on; GC
    // releases the one that is gone and keeps the other.
    fx.remove_netns();
    fx.node.gc(json!([])).assert_ok();
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    gone(&fx, &legacy, &fx.pod);
    let registered: Vec<String> = fx.sim.ports().into_iter().map(|p| p.0).collect();
    assert_eq!(registered, [ours.vmis[0].uuid.clone()]);
    assert_eq!(ours_ns.ifnames(), ["eth0", "lo"]);
    fx.node
        .cni("DEL")
        .container(&ours_cid)
        .netns(&ours_ns.path())
        .ifname("eth0")
        .args(&ours.multus_args(&ours_cid))
        .run(&conf)
        .assert_ok();
    assert_eq!(fx.sim.ports(), []);
}

#[test]
fn a_legacy_pod_gets_a_new_sandbox_from_this_plugin() {
    // The Go plugin's sandbox is replaced (its DEL lost, its namespace still there for a while)
    // and the new one is attached by this plugin: it takes the pod's VMIs over, the Go plugin's
    // links go, and in the end the pod's DELs leave nothing.
    let mut fx = Fixture::with_pod(pod(), &[]);
    let old_ns = std::mem::replace(&mut fx.ns, Netns::new());
    let old_cid = std::mem::replace(&mut fx.cid, uuid());
    {
        let legacy = Legacy {
            node: &fx.node,
            sim: &fx.sim,
            parent: None,
        };
        attach_legacy(&legacy, &fx.pod, &old_cid, &old_ns);
    }
    for (ifname, network) in [("eth0", "default"), ("net1", "net-a"), ("net2", "net-a")] {
        fx.add(ifname, network);
    }
    // The pod's VMIs in the new sandbox, each interface the one of its index (the Go plugin
    // took them in the agent's uuid order), with their MACs; the Go plugin's links gone.
    for (ifname, v) in ["eth0", "net1", "net2"].iter().zip(&fx.pod.vmis) {
        assert_eq!(fx.ns.mac(ifname), v.mac);
        assert!(!host_link_exists(&link_name(false, ifname, &fx.pod.uuid)));
        assert!(host_link_exists(&host_ifname(&v.uuid)));
    }
    assert_eq!(
        old_ns.ifnames(),
        ["lo"],
        "the old sandbox's interfaces went"
    );
    fx.assert_registrations_follow_files();
    for (ifname, network) in [("net2", "net-a"), ("net1", "net-a"), ("eth0", "default")] {
        fx.del(ifname, network).assert_ok();
    }
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    gone(&fx, &legacy, &fx.pod);
    assert_eq!(fx.node.leftovers(), [] as [String; 0]);
    // The old sandbox's late DEL finds nothing of its own: success, nothing touched.
    fx.call_in(&old_cid, &old_ns.path(), "DEL", "net1", &fx.conf("net-a"))
        .assert_ok();
}

#[test]
fn a_new_attachment_on_a_legacy_pod_never_takes_a_legacy_vmi() {
    // The binary was replaced while Multus attached the pod: eth0 and net1 are the Go plugin's,
    // net2 is this plugin's, in the same sandbox.
    let fx = Fixture::with_pod(pod(), &[]);
    let net1 = {
        let legacy = Legacy {
            node: &fx.node,
            sim: &fx.sim,
            parent: None,
        };
        legacy.add(&fx.pod, &fx.cid, &fx.ns, "eth0", "contrail-k8s-cni");
        legacy.add(&fx.pod, &fx.cid, &fx.ns, "net1", "net-a")
    };
    fx.add("net2", "net-a");
    // The Go plugin took the first net-a VMI in the agent's (uuid) order; this plugin the other.
    let mac = |uuid: &str| {
        fx.pod
            .vmis
            .iter()
            .find(|v| v.uuid == uuid)
            .unwrap()
            .mac
            .clone()
    };
    let other = fx.pod.vmis[1..].iter().find(|v| v.uuid != net1).unwrap();
    assert_eq!(fx.ns.mac("net1"), mac(&net1));
    assert_eq!(fx.ns.mac("net2"), other.mac);
    fx.assert_registrations_follow_files();
    for (ifname, network) in [("net2", "net-a"), ("net1", "net-a"), ("eth0", "default")] {
        fx.del(ifname, network).assert_ok();
    }
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    gone(&fx, &legacy, &fx.pod);
}

// ---------------------------------------------------------------- the way back

#[test]
fn the_go_plugins_del_of_a_pod_this_plugin_attached() {
    // Rolled back to the Go plugin: its DEL of a sandbox this plugin attached reads this
    // plugin's files (the agent's format, with keys it ignores), finds them all the sandbox's,
    // and removes them, the directory and every registration of the pod (`DELETE /vm`). The
    // links it deletes are named its way: this plugin's go with the sandbox's namespace, which
    // the runtime removes after its DEL.
    let fx = Fixture::with_pod(pod(), &[]);
    for (ifname, network) in [("eth0", "default"), ("net1", "net-a"), ("net2", "net-a")] {
        fx.add(ifname, network);
    }
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    assert_eq!(legacy.del(&fx.pod, &fx.cid), LegacyDel::Deleted(Vec::new()));
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    assert_eq!(fx.sim.ports(), []);
    for v in &fx.pod.vmis {
        assert!(
            host_link_exists(&host_ifname(&v.uuid)),
            "left for the netns"
        );
    }
    // The kernel takes a namespace's links down after the namespace goes.
    fx.remove_netns();
    wait_for(
        "the links to go with the netns",
        std::time::Duration::from_secs(60),
        || {
            fx.pod
                .vmis
                .iter()
                .all(|v| !host_link_exists(&host_ifname(&v.uuid)))
        },
    );
    // What only this plugin knows of stays: the pod's lock file (empty; this plugin's GC
    // removes it), beside the node's request budget.
    let lock = fx.node.ports_dir().join(".locks").join(fx.pod.vm_name());
    assert_eq!(fx.node.leftovers(), [lock.display().to_string()]);
}

#[test]
fn the_go_plugins_del_does_nothing_beside_another_sandboxs_files() {
    // This plugin keeps a failed attachment's claim, and an older sandbox's: the Go plugin's
    // DEL, finding a file of another sandbox in the pod's directory, does nothing (and says
    // success). Rolled forward again, this plugin's GC releases what is gone.
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("ip-delay-ms", json!(600_000)),
    ];
    let mut fx = Fixture::with_pod(PodSpec::new(vmis), &[]);
    fx.add("eth0", "default");
    let out = fx.under((0.1, 3), |fx| fx.call("ADD", "net1", &fx.conf("net-a")));
    assert_eq!(out.code(), 11);
    // A sandbox replaced without its DEL: the new one attaches eth0.
    let old_ns = std::mem::replace(&mut fx.ns, Netns::new());
    let old_cid = std::mem::replace(&mut fx.cid, uuid());
    fx.add("eth0", "default");
    drop(old_ns);
    let legacy = Legacy {
        node: &fx.node,
        sim: &fx.sim,
        parent: None,
    };
    let refused = legacy.del(&fx.pod, &fx.cid);
    assert!(
        matches!(&refused, LegacyDel::Refused(why) if why.contains(&old_cid)),
        "{refused:?}"
    );
    assert!(fx.node.pod_dir_exists(&fx.pod));
    assert_eq!(fx.sim.ports().len(), 1, "the Go plugin's DEL did nothing");
    // This plugin again: GC releases the old sandbox's reservation (its namespace is gone),
    // keeps the live eth0, and the pod's DEL ends it.
    fx.node
        .gc(json!([{"containerID": fx.cid, "ifname": "eth0"}]))
        .assert_ok();
    assert!(fx.node.reservations(&fx.pod).is_empty());
    fx.del("eth0", "default").assert_ok();
    fx.assert_nothing_left();
}
