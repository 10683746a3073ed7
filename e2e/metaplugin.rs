//! What meta-plugins send beyond a network config (requested IPs and MACs), and CNI-Genie's
//! names and partial rollback, its delegates called one by one. (The real Multus, its rollback
//! included: `e2e/multus/`.)

use contrail_testkit::*;
use serde_json::json;

#[test]
fn requested_ips_and_macs_are_logged_and_ignored() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let (pod, ns) = (&fx.pod, &fx.ns);
    let mut conf = fx.node.netconf("0.4.0", "net-a");
    // Multus puts capability args in runtimeConfig, a selection's cni-args under args.cni, and
    // may append IP= / MAC= to CNI_ARGS.
    conf["runtimeConfig"] = json!({"ips": ["192.0.2.9/24"], "mac": "02:11:22:33:44:55"});
    conf["args"] =
        json!({"cni": {"ips": ["192.0.2.10/24"], "mac": "02:11:22:33:44:56", "other": 1}});
    let args = format!("{};IP=192.0.2.11/24;MAC=02:11:22:33:44:57", fx.args());
    let r = fx
        .node
        .cni("ADD")
        .container(&fx.cid)
        .netns(&ns.path())
        .ifname("net1")
        .args(&args)
        .run(&conf)
        .assert_ok()
        .json();
    // Contrail's allocation wins, in the interface and in the result.
    assert_eq!(
        (ns.mac("net1"), ns.addrs("net1")),
        (pod.vmis[1].mac.clone(), vec![pod.vmis[1].addr()])
    );
    assert_eq!(r["interfaces"][1]["mac"], pod.vmis[1].mac);
    assert_eq!(r["ips"][0]["address"], pod.vmis[1].addr());
    let log = std::fs::read_to_string(fx.node.config_dir.0.join("cni.log")).unwrap();
    for what in [
        "runtimeConfig.ips",
        "runtimeConfig.mac",
        "args.cni.ips",
        "args.cni.mac",
        "CNI_ARGS IP=",
        "CNI_ARGS MAC=",
    ] {
        assert!(
            log.contains(&format!("ignoring {what}")),
            "no warning for {what}:\n{log}"
        );
    }
    fx.node
        .cni("DEL")
        .container(&fx.cid)
        .netns(&ns.path())
        .ifname("net1")
        .args(&args)
        .run(&conf)
        .assert_ok();
}

#[test]
fn cni_genie_names_and_its_partial_rollback() {
    let vmis = vec![
        VmiSpec::new("default", 1),
        VmiSpec::new("net-a", 2),
        VmiSpec::new("net-a", 3),
    ];
    let fx = Fixture::new(vmis.clone());
    let (node, ns) = (&fx.node, &fx.ns);
    // CNI-Genie: eth0..ethN, no K8S_POD_UID, cniVersion 0.3.0 filled in.
    let args = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={}",
        fx.pod.namespace, fx.pod.name
    );
    let genie = Caller {
        args,
        ..fx.caller()
    };
    let delegates = [
        Delegate::contrail(node, "0.3.0", "contrail-k8s-cni", "eth0"),
        Delegate::contrail(node, "0.3.0", "net-a", "eth1"),
        Delegate::contrail(node, "0.3.0", "net-a", "eth2"),
        Delegate::contrail(node, "0.3.0", "net-z", "eth3"),
    ];
    for d in &delegates[..3] {
        genie.call("ADD", d).assert_ok();
    }
    for (ifname, v) in [("eth0", &vmis[0]), ("eth1", &vmis[1]), ("eth2", &vmis[2])] {
        assert_eq!(
            (ns.mac(ifname), ns.addrs(ifname)),
            (v.mac.clone(), vec![v.addr()]),
            "{ifname}"
        );
    }
    // eth3's network is not one of the pod's: the ADD fails and undoes its own work, since
    // Genie DELs only the earlier, successful plugins.
    let out = genie.call("ADD", &delegates[3]);
    assert_eq!(out.code(), 101);
    assert_eq!(ns.ifnames(), ["eth0", "eth1", "eth2", "lo"]);
    assert_eq!(node.state_files(&fx.pod).len(), 3);
    for d in delegates[..3].iter().rev() {
        genie.call("DEL", d).assert_ok();
    }
    fx.assert_nothing_left();
}
