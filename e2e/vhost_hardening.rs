//! What a DPDK pod's tenant, the pod itself and a runtime can reach through a vhost-user
//! attachment (docs/security.md): only their own attachment. A NAD naming another attachment's
//! device-info file is refused and that file never touched; whatever a pod puts at the names
//! the plugin uses in its directory, before ADD or before DEL, GC, the sweep or a newer
//! sandbox's takeover, every release completes, removes the same pieces (the node's `uvh_vif_`
//! link, the device-info file), follows nothing and leaves what is not the plugin's, and
//! `inspect` says so; a runtime's wrong `K8S_POD_UID` reaches no other pod's directory.

use std::os::unix::fs::{FileTypeExt, symlink};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

use crate::vhost_user::{Dpdk, is_socket, sweeper};

const BOUND: Duration = Duration::from_secs(60);

/// The code of an interface that cannot be made as asked (something in the way).
const INTERFACE: u64 = 102;

/// What is not the pod's to touch: a file and a listening socket, outside the pod's directory.
struct Victim {
    dir: TempDir,
    _socket: UnixListener,
}

impl Victim {
    fn new() -> Victim {
        let dir = TempDir::new();
        std::fs::write(dir.0.join("net1.json"), "another's").unwrap();
        let socket = UnixListener::bind(dir.0.join("net1.sock")).unwrap();
        Victim {
            dir,
            _socket: socket,
        }
    }

    #[track_caller]
    fn assert_untouched(&self, case: &str) {
        let file = std::fs::read_to_string(self.dir.0.join("net1.json"));
        assert_eq!(file.ok().as_deref(), Some("another's"), "{case}");
        assert!(is_socket(&self.dir.0.join("net1.sock")), "{case}");
    }
}

/// What a pod can put at a name in its directory.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A directory with something in it (no unlink, no rmdir removes it).
    FullDir,
    /// A symbolic link to the victim's file of that name.
    Symlink,
    Fifo,
}

/// Where: one of the names the plugin uses in the pod's directory, or the directory itself
/// (a rough node's: a symlink to the victim's directory, or a regular file).
#[derive(Clone, Copy, Debug)]
enum Plant {
    At(&'static str, Kind),
    DirAsSymlink,
    DirAsFile,
}

impl Plant {
    /// Every kind at every name: the JSON file, its temporary file, the socket.
    fn all() -> Vec<Plant> {
        let mut all = Vec::new();
        for name in ["net1.json", "net1.json.tmp", "net1.sock"] {
            for kind in [Kind::FullDir, Kind::Symlink, Kind::Fifo] {
                all.push(Plant::At(name, kind));
            }
        }
        all.extend([Plant::DirAsSymlink, Plant::DirAsFile]);
        all
    }

    fn path(self, d: &Dpdk) -> PathBuf {
        match self {
            Plant::At(name, _) => d.pod_dir().join(name),
            Plant::DirAsSymlink | Plant::DirAsFile => d.pod_dir(),
        }
    }

    /// Puts it there, in place of what is at that name.
    fn put(self, d: &Dpdk, victim: &Victim) {
        let at = self.path(d);
        let _ = std::fs::remove_file(&at);
        let _ = std::fs::remove_dir_all(&at);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        match self {
            Plant::At(_, Kind::FullDir) => std::fs::create_dir_all(at.join("sub")).unwrap(),
            Plant::At(name, Kind::Symlink) => {
                let target = victim.dir.0.join(name.trim_end_matches(".tmp"));
                symlink(target, &at).unwrap()
            }
            Plant::At(_, Kind::Fifo) => {
                sh("mkfifo", &[at.to_str().unwrap()]);
            }
            Plant::DirAsSymlink => symlink(&victim.dir.0, &at).unwrap(),
            Plant::DirAsFile => std::fs::write(&at, "").unwrap(),
        }
    }

