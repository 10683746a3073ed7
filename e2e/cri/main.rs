//! kubelet's runtime end to end: containerd with its CRI plugin, Debian's 1.6 and the peers'
//! 2.2.7 (`version.rs`), driven over its CRI gRPC socket as kubelet drives it (RunPodSandbox,
//! PodSandboxStatus, CreateContainer, ExecSync, StopPodSandbox, RemovePodSandbox, Status), with
//! the shipped `netconf/contrail.conflist` (the release binary, then the reference `tuning`) as
//! the node's CNI config, against the agent simulator. containerd calls the plugin through
//! go-cni and libcni (1.1, the conflist at 1.0.0; 1.3, at 1.1.0 and with STATUS) with its own
//! CNI_ARGS, network namespaces, result cache and rollback; each test checks what kubelet sees
//! (the sandbox's IPs, the network's readiness) and what a user checks (the interface's MAC and
//! addresses in the pod, the agent's registration, the state file), and that nothing is left
//! afterwards: no link, no state, no registration, no sandbox, nothing in containerd's or
//! libcni's caches. Most tests run against both containerds ([`on_both`]).
//!
//! The harness (a private containerd per test, the sandbox image the test builds, the CRI
//! client) is `containerd.rs`, with what it needs of the node besides in `host.rs`. Tests by
//! theme besides the sandbox's life here: `conf.rs` (containerd's conf watch), `restarts.rs`,
//! `status.rs` (`NetworkReady` and the plugin's STATUS), `trace.rs` (`TRACEPARENT`).

mod containerd;
mod host;
mod version;

use std::mem::ManuallyDrop;
use std::path::Path;

use containerd::{BROKEN_RUNTIME, Containerd};
use contrail_testkit::*;
use k8s_cri::v1::{PodSandboxState, RunPodSandboxRequest, StopPodSandboxRequest};
use serde_json::Value;
use version::Version;

/// Each named test runs against both containerds, as `<name>::containerd_1_6` and
/// `<name>::containerd_2_2`: `<name>(Version)` is the test.
macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn containerd_1_6() {
                super::$name(super::Version::V1_6)
            }
            #[test]
            fn containerd_2_2() {
                super::$name(super::Version::V2_2)
            }
        }
    )*};
}

mod conf;
mod multus;
mod restarts;
mod status;
mod trace;

on_both!(
    run_pod_sandbox_gets_the_vmi_as_the_pods_network,
    a_container_in_the_sandbox_sees_the_interface,
    stop_pod_sandbox_twice_sends_a_second_del_without_a_netns,
    netns_removed_by_hand_before_stop,
    a_runtime_failure_after_the_network_is_up_is_rolled_back,
    twenty_sandboxes_at_once,
);

/// The shipped conflist these tests prove.
const CONFLIST: &str = "netconf/contrail.conflist";
/// The CRI plugin's interface name for the pod's network.
const IFNAME: &str = "eth0";

fn conflist() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo_file(CONFLIST)).unwrap()).unwrap()
}

/// A pod with one dual-stack VMI on the cluster network, as kube-manager makes for a pod without
/// network annotations; its simulator and node; containerd with the shipped conflist (declared
/// after the fixture: it stops what is left while the agent still answers).
fn cluster_pod(v: Version, env: &[(&str, &str)]) -> (Fixture, VmiSpec, Containerd) {
    let vmi = VmiSpec::new("default", 7).dual_stack();
    let fx = Fixture::new(vec![vmi.clone()]);
    let cd = Containerd::start(v, &fx.node, Some(&conflist()), env);
    (fx, vmi, cd)
}

/// A pod of the cluster network whose sandbox kubelet has run, checked as attached
/// ([`assert_attached`]).
struct Running {
    /// Dropped first: it stops what is left while the agent still answers.
    cd: Containerd,
    fx: Fixture,
    vmi: VmiSpec,
    /// The sandbox.
    id: String,
    netns: String,
    /// The host end.
    host: String,
}

fn running_pod(v: Version, env: &[(&str, &str)]) -> Running {
    let (fx, vmi, cd) = cluster_pod(v, env);
    let id = cd.run_pod(&fx.pod);
    let (netns, host) = assert_attached(&cd, &fx.sim, &fx.node, &fx.pod, &vmi, &id);
    assert_cni_version(&cd, &id, v.cni_version());
    Running {
        cd,
        fx,
        vmi,
        id,
        netns,
        host,
    }
}

