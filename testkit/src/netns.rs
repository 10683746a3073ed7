//! Network namespaces and links: the node of its own every test enters, the pod's network
//! namespace, the host's links.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::bins::{sh, tag};

thread_local! {
    /// Whether this thread is in a node of its own already.
    static IN_NODE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Moves the calling thread, and every thread and process it starts from now on, into a node of
/// its own: a network namespace with `lo` up, and a mount namespace (a slave of the machine's,
/// so nothing mounted here reaches the machine) with its own sysfs (the node's links in
/// `/sys/class/net`; the machine's cgroups kept for podman) and its own `/run/netns`. Every
/// constructor of this kit calls it; a test calls it itself before anything else that makes
/// links or namespaces. When the test ends, its processes end, and the node with its links and
/// namespaces goes with them, also when the test failed.
pub fn enter_node() {
    if IN_NODE.get() {
        return;
    }
    use nix::mount::{MntFlags, MsFlags, mount, umount2};
    use nix::sched::{CloneFlags, unshare};
    let fail = |what: &str, e: nix::Error| -> ! {
        panic!("entering a private node: {what}: {e} (the tests run as root: scripts/test)")
    };
    unshare(CloneFlags::CLONE_NEWNET | CloneFlags::CLONE_NEWNS)
        .unwrap_or_else(|e| fail("unshare", e));
    let none = None::<&str>;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_SLAVE, none)
        .unwrap_or_else(|e| fail("making / a slave", e));
    // A sysfs of this netns; the machine's cgroup tree moved over to it (runc needs it).
    let cgroups = std::env::temp_dir().join(format!("ck8s-cgroup-{}", tag()));
    std::fs::create_dir(&cgroups).unwrap();
    let bind = MsFlags::MS_BIND | MsFlags::MS_REC;
    mount(Some("/sys/fs/cgroup"), &cgroups, none, bind, none)
        .unwrap_or_else(|e| fail("keeping /sys/fs/cgroup", e));
    umount2("/sys", MntFlags::MNT_DETACH).unwrap_or_else(|e| fail("unmounting /sys", e));
    mount(Some("sysfs"), "/sys", Some("sysfs"), MsFlags::empty(), none)
        .unwrap_or_else(|e| fail("mounting sysfs", e));
    mount(
        Some(&cgroups),
        "/sys/fs/cgroup",
        none,
        MsFlags::MS_MOVE,
        none,
    )
    .unwrap_or_else(|e| fail("moving the cgroups back", e));
    let _ = std::fs::remove_dir(&cgroups);
    std::fs::create_dir_all("/run/netns").unwrap();
    mount(
        Some("tmpfs"),
        "/run/netns",
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=0755"),
    )
    .unwrap_or_else(|e| fail("mounting /run/netns", e));
    IN_NODE.set(true);
    sh("ip", &["link", "set", "lo", "up"]);
}

/// A directory of the test's own in place of the machine's `path` (created if missing), seen
/// by this node's processes only: for programs that hardcode where they keep things
/// (CNI-Genie's `/etc/cni/net.d` and `/opt/cni/bin`, libcni's `/var/lib/cni`). The mount goes
/// with the node; the directory with the returned guard.
pub fn private_dir(path: &str) -> crate::files::TempDir {
    let dir = crate::files::TempDir::new();
    bind_dir(&dir.0, path);
    dir
}

