//! Never strands a pod: GC and STATUS, many pods at once, races, stale and corrupt state,
//! hostile input.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

/// A call for `pod`'s sandbox (`cid` in `ns`) on a node that several pods share, as Multus
/// makes it.
fn call(
    node: &Node,
    command: &str,
    pod: &PodSpec,
    cid: &str,
    ns: &Netns,
    ifname: &str,
    conf: &Value,
) -> Output {
    node.cni(command)
        .container(cid)
        .netns(&ns.path())
        .ifname(ifname)
        .args(&pod.multus_args(cid))
        .run(conf)
}

#[test]
fn gc_releases_sandboxes_that_are_gone_and_keeps_live_ones() {
    let live = PodSpec::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let gone = PodSpec::new(vec![VmiSpec::new("default", 3), VmiSpec::new("net-a", 4)]);
    let sim = Sim::start(&[&live, &gone], &[]);
    let node = Node::new(&sim);
    let (live_ns, gone_ns) = (Netns::new(), Netns::new());
    let (live_cid, gone_cid) = (uuid(), uuid());
    for (pod, ns, cid) in [(&live, &live_ns, &live_cid), (&gone, &gone_ns, &gone_cid)] {
        for (ifname, network) in [("eth0", "default"), ("net1", "net-a")] {
            let conf = node.netconf("1.0.0", network);
            call(&node, "ADD", pod, cid, ns, ifname, &conf).assert_ok();
        }
    }
    // A state file without this plugin's marker (the OpenSDN Go plugin's) whose sandbox is not
    // provably gone (its netns path proves nothing): an attachment GC keeps.
    let foreign_dir = node.ports_dir().join("k8s__default__foreign");
    std::fs::create_dir_all(&foreign_dir).unwrap();
    let foreign = foreign_dir.join(uuid());
    std::fs::write(&foreign, json!({"vm-id": "x", "vm-uuid": uuid(), "vm-name": "k8s__default__foreign",
        "host-ifname": "tapforeign", "vm-ifname": "eth0", "vn-uuid": uuid(), "vmi-uuid": foreign.file_name().unwrap().to_str().unwrap()}).to_string()).unwrap();

    // The gone pod's sandbox goes without a DEL. Multus forwards GC to the cluster network
    // only: the list names eth0 of live sandboxes.
    drop(gone_ns);
    let valid = json!([{"containerID": live_cid, "ifname": "eth0"}]);
    node.gc(valid.clone()).assert_ok();
    assert_eq!(
        live_ns.ifnames(),
        ["eth0", "lo", "net1"],
        "a live pod keeps all its attachments"
    );
    assert_eq!(node.state_files(&live).len(), 2);
    assert!(!node.pod_dir_exists(&gone));
    let ports: BTreeSet<String> = sim.ports().into_iter().map(|p| p.0).collect();
    assert_eq!(ports, live.vmis.iter().map(|v| v.uuid.clone()).collect());
    assert!(
        foreign.exists(),
        "GC released a sandbox that is not provably gone"
    );
    // An empty list, under the older key name: what CRI-O sends, at its start, to a Contrail
    // config beside Multus's (the attachments of the pods that use that config directly). The
    // list alone proves nothing: every live sandbox keeps its attachments.
    let mut conf = node.netconf("1.1.0", "contrail-k8s-cni");
    conf["cni.dev/attachments"] = json!([]);
    node.cni("GC").run(&conf).assert_ok();
    assert_eq!(live_ns.ifnames(), ["eth0", "lo", "net1"]);
    assert_eq!(node.state_files(&live).len(), 2);
    assert_eq!(sim.ports().len(), 2);
    // Once its sandbox is gone, the same GC releases it.
    drop(live_ns);
    node.cni("GC").run(&conf).assert_ok();
    assert!(!node.pod_dir_exists(&live));
    assert!(sim.ports().is_empty());
    assert!(foreign.exists());
    // `null`, libcni 1.3's "none in use" (CRI-O 1.36 at its start, to a config no pod uses
    // directly), lists none, and so does no list at all (cnitool 1.3's gc): a live sandbox
    // stays, a gone one goes.
    let (back_ns, back_cid) = (Netns::new(), uuid());
    let default = node.netconf("1.0.0", "default");
    call(&node, "ADD", &live, &back_cid, &back_ns, "eth0", &default).assert_ok();
    let mut null = node.netconf("1.1.0", "contrail-k8s-cni");
    null["cni.dev/valid-attachments"] = Value::Null;
    let mut none = node.netconf("1.1.0", "contrail-k8s-cni");
    none.as_object_mut()
        .unwrap()
        .remove("cni.dev/valid-attachments");
    for conf in [&null, &none] {
        node.cni("GC").run(conf).assert_ok();
        assert_eq!(node.state_files(&live).len(), 1);
        assert_eq!(back_ns.ifnames(), ["eth0", "lo"]);
    }
    drop(back_ns);
    node.cni("GC").run(&none).assert_ok();
    assert!(!node.pod_dir_exists(&live));
    assert!(sim.ports().is_empty());
}