impl Running {
    /// [`end_pod`].
    fn end(&self) {
        end_pod(&self.cd, &self.fx, &self.id, &self.netns, &self.host);
    }

    fn stop(&self) {
        self.cd.stop_pod(&self.id);
    }

    /// The `CNI_NETNS` of each DEL containerd sent for the sandbox.
    fn del_netns(&self) -> Vec<String> {
        let dels = self.cd.calls_of("DEL", &self.id);
        dels.into_iter().map(|[netns, ..]| netns).collect()
    }

    /// RemovePodSandbox, then nothing is left ([`assert_gone`]).
    fn remove(&self) {
        self.cd.remove_pod(&self.id);
        assert_gone(&self.cd, &self.fx, &self.id, &self.netns, &self.host);
    }
}

/// A netns containerd made, looked at with the kit's helpers but never deleted by them.
fn view(netns: &str) -> ManuallyDrop<Netns> {
    let name = netns
        .strip_prefix("/var/run/netns/")
        .unwrap_or_else(|| panic!("containerd's netns {netns} is not in /var/run/netns"));
    ManuallyDrop::new(Netns { name: name.into() })
}

fn address(cidr: &str) -> &str {
    cidr.split_once('/').unwrap().0
}

/// While the sandbox runs, what kubelet sees (the sandbox ready with the VMI's addresses) and
/// what a user checks (eth0 in the pod with the VMI's MAC, addresses and default routes; the
/// agent's port; the state file of this sandbox) agree, and containerd called the plugin once,
/// as kubelet's runtime does. Returns (the netns, the host end).
#[track_caller]
fn assert_attached(
    cd: &Containerd,
    sim: &Sim,
    node: &Node,
    pod: &PodSpec,
    vmi: &VmiSpec,
    id: &str,
) -> (String, String) {
    let (status, info) = cd.status(id);
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    let network = status.network.expect("the sandbox's network status");
    assert_eq!(network.ip, address(&vmi.addr()), "PodSandboxStatus IP");
    let v6: Vec<String> = network
        .additional_ips
        .iter()
        .map(|i| i.ip.clone())
        .collect();
    assert_eq!(v6, [vmi.ip6.clone().unwrap()], "additional IPs");
    // The result containerd keeps (crictl inspectp shows it).
    assert_eq!(
        info["cniResult"]["Interfaces"][IFNAME]["Mac"], vmi.mac,
        "{info}"
    );
    // containerd keeps the sandbox's directory under its CRI plugin's root.
    let kept = cd.kept(id);
    assert!(
        kept.iter().any(|p| p.starts_with(cd.path("root"))),
        "{kept:?}"
    );

    let netns = cd.netns(id);
    assert!(
        netns.starts_with("/var/run/netns/cni-") && Path::new(&netns).exists(),
        "containerd's netns {netns}"
    );
    let ns = view(&netns);
    assert_eq!(ns.ifnames(), [IFNAME, "lo"]);
    assert_eq!(ns.mac(IFNAME), vmi.mac, "the interface's MAC is the VMI's");
    let v6 = format!("{}/128", vmi.ip6.as_ref().unwrap());
    let mut addrs = ns.addrs(IFNAME);
    addrs.sort();
    assert_eq!(addrs, [vmi.addr(), v6]);
    assert_eq!(
        ns.default_routes(),
        [
            ("-4".into(), vmi.gateway.clone().unwrap(), IFNAME.into()),
            ("-6".into(), vmi.v6_gateway.clone().unwrap(), IFNAME.into())
        ]
    );

    let host = node.assert_recorded(sim, pod, vmi, id, &netns, IFNAME);

    // What containerd passed: its netns, the pod's identity in CNI_ARGS.
    let adds = cd.calls_of("ADD", id);
    assert_eq!(adds.len(), 1, "ADDs of {id}: {adds:?}");
    assert_eq!(adds[0][0], netns);
    let args = &adds[0][1];
    for kv in [
        format!("K8S_POD_NAMESPACE={}", pod.namespace),
        format!("K8S_POD_NAME={}", pod.name),
        format!("K8S_POD_INFRA_CONTAINER_ID={id}"),
        format!("K8S_POD_UID={}", pod.uuid),
    ] {
        assert!(
            args.split(';').any(|a| a == kv),
            "{kv} in CNI_ARGS {args:?}"
        );
    }
    assert_call_logged(node, "ADD", id, pod);
    (netns, host)
}

