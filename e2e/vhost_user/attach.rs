//! vhost-user attachments as ADD makes them on a DPDK node: packets cross between Debian's
//! `dpdk-testpmd` as the pod's application (in a mount namespace that sees only the pod's
//! directory) and as the vRouter's side, through the plugin's `uvh_vif_` link; the simulator's
//! vrouter-dpdk stand-in connects once the application listens; refusals before anything
//! (kernel-mode and nested nodes, long socket paths, thick mode); a pod mixing vhost-user, veth
//! and macvlan; a repeated network; `netconf/dpdk.yaml` against the defaults; a pod's symlink in
//! place of its socket, which vrouter-dpdk's stand-in must not follow (`vhost-dir` on a
//! `nosymfollow` tmpfs), and the refusal without that mount.

use std::path::Path;

use contrail_testkit::*;
use serde_json::{Value, json};

use super::{BOUND, Dpdk, is_link, is_socket, read_json, requests_by_route, sorted};

#[test]
fn packets_cross_from_the_application_to_the_vrouter_through_the_plugins_socket() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], false);
    let vmi = &d.fx.pod.vmis[0];
    let mut conf = d.conf("dpdk-net");
    conf["cniVersion"] = json!("1.1.0");
    let result = d.fx.call("ADD", "net1", &conf).assert_ok().json();
    // One interface, in the pod's sandbox, with the VMI's MAC and the socket as the pod sees it;
    // the agent's address indexed to it. Nothing in the pod's netns.
    let pod_socket = format!("{APP_SOCKET_DIR}/net1.sock");
    assert_eq!(
        result["interfaces"],
        json!([{"name": "net1", "mac": vmi.mac, "mtu": 1500, "sandbox": d.fx.ns.path(),
                "socketPath": pod_socket}])
    );
    assert_eq!(result["ips"][0]["address"], vmi.addr());
    assert_eq!(result["ips"][0]["interface"], 0);
    assert_eq!(d.fx.ns.ifnames(), ["lo"]);
    // vrouter-dpdk's fixed path leads into the pod's directory.
    let socket = d.pod_dir().join("net1.sock");
    assert_eq!(std::fs::read_link(d.link(0)).unwrap(), socket);
    let info = read_json(&d.pod_dir().join("net1.json"));
    assert_eq!(
        (&info["socketPath"], &info["mode"], &info["mac"]),
        (&json!(pod_socket), &json!("server"), &json!(vmi.mac))
    );
    assert_eq!(info["ips"][0]["address"], vmi.addr());
    // Registered through POST /port as a PMD port, never through POST /vm.
    assert_eq!(
        d.routes(),
        [(vmi.uuid.clone(), "POST /port".into(), "pmd".into())]
    );

    // The application sees only its own directory: not the vRouter's, not other pods'.
    let app = Testpmd::app(&d.pod_dir(), "net1.sock", &[&d.vrouter.0, &d.vhost.0]);
    wait_for("the application's socket", BOUND, || is_socket(&socket));
    let vrouter = Testpmd::vrouter(&d.link(0));
    wait_for("packets at the vRouter's side", BOUND, || {
        vrouter.rx_so_far() > 0
    });
    d.check_ok("net1", &result);
    let vr_out = vrouter.stop(BOUND);
    let app_out = app.stop(BOUND);
    let (rx, tx) = (rx_packets(&vr_out), tx_packets(&app_out));
    eprintln!("vRouter side received {rx}, the application sent {tx}");
    assert!(rx > 0 && rx <= tx, "rx {rx} tx {tx}\n{vr_out}\n{app_out}");

    // The pod goes: DEL removes the link, the JSON file, the socket the application left
    // behind, the directory, and the POST /port registration.
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
}

#[test]
fn the_vrouter_connects_once_the_application_listens_and_del_disconnects_it() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.add("net1", "dpdk-net");
    let standin = || d.fx.sim.get("/sim/vhost")[0].clone();
    // vrouter-dpdk retries while the application has not started.
    assert_eq!(standin()["path"], d.link(0).to_str().unwrap());
    wait_for("a refused attempt", BOUND, || {
        standin()["attempts"].as_u64().unwrap() > 0
    });
    assert_eq!(standin()["connected"], false);
    let app = Testpmd::app(&d.pod_dir(), "net1.sock", &[&d.vrouter.0, &d.vhost.0]);
    wait_for("the vRouter to connect", BOUND, || {
        standin()["bytes-received"].as_u64().unwrap() > 0
    });
    assert_eq!(standin()["connected"], true);
    // The application stops (the kubelet stops a pod's containers before its sandbox's
    // network goes): vrouter-dpdk sees it go and keeps trying.
    app.stop(BOUND);
    wait_for("the vRouter to see the application go", BOUND, || {
        standin()["connected"] == false
    });
    // DEL: the port goes (vrouter-dpdk stops trying), and the link, the JSON file, the socket
    // the application left and the directory with it.
    d.del("net1", "dpdk-net");
    assert_eq!(d.fx.sim.get("/sim/vhost"), json!([]));
    d.assert_nothing_left();
}