#[test]
fn gc_after_a_node_reboot_cleans_state_whose_netns_is_gone() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let r = fx.add("eth0", "default");
    fx.remove_netns(); // the reboot took the netns and its veth; the state files stayed
    assert!(fx.node.pod_dir_exists(&fx.pod));
    fx.node.gc(json!([])).assert_ok();
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    assert!(!host_link_exists(&host_name(&r)));
    assert!(fx.sim.ports().is_empty());
}

#[test]
fn status_says_whether_the_agent_answers() {
    let mut fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let conf = fx.node.netconf("1.1.0", "contrail-k8s-cni");
    fx.node.cni("STATUS").run(&conf).assert_ok();
    fx.stop_agent();
    let out = fx.node.cni("STATUS").run(&conf);
    assert_eq!(out.code(), 50);
    assert!(out.msg().contains("unreachable"), "{}", out.msg());
}

/// A pod's attachments as Multus DELs them: in reverse order, each on its network.
const ATTACHMENTS: [(&str, &str); 3] = [("net2", "net-a"), ("net1", "net-a"), ("eth0", "default")];

#[test]
fn thirty_two_pods_in_parallel_never_share_a_vmi() {
    let pods: Vec<PodSpec> = (0..32u8)
        .map(|i| {
            let n = i % 100 + 1;
            PodSpec::new(vec![
                VmiSpec::new("default", n),
                VmiSpec::new("net-a", n),
                VmiSpec::new("net-a", n),
            ])
        })
        .collect();
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
    let mut node = Node::new(&sim);
    node.roomy();
    let node = node;
    let spaces: Vec<Netns> = pods.iter().map(|_| Netns::new()).collect();
    let cids: Vec<String> = pods.iter().map(|_| uuid()).collect();
    std::thread::scope(|s| {
        for ((pod, ns), cid) in pods.iter().zip(&spaces).zip(&cids) {
            let node = &node;
            s.spawn(move || {
                // Multus: one pod's delegates in sequence, pods in parallel.
                for (ifname, network) in [("eth0", "default"), ("net1", "net-a"), ("net2", "net-a")]
                {
                    let conf = node.netconf("1.0.0", network);
                    call(node, "ADD", pod, cid, ns, ifname, &conf).assert_ok();
                }
            });
        }
    });
    let mut seen = BTreeSet::new();
    for ((pod, ns), cid) in pods.iter().zip(&spaces).zip(&cids) {
        for (ifname, v) in ["eth0", "net1", "net2"].iter().zip(&pod.vmis) {
            assert_eq!(ns.mac(ifname), v.mac, "{} {ifname}", pod.name);
            assert!(seen.insert(v.uuid.clone()));
        }
        // Every state file is whole JSON naming this sandbox.
        for f in node.state_files(pod) {
            let body = std::fs::read(node.ports_dir().join(pod.vm_name()).join(&f)).unwrap();
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["vm-id"], *cid);
        }
    }
    assert_eq!(sim.ports().len(), 96);
    // Half the pods go away while the other half is checked, then the rest.
    std::thread::scope(|s| {
        for (i, ((pod, ns), cid)) in pods.iter().zip(&spaces).zip(&cids).enumerate() {
            let node = &node;
            s.spawn(move || {
                for (ifname, network) in ATTACHMENTS {
                    let mut conf = node.netconf("1.0.0", network);
                    if i % 2 == 0 {
                        call(node, "DEL", pod, cid, ns, ifname, &conf).assert_ok();
                    } else {
                        conf["prevResult"] = json!({});
                        call(node, "CHECK", pod, cid, ns, ifname, &conf).assert_ok();
                    }
                }
            });
        }
    });
    std::thread::scope(|s| {
        for ((pod, ns), cid) in pods.iter().zip(&spaces).zip(&cids).skip(1).step_by(2) {
            let node = &node;
            s.spawn(move || {
                for (ifname, network) in ATTACHMENTS {
                    let conf = node.netconf("1.0.0", network);
                    call(node, "DEL", pod, cid, ns, ifname, &conf).assert_ok();
                }
            });
        }
    });
    for (pod, ns) in pods.iter().zip(&spaces) {
        assert_eq!(ns.ifnames(), ["lo"]);
        assert!(!node.pod_dir_exists(pod));
    }
    assert!(sim.ports().is_empty());
}