/// The CNI version containerd's libcni spoke to the plugins of the sandbox's network: that of
/// the result it cached.
#[track_caller]
fn assert_cni_version(cd: &Containerd, id: &str, want: &str) {
    let cached = cd.cached_result(id);
    assert_eq!(cached["cniVersion"], want, "{cached}");
}

/// The node's log has a successful call of `command` for the sandbox: the call read the node's
/// file (CONTRAIL_CNI_CONF_DIR reached the plugin through containerd) and named the pod.
#[track_caller]
fn assert_call_logged(node: &Node, command: &str, id: &str, pod: &PodSpec) -> String {
    let want = format!(
        "{command} container={id} ifname={IFNAME} network=default pod={}/{}",
        pod.namespace, pod.name
    );
    let log = node.log();
    log.lines()
        .find(|l| l.contains(&want) && l.contains(": ok in"))
        .unwrap_or_else(|| panic!("no successful {want:?} in the node's log:\n{log}"))
        .to_string()
}

/// StopPodSandbox and RemovePodSandbox, as kubelet ends a pod, then nothing is left.
fn end_pod(cd: &Containerd, fx: &Fixture, id: &str, netns: &str, host: &str) {
    cd.stop_pod(id);
    // The DEL belongs to stopping (kubelet stops, and removes later).
    assert_released(fx, host);
    cd.remove_pod(id);
    assert_gone(cd, fx, id, netns, host);
}

/// The attachment is released: the host end, the agent's port and the pod's state are gone.
#[track_caller]
fn assert_released(fx: &Fixture, host: &str) {
    assert!(!host_link_exists(host), "host end {host} left");
    assert_eq!(fx.sim.ports(), [], "ports left registered");
    assert!(
        !fx.node.pod_dir_exists(&fx.pod),
        "state left: {:?}",
        fx.node.leftovers()
    );
}

/// Nothing of the sandbox anywhere: containerd knows no sandbox, keeps nothing of it (its
/// directories, libcni's cached results for our network and the loopback); no netns, no link
/// on the node but lo, nothing in the plugin's state directory.
#[track_caller]
fn assert_gone(cd: &Containerd, fx: &Fixture, id: &str, netns: &str, host: &str) {
    assert_released(fx, host);
    assert_eq!(cd.pods(), [], "sandboxes left");
    assert_eq!(cd.kept(id), [] as [std::path::PathBuf; 0]);
    assert!(!Path::new(netns).exists(), "netns {netns} left");
    assert_eq!(netns_names(), [] as [String; 0]);
    assert_eq!(node_links(), ["lo"]);
    assert_eq!(fx.node.leftovers(), [] as [String; 0]);
    assert_call_logged(&fx.node, "DEL", id, &fx.pod);
}

/// containerd's network namespaces on the node (`cni-<uuid>` in /var/run/netns).
fn netns_names() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("cni-"))
        .collect()
}

/// What kubelet does with the sandboxes of a RunPodSandbox that failed, which containerd keeps
/// NOTREADY: StopPodSandbox, then RemovePodSandbox. Returns their ids.
fn kubelet_cleans_up(cd: &Containerd) -> Vec<String> {
    let mut ids = Vec::new();
    for p in cd.pods() {
        assert_eq!(p.state, PodSandboxState::SandboxNotready as i32, "{p:?}");
        cd.stop_pod(&p.id);
        cd.remove_pod(&p.id);
        ids.push(p.id);
    }
    ids
}

/// RunPodSandbox with the plugin as the cluster network: kubelet's view, the pod's eth0, the
/// agent's registration, then StopPodSandbox and RemovePodSandbox leave nothing.
fn run_pod_sandbox_gets_the_vmi_as_the_pods_network(v: Version) {
    let pod = running_pod(v, &[]);
    let Running { cd, netns, .. } = &pod;
    pod.end();
    // ADD and DEL with the sandbox's netns; RemovePodSandbox stops the sandbox once more: a
    // DEL without a netns (the stop removed it). Nothing else reached the plugin.
    let calls: Vec<(String, String)> = cd
        .calls()
        .into_iter()
        .map(|c| (c[0].clone(), c[2].clone()))
        .collect();
    assert_eq!(
        calls,
        [
            ("ADD".into(), netns.clone()),
            ("DEL".into(), netns.clone()),
            ("DEL".into(), String::new())
        ]
    );
}