    /// Whether it is still there as it was put.
    fn is_there(self, d: &Dpdk) -> bool {
        let Ok(m) = self.path(d).symlink_metadata() else {
            return false;
        };
        let t = m.file_type();
        match self {
            Plant::At(_, Kind::FullDir) => t.is_dir() && self.path(d).join("sub").is_dir(),
            Plant::At(_, Kind::Symlink) | Plant::DirAsSymlink => t.is_symlink(),
            Plant::At(_, Kind::Fifo) => t.is_fifo(),
            Plant::DirAsFile => t.is_file(),
        }
    }

    /// Whether the application's socket is made: a plant at its name or in place of the
    /// directory keeps it from being made.
    fn leaves_room_for_the_socket(self) -> bool {
        matches!(self, Plant::At(name, _) if name != "net1.sock")
    }

    /// What `inspect` says of the pod's directory once the release left it.
    fn inspect_says(self) -> String {
        let kind = |k| match k {
            Kind::FullDir => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Fifo => "a FIFO",
        };
        match self {
            Plant::At(name, k) => format!("{name} ({})", kind(k)),
            Plant::DirAsSymlink => "a symbolic link in place of a directory".into(),
            Plant::DirAsFile => "a regular file in place of a directory".into(),
        }
    }
}

/// An attachment of the fixture's pod in a sandbox of its own (its container id and netns),
/// so that one fixture serves every case, with the device-info file Multus asks for.
struct Sandbox {
    cid: String,
    ns: Netns,
}

impl Sandbox {
    fn new() -> Sandbox {
        Sandbox {
            cid: uuid(),
            ns: Netns::new(),
        }
    }

    fn call(&self, d: &Dpdk, command: &str) -> Output {
        let mut conf = d.conf("dpdk-net");
        conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": self.device_info(d)});
        d.fx.call_in(&self.cid, &self.ns.path(), command, "net1", &conf)
    }

