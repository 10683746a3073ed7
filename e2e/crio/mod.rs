//! kubelet's runtime end to end: CRI-O 1.36.3 (the real `crio` and `pinns`, with Debian's
//! conmon and runc), driven through the real `crictl` 1.36 as kubelet drives it, with the shipped
//! `netconf/contrail.conflist` installed as `05-contrail.conflist` beside the node-wide
//! `10-contrail.conf` in its network directory (docs/runtimes.md), against the agent simulator.
//! CRI-O calls the plugin through ocicni and libcni 1.3 (CNI 1.1.0 from the conflist's
//! `cniVersions`): ADD then CHECK at RunPodSandbox, DEL at the first StopPodSandbox, STATUS to
//! its default network until it first passes, GC at its start, CHECK of every sandbox it
//! restores. Each test checks what kubelet sees (`crictl pods`, `inspectp`, `info`), what a user
//! checks (the pod's eth0 with the VMI's MAC and addresses in CRI-O's netns, the agent's port,
//! the state file, the host end) and that nothing is left afterwards.
//!
//! The harness (a private CRI-O per test, its pause image, `crictl`) is `runtime.rs`; the GC at
//! CRI-O's start is `gc.rs`, its restarts `restart.rs`, STATUS `status.rs`.

mod gc;
mod layouts;
mod restart;
mod runtime;
mod status;

use std::fs::File;
use std::path::Path;

use contrail_testkit::*;
use runtime::{Crio, PodNetns};
use serde_json::{Value, json};

/// The interface CRI-O names the pod's network.
const IFNAME: &str = "eth0";
/// The plugin's type, and the network's name in the shipped files.
const PLUGIN: &str = "contrail-k8s-cni";
/// What CRI-O logs when a network's GC at its start fails: ocicni's warning for the network,
/// then CRI-O's error when the GC ran during its restore, or its warning when the GC waited for
/// STATUS to pass first.
const GC_FAILED: [&str; 3] = [
    "Error while GCing network",
    "Garbage collect stale network resources during server startup failed",
    "Garbage collect stale network resources failed",
];

/// `CNI_ARGS` exactly as CRI-O 1.36 builds them for a sandbox of `pod`.
fn crio_args(pod: &PodSpec, id: &str) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={id};\
         K8S_POD_UID={}",
        pod.namespace, pod.name, pod.uuid
    )
}

/// A sandbox CRI-O ran, attached.
struct Attached {
    id: String,
    /// Its network namespace, as CRI-O pinned it.
    netns: String,
    /// The host end.
    host: String,
}

