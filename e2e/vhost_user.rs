//! vhost-user attachments for DPDK pods (docs/vhost-user.md), end to end: the release binary on
//! a DPDK node (a `dpdk_netlink` in the vRouter's socket directory, as vrouter-dpdk makes it),
//! the simulator's `POST /port` route and its vrouter-dpdk stand-in, and Debian's
//! `dpdk-testpmd` as the application in the pod and as the vRouter's side.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

const BOUND: Duration = Duration::from_secs(60);

/// A pod on a DPDK node: the vRouter's socket directory, the root of the pods' vhost-user
/// directories and the device-info directory are the test's, the pod mounts its directory at
/// [`APP_SOCKET_DIR`].
pub(crate) struct Dpdk {
    pub(crate) fx: Fixture,
    pub(crate) vrouter: TempDir,
    /// `vhost-dir` (`<vhost>/pods`), a tmpfs that follows no symlink, as a node mounts it;
    /// unmounted before `vhost` goes.
    guard: Option<Guard>,
    pub(crate) vhost: TempDir,
    pub(crate) devinfo: TempDir,
    /// Where the simulator's vrouter-dpdk stand-in looks, when testpmd plays that part instead.
    _elsewhere: TempDir,
    /// The simulator's switches, for a restart.
    sim_args: Vec<String>,
}

impl Dpdk {
    /// With the simulator's vrouter-dpdk stand-in connecting to the node's `uvh_vif_` links
    /// (`standin`), or to an unused directory (testpmd is the vRouter's side).
    pub(crate) fn new(vmis: Vec<VmiSpec>, standin: bool) -> Dpdk {
        Dpdk::with_sim(PodSpec::new(vmis), standin, &[])
    }

    /// [`Dpdk::new`] with more simulator switches.
    fn with_sim(pod: PodSpec, standin: bool, extra: &[&str]) -> Dpdk {
        Dpdk::with_pods(vec![pod], standin, extra)
    }

    /// [`Dpdk::with_sim`] on a node with `pods`; the fixture's pod is the first.
    pub(crate) fn with_pods(pods: Vec<PodSpec>, standin: bool, extra: &[&str]) -> Dpdk {
        enter_node();
        let (vrouter, vhost, devinfo, elsewhere) = (
            TempDir::new(),
            TempDir::new(),
            TempDir::new(),
            TempDir::new(),
        );
        std::fs::write(vrouter.0.join("dpdk_netlink"), "").unwrap();
        let watched = if standin { &vrouter.0 } else { &elsewhere.0 };
        let mut sim_args = dpdk_args(watched);
        sim_args.extend(extra.iter().map(|a| a.to_string()));
        let guard = Some(Guard::mount(&vhost.0.join("pods")));
        let args: Vec<&str> = sim_args.iter().map(String::as_str).collect();
        let sim = Sim::start(&pods.iter().collect::<Vec<_>>(), &args);
        let mut fx = Fixture {
            pod: pods[0].clone(),
            node: Node::new(&sim),
            sim,
            ns: Netns::new(),
            cid: uuid(),
        };
        fx.set("vrouter-socket-dir", json!(vrouter.0))
            .set("vhost-dir", json!(vhost.0.join("pods")))
            .set("vhost-pod-dir", json!(APP_SOCKET_DIR))
            .set("device-info-dir", json!(devinfo.0.join("cni")));
        Dpdk {
            fx,
            vrouter,
            guard,
            vhost,
            devinfo,
            _elsewhere: elsewhere,
            sim_args,
        }
    }

    /// A network's config asking for vhost-user, as its NetworkAttachmentDefinition would.
    pub(crate) fn conf(&self, network: &str) -> Value {
        let mut c = self.fx.conf(network);
        c["contrail"] = json!({"interface-type": "vhost-user"});
        c
    }

    pub(crate) fn add(&self, ifname: &str, network: &str) -> Value {
        self.fx
            .call("ADD", ifname, &self.conf(network))
            .assert_ok()
            .json()
    }