    /// Its attachment's device-info file, as Multus names it.
    fn device_info(&self, d: &Dpdk) -> PathBuf {
        d.devinfo
            .0
            .join("cni")
            .join(format!("dpdk-net-{}_net1", self.cid))
    }
}

/// How the attachment is released.
#[derive(Clone, Copy, Debug)]
enum Release {
    Del,
    /// GC (CNI 1.1) once the sandbox's netns is gone.
    Gc,
    /// The sweep (`install --watch`) once the sandbox's netns is gone.
    Sweep,
}

/// The node holds nothing of the attachment: no registration, no state, no `uvh_vif_` link,
/// no device-info file.
#[track_caller]
fn assert_released(d: &Dpdk, case: &str) {
    assert_eq!(d.fx.sim.ports(), [], "{case}: port left registered");
    assert!(!d.fx.node.pod_dir_exists(&d.fx.pod), "{case}: state left");
    assert_eq!(d.links(), [] as [String; 0], "{case}: uvh_vif_ link left");
    assert_eq!(
        device_infos(d),
        [] as [String; 0],
        "{case}: device-info left"
    );
    assert_eq!(d.fx.sim.violations(), [] as [Value; 0], "{case}");
}

/// The files in the node's device-info directory.
fn device_infos(d: &Dpdk) -> Vec<String> {
    let dir = std::fs::read_dir(d.devinfo.0.join("cni"));
    let names = dir.into_iter().flatten().map(|e| e.unwrap().file_name());
    names.map(|n| n.to_string_lossy().into_owned()).collect()
}

/// Removes what a case left of the pod's directory (the pod's plants), for the next case.
fn clear_pod_dir(d: &Dpdk) {
    let _ = std::fs::remove_file(d.pod_dir());
    let _ = std::fs::remove_dir_all(d.pod_dir());
}

/// `inspect`'s row for the pod's directory under `vhost-dir`.
fn inspect_row(d: &Dpdk) -> Option<Value> {
    let host = d.pod_dir().display().to_string();
    d.fx.node.inspect().into_iter().find(|r| r["host"] == host)
}

#[test]
fn whatever_a_pod_puts_at_the_plugins_names_every_release_completes_and_leaves_it() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    let victim = Victim::new();
    for release in [Release::Del, Release::Gc, Release::Sweep] {
        let (_host, watch) = match release {
            Release::Sweep => {
                let (host, watch) = sweeper(&d);
                (Some(host), Some(watch))
            }
            _ => (None, None),
        };
        for plant in Plant::all() {
            let case = format!("{plant:?} before {release:?}");
            let sandbox = Sandbox::new();
            sandbox.call(&d, "ADD").assert_ok();
            if plant.leaves_room_for_the_socket() {
                // The application listens at its socket: the release removes it, as ever.
                drop(UnixListener::bind(d.pod_dir().join("net1.sock")).unwrap());
            }
            plant.put(&d, &victim);
            let released = match release {
                Release::Del => {
                    let out = sandbox.call(&d, "DEL");
                    assert!(out.ok, "{case}: {out:?}");
                    // Done once is done: a repeated DEL finds nothing to do.
                    sandbox.call(&d, "DEL").assert_ok();
                    "DEL"
                }
                Release::Gc => {
                    drop(sandbox);
                    let out = d.fx.node.gc(json!([]));
                    assert!(out.ok, "{case}: {out:?}");
                    "GC"
                }
                Release::Sweep => {
                    let log = || watch.as_ref().unwrap().log();
                    let before = log().matches("sweep released 1 attachment(s)").count();
                    drop(sandbox);
                    wait_for(&format!("{case}: the sweep"), BOUND, || {
                        log().matches("sweep released 1 attachment(s)").count() > before
                    });
                    "the sweep"
                }
            };
            assert_released(&d, &case);
            victim.assert_untouched(&case);
            assert!(plant.is_there(&d), "{case}: {released} removed the pod's");
            assert!(
                !d.pod_dir().join("net1.sock").exists() || !plant.leaves_room_for_the_socket(),
                "{case}: the application's socket left"
            );
            // inspect says what is left, and the node's log why.
            let row = inspect_row(&d).unwrap_or_else(|| panic!("{case}: inspect shows nothing"));
            let health = row["health"].as_str().unwrap();
            assert!(
                health.starts_with("vhost-user directory left")
                    && health.contains(&plant.inspect_says()),
                "{case}: {row}"
            );
            assert!(
                d.fx.node
                    .log()
                    .contains("left alone, not this plugin's to remove"),
                "{case}"
            );
            clear_pod_dir(&d);
        }
        if let Some(w) = watch {
            w.terminate();
        }
    }
    d.assert_nothing_left();
}