/// A container of the pod (CreateContainer, StartContainer) sees the interface: ExecSync in it
/// shows eth0 with the VMI's MAC, addresses and default route, and the peer index of the host
/// end.
fn a_container_in_the_sandbox_sees_the_interface(v: Version) {
    let pod = running_pod(v, &[]);
    let Running {
        cd,
        fx,
        vmi,
        id,
        host,
        ..
    } = &pod;
    let probe = cd.start_probe(id, &fx.pod);
    let (code, out, err) = cd.exec(
        &probe,
        "cat /sys/class/net/eth0/address /sys/class/net/eth0/iflink; \
         ip addr show dev eth0; ip route; ip -6 route",
    );
    assert_eq!(code, 0, "ExecSync: {out}{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], [vmi.mac.as_str()], "{out}");
    let ifindex = std::fs::read_to_string(format!("/sys/class/net/{host}/ifindex")).unwrap();
    assert_eq!(
        lines[1],
        [ifindex.trim()],
        "eth0's peer is the host end: {out}"
    );
    let has = |start: &[&str]| {
        assert!(
            lines.iter().any(|l| l.starts_with(start)),
            "no line starting with {start:?} in:\n{out}"
        )
    };
    has(&["link/ether", &vmi.mac]);
    has(&["inet", &vmi.addr()]);
    has(&[
        "inet6",
        &format!("{}/128", vmi.ip6.as_ref().unwrap()),
        "scope",
        "global",
    ]);
    has(&[
        "default",
        "via",
        vmi.gateway.as_ref().unwrap(),
        "dev",
        IFNAME,
    ]);
    has(&[
        "default",
        "via",
        vmi.v6_gateway.as_ref().unwrap(),
        "dev",
        IFNAME,
    ]);
    cd.remove_container(&probe);
    pod.end();
}

/// StopPodSandbox twice (kubelet repeats it until RemovePodSandbox): the second reaches the
/// plugin with an empty CNI_NETNS (containerd removed the netns at the first) and succeeds.
fn stop_pod_sandbox_twice_sends_a_second_del_without_a_netns(v: Version) {
    let pod = running_pod(v, &[]);
    pod.stop();
    assert_released(&pod.fx, &pod.host);
    assert!(!Path::new(&pod.netns).exists(), "the first stop removes it");
    pod.stop();
    assert_eq!(pod.del_netns(), [pod.netns.clone(), String::new()]);
    let ok = format!("DEL container={} ifname={IFNAME}", pod.id);
    let log = pod.fx.node.log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains(&ok) && l.contains(": ok in"))
            .count(),
        2,
        "two successful DELs in the node's log:\n{log}"
    );
    pod.remove();
}

/// Someone removes the pod's netns by hand (`ip netns delete`) while the sandbox runs: the
/// sandbox's StopPodSandbox still reaches the plugin, whose DEL removes the host end by its
/// name, the registration and the state.
fn netns_removed_by_hand_before_stop(v: Version) {
    let pod = running_pod(v, &[]);
    let name = view(&pod.netns).name.clone();
    sh("ip", &["netns", "delete", &name]);
    assert!(!Path::new(&pod.netns).exists());
    // The pause container still holds the namespace, and with it the veth pair.
    assert!(host_link_exists(&pod.host));
    pod.stop();
    assert_eq!(pod.del_netns(), [""], "containerd found its netns gone");
    assert_released(&pod.fx, &pod.host);
    pod.remove();
}

/// The runtime fails after the network is up (the sandbox's runc cannot create the container):
/// containerd rolls back with a DEL of the same sandbox, which releases everything; kubelet's
/// retry, on a working runtime, gets the same VMI.
fn a_runtime_failure_after_the_network_is_up_is_rolled_back(v: Version) {
    let (fx, vmi, cd) = cluster_pod(v, &[]);
    let err = cd
        .try_run_pod(&fx.pod, BROKEN_RUNTIME)
        .expect_err("RunPodSandbox with a runc that fails");
    let calls = cd.calls();
    assert_eq!(
        calls.len(),
        2,
        "ADD, then the rollback's DEL: {calls:?} ({err:?})"
    );
    let (add, del) = (&calls[0], &calls[1]);
    assert_eq!(
        (add[0].as_str(), del[0].as_str()),
        ("ADD", "DEL"),
        "{calls:?}"
    );
    let failed = add[1].clone();
    assert_eq!(del[1], failed, "the DEL is the failed sandbox's");
    assert!(
        del[2] == add[2] || del[2].is_empty(),
        "the DEL's netns {:?}",
        del[2]
    );
    assert_call_logged(&fx.node, "ADD", &failed, &fx.pod);
    assert_call_logged(&fx.node, "DEL", &failed, &fx.pod);
    // The rollback's DEL alone released everything.
    let host = host_ifname(&vmi.uuid);
    assert_released(&fx, &host);
    assert!(!Path::new(&add[2]).exists(), "netns {} left", add[2]);
    // Its rollback done, containerd forgot the sandbox: kubelet has nothing to clean up.
    assert_gone(&cd, &fx, &failed, &add[2], &host);

    let id = cd.run_pod(&fx.pod);
    assert_ne!(id, failed);
    let (netns, host) = assert_attached(&cd, &fx.sim, &fx.node, &fx.pod, &vmi, &id);
    end_pod(&cd, &fx, &id, &netns, &host);
}

