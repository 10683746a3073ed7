//! Pods through Multus: mixed pods (the cluster network, a NAD twice, a bridge NAD, the JSON
//! form with `interface`), their network-status, DEL with and without Multus's cache, a pod gone
//! from the API, a failing delegate and Multus's rollback, and our networks beside another
//! cluster network.

use contrail_testkit::cluster::Nad;
use contrail_testkit::*;
use serde_json::json;

use super::{Rig, files_in};

/// The mixed pod: the cluster network (eth0), `net-a` twice (net1, net2), the bridge (net3).
const MIXED: [(&str, usize); 3] = [("eth0", 0), ("net1", 1), ("net2", 2)];

/// The JSON form: `net-a` on the interface the pod names (eth5, kube-manager's VMI 1 carries
/// that name), `net-a` again (net2: Multus numbers by position), the bridge as br9.
const JSON_FORM: &str =
    r#"[{"name":"net-a","interface":"eth5"},{"name":"net-a"},{"name":"br","interface":"br9"}]"#;
const JSON_IFS: [(&str, usize); 3] = [("eth0", 0), ("eth5", 1), ("net2", 2)];

pub fn mixed_pods_attach_report_and_go(mode: MultusMode) {
    let mixed = PodSpec::annotated("default", "net-a,net-a,br");
    let json_form = PodSpec::annotated("default", JSON_FORM);
    let rig = Rig::new(mode, &[&mixed, &json_form], &[], "0.3.1");
    let (a, b) = (rig.sandbox(&mixed), rig.sandbox(&json_form));

    // What the runtime gets is the cluster network's result: eth0, VMI 0's MAC and address.
    let result = rig.add(&a);
    let eth0 = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "eth0")
        .unwrap_or_else(|| panic!("no eth0 in {result}"));
    assert_eq!(eth0["mac"], json!(a.pod.vmis[0].mac));
    assert_eq!(result["ips"][0]["address"], json!(a.pod.vmis[0].addr()));
    assert_eq!(a.ns.ifnames(), ["eth0", "lo", "net1", "net2", "net3"]);
    rig.assert_attached(&a, &MIXED);
    rig.assert_bridged(&a, "net3");
    rig.assert_network_status(&a, &MIXED, &["net3"]);

    rig.add(&b);
    assert_eq!(b.ns.ifnames(), ["br9", "eth0", "eth5", "lo", "net2"]);
    rig.assert_attached(&b, &JSON_IFS);
    rig.assert_bridged(&b, "br9");
    rig.assert_network_status(&b, &JSON_IFS, &["br9"]);

    // The runtime's DEL: Multus DELs the cached delegates; the other pod keeps everything.
    rig.del(&a);
    rig.assert_gone(&a);
    rig.assert_attached(&b, &JSON_IFS);
    // Its second DEL (a runtime's StopPodSandbox, then RemovePodSandbox): Multus's cache of
    // the sandbox went with the first, so it reads the pod and its NADs again and DELs every
    // delegate; ours find nothing and succeed.
    rig.del(&a);
    rig.assert_gone(&a);
    rig.assert_attached(&b, &JSON_IFS);

    // Multus's cache is lost: the DEL reads the pod from the API and releases everything.
    rig.multus.lose_cache();
    rig.del(&b);
    rig.assert_gone(&b);
    rig.assert_nothing_left();
}

pub fn a_pod_gone_from_the_api(mode: MultusMode) {
    let pod = PodSpec::annotated("default", "net-a,br");
    let rig = Rig::new(mode, &[&pod], &[], "0.3.1");
    let sb = rig.sandbox(&pod);
    rig.add(&sb);
    rig.assert_attached(&sb, &[("eth0", 0), ("net1", 1)]);
    rig.assert_bridged(&sb, "net2");

    // The pod object is deleted before its sandbox: the DEL runs the delegates Multus cached.
    rig.api.delete_pod(&sb.pod);
    rig.del(&sb);
    rig.assert_gone(&sb);
    // Again, with neither the cache nor the pod: Multus succeeds, having nothing to run.
    let calls = rig.our_calls(&sb).len();
    rig.del(&sb);
    if mode == MultusMode::Thin {
        // (Thick's daemon may still have the pod in its informer's cache: it then DELs the
        // NADs' delegates again, which find nothing.)
        assert_eq!(rig.our_calls(&sb).len(), calls, "{:?}", rig.our_calls(&sb));
    }
    rig.assert_gone(&sb);
    rig.assert_nothing_left();
}