/// A newer sandbox of the pod that takes the attachment over (the same network and interface:
/// the VMI is the older sandbox's until then) releases what the older one had as DEL, GC and
/// the sweep would: its `uvh_vif_` link and device-info file go whatever the pod left in its
/// directory, and what the pod left stays. Where the pod's plant is in the way of the newer
/// attachment its ADD fails and leaves nothing of either; the older sandbox's late DEL reaches
/// nothing of the newer one's.
#[test]
fn a_newer_sandbox_taking_the_attachment_over_releases_the_older_ones_whatever_the_pod_left() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    let victim = Victim::new();
    for plant in Plant::all() {
        let case = format!("{plant:?} before a takeover");
        let older = Sandbox::new();
        older.call(&d, "ADD").assert_ok();
        assert!(older.device_info(&d).exists(), "{case}");
        if plant.leaves_room_for_the_socket() {
            drop(UnixListener::bind(d.pod_dir().join("net1.sock")).unwrap());
        }
        plant.put(&d, &victim);
        let newer = Sandbox::new();
        let out = newer.call(&d, "ADD");
        assert!(
            !older.device_info(&d).exists(),
            "{case}: the older device-info left: {out:?}"
        );
        if matches!(plant, Plant::At("net1.sock", _)) {
            // The application makes the socket: nothing of the plugin's is in the way.
            assert!(out.ok, "{case}: {out:?}");
            assert_eq!(device_infos(&d).len(), 1, "{case}");
            assert_eq!(d.links().len(), 1, "{case}");
        } else {
            assert_eq!(out.code(), INTERFACE, "{case}: {out:?}");
            assert!(
                out.msg().contains("must remove it"),
                "{case}: {}",
                out.msg()
            );
            assert_eq!(d.fx.sim.ports(), [], "{case}: port left registered");
            assert_eq!(d.links(), [] as [String; 0], "{case}: uvh_vif_ link left");
            assert_eq!(device_infos(&d), [] as [String; 0], "{case}");
        }
        let (links, ports) = (d.links(), d.fx.sim.ports());
        older.call(&d, "DEL").assert_ok();
        assert_eq!(
            (d.links(), d.fx.sim.ports()),
            (links, ports),
            "{case}: older DEL"
        );
        newer.call(&d, "DEL").assert_ok();
        assert_released(&d, &case);
        victim.assert_untouched(&case);
        assert!(plant.is_there(&d), "{case}: the takeover removed the pod's");
        clear_pod_dir(&d);
    }
    d.assert_nothing_left();
}

/// Planted before ADD (the pod's directory outlives a sandbox; a rough node): where the plugin
/// writes (the JSON file, its temporary file, the directory itself) ADD refuses, says who must
/// remove it, and leaves nothing of its own; at the socket's name, which the application makes,
/// ADD succeeds and the vRouter follows no link. Either way the runtime's DEL completes.
#[test]
fn whatever_a_pod_put_at_the_plugins_names_before_add_an_add_writes_over_none_of_it() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    let victim = Victim::new();
    for plant in Plant::all() {
        let case = format!("{plant:?} before ADD");
        let sandbox = Sandbox::new();
        plant.put(&d, &victim);
        let out = sandbox.call(&d, "ADD");
        if matches!(plant, Plant::At("net1.sock", _)) {
            assert!(out.ok, "{case}: {out:?}");
            assert_eq!(d.links().len(), 1, "{case}");
        } else {
            assert_eq!(out.code(), INTERFACE, "{case}: {out:?}");
            let msg = out.msg();
            assert!(
                msg.contains(plant.path(&d).to_str().unwrap()) && msg.contains("must remove it"),
                "{case}: {msg}"
            );
            assert_eq!(d.fx.sim.ports(), [], "{case}: port left registered");
            assert_eq!(d.links(), [] as [String; 0], "{case}");
        }
        victim.assert_untouched(&case);
        assert!(plant.is_there(&d), "{case}: ADD replaced the pod's");
        sandbox.call(&d, "DEL").assert_ok();
        assert_released(&d, &case);
        assert!(plant.is_there(&d), "{case}: DEL removed the pod's");
        clear_pod_dir(&d);
    }
    d.assert_nothing_left();
}

