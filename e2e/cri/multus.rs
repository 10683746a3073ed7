//! containerd 2.2.7 behind the real Multus 4.3.0 thick (`testkit::Multus`), as a node of a
//! Multus cluster runs: containerd's CNI config directory holds the `00-multus.conf` the
//! daemon wrote, containerd calls `multus-shim`, the daemon (an in-cluster client of the
//! Kubernetes API stand-in) runs our plugin for the cluster network and each of the pod's
//! networks, and answers containerd's STATUS through the cluster network's delegate.

use contrail_testkit::cluster::Nad;
use contrail_testkit::*;
use k8s_cri::v1::PodSandboxState;
use serde_json::json;

use crate::containerd::Containerd;
use crate::version::Version;
use crate::*;

#[test]
fn containerd_2_2_runs_a_pod_behind_multus_thick() {
    let pod = PodSpec::annotated("default", "net-a,net-a");
    let mut sim = Sim::start_cluster(&[&pod], &[Nad::contrail("default", "net-a")], &[]);
    let api = KubeApi::of(&sim);
    let mut node = Node::new(&sim);
    node.roomy();
    let dirs = CniDirs::new();
    // The cluster network at 1.1.0: Multus then forwards containerd's STATUS to it.
    let cluster =
        json!({"cniVersion": "1.1.0", "name": "contrail-k8s-cni", "type": "contrail-k8s-cni"});
    // Multus first: its daemon's service account goes into a /run of the node's own, which
    // containerd's sockets must then live in.
    let multus = Multus::install(MultusMode::Thick, &dirs, &api, &node, cluster);
    let cd = Containerd::start_in(Version::V2_2, &node, &dirs.conf, &[]);
    cd.install_plugin("multus-shim", &peer_bin("multus-shim"));
    cd.wait_network_ready();

    let id = cd.run_pod(&pod);
    let (status, _) = cd.status(&id);
    assert_eq!(status.state, PodSandboxState::SandboxReady as i32);
    let netns = cd.netns(&id);
    let ns = view(&netns);
    assert_eq!(
        ns.ifnames(),
        ["eth0", "lo", "net1", "net2"],
        "{}",
        multus.log()
    );
    let vmis = sim.vmis_made(&pod);
    for (ifname, vmi) in ["eth0", "net1", "net2"].iter().zip(&vmis) {
        assert_eq!(ns.mac(ifname), vmi.mac, "{ifname}");
        assert_eq!(ns.addrs(ifname), [vmi.addr()], "{ifname}");
    }
    // kubelet's view: the sandbox's IP is the cluster network's.
    let ip = status.network.expect("the sandbox's network").ip;
    assert_eq!(ip, address(&vmis[0].addr()));
    // The pod's network-status, written back by the daemon: every interface with its VMI's MAC.
    let reported = api.network_status(&pod);
    for (ifname, vmi) in ["eth0", "net1", "net2"].iter().zip(&vmis) {
        let entry = reported
            .iter()
            .find(|e| e["interface"] == *ifname)
            .unwrap_or_else(|| panic!("{ifname} not in {reported:?}"));
        assert_eq!(entry["mac"], vmi.mac, "{ifname}");
    }
    assert_eq!(sim.ports().len(), 3);
    assert_eq!(node.state_files(&pod).len(), 3);

    // kubelet stops and removes the pod: containerd's DEL reaches every delegate.
    cd.stop_pod(&id);
    cd.remove_pod(&id);
    assert_eq!(sim.ports(), []);
    assert!(!node.pod_dir_exists(&pod), "{:?}", node.leftovers());
    for v in &vmis {
        assert!(!host_link_exists(&host_ifname(&v.uuid)));
    }
    assert_eq!(cd.pods(), [], "sandboxes left");
    assert_eq!(netns_names(), [] as [String; 0]);
    assert_eq!(node.leftovers(), [] as [String; 0]);

    // containerd's STATUS goes through the shim to the daemon and the cluster network's
    // delegate: with the agent gone, the node's network is not ready, with the plugin's words.
    sim.stop();
    let (ready, reason, message) = cd.conditions()["NetworkReady"].clone();
    assert!(!ready, "NetworkReady with the agent gone");
    assert_eq!(reason, "NetworkPluginNotReady");
    assert!(message.contains("is unreachable"), "{message}");
}