    pub(crate) fn del(&self, ifname: &str, network: &str) {
        self.fx.call("DEL", ifname, &self.conf(network)).assert_ok();
    }

    /// CHECK with the ADD's result as prevResult.
    fn check_ok(&self, ifname: &str, prev: &Value) {
        let mut conf = self.conf("dpdk-net");
        conf["prevResult"] = prev.clone();
        self.fx.call("CHECK", ifname, &conf).assert_ok();
    }

    /// The pod's directory under `vhost-dir`.
    pub(crate) fn pod_dir(&self) -> PathBuf {
        self.vhost.0.join("pods").join(&self.fx.pod.uuid)
    }

    /// The link vrouter-dpdk connects to for VMI `k`.
    pub(crate) fn link(&self, k: usize) -> PathBuf {
        let tap = host_ifname(&self.fx.pod.vmis[k].uuid);
        self.vrouter.0.join(format!("uvh_vif_{tap}"))
    }

    /// The `uvh_vif_` links in the vRouter's socket directory.
    pub(crate) fn links(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.vrouter.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("uvh_vif_"))
            .collect();
        v.sort();
        v
    }

    /// The registrations by route: (vmi, route, transport).
    fn routes(&self) -> Vec<(String, String, String)> {
        let mut v: Vec<(String, String, String)> = self
            .fx
            .sim
            .get("/sim/ports")
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let vmi = p["vmi-uuid"].as_str().or(p["id"].as_str()).unwrap();
                let s = |k: &str| p[k].as_str().unwrap().to_string();
                (vmi.to_string(), s("sim-route"), s("sim-transport"))
            })
            .collect();
        v.sort();
        v
    }

    /// Nothing of the pod anywhere: no link, no pod directory, no registration by either
    /// route, no state, nothing in the netns, no device-info file.
    #[track_caller]
    pub(crate) fn assert_nothing_left(&self) {
        self.fx.assert_nothing_left();
        self.assert_node_clean();
    }

    /// [`Dpdk::assert_nothing_left`] of a pod whose netns is gone.
    #[track_caller]
    pub(crate) fn assert_node_clean(&self) {
        assert_eq!(self.fx.sim.ports(), [], "port left registered");
        assert!(!self.fx.node.pod_dir_exists(&self.fx.pod), "state left");
        assert_eq!(self.links(), [] as [String; 0], "uvh_vif_ links left");
        assert!(!self.pod_dir().exists(), "the pod's directory is left");
        let devinfo: Vec<_> = std::fs::read_dir(self.devinfo.0.join("cni"))
            .into_iter()
            .flatten()
            .collect();
        assert!(devinfo.is_empty(), "device-info left: {devinfo:?}");
        assert_eq!(self.fx.sim.violations(), [] as [Value; 0]);
    }
}

/// A tmpfs mounted `nosymfollow` (the node's `vhost-dir`), unmounted on drop.
struct Guard(PathBuf);

impl Guard {
    fn mount(dir: &Path) -> Guard {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.to_str().unwrap();
        let opts = "nosymfollow,nodev,noexec,nosuid,mode=0755";
        sh("mount", &["-t", "tmpfs", "-o", opts, "tmpfs", path]);
        Guard(dir.to_path_buf())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = try_sh("umount", &["-l", self.0.to_str().unwrap()]);
    }
}

fn is_link(path: &Path) -> bool {
    path.symlink_metadata().is_ok_and(|m| m.is_symlink())
}

pub(crate) fn is_socket(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

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
    let multus = d.fx.multus();
    multus
        .add_all(&delegates)
        .unwrap_or_else(|(i, out)| panic!("delegate {i} failed: {out:?}"));
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
        multus.call("CHECK", dl).assert_ok();
    }
    // DEL of the veth alone: DELETE /vm and the pod's resync never touch the /port port.
    multus.call("DEL", &delegates[1]).assert_ok();
    assert_eq!(
        d.routes(),
        [(vmis[0].uuid.clone(), "POST /port".into(), "pmd".into())]
    );
    assert_eq!(
        std::fs::read_link(d.link(0)).unwrap(),
        d.pod_dir().join("net1.sock")
    );
    multus.call("CHECK", &delegates[0]).assert_ok();
    assert_eq!(ns.addrs("net3"), ["192.168.77.5/24"]);
    d.fx.assert_registrations_follow_files();
    multus.del_all(&delegates);
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