#[test]
fn del_of_one_attachment_while_another_of_the_pod_is_slowly_added() {
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2).with("ip-delay-ms", json!(800)),
    ]);
    // eth0's DEL registers net1 again, which starts its delay again: room for both.
    fx.node.roomy();
    fx.add("eth0", "default");
    std::thread::scope(|s| {
        let slow = s.spawn(|| fx.add("net1", "net-a"));
        // Once net1's claim is recorded, eth0 goes: the pod still has an attachment, so the
        // agent must not be told to drop the pod.
        wait_for("net1's claim", std::time::Duration::from_secs(10), || {
            fx.node.state_files(&fx.pod).len() == 2
        });
        fx.del("eth0", "default").assert_ok();
        slow.join().unwrap();
    });
    assert_eq!(fx.ns.ifnames(), ["lo", "net1"]);
    let ports: Vec<String> = fx.sim.ports().into_iter().map(|p| p.2).collect();
    assert!(ports.contains(&"net1".to_string()), "{ports:?}");
    fx.del("net1", "net-a").assert_ok();
    assert!(!fx.node.pod_dir_exists(&fx.pod));
}

#[test]
fn del_of_the_same_attachment_during_its_slow_add_leaves_nothing() {
    // A runtime that gave up waiting sends DEL while the ADD still waits for the agent: an IP
    // configuration that does not come within the ADD's 30 s, so that only the DEL ends it.
    let mut fx = Fixture::new(vec![
        VmiSpec::new("default", 1).with("ip-delay-ms", json!(600_000)),
    ]);
    fx.node.roomy();
    std::thread::scope(|s| {
        let slow = s.spawn(|| fx.call("ADD", "eth0", &fx.conf("")));
        wait_for("the claim", std::time::Duration::from_secs(10), || {
            fx.node.state_files(&fx.pod).len() == 1
        });
        fx.del("eth0", "default").assert_ok();
        assert_eq!(slow.join().unwrap().code(), 102);
    });
    fx.assert_nothing_left();
}

/// A pod on the cluster network and twice on net-a, with its state directory made, for files
/// placed there by hand: (fixture, its VMIs, the directory).
fn with_pod_dir() -> (Fixture, Vec<VmiSpec>, PathBuf) {
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ];
    let fx = Fixture::new(vmis.clone());
    let dir = fx.node.ports_dir().join(fx.pod.vm_name());
    std::fs::create_dir_all(&dir).unwrap();
    (fx, vmis, dir)
}

#[test]
fn corrupt_and_unknown_state_files_are_reported_and_left_alone() {
    let (fx, vmis, dir) = with_pod_dir();
    let (pod, node) = (&fx.pod, &fx.node);
    // A torn file on net-a's first VMI, and one from a future version on the cluster VMI.
    std::fs::write(dir.join(&vmis[1].uuid), "{\"vm-id\": \"abc\", \"vm-").unwrap();
    let future = json!({"vm-id": "x", "vm-uuid": pod.uuid, "vm-name": pod.vm_name(), "host-ifname": "tapx",
        "vm-ifname": "eth0", "vn-uuid": uuid(), "vmi-uuid": vmis[0].uuid, "contrail-k8s-cni-state": "99"});
    std::fs::write(dir.join(&vmis[0].uuid), future.to_string()).unwrap();
    // net1 cannot know who holds the torn VMI: it takes the next one.
    fx.add("net1", "net-a");
    assert_eq!(fx.ns.mac("net1"), vmis[2].mac);
    fx.del("net1", "net-a").assert_ok();
    node.gc(json!([])).assert_ok();
    assert!(
        dir.join(&vmis[1].uuid).exists() && dir.join(&vmis[0].uuid).exists(),
        "not ours to delete"
    );
    let log = std::fs::read_to_string(node.config_dir.0.join("cni.log")).unwrap();
    assert!(
        log.contains("unreadable state file") && log.contains(&vmis[1].uuid),
        "{log}"
    );
}