#[test]
fn a_node_without_a_dpdk_vrouter_refuses_before_anything_is_made() {
    let mut d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    std::fs::remove_file(d.vrouter.0.join("dpdk_netlink")).unwrap();
    let refused = |d: &Dpdk, words: &str| {
        let out = d.fx.call("ADD", "net1", &d.conf("dpdk-net"));
        assert_eq!(out.code(), 7, "{out:?}");
        assert!(out.msg().contains(words), "{}", out.msg());
        assert_eq!(d.fx.sim.requests(), 0, "the agent was asked");
        let made = std::fs::read_dir(d.vhost.0.join("pods")).unwrap().count();
        assert_eq!(made, 0, "a pod directory was made");
        d.assert_nothing_left();
    };
    refused(&d, "no dpdk_netlink in");
    // The node says so outright, whatever its socket directory holds.
    std::fs::write(d.vrouter.0.join("dpdk_netlink"), "").unwrap();
    d.fx.set("vrouter-mode", json!("kernel"));
    refused(&d, "vrouter-mode kernel");
    // A nested node has no vRouter of its own.
    d.fx.set("vrouter-mode", json!("dpdk"))
        .set("vif-type", json!("macvlan"));
    refused(&d, "nested");
    // A network's config cannot say otherwise: vrouter-mode is the node's.
    d.fx.set("vif-type", Value::Null)
        .set("vrouter-mode", json!("kernel"));
    let mut conf = d.conf("dpdk-net");
    conf["contrail"]["vrouter-mode"] = json!("dpdk");
    let out = d.fx.call("ADD", "net1", &conf);
    assert_eq!(out.code(), 7, "{out:?}");
    assert!(out.msg().contains("vrouter-mode"), "{}", out.msg());
    d.assert_nothing_left();
}

#[test]
fn socket_paths_over_107_bytes_are_refused_before_anything_is_made() {
    let mut d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    // A long socket directory has no dpdk_netlink of its own: the node says it is DPDK.
    d.fx.set("vrouter-mode", json!("dpdk"));
    let long = |base: &Path| base.join("d".repeat(60)).to_str().unwrap().to_string();
    let (vhost_long, vrouter_long) = (long(&d.vhost.0), long(&d.vrouter.0));
    let mount_long = format!("/var/run/{}", "m".repeat(90));
    for (key, value) in [
        ("vhost-dir", &vhost_long),
        ("vrouter-socket-dir", &vrouter_long),
        ("vhost-pod-dir", &mount_long),
    ] {
        let before = d.fx.node.contrail()[key].clone();
        d.fx.set(key, json!(value));
        let out = d.fx.call("ADD", "net1", &d.conf("dpdk-net"));
        assert_eq!(out.code(), 7, "{key}: {out:?}");
        assert!(
            out.msg().contains(&format!("contrail.{key}")) && out.msg().contains("107"),
            "{key}: {}",
            out.msg()
        );
        assert_eq!(d.fx.sim.requests(), 0, "{key}: the agent was asked");
        assert!(!Path::new(&vhost_long).exists() && !Path::new(&vrouter_long).exists());
        d.assert_nothing_left();
        d.fx.set(key, before);
    }
}