#[test]
fn gc_and_the_sweep_leave_no_link_directory_or_port_registration() {
    // GC (CNI 1.1) of a sandbox that is gone, whose application was killed and left its
    // socket behind.
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.add("net1", "dpdk-net");
    let socket = d.pod_dir().join("net1.sock");
    let app = Testpmd::app(&d.pod_dir(), "net1.sock", &[&d.vrouter.0, &d.vhost.0]);
    wait_for("the application's socket", BOUND, || is_socket(&socket));
    drop(app); // SIGKILL
    assert!(is_socket(&socket));
    d.fx.remove_netns();
    d.fx.node.gc(json!([])).assert_ok();
    d.assert_node_clean();

    // The sweep (install --watch) of a sandbox whose netns is gone.
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.add("net1", "dpdk-net");
    d.fx.remove_netns();
    let (_host, watch) = sweeper(&d);
    wait_for("the sweep", BOUND, || {
        watch.log().contains("sweep released 1 attachment(s)")
    });
    watch.terminate();
    d.assert_node_clean();
}

/// `install --watch` on the node's file, sweeping every second without a grace period.
pub(crate) fn sweeper(d: &Dpdk) -> (TempDir, Watch) {
    let host = TempDir::new();
    let conf = host.0.join("10-contrail.conf");
    std::fs::copy(d.fx.node.node_file(), &conf).unwrap();
    let watch = Watch::start(
        &host.0.join("bin"),
        &host.0.join("net.d"),
        &conf,
        &["--sweep-interval", "1", "--sweep-grace", "0"],
    );
    (host, watch)
}

/// A DEL that comes while the application still listens (not the kubelet's order, but a
/// runtime's or an operator's): the socket goes with the port, and the pod's directory with it;
/// the application is not disturbed (nothing connects to it to find out whether it listens).
#[test]
fn a_del_while_the_application_listens_removes_its_socket_and_directory() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], false);
    d.add("net1", "dpdk-net");
    let socket = d.pod_dir().join("net1.sock");
    let app = Testpmd::app(&d.pod_dir(), "net1.sock", &[&d.vrouter.0, &d.vhost.0]);
    wait_for("the application's socket", BOUND, || is_socket(&socket));
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
    let out = app.stop(BOUND);
    assert!(
        !out.contains("Connected") && !out.contains("new device"),
        "{out}"
    );
}

/// The requests the agent served so far, by method and route (any outcome).
fn requests_by_route(d: &Dpdk) -> std::collections::BTreeMap<String, u64> {
    let mut by = std::collections::BTreeMap::new();
    for (key, n) in d.fx.sim.get("/sim/requests").as_object().unwrap() {
        let route = key.rsplit_once(' ').map_or(key.as_str(), |(r, _)| r);
        *by.entry(route.to_string()).or_default() += n.as_u64().unwrap();
    }
    by
}

fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v
}

