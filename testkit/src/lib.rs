//! The end-to-end tests' harness: runs the real release binary as a runtime does (environment
//! and stdin), in network namespaces the test creates and always removes, against the agent
//! simulator; every test in a node of its own ([`enter_node`]), so that no test touches the
//! machine's network namespace or sees another test's links.

// `new()` makes a namespace, a directory or a process: an effect, not a default value.
#![allow(clippy::new_without_default)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod cluster;
pub mod legacy;
pub mod procfs;

/// Where the binaries under test are: the release build of the plugin and the simulator, in
/// `target/<triple>/release/`. A test binary runs from `target/<triple>/<profile>/deps` (the
/// `testing` profile), a program of the release build (the benchmark) from the release directory
/// itself; `CONTRAIL_BIN_DIR` names another.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CONTRAIL_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let mut dir = exe.parent().expect("a binary in a directory");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("deps in a profile's directory");
    }
    dir.parent()
        .expect("a profile's directory in target/<triple>")
        .join("release")
}

/// A binary of the release build, which the tests need built beforehand.
fn built(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --release -p contrail-k8s-cni -p contrail-agent-sim` \
         first (scripts/test does)",
        p.display()
    );
    p
}

/// The plugin binary under test. Its features must be the ones these tests were built with
/// (`thick`, `crash-points`: scripts/test builds both with the same), or the tests of a feature
/// would be left out, or fail for the wrong reason.
pub fn plugin_bin() -> PathBuf {
    static CHECKED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let bin = built("contrail-k8s-cni");
            let version = sh(bin.to_str().unwrap(), &["--version"]);
            // "contrail-k8s-cni 0.2.0 (git ...); CNI versions ...; features thick, crash-points"
            let features = version.trim().split("; features ").nth(1).unwrap_or("");
            let has = |f: &str| features.split(", ").any(|w| w == f);
            for (feature, built_with) in [
                ("thick", cfg!(feature = "thick")),
                ("crash-points", cfg!(feature = "crash-points")),
            ] {
                assert_eq!(
                    has(feature),
                    built_with,
                    "{} says {version:?}: the tests were built {} feature {feature}; build both \
                     with the same features (scripts/test)",
                    bin.display(),
                    if built_with { "with" } else { "without" },
                );
            }
            bin
        })
        .clone()
}

/// The agent simulator (package `contrail-agent-sim`).
pub fn sim_bin() -> PathBuf {
    built("contrail-agent-sim")
}

/// A file of this repository, by its path from the top (`netconf/contrail.conflist`).
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ in the repository")
        .join(rel)
}

pub fn uuid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .unwrap()
        .trim()
        .to_string()
}

/// A short random tag for names that must be unique across parallel tests.
pub fn tag() -> String {
    uuid()[..8].to_string()
}

/// Runs a command: its stdout, or what went wrong.
pub fn try_sh(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{cmd} {args:?}: {e}"))
}

/// Runs a command that must succeed: its stdout.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    try_sh(cmd, args).unwrap_or_else(|e| panic!("{e}"))
}

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

/// When this machine booted, as the kernel reports it (`btime` in /proc/stat, whole seconds).
pub fn boot_time() -> std::time::SystemTime {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let secs: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|s| s.trim().parse().ok())
        .expect("btime in /proc/stat");
    std::time::UNIX_EPOCH + Duration::from_secs(secs)
}

/// Writes `content` to `path`, last modified at `when`: a file as an earlier boot left it.
pub fn write_dated(path: &Path, content: &str, when: std::time::SystemTime) {
    std::fs::write(path, content).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(when).unwrap();
}

pub fn host_link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let p = std::env::temp_dir().join(format!("ck8s-test-{}", tag()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// One VMI of a simulated pod.
#[derive(Clone, Debug)]
pub struct VmiSpec {
    pub uuid: String,
    pub network: String,
    pub mac: String,
    pub ip: Option<String>,
    pub gateway: Option<String>,
    pub ip6: Option<String>,
    pub v6_gateway: Option<String>,
    pub extra: Value,
}

impl VmiSpec {
    /// A VMI on `network` numbered `n` within the test: 10.<n>.0.<n+10>/24, fd00:<n>::<n+10>.
    pub fn new(network: &str, n: u8) -> VmiSpec {
        VmiSpec {
            uuid: uuid(),
            network: network.to_string(),
            mac: format!("02:{:02x}:{:02x}:00:00:{:02x}", rand_byte(), rand_byte(), n),
            ip: Some(format!("10.{n}.0.{}/24", n + 10)),
            gateway: Some(format!("10.{n}.0.1")),
            ip6: None,
            v6_gateway: None,
            extra: json!({}),
        }
    }

    pub fn dual_stack(mut self) -> VmiSpec {
        let n = self
            .ip
            .as_ref()
            .unwrap()
            .split('.')
            .nth(1)
            .unwrap()
            .to_string();
        self.ip6 = Some(format!("fd00:{n}::{n}a"));
        self.v6_gateway = Some(format!("fd00:{n}::1"));
        self
    }

    pub fn with(mut self, key: &str, value: Value) -> VmiSpec {
        self.extra[key] = value;
        self
    }

    pub fn addr(&self) -> String {
        self.ip.clone().unwrap()
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({"uuid": self.uuid, "network": self.network, "mac": self.mac});
        for (k, val) in [
            ("ip", &self.ip),
            ("gateway", &self.gateway),
            ("ip6", &self.ip6),
            ("v6-gateway", &self.v6_gateway),
        ] {
            if let Some(x) = val {
                v[k] = json!(x);
            }
        }
        for (k, val) in self.extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        v
    }
}

fn rand_byte() -> u8 {
    u8::from_str_radix(&uuid()[..2], 16).unwrap()
}

/// A simulated pod: namespace/name and its VMIs in index order.
#[derive(Clone)]
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    pub uuid: String,
    pub vmis: Vec<VmiSpec>,
    /// A pod given by its `k8s.v1.cni.cncf.io/networks` annotation instead of its VMIs: the
    /// simulator makes them as kube-manager does, from the NADs it was started with
    /// ([`Sim::start_cluster`]).
    pub networks_annotation: Option<String>,
}

impl PodSpec {
    pub fn new(vmis: Vec<VmiSpec>) -> PodSpec {
        PodSpec {
            namespace: "default".into(),
            name: format!("pod-{}", tag()),
            uuid: uuid(),
            vmis,
            networks_annotation: None,
        }
    }

    /// A pod of `namespace` by its networks annotation.
    pub fn annotated(namespace: &str, annotation: &str) -> PodSpec {
        PodSpec {
            namespace: namespace.into(),
            networks_annotation: Some(annotation.into()),
            ..PodSpec::new(Vec::new())
        }
    }

    pub fn vm_name(&self) -> String {
        format!("k8s__{}__{}", self.namespace, self.name)
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({"name": self.name, "namespace": self.namespace, "uuid": self.uuid,
               "vmis": self.vmis.iter().map(VmiSpec::to_json).collect::<Vec<_>>()});
        if let Some(annotation) = &self.networks_annotation {
            v["networks-annotation"] = json!(annotation);
        }
        v
    }

    /// CNI_ARGS exactly as Multus builds them: its own keys, then the runtime's again.
    pub fn multus_args(&self, container_id: &str) -> String {
        let own = format!(
            "K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={container_id};K8S_POD_UID={}",
            self.namespace, self.name, self.uuid
        );
        format!("IgnoreUnknown=true;{own};IgnoreUnknown=1;{own}")
    }
}

/// The simulator's switches for a DPDK node whose vrouter-dpdk socket directory is
/// `vr_socket_dir`; its stand-in retries every 50 ms (vrouter-dpdk: 5 s), so that tests wait
/// little.
pub fn dpdk_args(vr_socket_dir: &Path) -> Vec<String> {
    let dir = vr_socket_dir.to_str().unwrap();
    ["--dpdk", "--vr-socket-dir", dir, "--vhost-retry-ms", "50"]
        .map(String::from)
        .to_vec()
}

/// One raw HTTP/1.1 exchange on a kept-alive connection ([`Sim::connect`]): (status line, body).
/// Raw on purpose: the status line and the framing are part of the agent's contract, and the
/// agent sends no Connection header (its sessions stay open).
pub fn exchange(
    conn: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (String, String) {
    let body = body.map(Value::to_string).unwrap_or_default();
    exchange_raw(conn, method, path, &body)
}

/// [`exchange`] with a body of any bytes (JSON cut short, another shape): what a test sends as
/// a client that breaks the contract would.
pub fn exchange_raw(
    conn: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: &str,
) -> (String, String) {
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(request.as_bytes()).unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap();
        assert!(
            !name.eq_ignore_ascii_case("connection"),
            "the agent sends no Connection header: {line}"
        );
        if name.eq_ignore_ascii_case("content-length") {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).unwrap();
    (status.trim().to_string(), String::from_utf8(body).unwrap())
}

/// The agent simulator on an ephemeral loopback port, killed on drop.
pub struct Sim {
    child: Child,
    /// The loopback address it listens on.
    pub ip: String,
    pub port: u16,
    bin: PathBuf,
    _dir: TempDir,
}

impl Sim {
    pub fn start(pods: &[&PodSpec], args: &[&str]) -> Sim {
        Sim::start_with(&sim_bin(), pods, args)
    }

    /// [`Sim::start`] with the simulator binary at `bin`.
    /// On a DPDK node: `--dpdk`, its vrouter-dpdk stand-in connecting to the `uvh_vif_` links
    /// in `vr_socket_dir` (see [`dpdk_args`]).
    pub fn dpdk(pods: &[&PodSpec], vr_socket_dir: &Path) -> Sim {
        let args = dpdk_args(vr_socket_dir);
        Sim::start(pods, &args.iter().map(String::as_str).collect::<Vec<_>>())
    }

    pub fn start_with(bin: &Path, pods: &[&PodSpec], args: &[&str]) -> Sim {
        Sim::spawn(bin, Sim::pods_file(pods), "127.0.0.1", args)
    }

    /// [`Sim::start`] with the cluster's NetworkAttachmentDefinitions, from which it makes the
    /// VMIs of the pods given by their annotation ([`PodSpec::annotated`]) as kube-manager does.
    pub fn start_cluster(pods: &[&PodSpec], nads: &[cluster::Nad], args: &[&str]) -> Sim {
        let dir = Sim::pods_file(pods);
        let file = dir.0.join("pods.json");
        let mut body: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        body["nads"] = nads.iter().map(cluster::Nad::to_json).collect();
        std::fs::write(&file, body.to_string()).unwrap();
        Sim::spawn(&sim_bin(), dir, "127.0.0.1", args)
    }

    /// [`Sim::start`] on another loopback address (`127.0.0.2`: an endpoint that is not the
    /// node's agent).
    pub fn start_on(ip: &str, pods: &[&PodSpec], args: &[&str]) -> Sim {
        Sim::spawn(&sim_bin(), Sim::pods_file(pods), ip, args)
    }

    fn pods_file(pods: &[&PodSpec]) -> TempDir {
        let dir = TempDir::new();
        let body = json!({"pods": pods.iter().map(|p| p.to_json()).collect::<Vec<_>>()});
        std::fs::write(dir.0.join("pods.json"), body.to_string()).unwrap();
        dir
    }

    /// The agent dies: nothing listens on its port any more (until [`Sim::restart`]).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The agent restarts (on another port) with the same pods and new switches; what it had
    /// registered is gone, as when a real agent restarts without its port files.
    pub fn restart(&mut self, args: &[&str]) {
        self.stop();
        let dir = std::mem::replace(&mut self._dir, TempDir(PathBuf::new()));
        *self = Sim::spawn(&self.bin, dir, &self.ip, args);
    }

    /// The agent restarts (on another port) serving `pods`, as after kube-manager changed them.
    pub fn restart_with(&mut self, pods: &[&PodSpec], args: &[&str]) {
        self.stop();
        *self = Sim::spawn(&self.bin, Sim::pods_file(pods), &self.ip, args);
    }

    fn spawn(bin: &Path, dir: TempDir, ip: &str, args: &[&str]) -> Sim {
        enter_node();
        let file = dir.0.join("pods.json");
        let mut child = Command::new(bin)
            .args([
                "--pods",
                file.to_str().unwrap(),
                "--listen",
                &format!("{ip}:0"),
            ])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("simulator did not start: {line:?}"));
        Sim {
            child,
            ip: ip.to_string(),
            port,
            bin: bin.to_path_buf(),
            _dir: dir,
        }
    }

    /// A raw HTTP connection to it, as the plugin opens one (`TCP_NODELAY`), for [`exchange`].
    pub fn connect(&self) -> BufReader<TcpStream> {
        let conn = TcpStream::connect((self.ip.as_str(), self.port)).unwrap();
        conn.set_nodelay(true).unwrap();
        BufReader::new(conn)
    }

    /// One GET; the answer's JSON body.
    pub fn get(&self, path: &str) -> Value {
        let url = format!("http://{}:{}{path}", self.ip, self.port);
        let body = ureq::get(&url)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    }

    /// Registers VMI `k` of `pod` the way the plugin does (`POST /vm`).
    pub fn register(&self, pod: &PodSpec, k: usize, host_ifname: &str, vm_ifname: &str) {
        let cfg = self.get(&format!("/vm-cfg/{}", pod.vm_name()));
        let vmi = &pod.vmis[k].uuid;
        let vn = cfg
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == vmi.as_str())
            .unwrap()["vn-id"]
            .clone();
        let port = json!({"vm-uuid": pod.uuid, "vm-name": pod.vm_name(), "vm-id": "test",
            "host-ifname": host_ifname, "vm-ifname": vm_ifname, "vn-uuid": vn, "vmi-uuid": vmi});
        let url = format!("http://{}:{}/vm", self.ip, self.port);
        ureq::post(&url).send_json(&port).unwrap();
    }

    /// The requests a nested node must never send that it received (see the simulator).
    pub fn violations(&self) -> Vec<Value> {
        self.get("/sim/violations").as_array().unwrap().clone()
    }

    /// How many requests it served (its own `/sim/` ones aside).
    pub fn requests(&self) -> u64 {
        self.get("/sim/stats")["requests"].as_u64().unwrap()
    }

    /// The ports the agent has registered: (vmi uuid, host ifname, vm ifname); a `POST /port`
    /// one as (`id`, `system-name`, "").
    pub fn ports(&self) -> Vec<(String, String, String)> {
        self.get("/sim/ports")
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
                match p["sim-route"].as_str() {
                    Some("POST /port") => (s("id"), s("system-name"), String::new()),
                    _ => (s("vmi-uuid"), s("host-ifname"), s("vm-ifname")),
                }
            })
            .collect()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the plugin printed and how it exited.
#[derive(Debug)]
pub struct Output {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout))
    }

    /// The CNI error code, asserting the call failed with a proper error object.
    pub fn code(&self) -> u64 {
        assert!(!self.ok, "expected a failure, got success: {}", self.stdout);
        let j = self.json();
        assert!(
            j["msg"].as_str().is_some_and(|m| !m.is_empty()),
            "error without msg: {j}"
        );
        j["code"].as_u64().unwrap()
    }

    pub fn msg(&self) -> String {
        self.json()["msg"].as_str().unwrap().to_string()
    }

    #[track_caller]
    pub fn assert_ok(&self) -> &Output {
        assert!(
            self.ok,
            "plugin failed: stdout={} stderr={}",
            self.stdout, self.stderr
        );
        self
    }
}

/// Runs the plugin binary with the given environment and stdin, as a runtime does.
pub fn run_plugin(env: &[(&str, &str)], stdin: &[u8]) -> Output {
    run_cni(&plugin_bin(), env, stdin)
}

/// Runs any CNI plugin binary (ours or Debian's) with the given environment and stdin.
pub fn run_cni(bin: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Output {
    run_wrapped(&[], bin, env, stdin)
}

/// [`run_cni`] under a wrapper command (`timeout`, `prlimit`...) that execs the plugin.
pub fn run_wrapped(wrapper: &[String], bin: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Output {
    let mut argv: Vec<&std::ffi::OsStr> = wrapper.iter().map(|a| a.as_ref()).collect();
    argv.push(bin.as_os_str());
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A plugin that rejects its environment exits before reading stdin, as runtimes allow.
    let _ = child.stdin.take().unwrap().write_all(stdin);
    let out = child.wait_with_output().unwrap();
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

/// One node's plugin setup: a state and log directory, the node-wide file's directory (the
/// plugin's `CONTRAIL_CNI_CONF_DIR`), and the simulator's port. The node's settings live in the
/// node-wide file, as on a real node: stdin carries only what a NetworkAttachmentDefinition
/// would.
pub struct Node {
    pub config_dir: TempDir,
    pub conf_dir: TempDir,
    pub port: u16,
    /// The node-wide file: a network config whose `contrail` section is the node's settings
    /// (change them with [`Node::set`]).
    file: Value,
    /// A command the plugin runs under (`timeout`, `prlimit`); none by default.
    pub wrapper: Vec<String>,
}

impl Node {
    pub fn new(sim: &Sim) -> Node {
        enter_node();
        let config_dir = TempDir::new();
        let contrail = json!({
            "vrouter-port": sim.port,
            "config-dir": config_dir.0.join("ports").to_str().unwrap(),
            "poll-timeout": 0.5,
            "poll-retries": 6,
            "log-file": config_dir.0.join("cni.log").to_str().unwrap(),
            "log-level": "debug",
        });
        let node = Node {
            config_dir,
            conf_dir: TempDir::new(),
            port: sim.port,
            file: json!({"cniVersion": "1.0.0", "name": "contrail-k8s-cni",
                         "type": "contrail-k8s-cni", "contrail": contrail}),
            wrapper: Vec::new(),
        };
        node.write_node_file();
        node
    }

    /// The node-wide file's `contrail` section.
    pub fn contrail(&self) -> &Value {
        &self.file["contrail"]
    }

    /// A deadline of 30 s a call (1 s a request), for tests whose subject is not a deadline:
    /// many calls at once on a busy 2-core machine take seconds each (process starts, netns
    /// entry, link changes under the kernel's one lock), which the default 3 s does not cover.
    pub fn roomy(&mut self) -> &mut Node {
        self.set("poll-timeout", json!(1))
            .set("poll-retries", json!(30))
    }

    /// Sets a key of the node-wide file (`Value::Null` removes it) and writes the file.
    pub fn set(&mut self, key: &str, value: Value) -> &mut Node {
        match value {
            Value::Null => {
                self.file["contrail"].as_object_mut().unwrap().remove(key);
            }
            v => self.file["contrail"][key] = v,
        }
        self.write_node_file();
        self
    }

    /// Installs a shipped network config (`netconf/10-contrail.conf`, ...) as the node-wide
    /// file, pointed at this node's agent and directories; returns it, as kubelet hands it to
    /// the plugin on stdin when it calls the plugin directly.
    pub fn install(&mut self, mut conf: Value) -> Value {
        for (k, v) in self.contrail().as_object().unwrap() {
            conf["contrail"][k] = v.clone();
        }
        self.file = conf.clone();
        self.write_node_file();
        conf
    }

    /// The node-wide file, as the DaemonSet installs it.
    pub fn node_file(&self) -> PathBuf {
        self.conf_dir.0.join("10-contrail.conf")
    }

    /// Written whole and renamed into place: calls running meanwhile read the old or the new.
    fn write_node_file(&self) {
        let tmp = self.conf_dir.0.join(".10-contrail.conf.tmp");
        std::fs::write(&tmp, self.file.to_string()).unwrap();
        std::fs::rename(&tmp, self.node_file()).unwrap();
    }

    pub fn ports_dir(&self) -> PathBuf {
        self.config_dir.0.join("ports")
    }

    /// The node's log file.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.config_dir.0.join("cni.log")).unwrap_or_default()
    }

    /// The network config Multus hands a delegate: the NAD's config plus its injected name.
    pub fn netconf(&self, version: &str, network: &str) -> Value {
        json!({"cniVersion": version, "name": network, "type": "contrail-k8s-cni"})
    }

    pub fn call(
        &self,
        command: &str,
        container_id: &str,
        netns: &str,
        ifname: &str,
        args: &str,
        conf: &Value,
    ) -> Output {
        self.call_with(&[], command, container_id, netns, ifname, args, conf)
    }

    /// [`Node::call`] with extra environment variables.
    #[allow(clippy::too_many_arguments)]
    pub fn call_with(
        &self,
        extra: &[(&str, &str)],
        command: &str,
        container_id: &str,
        netns: &str,
        ifname: &str,
        args: &str,
        conf: &Value,
    ) -> Output {
        let mut env = self.env(command, container_id, netns, ifname, args);
        env.extend_from_slice(extra);
        run_wrapped(
            &self.wrapper,
            &plugin_bin(),
            &env,
            conf.to_string().as_bytes(),
        )
    }

    /// The environment a runtime gives the plugin on this node.
    pub fn env<'a>(
        &'a self,
        command: &'a str,
        container_id: &'a str,
        netns: &'a str,
        ifname: &'a str,
        args: &'a str,
    ) -> Vec<(&'a str, &'a str)> {
        vec![
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", container_id),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", ifname),
            ("CNI_ARGS", args),
            ("CNI_PATH", "/opt/cni/bin"),
            ("CONTRAIL_CNI_CONF_DIR", self.conf_dir.0.to_str().unwrap()),
        ]
    }

    /// GC (cniVersion 1.1.0) with `valid` as the valid attachments.
    pub fn gc(&self, valid: Value) -> Output {
        let mut conf = self.netconf("1.1.0", "contrail-k8s-cni");
        conf["cni.dev/valid-attachments"] = valid;
        self.call("GC", "", "", "", "", &conf)
    }

    /// Everything in the config dir besides the log file, the state root, its locks' directory
    /// and the request budget (the node's, like config-dir itself): whatever a call left behind.
    pub fn leftovers(&self) -> Vec<String> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten() {
                let path = e.unwrap().path();
                out.push(path.clone());
                if path.is_dir() && !path.is_symlink() {
                    walk(&path, out);
                }
            }
        }
        let mut all = Vec::new();
        walk(&self.config_dir.0, &mut all);
        let allowed = [
            self.config_dir.0.join("cni.log"),
            self.ports_dir(),
            self.ports_dir().join(".locks"),
            // The node's request budget to the agent, shared by every call on the node.
            self.ports_dir().join(".budget"),
        ];
        all.retain(|p| !allowed.contains(p));
        all.iter().map(|p| p.display().to_string()).collect()
    }

    /// State files (vmi uuids) of a pod.
    pub fn state_files(&self, pod: &PodSpec) -> Vec<String> {
        let dir = self.ports_dir().join(pod.vm_name());
        let mut v: Vec<String> = match std::fs::read_dir(dir) {
            Ok(rd) => rd
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| !n.starts_with('.'))
                .collect(),
            Err(_) => Vec::new(),
        };
        v.sort();
        v
    }

    /// The VMIs a pod's failed attachments hold (`.<vmi>.reserved`, or `.reserve` while their
    /// deregistration is pending).
    pub fn reservations(&self, pod: &PodSpec) -> Vec<String> {
        self.dotted(pod, &["reserved", "reserve"])
    }

    /// The VMIs of a pod whose deregistration is pending (`.<vmi>.release` or `.reserve`).
    pub fn pending(&self, pod: &PodSpec) -> Vec<String> {
        self.dotted(pod, &["release", "reserve"])
    }

    fn dotted(&self, pod: &PodSpec, suffixes: &[&str]) -> Vec<String> {
        let dir = self.ports_dir().join(pod.vm_name());
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                let (vmi, suffix) = name.strip_prefix('.')?.split_once('.')?;
                suffixes.contains(&suffix).then(|| vmi.to_string())
            })
            .collect();
        v.sort();
        v
    }

    pub fn pod_dir_exists(&self, pod: &PodSpec) -> bool {
        self.ports_dir().join(pod.vm_name()).exists()
    }

    /// `inspect --json` of the node, as the operator runs it: one row per finding.
    pub fn inspect(&self) -> Vec<Value> {
        let out = Command::new(plugin_bin())
            .args(["inspect", "--json", "--config"])
            .arg(self.node_file())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// Waits for a condition with a bound; panics with `what` when it does not hold in time.
pub fn wait_for(what: &str, bound: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() >= bound {
            // One last look: a condition slow to evaluate may have crossed the bound itself.
            assert!(cond(), "timed out after {bound:?} waiting for {what}");
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One delegate of a Multus-style pod: which plugin, its config, and the interface name.
pub struct Delegate {
    pub bin: PathBuf,
    pub conf: Value,
    pub ifname: String,
}

impl Delegate {
    pub fn contrail(node: &Node, version: &str, network: &str, ifname: &str) -> Delegate {
        Delegate {
            bin: plugin_bin(),
            conf: node.netconf(version, network),
            ifname: ifname.into(),
        }
    }

    /// A Debian reference plugin from /usr/lib/cni.
    pub fn debian(conf: Value, ifname: &str) -> Delegate {
        let bin = Path::new("/usr/lib/cni").join(conf["type"].as_str().unwrap());
        assert!(
            bin.exists(),
            "{} is missing: install containernetworking-plugins (scripts/test does)",
            bin.display()
        );
        Delegate {
            bin,
            conf,
            ifname: ifname.into(),
        }
    }
}

/// What Multus (thin plugin, v4) does with a pod's delegates: ADD them in order and, when one
/// fails, DEL the failed one and every earlier one; DEL them in reverse order.
pub struct Multus<'a> {
    pub node: &'a Node,
    pub container_id: String,
    pub netns: String,
    pub args: String,
}

impl Multus<'_> {
    pub fn call(&self, command: &str, d: &Delegate) -> Output {
        let env = [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", self.container_id.as_str()),
            ("CNI_NETNS", self.netns.as_str()),
            ("CNI_IFNAME", d.ifname.as_str()),
            ("CNI_ARGS", self.args.as_str()),
            ("CNI_PATH", "/usr/lib/cni"),
            (
                "CONTRAIL_CNI_CONF_DIR",
                self.node.conf_dir.0.to_str().unwrap(),
            ),
        ];
        run_cni(&d.bin, &env, d.conf.to_string().as_bytes())
    }

    /// ADD every delegate; on the first failure, roll back as Multus does and return its index.
    pub fn add_all(&self, delegates: &[Delegate]) -> Result<Vec<Value>, (usize, Output)> {
        let mut results = Vec::new();
        for (i, d) in delegates.iter().enumerate() {
            let out = self.call("ADD", d);
            if !out.ok {
                for earlier in delegates[..=i].iter().rev() {
                    self.call("DEL", earlier).assert_ok();
                }
                return Err((i, out));
            }
            results.push(out.json());
        }
        Ok(results)
    }

    pub fn del_all(&self, delegates: &[Delegate]) {
        for d in delegates.iter().rev() {
            self.call("DEL", d).assert_ok();
        }
    }
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
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

/// The host end of a VMI's veth, as the manual documents it (docs/multus.md): `tap` + 12 hex digits of a hash
/// of the VMI uuid (FNV-1a, then murmur3's finalizer). Deliberately written again from the
/// manual rather than shared: the name is a contract with operators and with links an older
/// version left behind, so a change to the plugin's scheme must fail a test. Checked against
/// real ADD results in e2e/faults.rs.
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

/// One pod of a test: its VMIs in a simulator of its own, a node's plugin config, a network
/// namespace and a sandbox (container id). Calls go as Multus makes them: its CNI_ARGS, the
/// NetworkAttachmentDefinition's config with the network's name.
pub struct Fixture {
    pub pod: PodSpec,
    pub sim: Sim,
    pub node: Node,
    pub ns: Netns,
    pub cid: String,
}

impl Fixture {
    pub fn new(vmis: Vec<VmiSpec>) -> Fixture {
        Fixture::with_sim(vmis, &[])
    }

    /// With simulator switches (faults, `--state-dir`, ...).
    pub fn with_sim(vmis: Vec<VmiSpec>, sim_args: &[&str]) -> Fixture {
        Fixture::with_pod(PodSpec::new(vmis), sim_args)
    }

    /// For a pod made beforehand: its namespace or name from a manifest, or its name and uuid
    /// already in crafted agent answers.
    pub fn with_pod(pod: PodSpec, sim_args: &[&str]) -> Fixture {
        let sim = Sim::start(&[&pod], sim_args);
        let node = Node::new(&sim);
        Fixture {
            pod,
            sim,
            node,
            ns: Netns::new(),
            cid: uuid(),
        }
    }

    /// Sets a key of the node-wide file.
    pub fn set(&mut self, key: &str, value: Value) -> &mut Fixture {
        self.node.set(key, value);
        self
    }

    /// `f` under another request budget than the node's (poll-timeout in seconds,
    /// poll-retries), which is put back after: a test bounds the deadline of the call it is
    /// about without making the calls around it a race with a busy machine's scheduler.
    pub fn under<T>(&mut self, (timeout, retries): (f64, u32), f: impl FnOnce(&Fixture) -> T) -> T {
        let contrail = self.node.contrail();
        let saved = (
            contrail["poll-timeout"].clone(),
            contrail["poll-retries"].clone(),
        );
        self.set("poll-timeout", json!(timeout))
            .set("poll-retries", json!(retries));
        let out = f(self);
        self.set("poll-timeout", saved.0)
            .set("poll-retries", saved.1);
        out
    }

    pub fn args(&self) -> String {
        self.pod.multus_args(&self.cid)
    }

    /// The config Multus hands the delegate for `network` (cniVersion 1.0.0).
    pub fn conf(&self, network: &str) -> Value {
        self.node.netconf("1.0.0", network)
    }

    /// A call with this config, in the pod's netns.
    pub fn call(&self, command: &str, ifname: &str, conf: &Value) -> Output {
        self.call_in(&self.cid, &self.ns.path(), command, ifname, conf)
    }

    /// A call for another sandbox of the pod: its container id and netns path.
    pub fn call_in(
        &self,
        cid: &str,
        netns: &str,
        command: &str,
        ifname: &str,
        conf: &Value,
    ) -> Output {
        let args = self.pod.multus_args(cid);
        self.node.call(command, cid, netns, ifname, &args, conf)
    }

    /// Multus, calling delegates in the pod's sandbox with its CNI_ARGS.
    pub fn multus(&self) -> Multus<'_> {
        Multus {
            node: &self.node,
            container_id: self.cid.clone(),
            netns: self.ns.path(),
            args: self.args(),
        }
    }

    /// The pod's netns goes away (a node reboot, a runtime that removed it first); later calls
    /// still name its path.
    pub fn remove_netns(&self) {
        sh("ip", &["netns", "del", &self.ns.name]);
    }

    /// The agent dies: nothing listens on its port any more (until [`Fixture::restart_agent`]).
    pub fn stop_agent(&mut self) {
        self.sim.stop();
    }

    /// The agent restarts on another port with new switches, as [`Sim::restart`], and the node
    /// is pointed at it.
    pub fn restart_agent(&mut self, sim_args: &[&str]) {
        self.sim.restart(sim_args);
        self.point_at_agent();
    }

    /// The pod's VMIs change in Contrail (`change` edits them) and the agent, restarted on
    /// another port, serves them so.
    pub fn change_vmis(&mut self, change: impl FnOnce(&mut Vec<VmiSpec>)) {
        change(&mut self.pod.vmis);
        self.sim.restart_with(&[&self.pod], &[]);
        self.point_at_agent();
    }

    fn point_at_agent(&mut self) {
        self.node.port = self.sim.port;
        self.node.set("vrouter-port", json!(self.sim.port));
    }

    /// ADD, which must succeed: its result.
    #[track_caller]
    pub fn add(&self, ifname: &str, network: &str) -> Value {
        self.call("ADD", ifname, &self.conf(network))
            .assert_ok()
            .json()
    }

    pub fn del(&self, ifname: &str, network: &str) -> Output {
        self.call("DEL", ifname, &self.conf(network))
    }

    /// CHECK with the ADD result as prevResult, as libcni sends it.
    pub fn check(&self, ifname: &str, network: &str, prev: &Value) -> Output {
        let mut conf = self.conf(network);
        conf["prevResult"] = prev.clone();
        self.call("CHECK", ifname, &conf)
    }

    /// The agent's registered ports: (vmi uuid, host ifname, vm ifname).
    pub fn registered(&self) -> std::collections::BTreeSet<(String, String, String)> {
        self.sim.ports().into_iter().collect()
    }

    /// The rule every call keeps: the agent has exactly the pod's attachments that have a state
    /// file registered (a reservation or a pending release explains no registration).
    #[track_caller]
    pub fn assert_registrations_follow_files(&self) {
        let registered: Vec<String> = self.registered().into_iter().map(|(v, _, _)| v).collect();
        assert_eq!(registered, self.node.state_files(&self.pod));
    }

    /// The rule every call keeps, as it stands when a call's deadline cut its deregistration
    /// short: the agent holds no port of the pod that neither a state file nor a pending
    /// release explains, and while no release is pending, exactly the pod's attachments that
    /// have a state file (the next call for the pod, GC or the sweep finishes a pending one).
    #[track_caller]
    pub fn assert_registrations_explained(&self) {
        let registered: Vec<String> = self.registered().into_iter().map(|(v, _, _)| v).collect();
        let (files, pending) = (
            self.node.state_files(&self.pod),
            self.node.pending(&self.pod),
        );
        if pending.is_empty() {
            assert_eq!(registered, files);
        }
        for vmi in &registered {
            assert!(
                files.contains(vmi) || pending.contains(vmi),
                "port {vmi} registered, with no state file and no pending release: files \
                 {files:?}, pending {pending:?}"
            );
        }
    }

    /// What a failed ADD leaves: no interface in the netns, no host end, no attachment; at most
    /// the reservations of the VMIs it claimed (see [`Node::reservations`]), which its DEL or
    /// retry takes, and a registration its rollback could not drop within the call's deadline,
    /// recorded as a pending release for the next call (a timed-out ADD's rollback has what
    /// is left of that deadline, 50 ms a request at least).
    #[track_caller]
    pub fn assert_rolled_back(&self) {
        assert_eq!(self.ns.ifnames(), ["lo"]);
        for v in &self.pod.vmis {
            let tap = host_ifname(&v.uuid);
            assert!(!host_link_exists(&tap), "host end {tap} left behind");
        }
        assert_eq!(self.node.state_files(&self.pod), [] as [String; 0]);
        self.assert_registrations_explained();
    }

    /// Nothing of the pod is left: no interface in the netns, no host end, no state (not even a
    /// reservation), no port.
    #[track_caller]
    pub fn assert_nothing_left(&self) {
        self.assert_rolled_back();
        assert_eq!(self.sim.ports(), [], "port left registered");
        assert!(
            !self.node.pod_dir_exists(&self.pod),
            "state left: reservations {:?}, pending {:?}",
            self.node.reservations(&self.pod),
            self.node.pending(&self.pod)
        );
    }
}

/// The host end of an ADD result: its first interface.
pub fn host_name(result: &Value) -> String {
    result["interfaces"][0]["name"]
        .as_str()
        .unwrap()
        .to_string()
}

// ---------------------------------------------------------------- crash points and seeds

/// The crash points of ADD, in order (the `crash::point` calls in src/): the claim's file
/// written but not yet renamed into place, the claim, the veth, the registration, the wait for
/// the IP configuration (after a first 404), the IP configuration received, the addresses and
/// routes.
pub const ADD_STEPS: [&str; 7] = [
    "renaming",
    "claimed",
    "veth",
    "registered",
    "waiting",
    "ip",
    "addressed",
];

/// The crash points of DEL (and of GC, which releases the same way): the interfaces gone, the
/// released files renamed to their pending names, the pod's ports dropped by the agent (before
/// the attachments that stay are registered again).
pub const DEL_STEPS: [&str; 3] = ["unlinked", "marked", "deregistered"];

// ---------------------------------------------------------------- seeds

/// SplitMix64: small, and the same sequence for a seed on every machine.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub fn uuid(&mut self) -> String {
        uuid_of(u128::from(self.next_u64()) << 64 | u128::from(self.next_u64()))
    }
}

/// The uuid spelling of a number (8-4-4-4-12 lower-case hex digits).
pub fn uuid_of(n: u128) -> String {
    let h = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Runs `case` for `cases` fresh seeds, or for the one seed in the environment variable `var`
/// (on shard 0 only); a failure prints its seed and how to replay it, with `describe(seed)`.
pub fn for_each_seed(
    var: &str,
    test: &str,
    cases: u64,
    shard: u64,
    describe: impl Fn(u64) -> String,
    case: impl Fn(u64),
) {
    let seeds: Vec<u64> = match std::env::var(var) {
        Ok(s) if shard == 0 => vec![
            s.parse()
                .unwrap_or_else(|_| panic!("{var} must be a number")),
        ],
        Ok(_) => vec![],
        Err(_) => {
            let base = u64::from_str_radix(&uuid().replace('-', "")[..16], 16).unwrap();
            (0..cases).map(|i| base.wrapping_add(i)).collect()
        }
    };
    for seed in seeds {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| case(seed)));
        if let Err(e) = outcome {
            eprintln!(
                "seed {seed} failed: {}\nreplay: {var}={seed} cargo nextest run --release {test}",
                describe(seed)
            );
            std::panic::resume_unwind(e);
        }
    }
}

/// `install --watch` running as the DaemonSet's container; stopped (SIGKILL) on drop if the
/// test did not stop it.
pub struct Watch {
    child: Child,
    log: PathBuf,
    _log_dir: TempDir,
}

impl Watch {
    pub fn start(bin_dir: &Path, conf_dir: &Path, conf: &Path, extra: &[&str]) -> Watch {
        let log_dir = TempDir::new();
        let log = log_dir.0.join("watch.log");
        let child = Command::new(plugin_bin())
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .args(["install", "--watch", "--bin-dir"])
            .arg(bin_dir)
            .arg("--conf-dir")
            .arg(conf_dir)
            .arg("--conf")
            .arg(conf)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Watch {
            child,
            log,
            _log_dir: log_dir,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, as kubelet stops a container: the process exits 0.
    pub fn terminate(mut self) {
        sh("kill", &["-TERM", &self.child.id().to_string()]);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}: {}", self.log());
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the application side of a [`Testpmd`] sees its pod's directory (its own mount
/// namespace binds the pod's directory there).
pub const APP_SOCKET_DIR: &str = "/mnt/vhost";

/// A DPDK `dpdk-testpmd` (Debian's `dpdk-dev`) for the vhost-user rig: without hugepages
/// (`--no-huge`, memfd-backed: the vRouter's 8 memory regions are enough), its DPDK runtime
/// directory on a tmpfs of its own mount namespace (nothing left in `/run/dpdk`), its two
/// lcores floating over the machine's CPUs. It forwards until stopped; [`Testpmd::stop`] sends
/// SIGINT, on which testpmd prints its forward statistics and exits.
pub struct Testpmd {
    child: Child,
    output: Arc<std::sync::Mutex<String>>,
}

impl Testpmd {
    /// The application in a pod: a virtio-user port in server mode (it creates and listens on
    /// `<pod_dir>/<socket>`), sending (`txonly`). It runs in a mount namespace of its own that
    /// sees the pod's directory at [`APP_SOCKET_DIR`] and an empty tmpfs over each of `hide`
    /// (the vRouter's socket directory, other pods' directories: a pod never sees them).
    pub fn app(pod_dir: &Path, socket: &str, hide: &[&Path]) -> Testpmd {
        let mut mounts = format!(
            "mount -t tmpfs tmpfs /mnt && mkdir {APP_SOCKET_DIR} && mount --bind '{}' {APP_SOCKET_DIR}",
            pod_dir.display()
        );
        for dir in hide {
            mounts += &format!(" && mount -t tmpfs tmpfs '{}'", dir.display());
        }
        let vdev = format!("net_virtio_user0,path={APP_SOCKET_DIR}/{socket},server=1");
        Testpmd::spawn(&mounts, &vdev, "txonly")
    }

    /// vrouter-dpdk's side: a vhost port in client mode that connects to `path` (a
    /// `uvh_vif_<name>`, possibly a symlink), receiving (`rxonly`) and printing its statistics
    /// every second.
    pub fn vrouter(path: &Path) -> Testpmd {
        let vdev = format!("net_vhost0,iface={},client=1", path.display());
        Testpmd::spawn("true", &vdev, "rxonly")
    }

    fn spawn(mounts: &str, vdev: &str, mode: &str) -> Testpmd {
        enter_node();
        let prefix = format!("ck8s-{}", tag());
        let script = format!(
            "mkdir -p /run/dpdk && mount -t tmpfs tmpfs /run/dpdk && {mounts} && exec dpdk-testpmd \
             --lcores '0@(0,1),1@(0,1)' --no-huge -m 256 --no-pci --file-prefix {prefix} \
             --vdev '{vdev}' -- --forward-mode={mode} --nb-cores=1 --total-num-mbufs=2048 \
             --stats-period 1"
        );
        let mut child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare and dpdk-testpmd (Debian's dpdk-dev: scripts/test installs it)");
        let output = Arc::new(std::sync::Mutex::new(String::new()));
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        for pipe in pipes {
            let output = Arc::clone(&output);
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut out = output.lock().unwrap();
                    out.push_str(&line);
                    out.push('\n');
                }
            });
        }
        Testpmd { child, output }
    }

    /// What it printed so far.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// The packets received so far, by its last periodic statistics.
    pub fn rx_so_far(&self) -> u64 {
        rx_packets(&self.output())
    }

    /// Stops it (SIGINT: it prints its forward statistics) and waits, at most `bound`, for it
    /// to exit; everything it printed.
    pub fn stop(mut self, bound: Duration) -> String {
        let pid = self.child.id().to_string();
        let _ = try_sh("kill", &["-INT", &pid]);
        let start = Instant::now();
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed() < bound,
                "testpmd did not exit within {bound:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The readers finish with the pipes.
        wait_for("testpmd's output", bound, || {
            Arc::strong_count(&self.output) == 1
        });
        self.output()
    }
}

impl Drop for Testpmd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `RX-packets: N` testpmd printed (its periodic statistics, or at exit its forward
/// statistics); 0 before any.
pub fn rx_packets(output: &str) -> u64 {
    last_count(output, "RX-packets:")
}

/// The last `TX-packets: N` testpmd printed; 0 before any.
pub fn tx_packets(output: &str) -> u64 {
    last_count(output, "TX-packets:")
}

fn last_count(output: &str, label: &str) -> u64 {
    output
        .lines()
        .filter_map(|l| l.trim().strip_prefix(label))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .next_back()
        .unwrap_or(0)
}