/// The test's directory `dir` in place of the machine's `path` (created if missing), for this
/// node's processes only (see [`private_dir`]).
pub fn bind_dir(dir: &Path, path: &str) {
    use nix::mount::{MsFlags, mount};
    enter_node();
    std::fs::create_dir_all(path).unwrap_or_else(|e| panic!("creating {path}: {e}"));
    mount(
        Some(dir),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap_or_else(|e| panic!("mounting {} over {path}: {e}", dir.display()));
}

/// A `/run` of this node's own (a tmpfs; the node's `/run/netns` and the namespaces in it kept):
/// for programs that keep things under `/run` at paths they hardcode, such as an in-cluster
/// Kubernetes client's service account in `/var/run/secrets/kubernetes.io/serviceaccount`.
/// The machine's `/run` is not a tmpfs everywhere, and a directory made there would outlive the
/// test. Its other contents are hidden from the node from then on; idempotent.
pub fn private_run() {
    use nix::mount::{MsFlags, mount};
    thread_local! {
        static DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if DONE.get() {
        return;
    }
    enter_node();
    let fail = |what: &str, e: nix::Error| -> ! { panic!("a private /run: {what}: {e}") };
    let none = None::<&str>;
    // Aside while the tmpfs goes over /run, then back (a move takes its submounts along).
    let aside = crate::files::TempDir::new();
    mount(Some("/run/netns"), &aside.0, none, MsFlags::MS_MOVE, none)
        .unwrap_or_else(|e| fail("moving /run/netns aside", e));
    mount(
        Some("tmpfs"),
        "/run",
        Some("tmpfs"),
        MsFlags::empty(),
        Some("mode=0755"),
    )
    .unwrap_or_else(|e| fail("mounting a tmpfs on /run", e));
    std::fs::create_dir("/run/netns").unwrap();
    mount(Some(&aside.0), "/run/netns", none, MsFlags::MS_MOVE, none)
        .unwrap_or_else(|e| fail("moving /run/netns back", e));
    DONE.set(true);
}

/// This thread's id: `/proc/<tid>` names this thread's namespaces (`/proc/<pid>` names the main
/// thread's, which stays in the machine's).
pub fn thread_id() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

/// A network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new() -> Netns {
        enter_node();
        let name = format!("ck8s-{}", tag());
        sh("ip", &["netns", "add", &name]);
        sh("ip", &["-n", &name, "link", "set", "lo", "up"]);
        Netns { name }
    }

    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// `ip -j addr show` inside the namespace, by interface name.
    pub fn links(&self) -> Vec<Value> {
        serde_json::from_str(&sh("ip", &["-n", &self.name, "-j", "addr", "show"])).unwrap()
    }

    pub fn link(&self, ifname: &str) -> Option<Value> {
        self.links().into_iter().find(|l| l["ifname"] == ifname)
    }

    pub fn ifnames(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .links()
            .iter()
            .map(|l| l["ifname"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    }

    /// Addresses of an interface as "addr/plen", global scope only.
    pub fn addrs(&self, ifname: &str) -> Vec<String> {
        let link = self
            .link(ifname)
            .unwrap_or_else(|| panic!("{ifname} missing in {}", self.name));
        link["addr_info"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["scope"] == "global")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
            .collect()
    }

    pub fn mac(&self, ifname: &str) -> String {
        self.link(ifname).unwrap()["address"]
            .as_str()
            .unwrap()
            .to_string()
    }

    pub fn mtu(&self, ifname: &str) -> u64 {
        self.link(ifname).unwrap()["mtu"].as_u64().unwrap()
    }

    /// Default routes as (family, gateway, device).
    pub fn default_routes(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for fam in ["-4", "-6"] {
            let routes: Vec<Value> = serde_json::from_str(&sh(
                "ip",
                &["-n", &self.name, "-j", fam, "route", "show", "default"],
            ))
            .unwrap();
            for r in routes {
                out.push((
                    fam.to_string(),
                    r["gateway"].as_str().unwrap_or("").to_string(),
                    r["dev"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
        out
    }

    pub fn v6_tentative(&self, ifname: &str) -> bool {
        let link = self.link(ifname).unwrap();
        link["addr_info"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["family"] == "inet6" && a["scope"] == "global" && a["tentative"] == true)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // A test may have removed it already (a node reboot, a runtime that went first).
        if Path::new(&self.path()).exists() {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.name])
                .status();
        }
    }
}

pub fn host_link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The links of the node (the test's own network namespace).
pub fn node_links() -> Vec<String> {
    let links: Vec<Value> = serde_json::from_str(&sh("ip", &["-j", "link", "show"])).unwrap();
    links
        .iter()
        .map(|l| l["ifname"].as_str().unwrap().to_string())
        .collect()
}

/// The network namespace an OCI runtime spec gives its container (a sandbox's, as a runtime
/// reports it).
pub fn netns_in_runtime_spec(spec: &Value) -> String {
    spec["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["type"] == "network")
        .and_then(|n| n["path"].as_str())
        .unwrap_or_else(|| panic!("no network namespace in {spec}"))
        .to_string()
}

/// A host link the test created (a bridge a plugin made, a macvlan master), deleted on drop.
pub struct HostLink(pub String);

impl HostLink {
    /// A veth in the host netns, up, to be a macvlan master (the kernel here has no dummy
    /// links); its peer goes with it.
    pub fn macvlan_master() -> HostLink {
        enter_node();
        let t = tag();
        let master = HostLink(format!("ck8sm{t}"));
        let peer = format!("ck8sp{t}");
        sh(
            "ip",
            &[
                "link", "add", &master.0, "type", "veth", "peer", "name", &peer,
            ],
        );
        sh("ip", &["link", "set", &master.0, "up"]);
        master
    }
}

impl Drop for HostLink {
    fn drop(&mut self) {
        // A plugin may never have made it (a bridge of a network no pod used).
        if host_link_exists(&self.0) {
            let _ = Command::new("ip").args(["link", "del", &self.0]).status();
        }
    }
}

/// The host end of a VMI's veth, as the manual documents it (docs/multus.md): `tap` + 12 hex digits of a hash
/// of the VMI uuid (FNV-1a, then murmur3's finalizer). Deliberately written again from the
/// manual rather than shared: the name is a contract with operators and with links an older
/// version left behind, so a change to the plugin's scheme must fail a test. Checked against
/// real ADD results in e2e/faults/.
pub fn host_ifname(vmi_uuid: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in vmi_uuid.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    for m in [0xff51_afd7_ed55_8ccd, 0xc4ce_b9fe_1a85_ec53] {
        h = (h ^ (h >> 33)).wrapping_mul(m);
    }
    format!("tap{:012x}", (h ^ (h >> 33)) >> 16)
}