/// While the sandbox runs, what kubelet sees (the sandbox ready, its IPs the VMI's) and what a
/// user checks (eth0 in CRI-O's netns with the VMI's MAC, addresses and default routes, the
/// conflist's `tuning` sysctl there; the host end; the agent's port; the state file of this
/// sandbox) agree, and CRI-O called the plugin's ADD once, at 1.1.0, with its netns and the
/// pod's identity.
#[track_caller]
fn assert_attached(
    crio: &Crio,
    sim: &Sim,
    node: &Node,
    pod: &PodSpec,
    vmi: &VmiSpec,
    id: &str,
) -> Attached {
    assert!(
        crio.pods().contains(&(id.into(), "SANDBOX_READY".into())),
        "{id} not ready: {:?}",
        crio.pods()
    );
    let status = &crio.inspect(id)["status"];
    let address = |cidr: &str| cidr.split_once('/').unwrap().0.to_string();
    assert_eq!(status["network"]["ip"], address(&vmi.addr()), "{status}");
    let extra: Vec<Value> = vmi.ip6.iter().map(|ip| ip.as_str().into()).collect();
    let shown: Vec<Value> = status["network"]["additionalIps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["ip"].clone())
        .collect();
    assert_eq!(shown, extra, "{status}");

    let netns = crio.netns(id);
    assert!(
        Path::new(&netns).starts_with(crio.path("run/ns/netns")) && Path::new(&netns).exists(),
        "CRI-O's netns {netns}"
    );
    let ns = PodNetns::of(&netns);
    assert_eq!(ns.ifnames(), [IFNAME, "lo"]);
    assert_eq!(ns.mac(IFNAME), vmi.mac, "the interface's MAC is the VMI's");
    let mut want = vec![vmi.addr()];
    let mut routes = vec![("-4".into(), vmi.gateway.clone().unwrap(), IFNAME.into())];
    if let (Some(ip6), Some(gw6)) = (&vmi.ip6, &vmi.v6_gateway) {
        want.push(format!("{ip6}/128"));
        routes.push(("-6".into(), gw6.clone(), IFNAME.into()));
    }
    let mut addrs = ns.addrs(IFNAME);
    addrs.sort();
    assert_eq!(addrs, want);
    assert_eq!(ns.default_routes(), routes);
    // `tuning`, chained after the plugin in the shipped conflist, ran in the pod's netns.
    let arp_notify = sh(
        "ip",
        &[
            "netns",
            "exec",
            &ns.name,
            "cat",
            "/proc/sys/net/ipv4/conf/all/arp_notify",
        ],
    );
    assert_eq!(arp_notify.trim(), "1", "tuning's sysctl in the pod");

    let host = node.assert_recorded(sim, pod, vmi, id, &netns, IFNAME);

    let adds: Vec<_> = crio
        .calls()
        .into_iter()
        .filter(|c| c.plugin == PLUGIN && c.command == "ADD" && c.container == id)
        .collect();
    assert_eq!(adds.len(), 1, "ADDs of {id}: {adds:?}");
    assert_eq!(adds[0].netns, netns);
    assert_eq!(adds[0].args, crio_args(pod, id));
    assert_eq!(
        adds[0].stdin["cniVersion"], "1.1.0",
        "the conflist's cniVersions"
    );
    Attached {
        id: id.into(),
        netns,
        host,
    }
}

/// The attachment of `vmi` is released: no host end, no port at the agent, no state.
#[track_caller]
fn assert_released(sim: &Sim, node: &Node, pod: &PodSpec, vmi: &VmiSpec) {
    let host = host_ifname(&vmi.uuid);
    assert!(!host_link_exists(&host), "host end {host} left");
    let ports = sim.ports();
    assert!(
        !ports.iter().any(|p| p.0 == vmi.uuid),
        "{} left registered: {ports:?}",
        vmi.uuid
    );
    assert!(
        !node.pod_dir_exists(pod),
        "state of {} left: {:?}",
        pod.name,
        node.state_files(pod)
    );
}

/// Nothing anywhere: CRI-O knows no sandbox and pins no netns, libcni caches no result, the
/// node has no link but lo, the agent no port, the plugin's state directory nothing; and no GC
/// at CRI-O's starts failed.
#[track_caller]
fn assert_nothing_left(crio: &Crio, sim: &Sim, node: &Node) {
    assert_eq!(crio.pods(), [], "sandboxes left");
    assert_eq!(crio.netns_files(), [] as [String; 0], "pinned netns left");
    assert_eq!(crio.cached_results(), [] as [std::path::PathBuf; 0]);
    assert_eq!(node_links(), ["lo"]);
    assert_eq!(sim.ports(), [], "ports left registered");
    assert_eq!(node.leftovers(), [] as [String; 0]);
    assert_no_gc_failed(crio);
}

/// CRI-O logged no failed GC at any of its starts.
#[track_caller]
fn assert_no_gc_failed(crio: &Crio) {
    let log = crio.log();
    for line in GC_FAILED {
        assert!(!log.contains(line), "{line:?} in CRI-O's log:\n{log}");
    }
}

/// An attachment a runtime made and then lost (it crashed, and the sandbox's netns path went
/// with the node's cleanup), as it is on the node when CRI-O starts: the state file, the agent's
/// port and the host end of a sandbox no runtime knows, whose netns path is gone. The namespace
/// itself lives on while the returned file holds it, and with it the veth pair.
fn crashed_runtimes_leftover(node: &Node, pod: &PodSpec) -> File {
    let ns = Netns::new();
    let id = uuid();
    let conf = json!({"cniVersion": "1.1.0", "name": PLUGIN, "type": PLUGIN});
    node.cni("ADD")
        .container(&id)
        .netns(&ns.path())
        .ifname(IFNAME)
        .args(&crio_args(pod, &id))
        .run(&conf)
        .assert_ok();
    let holder = File::open(ns.path()).unwrap();
    drop(ns);
    let vmi = &pod.vmis[0];
    assert!(host_link_exists(&host_ifname(&vmi.uuid)));
    assert_eq!(node.state_files(pod), [vmi.uuid.as_str()]);
    holder
}

/// Waits for CRI-O's GC of the plugin at the start that began with call `from` (it runs once
/// STATUS first passed, beside the CRI): that GC call.
#[track_caller]
fn gc_at_start(crio: &Crio, from: usize) -> runtime::Call {
    let gc = || {
        crio.calls()[from..]
            .iter()
            .find(|c| c.plugin == PLUGIN && c.command == "GC")
            .cloned()
    };
    wait_for("CRI-O's GC at its start", runtime::BOUND, || gc().is_some());
    gc().unwrap()
}

/// A pod from RunPodSandbox to RemovePodSandbox, as kubelet runs it on CRI-O with the shipped
/// conflist: at CRI-O's start, STATUS then GC (no pods: `null`, which the plugin takes as "none
/// listed"); RunPodSandbox is ADD then CHECK (of the plugin, then of `tuning`), the pod
/// attached; the first StopPodSandbox one DEL that releases everything; the second stop and
/// RemovePodSandbox call nothing; nothing left. CRI-O's own environment reaches the plugin (as
/// `CONTRAIL_CNI_CONF_DIR` must): a trace context there shows in the calls' log lines.
#[test]
fn a_pod_from_run_to_remove_on_the_shipped_conflist() {
    let vmi = VmiSpec::new("default", 7).dual_stack();
    let fx = Fixture::new(vec![vmi.clone()]);
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let mut crio = Crio::new(&fx.node);
    crio.env("TRACEPARENT", &format!("00-{trace}-b7ad6b7169203331-01"));
    crio.install("05-contrail.conflist", &runtime::shipped_conflist());
    crio.start();
    let gc = gc_at_start(&crio, 0);
    assert_eq!(gc.rc, 0, "{gc:?}");
    assert!(gc.stdin["cni.dev/valid-attachments"].is_null(), "{gc:?}");
    assert_eq!(
        crio.plugin_calls(0),
        [
            ("STATUS".into(), String::new()),
            ("GC".into(), String::new())
        ]
    );
    let (ready, reason, message) = crio.network_ready();
    assert!(ready, "NetworkReady: {reason}: {message}");

    let before = crio.calls().len();
    let id = crio.run_pod(&fx.pod);
    let pod = assert_attached(&crio, &fx.sim, &fx.node, &fx.pod, &vmi, &id);
    let run: Vec<(String, String)> = crio.calls()[before..]
        .iter()
        .map(|c| (c.plugin.clone(), c.command.clone()))
        .collect();
    let call = |plugin: &str, command: &str| (plugin.to_string(), command.to_string());
    assert_eq!(
        run,
        [
            call(PLUGIN, "ADD"),
            call("tuning", "ADD"),
            call(PLUGIN, "CHECK"),
            call("tuning", "CHECK")
        ]
    );

    let before = crio.calls().len();
    crio.stop_pod(&id);
    assert_released(&fx.sim, &fx.node, &fx.pod, &vmi);
    let stop = &crio.calls()[before..];
    let del = stop
        .iter()
        .find(|c| c.plugin == PLUGIN)
        .expect("a DEL at the first stop");
    assert_eq!(crio.plugin_calls(before), [("DEL".into(), id.clone())]);
    assert_eq!((del.netns.as_str(), del.rc), (pod.netns.as_str(), 0));
    assert_eq!(del.args, crio_args(&fx.pod, &id));

    let before = crio.calls().len();
    crio.stop_pod(&id);
    crio.remove_pod(&id);
    assert_eq!(
        crio.calls().len(),
        before,
        "calls at the second stop and remove"
    );
    assert!(!Path::new(&pod.netns).exists(), "{} left", pod.netns);
    assert_nothing_left(&crio, &fx.sim, &fx.node);
    let log = fx.node.log();
    for command in ["ADD", "CHECK", "DEL"] {
        let call = format!("{command} container={id} ");
        assert!(
            log.lines()
                .any(|l| l.contains(&call) && l.contains(&format!(" trace={trace}"))),
            "no {command} line with the trace id:\n{log}"
        );
    }
}

/// 10 sandboxes at once, as kubelet's pod workers start them: 10 distinct VMIs, each pod's eth0
/// with its own MAC and addresses; then 10 StopPodSandbox at once and RemovePodSandbox leave
/// nothing.
#[test]
fn ten_sandboxes_at_once() {
    enter_node();
    let vmis: Vec<VmiSpec> = (1..=10).map(|n| VmiSpec::new("default", n)).collect();
    let pods: Vec<PodSpec> = vmis.iter().map(|v| PodSpec::new(vec![v.clone()])).collect();
    let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
    let mut node = Node::new(&sim);
    // Ten sandboxes at once on a busy 2-core machine: each call's deadline is not this test's
    // subject.
    node.roomy();
    let crio = Crio::with_shipped_conflist(&node);

    let runs: Vec<_> = pods.iter().map(|p| crio.spawn_run_pod(p)).collect();
    let ids: Vec<String> = runs.into_iter().map(|r| crio.finish(r)).collect();
    let attached: Vec<Attached> = pods
        .iter()
        .zip(&vmis)
        .zip(&ids)
        .map(|((pod, vmi), id)| assert_attached(&crio, &sim, &node, pod, vmi, id))
        .collect();
    let mut registered: Vec<String> = sim.ports().into_iter().map(|p| p.0).collect();
    registered.sort();
    registered.dedup();
    assert_eq!(registered.len(), 10, "10 distinct VMIs registered");

    let stops: Vec<_> = ids
        .iter()
        .map(|id| crio.spawn_crictl(&["stopp", id]))
        .collect();
    for stop in stops {
        crio.finish(stop);
    }
    for ((pod, vmi), a) in pods.iter().zip(&vmis).zip(&attached) {
        assert_released(&sim, &node, pod, vmi);
        let dels = crio.plugin_calls(0);
        let dels = dels.iter().filter(|c| c.0 == "DEL" && c.1 == a.id).count();
        assert_eq!(dels, 1, "DELs of {}", pod.name);
        crio.remove_pod(&a.id);
    }
    assert_nothing_left(&crio, &sim, &node);
}

/// RunPodSandbox of a pod the agent does not know (kube-manager made no VMI for it): the
/// plugin's ADD fails when its request budget is spent, CRI-O rolls back with a DEL of the same
/// sandbox and netns and fails the RunPodSandbox with the plugin's message; it keeps no sandbox,
/// and nothing is left.
#[test]
fn a_failed_add_is_rolled_back_by_crio() {
    let mut fx = Fixture::new(vec![VmiSpec::new("default", 8)]);
    // The ADD's wait for the VMI is not this test's subject.
    fx.set("poll-timeout", json!(0.2))
        .set("poll-retries", json!(2));
    let crio = Crio::with_shipped_conflist(&fx.node);
    let ghost = PodSpec::new(vec![VmiSpec::new("default", 9)]);
    let out = crio.spawn_run_pod(&ghost).wait_with_output().unwrap();
    assert!(!out.status.success(), "RunPodSandbox of a pod without VMIs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "error adding pod {}_{} to CNI network",
            ghost.namespace, ghost.name
        )) && err.contains("the agent does not know the pod"),
        "{err}"
    );
    let calls: Vec<_> = crio
        .calls()
        .into_iter()
        .filter(|c| c.plugin == PLUGIN && (c.command == "ADD" || c.command == "DEL"))
        .collect();
    assert_eq!(calls.len(), 2, "ADD, then the rollback's DEL: {calls:?}");
    let (add, del) = (&calls[0], &calls[1]);
    assert_eq!((add.command.as_str(), del.command.as_str()), ("ADD", "DEL"));
    assert_ne!(add.rc, 0);
    assert_eq!(del.rc, 0);
    assert_eq!((&del.container, &del.netns), (&add.container, &add.netns));
    assert_eq!(del.args, crio_args(&ghost, &add.container));
    assert!(!Path::new(&add.netns).exists(), "{} left", add.netns);
    assert!(!fx.node.pod_dir_exists(&ghost), "{:?}", fx.node.leftovers());
    assert_nothing_left(&crio, &fx.sim, &fx.node);
}