#[test]
fn a_pod_mixes_a_vhost_user_attachment_a_veth_one_and_macvlan() {
    let vmis = vec![VmiSpec::new("dpdk-net", 1), VmiSpec::new("net-a", 2)];
    let d = Dpdk::new(vmis.clone(), true);
    let master = HostLink::macvlan_master();
    let macvlan = json!({"cniVersion": "1.0.0", "name": "macvlan-net", "type": "macvlan",
        "master": master.0, "mode": "bridge",
        "ipam": {"type": "static", "addresses": [{"address": "192.168.77.5/24"}]}});
    let vhost = Delegate {
        conf: d.conf("dpdk-net"),
        ..Delegate::contrail(&d.fx.node, "1.0.0", "dpdk-net", "net1")
    };
    let delegates = [
        vhost,
        Delegate::contrail(&d.fx.node, "1.0.0", "net-a", "net2"),
        Delegate::debian(macvlan, "net3"),
    ];
    // Each delegate ADDed in turn, as a meta-plugin runs a pod's.
    let caller = d.fx.caller();
    for dl in &delegates {
        caller.call("ADD", dl).assert_ok();
    }
    let ns = &d.fx.ns;
    // net1 is a socket, not an interface; net2 the veth with its VMI's MAC and address.
    assert_eq!(ns.ifnames(), ["lo", "net2", "net3"]);
    assert_eq!(
        (ns.mac("net2"), ns.addrs("net2")),
        (vmis[1].mac.clone(), vec![vmis[1].addr()])
    );
    assert_eq!(ns.addrs("net3"), ["192.168.77.5/24"]);
    assert_eq!(
        d.routes(),
        sorted(vec![
            (vmis[0].uuid.clone(), "POST /port".into(), "pmd".into()),
            (vmis[1].uuid.clone(), "POST /vm".into(), "af-packet".into()),
        ])
    );
    for dl in &delegates[..2] {
        caller.call("CHECK", dl).assert_ok();
    }
    // DEL of the veth alone: DELETE /vm and the pod's resync never touch the /port port.
    caller.call("DEL", &delegates[1]).assert_ok();
    assert_eq!(
        d.routes(),
        [(vmis[0].uuid.clone(), "POST /port".into(), "pmd".into())]
    );
    assert_eq!(
        std::fs::read_link(d.link(0)).unwrap(),
        d.pod_dir().join("net1.sock")
    );
    caller.call("CHECK", &delegates[0]).assert_ok();
    assert_eq!(ns.addrs("net3"), ["192.168.77.5/24"]);
    d.fx.assert_registrations_follow_files();
    for dl in delegates.iter().rev() {
        caller.call("DEL", dl).assert_ok();
    }
    d.assert_nothing_left();
}