/// 20 pods at once, as kubelet's pod workers start them: every sandbox gets its own VMI (MAC,
/// addresses, registration); then 20 StopPodSandbox at once leave nothing.
fn twenty_sandboxes_at_once(v: Version) {
    let Pods {
        vmis,
        pods,
        sim,
        mut node,
    } = Pods::new(20);
    // Twenty sandboxes at once on a busy 2-core machine: each call's deadline is not this
    // test's subject.
    node.roomy();
    let cd = Containerd::start(v, &node, Some(&conflist()), &[]);

    let runs = pods
        .iter()
        .map(|pod| {
            let mut client = cd.client();
            let req = RunPodSandboxRequest {
                config: Some(cd.sandbox_config(pod)),
                runtime_handler: String::new(),
            };
            async move { client.run_pod_sandbox(req).await }
        })
        .collect();
    let ids: Vec<String> = cd
        .concurrently(runs)
        .into_iter()
        .zip(&pods)
        .map(|(r, pod)| {
            r.unwrap_or_else(|e| panic!("RunPodSandbox of {}: {e:?}", pod.name))
                .into_inner()
                .pod_sandbox_id
        })
        .collect();
    let mut hosts = Vec::new();
    for ((pod, vmi), id) in pods.iter().zip(&vmis).zip(&ids) {
        let (_, host) = assert_attached(&cd, &sim, &node, pod, vmi, id);
        hosts.push(host);
    }
    assert_eq!(sim.ports().len(), 20);

    let stops = ids
        .iter()
        .map(|id| {
            let mut client = cd.client();
            let req = StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            };
            async move { client.stop_pod_sandbox(req).await }
        })
        .collect();
    for (r, id) in cd.concurrently(stops).into_iter().zip(&ids) {
        r.unwrap_or_else(|e| panic!("StopPodSandbox of {id}: {e:?}"));
    }
    for id in &ids {
        cd.remove_pod(id);
    }
    assert_all_gone(&cd, &sim, &node, &pods, &ids, &hosts);
}

/// Several pods of one node, each with one dual-stack VMI of the cluster network; the agent
/// knows them all.
struct Pods {
    vmis: Vec<VmiSpec>,
    pods: Vec<PodSpec>,
    sim: Sim,
    node: Node,
}

impl Pods {
    fn new(n: u8) -> Pods {
        enter_node();
        let vmis: Vec<VmiSpec> = (1..=n)
            .map(|n| VmiSpec::new("default", n).dual_stack())
            .collect();
        let pods: Vec<PodSpec> = vmis.iter().map(|v| PodSpec::new(vec![v.clone()])).collect();
        let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &[]);
        let node = Node::new(&sim);
        Pods {
            vmis,
            pods,
            sim,
            node,
        }
    }
}

/// [`assert_gone`] for several pods of one node.
#[track_caller]
fn assert_all_gone(
    cd: &Containerd,
    sim: &Sim,
    node: &Node,
    pods: &[PodSpec],
    ids: &[String],
    hosts: &[String],
) {
    for (pod, id) in pods.iter().zip(ids) {
        assert_call_logged(node, "DEL", id, pod);
        assert!(!node.pod_dir_exists(pod), "state of {} left", pod.name);
        assert_eq!(cd.kept(id), [] as [std::path::PathBuf; 0]);
    }
    for host in hosts {
        assert!(!host_link_exists(host), "{host} left");
    }
    assert_eq!(sim.ports(), [], "ports left registered");
    assert_eq!(cd.pods(), [], "sandboxes left");
    assert_eq!(netns_names(), [] as [String; 0]);
    assert_eq!(node_links(), ["lo"]);
    assert_eq!(node.leftovers(), [] as [String; 0]);
}