/// After a power loss: state files written before the boot that are empty or torn (the rename
/// reached the disk, the content did not) are removed by the next call for the pod and by GC,
/// and hold no VMI; the same files written since the boot are someone else's and stay.
#[test]
fn state_files_a_power_loss_tore_go_with_the_next_call_and_gc_and_no_others() {
    let (fx, vmis, dir) = with_pod_dir();
    let (pod, node) = (&fx.pod, &fx.node);
    let before_boot = boot_time() - Duration::from_secs(60);
    let since_boot = std::time::SystemTime::now();
    write_dated(&dir.join(&vmis[1].uuid), "", since_boot);
    write_dated(&dir.join(&vmis[2].uuid), "", before_boot);
    let torn_row = |rows: &[Value]| {
        rows.iter()
            .filter(|r| r["health"].as_str().unwrap().contains("by a power loss"))
            .map(|r| r["health"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let rows = node.inspect();
    assert_eq!(
        torn_row(&rows),
        [format!(
            "state file left empty or torn by a power loss: {}",
            vmis[2].uuid
        )]
    );
    // net-a's first VMI is held by the file of this boot; its second is free again.
    fx.add("net1", "net-a");
    assert_eq!(fx.ns.mac("net1"), vmis[2].mac);
    assert!(dir.join(&vmis[1].uuid).exists(), "not ours to delete");
    assert!(
        node.log().contains("left by a power loss"),
        "{}",
        node.log()
    );
    assert_eq!(torn_row(&node.inspect()), [] as [String; 0]);
    fx.del("net1", "net-a").assert_ok();
    // GC, in a pod that no call visits any more.
    let other = node
        .ports_dir()
        .join("k8s__default__gone-before-the-power-cut");
    std::fs::create_dir_all(&other).unwrap();
    write_dated(&other.join(uuid()), "{\"vm-id\": \"", before_boot);
    write_dated(&dir.join(&vmis[2].uuid), "\0\0\0\0", before_boot);
    node.gc(json!([])).assert_ok();
    assert!(
        !other.exists(),
        "GC removed the torn file and its directory"
    );
    assert_eq!(node.state_files(pod), [vmis[1].uuid.clone()]);
}

#[test]
fn hostile_environment_and_stdin() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let (ns, cid) = (&fx.ns, &fx.cid);
    // 2 MiB of stdin.
    let mut big = fx.conf("").to_string().into_bytes();
    big.truncate(big.len() - 1);
    big.extend(format!(",\"pad\":\"{}\"}}", "x".repeat(2 << 20)).as_bytes());
    let out = run_plugin(
        &[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", cid),
            ("CNI_NETNS", &ns.path()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", &fx.args()),
        ],
        &big,
    );
    assert_eq!(out.code(), 7);
    assert!(out.msg().contains("larger than"), "{}", out.msg());
    // Non-UTF-8 values are named, not mistaken for absent ones.
    for var in ["CNI_IFNAME", "CNI_CONTAINERID"] {
        let mut cmd = Command::new(plugin_bin());
        cmd.env_clear()
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", cid)
            .env("CNI_NETNS", ns.path())
            .env("CNI_IFNAME", "eth0")
            .env(var, std::ffi::OsStr::from_bytes(b"eth\xff0"))
            .stdin(Stdio::null());
        let out = cmd.output().unwrap();
        let j: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["code"], 4, "{var}: {j}");
        assert!(j["msg"].as_str().unwrap().starts_with(var), "{j}");
    }
    // Path tricks in the pod identity and a netns path that is no namespace.
    for (args, netns) in [
        ("K8S_POD_NAMESPACE=..;K8S_POD_NAME=x".to_string(), ns.path()),
        (format!("K8S_POD_NAME={}", "a".repeat(300)), ns.path()),
        (fx.args(), "/etc/hostname".to_string()),
        (fx.args(), "/run/netns/../../etc".to_string()),
    ] {
        let out = fx
            .node
            .cni("ADD")
            .container(cid)
            .netns(&netns)
            .ifname("eth0")
            .args(&args)
            .run(&fx.conf(""));
        assert_eq!(out.code(), 4, "{args} {netns}: {}", out.stdout);
    }
    assert_eq!(ns.ifnames(), ["lo"]);
    assert!(
        !fx.node.ports_dir().exists(),
        "nothing may be written before input is validated"
    );
}
