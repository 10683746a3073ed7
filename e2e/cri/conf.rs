//! The node's CNI config as containerd's conf watch sees it: the shipped conflist arriving
//! after containerd started, and beside the node-wide file in the node's CNI directory.

use contrail_testkit::*;
use serde_json::Value;

use crate::containerd::{BOUND, Containerd};
use crate::version::Version;
use crate::*;

on_both!(
    the_shipped_conflist_is_picked_up_by_containerds_conf_watch,
    the_node_wide_file_and_the_conflist_share_the_nodes_cni_directory,
);

/// The sysctls the shipped conflist's `tuning` sets: (key, value).
fn tuning_sysctls() -> Vec<(String, String)> {
    let list = conflist();
    let tuning = list["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "tuning")
        .expect("the shipped conflist chains tuning")
        .clone();
    let sysctls = tuning["sysctl"].as_object().unwrap();
    assert!(!sysctls.is_empty());
    sysctls
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// A sysctl in a pod's netns (`net.ipv4.conf.all.arp_notify`).
fn pod_sysctl(netns: &str, key: &str) -> String {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let name = view(netns).name.clone();
    sh("ip", &["netns", "exec", &name, "cat", &path])
        .trim()
        .to_string()
}

/// containerd starts before the node has a CNI config (the DaemonSet installs it later): its
/// network is not ready and RunPodSandbox fails without calling anything; once the shipped
/// conflist is in its CNI config directory, its conf watch picks it up, and a pod gets both of
/// its plugins: ours (the VMI) and `tuning` (its sysctl, in the pod's netns).
fn the_shipped_conflist_is_picked_up_by_containerds_conf_watch(v: Version) {
    let vmi = VmiSpec::new("default", 7).dual_stack();
    let fx = Fixture::new(vec![vmi.clone()]);
    let cd = Containerd::start(v, &fx.node, None, &[]);
    let (ready, reason, _) = cd.conditions()["NetworkReady"].clone();
    assert!(!ready, "NetworkReady without a CNI config ({reason})");
    let err = cd
        .try_run_pod(&fx.pod, "")
        .expect_err("RunPodSandbox without a CNI config");
    assert!(err.message().contains("cni"), "{err:?}");
    assert_eq!(cd.calls(), [] as [[String; 5]; 0], "the plugin was called");
    // containerd 1.6 keeps the failed sandbox (NOTREADY, with its netns): it cannot stop it
    // without a network config, and kubelet retries. 2.2.7 takes a teardown that fails after
    // a setup that set nothing up as done, and forgets the sandbox and its netns.
    let failed: Vec<String> = cd.pods().into_iter().map(|p| p.id).collect();
    assert_eq!(failed.len(), usize::from(v == Version::V1_6), "{failed:?}");

    cd.install_conflist(&conflist());
    cd.wait_network_ready();
    // kubelet's retry stops and removes it: DELs of a sandbox the plugin never saw succeed.
    assert_eq!(kubelet_cleans_up(&cd), failed);
    let dels: Vec<String> = cd
        .calls()
        .into_iter()
        .filter(|c| c[0] != "STATUS")
        .map(|c| format!("{} {}", c[0], c[1]))
        .collect();
    assert!(
        dels.iter()
            .all(|d| failed.iter().any(|id| *d == format!("DEL {id}")))
            && dels.is_empty() == failed.is_empty(),
        "{dels:?}"
    );
    assert_eq!(netns_names(), [] as [String; 0]);
    let id = cd.run_pod(&fx.pod);
    let (netns, host) = assert_attached(&cd, &fx.sim, &fx.node, &fx.pod, &vmi, &id);
    assert_eq!(cd.cni_plugins(), ["contrail-k8s-cni", "tuning"]);
    // tuning ran after us, in the pod's netns: its sysctls hold there (not on the node).
    for (key, value) in tuning_sysctls() {
        assert_eq!(pod_sysctl(&netns, &key), value, "{key} in the pod");
        let node_value = std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/")));
        assert_ne!(node_value.unwrap().trim(), value, "{key} on the node");
    }
    end_pod(&cd, &fx, &id, &netns, &host);
}

/// The node's CNI directory as on a node, shared by the runtime and the plugin: the node-wide
/// file (`10-contrail.conf`, the plugin's settings) is a network config too, and containerd
/// takes the first config by name. Alone, it is the pod network (our plugin, no `tuning`); the
/// shipped conflist installed as `05-contrail.conflist` sorts before it, and containerd's conf
/// watch switches to it: the next pod gets `tuning` as well. The plugin reads its settings from
/// the node-wide file all along (the conflist has none).
fn the_node_wide_file_and_the_conflist_share_the_nodes_cni_directory(v: Version) {
    let Pods {
        vmis,
        pods,
        sim,
        node,
    } = Pods::new(2);
    let cd = Containerd::start_in_node_dir(v, &node);
    assert_eq!(cd.cni_plugins(), ["contrail-k8s-cni"], "the node-wide file");

    let first = cd.run_pod(&pods[0]);
    let (netns, first_host) = assert_attached(&cd, &sim, &node, &pods[0], &vmis[0], &first);
    // The node-wide file's version (libcni takes a single config's `cniVersion` as it is).
    let file: Value = serde_json::from_slice(&std::fs::read(node.node_file()).unwrap()).unwrap();
    assert_cni_version(&cd, &first, file["cniVersion"].as_str().unwrap());
    for (key, value) in tuning_sysctls() {
        assert_ne!(pod_sysctl(&netns, &key), value, "{key}: no tuning yet");
    }

    cd.install_conflist_as("05-contrail.conflist", &conflist());
    wait_for(
        "containerd's conf watch to load the conflist",
        BOUND,
        || cd.cni_plugins() == ["contrail-k8s-cni", "tuning"],
    );
    let second = cd.run_pod(&pods[1]);
    let (netns, second_host) = assert_attached(&cd, &sim, &node, &pods[1], &vmis[1], &second);
    assert_cni_version(&cd, &second, v.cni_version());
    for (key, value) in tuning_sysctls() {
        assert_eq!(pod_sysctl(&netns, &key), value, "{key} in the pod");
    }

    let ids = [first, second];
    for id in &ids {
        cd.stop_pod(id);
        cd.remove_pod(id);
    }
    assert_all_gone(&cd, &sim, &node, &pods, &ids, &[first_host, second_host]);
}

/// `examples/containerd/config.toml` as a node has it: containerd 2.2.7 imports the example's CNI
/// settings as they are (the node's `/etc/cni/net.d` and `/opt/cni/bin`), where the node-wide
/// file and the shipped conflist, installed as the example says (`05-contrail.conflist`), sit: a
/// pod gets the conflist's two plugins at 1.1.0, kubelet's network is ready through the plugins'
/// STATUS, and the pod's end leaves nothing.
#[test]
fn the_containerd_example_is_a_nodes_cni_config() {
    let vmi = VmiSpec::new("default", 7).dual_stack();
    let fx = Fixture::new(vec![vmi.clone()]);
    let cd = Containerd::start_as_example(&fx.node);
    cd.install_conflist_as("05-contrail.conflist", &conflist());
    cd.wait_network_ready();
    assert_eq!(cd.cni_plugins(), ["contrail-k8s-cni", "tuning"]);
    let id = cd.run_pod(&fx.pod);
    let (netns, host) = assert_attached(&cd, &fx.sim, &fx.node, &fx.pod, &vmi, &id);
    assert_cni_version(&cd, &id, "1.1.0");
    for (key, value) in tuning_sysctls() {
        assert_eq!(pod_sysctl(&netns, &key), value, "{key} in the pod");
    }
    end_pod(&cd, &fx, &id, &netns, &host);
}