/// SIGKILL at every step of a vhost-user attachment's ADD and DEL, beside a veth sibling that
/// is up: the runtime's DEL (or a retried ADD) finishes the job, the sibling keeps its
/// registration, and in the end nothing is left.
#[cfg(feature = "crash-points")]
#[test]
fn killed_at_every_step_then_del_or_a_retry_finishes_the_job() {
    let killed = |d: &Dpdk, command: &str, step: &str| {
        let fx = &d.fx;
        let out = fx.node.call_with(
            &[("CONTRAIL_CNI_CRASH_AT", step)],
            command,
            &fx.cid,
            &fx.ns.path(),
            "net1",
            &fx.args(),
            &d.conf("dpdk-net"),
        );
        assert!(
            !out.ok && out.stdout.is_empty(),
            "{command} {step}: not killed: {out:?}"
        );
    };
    let sibling_only = |d: &Dpdk, step: &str| {
        assert_eq!(d.fx.ns.ifnames(), ["eth0", "lo"], "{step}");
        assert_eq!(d.links(), [] as [String; 0], "{step}: link left");
        assert!(!d.pod_dir().exists(), "{step}: directory left");
        assert_eq!(
            d.fx.node.state_files(&d.fx.pod),
            [d.fx.pod.vmis[0].uuid.clone()],
            "{step}"
        );
        d.fx.assert_registrations_follow_files();
        d.fx.call("CHECK", "eth0", &d.fx.conf("default"))
            .assert_ok();
    };
    let pod = || {
        // The first poll for net1's IP configuration is answered "not yet": a wait to be
        // killed in, however late a busy machine makes that poll.
        let pod = PodSpec::new(vec![
            VmiSpec::new("default", 1),
            VmiSpec::new("dpdk-net", 2),
        ]);
        let not_yet = format!("GET:/vm/{}/{}:1", pod.uuid, pod.vmis[1].uuid);
        let d = Dpdk::with_sim(pod, true, &["--not-yet", &not_yet]);
        d.fx.add("eth0", "default");
        d
    };
    let finish = |d: &Dpdk| {
        d.fx.del("eth0", "default").assert_ok();
        d.del("net1", "dpdk-net");
        d.assert_nothing_left();
        assert_eq!(d.fx.node.leftovers(), [] as [String; 0]);
    };
    let add_steps = ADD_STEPS.iter().chain(&["vhost-dir"]);
    for step in add_steps.clone() {
        let d = pod();
        killed(&d, "ADD", step);
        d.del("net1", "dpdk-net");
        sibling_only(&d, step);
        finish(&d);
    }
    for step in add_steps {
        let d = pod();
        killed(&d, "ADD", step);
        let r = d.add("net1", "dpdk-net");
        assert_eq!(
            r["interfaces"][0]["mac"],
            d.fx.pod.vmis[1].mac.as_str(),
            "{step}"
        );
        assert!(is_link(&d.link(1)), "{step}");
        d.fx.assert_registrations_follow_files();
        d.check_ok("net1", &r);
        finish(&d);
    }
    for step in DEL_STEPS {
        let d = pod();
        d.add("net1", "dpdk-net");
        killed(&d, "DEL", step);
        d.del("net1", "dpdk-net");
        sibling_only(&d, step);
        finish(&d);
    }
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

/// The agent restarts on a DPDK node: it reloads its own copy of each `POST /port` and every
/// UUID-named file of the state directory as a `POST /vm` port, without looking for an
/// interface. A vhost-user attachment's file must not be one it can take: the VMI stays a PMD
/// port, registered once, and vrouter-dpdk connects to its link again.
#[test]
fn an_agent_restart_keeps_a_vhost_user_port_a_pmd_port() {
    let agents_ports = TempDir::new();
    let ports_arg = ["--ports-dir", agents_ports.0.to_str().unwrap()];
    let vmis = vec![VmiSpec::new("dpdk-net", 1), VmiSpec::new("net-a", 2)];
    let mut d = Dpdk::with_sim(PodSpec::new(vmis.clone()), true, &ports_arg);
    let r1 = d.add("net1", "dpdk-net");
    d.fx.add("net2", "net-a");
    let state_dir = d.fx.node.ports_dir();
    let mut args: Vec<&str> = d.sim_args.iter().map(String::as_str).collect();
    args.extend(["--state-dir", state_dir.to_str().unwrap()]);
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    d.fx.restart_agent(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(d.fx.sim.violations(), [] as [Value; 0]);
    assert_eq!(
        d.routes(),
        sorted(vec![
            (vmis[0].uuid.clone(), "POST /port".into(), "pmd".into()),
            (vmis[1].uuid.clone(), "POST /vm".into(), "af-packet".into()),
        ])
    );
    assert_eq!(
        d.fx.sim.get("/sim/vhost")[0]["path"],
        d.link(0).to_str().unwrap()
    );
    d.check_ok("net1", &r1);
    d.fx.call("CHECK", "net2", &d.fx.conf("net-a")).assert_ok();
    d.fx.del("net2", "net-a").assert_ok();
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
    let left: Vec<_> = std::fs::read_dir(&agents_ports.0).unwrap().collect();
    assert!(left.is_empty(), "the agent's /port files left: {left:?}");
}

/// `inspect` shows a vhost-user attachment by its link, says when the link is gone, and finds
/// a `uvh_vif_` link into the pods' directories that no attachment explains.
#[test]
fn inspect_shows_the_link_its_loss_and_orphan_links() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    d.add("net1", "dpdk-net");
    let vmi = &d.fx.pod.vmis[0];
    let row = |rows: &[Value]| {
        rows.iter()
            .find(|r| r["vmi"] == vmi.uuid.as_str())
            .cloned()
            .unwrap()
    };
    let link_name = d.link(0).file_name().unwrap().to_str().unwrap().to_string();
    let r = row(&d.fx.node.inspect());
    assert_eq!(
        (&r["host"], &r["mac"], &r["health"]),
        (&json!(link_name), &json!(vmi.mac), &json!("ok")),
        "{r}"
    );
    assert_eq!(r["addresses"], json!([vmi.addr()]));
    // Someone removed the link: vrouter-dpdk can no longer reach the pod.
    std::fs::remove_file(d.link(0)).unwrap();
    assert_eq!(
        row(&d.fx.node.inspect())["health"],
        "vhost-user link missing"
    );
    let out = d.fx.call("CHECK", "net1", &d.conf("dpdk-net"));
    assert_eq!(out.code(), 103, "{out:?}");
    // A link of this plugin's kind that no attachment explains.
    let orphan = d.vrouter.0.join("uvh_vif_tap0123456789a");
    std::os::unix::fs::symlink(d.vhost.0.join("pods/gone/net1.sock"), &orphan).unwrap();
    let rows = d.fx.node.inspect();
    let o = rows
        .iter()
        .find(|r| r["host"] == "uvh_vif_tap0123456789a")
        .unwrap();
    assert_eq!(o["health"], "orphan vhost-user link");
    assert_eq!(
        o["fix"],
        format!("if no pod uses it: rm {}", orphan.display())
    );
    std::fs::remove_file(&orphan).unwrap();
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
}

/// An ADD that fails after its `POST /port` (the VMI never gets its IP configuration) undoes
/// it: no link, no directory, no JSON file, no registration by either route; the VMI stays
/// reserved for the retry, which fails the same way, and the runtime's DEL leaves nothing.
#[test]
fn an_add_that_fails_after_its_registration_leaves_nothing() {
    let vmis = vec![VmiSpec::new("dpdk-net", 1).with("ip-delay-ms", json!(600_000))];
    let mut d = Dpdk::new(vmis, true);
    for _ in 0..2 {
        let conf = d.conf("dpdk-net");
        let out = d.fx.under((0.1, 3), |fx| fx.call("ADD", "net1", &conf));
        assert_eq!(out.code(), 11, "{out:?}");
        assert!(out.msg().contains(&d.fx.pod.vmis[0].uuid), "{}", out.msg());
        let by = requests_by_route(&d);
        assert!(by.contains_key("POST /port"), "never registered: {by:?}");
        d.fx.assert_rolled_back();
        assert_eq!(d.links(), [] as [String; 0]);
        assert!(!d.pod_dir().exists());
        assert_eq!(
            d.fx.node.reservations(&d.fx.pod),
            [d.fx.pod.vmis[0].uuid.clone()]
        );
    }
    d.del("net1", "dpdk-net");
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