/// The device-info file Multus names for the attachment, `<network>-<CNI_CONTAINERID>_<CNI_IFNAME>`
/// in the node's directory, is written and goes with it. Any other path, another attachment's
/// name above all, is refused before anything is made, and no DEL removes it.
#[test]
fn only_the_attachments_own_device_info_file_is_written_and_removed() {
    let d = Dpdk::new(vec![VmiSpec::new("dpdk-net", 1)], true);
    let dir = d.devinfo.0.join("cni");
    let own = dir.join(format!("dpdk-net-{}_net1", d.fx.cid));
    let mut conf = d.conf("dpdk-net");
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": own});
    d.fx.call("ADD", "net1", &conf).assert_ok();
    let info: Value = serde_json::from_slice(&std::fs::read(&own).unwrap()).unwrap();
    assert_eq!(
        info,
        json!({"type": "vhost-user", "version": "1.1.0",
               "vhost-user": {"mode": "server", "path": format!("{APP_SOCKET_DIR}/net1.sock")}})
    );
    d.fx.call("DEL", "net1", &conf).assert_ok();
    assert!(!own.exists());
    d.assert_nothing_left();

    // Other attachments' files (another sandbox's, interface's, network's), and paths outside
    // the node's directory.
    std::fs::create_dir_all(&dir).unwrap();
    let others = [
        dir.join(format!("dpdk-net-{}_net1", uuid())),
        dir.join(format!("dpdk-net-{}_net2", d.fx.cid)),
        dir.join(format!("other-net-{}_net1", d.fx.cid)),
    ];
    for other in &others {
        std::fs::write(other, "another attachment's").unwrap();
    }
    let outside = d.vhost.0.join("cron-job");
    let paths = others.iter().cloned().chain([
        outside.clone(),
        dir.join(format!("../cni/dpdk-net-{}_net1", d.fx.cid)),
        dir.join("sub/x.json"),
    ]);
    for path in paths {
        conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": path});
        let asked = d.fx.sim.requests();
        let out = d.fx.call("ADD", "net1", &conf);
        assert_eq!(out.code(), 7, "{path:?}: {out:?}");
        let msg = out.msg();
        assert!(
            msg.contains("CNIDeviceInfoFile") && msg.contains(own.to_str().unwrap()),
            "{msg}"
        );
        assert_eq!(d.fx.sim.requests(), asked, "{path:?}: the agent was asked");
        d.fx.call("DEL", "net1", &conf).assert_ok();
        assert!(!outside.exists(), "{path:?} written");
        for other in &others {
            assert_eq!(
                std::fs::read_to_string(other).unwrap(),
                "another attachment's",
                "{path:?}"
            );
        }
    }
    // An attachment made with its own file, released with a config naming another's: the
    // release removes its own, which its record names, and nothing else.
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": own});
    d.fx.call("ADD", "net1", &conf).assert_ok();
    conf["runtimeConfig"] = json!({"CNIDeviceInfoFile": others[0]});
    d.fx.call("DEL", "net1", &conf).assert_ok();
    assert!(!own.exists());
    assert!(others.iter().all(|o| o.exists()));
    for other in &others {
        std::fs::remove_file(other).unwrap();
    }
    d.assert_nothing_left();
}

/// Pod B's calls with pod A's `K8S_POD_UID` (a runtime's or a meta-plugin's bug), before and
/// after A's ADD: B's ADD is refused before anything is made (B's VMIs are of B's VM, which
/// kube-manager makes with B's UID), its DEL reaches nothing, and A's attachment is intact.
#[test]
fn another_pods_uid_reaches_none_of_its_attachments() {
    let (d, a, b) = two_pods();
    let b_with_a_uid = PodSpec {
        uuid: a.uuid.clone(),
        ..b.clone()
    };
    let (ns, cid) = (Netns::new(), uuid());
    let args = b_with_a_uid.multus_args(&cid);
    let conf = d.conf("dpdk-net");
    let b_call = |command| {
        d.fx.node
            .cni(command)
            .container(&cid)
            .netns(&ns.path())
            .ifname("net1")
            .args(&args)
            .run(&conf)
    };
    let mut prev = None;
    for a_attached in [false, true] {
        let ports = d.fx.sim.ports();
        let out = b_call("ADD");
        assert_eq!(out.code(), 4, "{out:?}");
        let msg = out.msg();
        assert!(
            msg.contains(&format!("K8S_POD_UID {} is not this pod's", a.uuid))
                && msg.contains(&b.uuid),
            "{msg}"
        );
        assert_eq!(d.fx.sim.ports(), ports, "B registered");
        assert!(!d.fx.node.pod_dir_exists(&b));
        b_call("DEL").assert_ok();
        if a_attached {
            assert!(is_socket(&d.pod_dir().join("net1.sock")));
            assert!(d.pod_dir().join("net1.json").exists());
            assert_eq!(d.links().len(), 1);
            let mut check = d.conf("dpdk-net");
            check["prevResult"] = prev.clone().unwrap();
            d.fx.call("CHECK", "net1", &check).assert_ok();
        } else {
            assert!(!d.pod_dir().exists());
            prev = Some(d.add("net1", "dpdk-net"));
            drop(UnixListener::bind(d.pod_dir().join("net1.sock")).unwrap());
        }
    }
    d.del("net1", "dpdk-net");
    d.assert_nothing_left();
}