#[test]
fn a_network_attached_twice_gets_two_sockets_in_the_pods_directory() {
    let vmis = vec![VmiSpec::new("dpdk-net", 1), VmiSpec::new("dpdk-net", 2)];
    let d = Dpdk::new(vmis.clone(), true);
    let r1 = d.add("net1", "dpdk-net");
    let r2 = d.add("net2", "dpdk-net");
    // In index order, each its own VMI, socket and link.
    for (k, (r, ifname)) in [(&r1, "net1"), (&r2, "net2")].into_iter().enumerate() {
        assert_eq!(r["interfaces"][0]["mac"], vmis[k].mac.as_str(), "{ifname}");
        assert_eq!(
            std::fs::read_link(d.link(k)).unwrap(),
            d.pod_dir().join(format!("{ifname}.sock"))
        );
    }
    assert_eq!(d.links().len(), 2);
    d.fx.assert_registrations_follow_files();
    // One goes: the directory stays for the other. It costs the agent one request, not the
    // pod's DELETE /vm and a registration of each attachment that stays.
    let before = requests_by_route(&d);
    d.del("net1", "dpdk-net");
    let after = requests_by_route(&d);
    let sent: Vec<(&String, u64)> = after
        .iter()
        .map(|(k, n)| (k, n - before.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    assert_eq!(sent, [(&"DELETE /port/<vmi-uuid>".to_string(), 1)]);
    assert!(d.pod_dir().join("net2.json").exists());
    assert!(!is_link(&d.link(0)) && is_link(&d.link(1)));
    d.fx.assert_registrations_follow_files();
    d.check_ok("net2", &r2);
    d.del("net2", "dpdk-net");
    d.assert_nothing_left();
}

/// netconf/dpdk.yaml as shipped: its NAD's config makes a vhost-user attachment whose socket is
/// where its pod mounts its own directory, by the node's default keys.
#[test]
fn the_shipped_dpdk_network_and_pod_fit_the_plugins_defaults() {
    let text = std::fs::read_to_string(repo_file("netconf/dpdk.yaml")).unwrap();
    let docs: Vec<serde_yaml::Value> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let (nad, pod) = (&docs[0], &docs[1]);
    let container = &pod["spec"]["containers"][0];
    let mount = &container["volumeMounts"][0];
    let volume = &pod["spec"]["volumes"][0];
    assert_eq!(mount["name"], volume["name"]);
    assert_eq!(mount["subPathExpr"].as_str(), Some("$(POD_UID)"));
    assert_eq!(
        container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.uid")
    );
    // The node's defaults: where the plugin makes pods' directories, where pods mount theirs.
    let help = sh(plugin_bin().to_str().unwrap(), &["--help"]);
    let default = |key: &str| {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap();
        line.split_whitespace().nth(2).unwrap().to_string()
    };
    assert_eq!(
        volume["hostPath"]["path"].as_str().unwrap(),
        default("vhost-dir")
    );
    let mount_path = mount["mountPath"].as_str().unwrap();
    assert_eq!(mount_path, default("vhost-pod-dir"));

    // The NAD's config, as Multus hands it to the plugin, on a DPDK node set to those defaults
    // but for its test directories.
    let mut d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.fx.set("vhost-pod-dir", json!(mount_path));
    let mut conf: Value = serde_json::from_str(nad["spec"]["config"].as_str().unwrap()).unwrap();
    conf["name"] = json!(nad["metadata"]["name"].as_str().unwrap());
    let r = d.fx.call("ADD", "net1", &conf).assert_ok().json();
    let socket = format!("{mount_path}/net1.sock");
    assert_eq!(r["interfaces"][0]["socketPath"], socket.as_str());
    assert!(
        container["args"][0]
            .as_str()
            .unwrap()
            .contains(&format!("path={socket},server=1"))
    );
    d.fx.call("DEL", "net1", &conf).assert_ok();
    d.assert_nothing_left();
}

/// Thick mode attaches every VMI of a pod in one call with one config: a network's
/// `interface-type` has nowhere to come from, and vhost-user is refused before anything.
#[cfg(feature = "thick")]
#[test]
fn thick_mode_refuses_vhost_user_before_anything() {
    let mut d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.fx.set("mode", json!("thick"));
    let mut conf = d.conf("dpdk-net");
    conf["contrail"]["mode"] = json!("thick");
    let out = d.fx.call("ADD", "eth0", &conf);
    assert_eq!(out.code(), 7, "{out:?}");
    assert!(out.msg().contains("plugin mode"), "{}", out.msg());
    assert_eq!(d.fx.sim.requests(), 0);
    d.assert_nothing_left();
}

/// A pod puts a symlink where its socket goes, to a socket of someone else's. vrouter-dpdk,
/// root in the host's mount namespace, must not follow it: `vhost-dir` follows no symlink, so
/// its connect fails there while the plugin's own link, in the vRouter's directory, still
/// leads into the pod's directory. Without that mount, ADD refuses before anything is made.
#[test]
fn a_symlink_in_place_of_the_socket_leads_the_vrouter_nowhere() {
    let mut d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.add("net1", "dpdk-net");
    let victim_dir = TempDir::new();
    let victim = std::os::unix::net::UnixListener::bind(victim_dir.0.join("other.sock")).unwrap();
    victim.set_nonblocking(true).unwrap();
    std::os::unix::fs::symlink(
        victim_dir.0.join("other.sock"),
        d.pod_dir().join("net1.sock"),
    )
    .unwrap();
    let standin = || d.fx.sim.get("/sim/vhost")[0].clone();
    let tried = standin()["attempts"].as_u64().unwrap();
    wait_for("vrouter-dpdk to try again", BOUND, || {
        standin()["attempts"].as_u64().unwrap() >= tried + 3
    });
    assert_eq!(standin()["connected"], false);
    assert!(
        standin()["error"]
            .as_str()
            .unwrap_or("")
            .contains("symbolic links"),
        "{}",
        standin()
    );
    let accepted = victim.accept();
    assert!(
        accepted
            .as_ref()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the victim's socket got a connection: {accepted:?}"
    );
    // The pod's symlink is not a socket: DEL leaves it, and the directory with it, alone.
    d.del("net1", "dpdk-net");
    std::fs::remove_file(d.pod_dir().join("net1.sock")).unwrap();
    std::fs::remove_dir(d.pod_dir()).unwrap();
    d.assert_nothing_left();

    // A node whose vhost-dir follows symlinks: refused before anything.
    d.guard = None;
    let out = d.fx.call("ADD", "net1", &d.conf("dpdk-net"));
    assert_eq!(out.code(), 7, "{out:?}");
    assert!(out.msg().contains("nosymfollow"), "{}", out.msg());
    assert_eq!(d.fx.sim.ports(), []);
    d.assert_nothing_left();
}
