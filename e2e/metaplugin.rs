//! What Multus and CNI-Genie really send, and how they react to failures.

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
fn multus_dels_every_delegate_after_a_later_one_fails() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1), VmiSpec::new("net-a", 2)]);
    let node = &fx.node;
    // The third delegate is a network kube-manager made no VMI for (a typo in the pod's
    // annotation, say): its ADD fails. (Debian's macvlan cannot play this part: its DEL
    // re-validates the whole config and fails wherever its ADD did.)
    let delegates = [
        Delegate::contrail(node, "0.3.1", "contrail-k8s-cni", "eth0"),
        Delegate::contrail(node, "0.3.0", "net-a", "net1"),
        Delegate::contrail(node, "0.3.0", "net-typo", "net2"),
    ];
    let multus = fx.multus();
    let (failed, _) = multus
        .add_all(&delegates)
        .expect_err("the macvlan delegate must fail");
    assert_eq!(failed, 2);
    // Multus DELed net2, net1 and eth0: nothing of the pod is left anywhere.
    fx.assert_nothing_left();
    // The retry Kubernetes makes then succeeds from scratch.
    multus
        .add_all(&delegates[..2])
        .unwrap_or_else(|(i, out)| panic!("retry of delegate {i}: {out:?}"));
    assert_eq!(fx.ns.ifnames(), ["eth0", "lo", "net1"]);
    multus.del_all(&delegates[..2]);
}