pub fn a_failing_delegate_is_rolled_back(mode: MultusMode) {
    // net-z is a conflist: kube-manager made no VMI for it, so our ADD for it fails (101).
    let pod = PodSpec::annotated("default", "net-a,br,net-z,net-a");
    let rig = Rig::new(mode, &[&pod], &[], "0.3.1");
    let sb = rig.sandbox(&pod);
    let out = rig.call("ADD", &sb);
    // Our ADD of net3 failed with 101; the runtime gets Multus's code, our message within its
    // own.
    let ours = format!("ADD container={} ifname=net3 network=net-z", sb.cid);
    let log = rig.node.log();
    let line = log.lines().find(|l| l.contains(&ours)).unwrap();
    assert!(line.contains("(code 101)"), "{line}");
    assert_eq!(out.code(), 999, "{out:?}");
    assert!(
        out.msg().contains(r#"has no VMI on network "net-z""#),
        "{}",
        out.msg()
    );
    // Multus DELs the failed delegate and every earlier one, in reverse (the bridge's DEL is
    // between net3's and net1's: its veth and lease are gone); the last net-a is never run.
    assert_eq!(
        rig.our_calls(&sb),
        [
            "ADD eth0 default",
            "ADD net1 net-a",
            "ADD net3 net-z",
            "DEL net3 net-z",
            "DEL net1 net-a",
            "DEL eth0 default",
        ]
    );
    rig.assert_gone(&sb);
    assert_eq!(rig.bridge_ports(), [] as [String; 0]);
    let calls = rig.our_calls(&sb).len();
    // The runtime's DEL of the failed sandbox: Multus reads the pod again and DELs every
    // delegate of its annotation, net4 (never added) included; nothing is left to release.
    rig.del(&sb);
    assert_eq!(
        rig.our_calls(&sb)[calls..],
        [
            "DEL net4 net-a",
            "DEL net3 net-z",
            "DEL net1 net-a",
            "DEL eth0 default"
        ]
    );
    rig.assert_gone(&sb);
    // The kubelet's next sandbox fails the same way, and leaves nothing either.
    let retry = rig.sandbox(&pod);
    assert_eq!(rig.call("ADD", &retry).code(), 999);
    rig.assert_gone(&retry);
    rig.del(&retry);
    rig.assert_nothing_left();
}

pub fn our_networks_beside_another_cluster_network(mode: MultusMode) {
    // The cluster network is the bridge plugin (as calico would be): eth0 and the default
    // route are its. kube-manager still makes VMI 0 for the cluster network; it stays unused.
    let cluster_bridge = HostLink(format!("mcl{}", tag()));
    let cluster_ipam = TempDir::new();
    let cluster = json!({"cniVersion": "0.3.1", "name": "cluster", "type": "bridge",
        "bridge": cluster_bridge.0, "isGateway": true, "isDefaultGateway": true,
        "ipam": {"type": "host-local", "subnet": "10.244.0.0/24", "dataDir": cluster_ipam.0}});
    let master = HostLink::macvlan_master();
    let macvlan = Nad {
        namespace: "default".into(),
        name: "macvlan-net".into(),
        config: Some(
            json!({"cniVersion": "0.3.1", "type": "macvlan", "master": master.0,
                "mode": "bridge",
                "ipam": {"type": "static", "addresses": [{"address": "192.168.77.5/24"}]}})
            .to_string(),
        ),
    };
    let pod = PodSpec::annotated("default", "net-a,macvlan-net,net-a");
    let rig = Rig::with_cluster(mode, &[&pod], &[macvlan], cluster);
    let sb = rig.sandbox(&pod);
    rig.add(&sb);

    // net1 and net3 get net-a's VMIs 1 and 2; net2 is macvlan's.
    let ours = [("net1", 1), ("net3", 2)];
    assert_eq!(sb.ns.ifnames(), ["eth0", "lo", "net1", "net2", "net3"]);
    rig.assert_attached(&sb, &ours);
    assert_eq!(sb.ns.addrs("eth0"), ["10.244.0.2/24"]);
    assert_eq!(sb.ns.addrs("net2"), ["192.168.77.5/24"]);
    assert_eq!(
        sb.ns.default_routes(),
        [("-4".into(), "10.244.0.1".into(), "eth0".into())]
    );
    rig.assert_network_status(&sb, &ours, &["eth0", "net2"]);
    let status = rig.api.network_status(&sb.pod);
    assert_eq!(status[0]["interface"], "eth0");
    assert_eq!(status[0]["default"], true, "{status:?}");

    rig.del(&sb);
    rig.assert_gone(&sb);
    let leases: Vec<String> = files_in(&cluster_ipam.0)
        .into_iter()
        .filter(|f| f.contains("10.244."))
        .collect();
    assert!(leases.is_empty(), "host-local still holds {leases:?}");
    rig.assert_nothing_left();
}