/// A record made with another pod's UID (by an earlier version, which did not refuse it): its
/// release removes its link, registration and state, and nothing in that pod's directory;
/// `inspect` names the pod whose record it is.
#[test]
fn a_record_made_with_another_pods_uid_is_released_without_touching_that_pods_directory() {
    let (d, a, b) = two_pods();
    d.add("net1", "dpdk-net");
    let a_socket = d.pod_dir().join("net1.sock");
    drop(UnixListener::bind(&a_socket).unwrap());
    let (ns, cid) = (Netns::new(), uuid());
    let args = b.multus_args(&cid);
    let conf = d.conf("dpdk-net");
    d.fx.node
        .cni("ADD")
        .container(&cid)
        .netns(&ns.path())
        .ifname("net2")
        .args(&args)
        .run(&conf)
        .assert_ok();
    // As if B had been attached with A's UID: its record names it, its files are in A's
    // directory.
    let record = PathBuf::from(d.fx.node.contrail()["config-dir"].as_str().unwrap())
        .join(b.vm_name())
        .join(&b.vmis[0].uuid);
    let mut r: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    r["pod-uid"] = json!(a.uuid);
    std::fs::write(&record, r.to_string()).unwrap();
    let b_dir = d.vhost.0.join("pods").join(&b.uuid);
    let b_file = d.pod_dir().join("net2.json");
    std::fs::rename(b_dir.join("net2.json"), &b_file).unwrap();
    std::fs::remove_dir(&b_dir).unwrap();
    let row = inspect_row(&d).unwrap();
    assert_eq!(
        row["health"],
        format!(
            "vhost-user directory named by other pods' attachments: {}",
            b.vm_name()
        ),
        "{row}"
    );
    // B's sandbox goes; GC releases its link, port and state, nothing in A's directory.
    drop(ns);
    d.fx.node.gc(json!([])).assert_ok();
    assert!(!d.fx.node.pod_dir_exists(&b));
    assert_eq!(d.fx.sim.ports().len(), 1);
    assert_eq!(d.links().len(), 1);
    assert!(d.pod_dir().join("net1.json").exists() && is_socket(&a_socket));
    assert!(b_file.exists());
    assert!(d.fx.node.log().contains("another pod's directory"));
    assert_eq!(inspect_row(&d), None);
    // A's release removes its own, and leaves B's file with the directory.
    d.del("net1", "dpdk-net");
    assert!(!a_socket.exists() && b_file.exists());
    let row = inspect_row(&d).unwrap();
    assert_eq!(
        row["health"],
        "vhost-user directory left, holding net2.json (a regular file)"
    );
    std::fs::remove_file(&b_file).unwrap();
    std::fs::remove_dir(d.pod_dir()).unwrap();
    d.assert_nothing_left();
}

/// A DPDK node with pods A (the fixture's) and B, each with a VMI on `dpdk-net`.
fn two_pods() -> (Dpdk, PodSpec, PodSpec) {
    let a = PodSpec::new(vec![VmiSpec::new("dpdk-net", 1)]);
    let b = PodSpec::new(vec![VmiSpec::new("dpdk-net", 2)]);
    (Dpdk::with_pods(vec![a.clone(), b.clone()], true, &[]), a, b)
}
