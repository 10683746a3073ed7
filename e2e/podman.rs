//! A real container runtime end to end: podman 4.3 with its CNI backend runs busybox containers
//! on the shipped `netconf/contrail.conflist` (the release binary, then Debian's `tuning`),
//! against the agent simulator, and the tests check what a user would: the container's
//! interface, the agent's registration while it runs, and that nothing is left afterwards.
//!
//! No image is pulled: `--rootfs` points at a per-test directory holding busybox-static. All of
//! podman's state is per test too (root, runroot, tmp dir, locks, network configs, plugin dir,
//! configuration files, HOME/XDG/TMPDIR), so the tests run in parallel with each other and with
//! anything else on the machine, and never read its /etc/cni/net.d or /etc/containers. The one
//! place that cannot be moved is libcni's result cache in /var/lib/cni/results (podman 4.3 does
//! not configure a cache dir); its entries are per container id and checked to be gone.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use contrail_testkit::*;
use serde_json::Value;

/// The shipped conflist these tests prove.
const CONFLIST: &str = "netconf/contrail.conflist";
const PLUGIN: &str = "contrail-k8s-cni";
/// Where Debian's containernetworking-plugins keeps the reference plugins.
const REFERENCE_PLUGINS: &str = "/usr/lib/cni";
const BUSYBOX: &str = "/bin/busybox";
const PACKAGES: &str = "podman busybox-static catatonit runc containernetworking-plugins";
/// libcni's result cache, which podman 4.3's CNI backend always uses.
const CNI_CACHE: &str = "/var/lib/cni/results";
/// Upper bound for anything podman or the plugin does here (each takes well under a second).
const BOUND: Duration = Duration::from_secs(30);
/// Upper bound for `podman run` to reach the container: longer than the plugin's own wait for
/// the agent (the shipped conflist keeps the defaults, 3 s x 20), so a failing ADD shows as
/// podman's error carrying the plugin's message, not as a timeout here.
const RUN_BOUND: Duration = Duration::from_secs(90);

/// One test's podman: its own directories and configuration, and one container named after the
/// simulated pod. Dropping it removes the container (so the plugin's DEL runs while the
/// simulator still lives: declare it after the `Fixture`), waits for podman's helper processes,
/// then removes the directories.
struct Podman {
    /// The container's name, which podman passes as `K8S_POD_NAME`.
    name: String,
    /// The network's name from the conflist.
    network: String,
    dir: PathBuf,
    /// The conflist's sysctls as tuning writes them for eth0: (path under /proc/sys, value).
    sysctls: Vec<(String, String)>,
    /// The container's netns once known, so a failed test can still remove it.
    sandbox: Option<String>,
    /// The plugin's log, shown when podman fails.
    log: PathBuf,
    _tmp: TempDir,
}

impl Podman {
    fn new(fx: &Fixture) -> Podman {
        let node = &fx.node;
        let tmp = TempDir::new();
        let dir = tmp.0.clone();
        for sub in [
            "root",
            "runroot",
            "tmp",
            "tmpdir",
            "net",
            "cni",
            "rootfs/bin",
            "home",
            "config",
            "data",
            "run",
            "hooks",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        install_busybox(&dir.join("rootfs/bin/busybox"));

        // The shipped conflist, as it is: the node's settings (the simulator's port, per-test
        // state and log paths) are in the test's node-wide file. Every plugin it names must be
        // in the plugin dir.
        let mut conflist: Value =
            serde_json::from_str(&std::fs::read_to_string(repo_file(CONFLIST)).unwrap()).unwrap();
        let network = conflist["name"].as_str().unwrap().to_string();
        // The name that makes the plugin attach the pod's cluster-network VMI.
        assert_eq!(network, PLUGIN, "{CONFLIST}: name");
        let mut sysctls = Vec::new();
        for plugin in conflist["plugins"].as_array_mut().unwrap() {
            let kind = plugin["type"].as_str().unwrap().to_string();
            // tuning 1.1.1 turns the dots into slashes, then IFNAME into CNI_IFNAME.
            for (key, value) in plugin["sysctl"].as_object().into_iter().flatten() {
                let path = key.replace('.', "/").replacen("IFNAME", "eth0", 1);
                sysctls.push((format!("/proc/sys/{path}"), value.as_str().unwrap().into()));
            }
            let target = if kind == PLUGIN {
                plugin_bin()
            } else {
                let p = Path::new(REFERENCE_PLUGINS).join(&kind);
                assert!(
                    p.exists(),
                    "{CONFLIST} needs the {kind} plugin: {} is missing (install {PACKAGES})",
                    p.display()
                );
                p
            };
            std::os::unix::fs::symlink(target, dir.join("cni").join(&kind)).unwrap();
        }
        std::fs::write(
            dir.join("net/contrail.conflist"),
            serde_json::to_string_pretty(&conflist).unwrap(),
        )
        .unwrap();

        // containers.conf, the only one podman reads when CONTAINERS_CONF is set. The engine's
        // `env` is how CONTRAIL_CNI_CONF_DIR reaches every plugin call: podman hands its own
        // environment to plugins, but the DEL of a stopped container comes from `podman
        // container cleanup`, which conmon starts with a scrubbed environment (CONTAINERS_CONF
        // survives, so the cleanup process sets `env` from this file again). File locks in the
        // tmp dir instead of the machine-wide /dev/shm/libpod_lock; no events log; no OCI hooks
        // from the machine; temporary files (TMPDIR of the cleanup process) in the test's dir.
        let path = |sub: &str| dir.join(sub).to_str().unwrap().to_string();
        let env = [
            format!(
                "CONTRAIL_CNI_CONF_DIR={}",
                node.conf_dir.0.to_str().unwrap()
            ),
            format!("CONTAINERS_STORAGE_CONF={}", path("storage.conf")),
        ];
        let containers_conf = format!(
            "[engine]\n\
             env = [{}]\n\
             events_logger = \"none\"\n\
             hooks_dir = [{}]\n\
             image_copy_tmp_dir = {}\n\
             lock_type = \"file\"\n\
             tmp_dir = {}\n\
             [network]\n\
             network_backend = \"cni\"\n\
             cni_plugin_dirs = [{}]\n\
             network_config_dir = {}\n",
            env.iter().map(|e| toml(e)).collect::<Vec<_>>().join(", "),
            toml(&path("hooks")),
            toml(&path("tmpdir")),
            toml(&path("tmp")),
            toml(&path("cni")),
            toml(&path("net")),
        );
        std::fs::write(dir.join("containers.conf"), containers_conf).unwrap();
        std::fs::write(
            dir.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = {}\nrunroot = {}\n",
                toml(&path("root")),
                toml(&path("runroot"))
            ),
        )
        .unwrap();
        std::fs::write(dir.join("registries.conf"), "").unwrap();

        Podman {
            name: fx.pod.name.clone(),
            network,
            dir,
            sysctls,
            sandbox: None,
            log: log_file(node),
            _tmp: tmp,
        }
    }

    fn path(&self, sub: &str) -> String {
        self.dir.join(sub).to_str().unwrap().to_string()
    }

    /// podman with this test's environment only (nothing inherited: no CONTAINER_HOST, no
    /// RUST_LOG for the plugin, no user config) and the global flags from the reference.
    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", self.path("home"))
            .env("XDG_CONFIG_HOME", self.path("config"))
            .env("XDG_DATA_HOME", self.path("data"))
            .env("XDG_RUNTIME_DIR", self.path("run"))
            .env("TMPDIR", self.path("tmpdir"))
            .env("CONTAINERS_CONF", self.path("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.path("storage.conf"))
            .env("CONTAINERS_REGISTRIES_CONF", self.path("registries.conf"))
            .args([
                "--root",
                &self.path("root"),
                "--runroot",
                &self.path("runroot"),
            ])
            .args(["--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"])
            // crun fails on this machine's hybrid cgroups.
            .args(["--runtime", "runc"]);
        c
    }

    /// `podman run` up to the command: podman's default rlimits fail here without the explicit
    /// ulimits.
    fn run_args(&self) -> Vec<String> {
        [
            "run",
            "--name",
            &self.name,
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=4096:4096",
            "--network",
            &self.network,
            "--rootfs",
            &self.path("rootfs"),
        ]
        .map(String::from)
        .to_vec()
    }

    /// Runs podman; a failure fails the test with podman's own words.
    #[track_caller]
    fn podman(&self, args: &[&str]) -> String {
        let out = self
            .cmd()
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run podman ({e}): install {PACKAGES}"));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "podman {args:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}\nplugin log: {}",
            out.status,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
        stdout.into_owned()
    }

    /// `podman container inspect` of the test's container.
    fn inspect(&self) -> Value {
        let v: Value =
            serde_json::from_str(&self.podman(&["container", "inspect", &self.name])).unwrap();
        v[0].clone()
    }

    /// Names of all containers in this test's podman.
    fn containers(&self) -> Vec<String> {
        self.podman(&["ps", "--all", "--format", "{{.Names}}"])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Processes working on this test's podman root: podman itself, conmon, and the `podman
    /// container cleanup` conmon starts when the container exits (which runs the DEL).
    fn processes(&self) -> Vec<u32> {
        let root = self.path("root");
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if cmdline.split(|&b| b == 0).any(|arg| arg == root.as_bytes()) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Mount points under this test's directories (podman mounts each container's /dev/shm).
    fn mounts(&self) -> Vec<String> {
        procfs::mounts_under(&self.dir)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        // Best effort, never panicking: after a passing test all of this finds nothing to do.
        let _ = self
            .cmd()
            .args(["rm", "--force", "--time", "0", &self.name])
            .output();
        // conmon's cleanup process must not outlive the directories (it would recreate them).
        let start = Instant::now();
        while !self.processes().is_empty() && start.elapsed() < BOUND {
            std::thread::sleep(Duration::from_millis(20));
        }
        for pid in self.processes() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        for m in self.mounts().iter().rev() {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
        if let Some(ns) = &self.sandbox
            && let Some(name) = ns.strip_prefix("/run/netns/")
            && Path::new(ns).exists()
        {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// Copies busybox-static into the rootfs; a dynamically linked busybox would not run there.
fn install_busybox(to: &Path) {
    let bytes =
        std::fs::read(BUSYBOX).unwrap_or_else(|e| panic!("{BUSYBOX}: {e} (install {PACKAGES})"));
    assert!(
        is_static_elf64(&bytes),
        "{BUSYBOX} is not a static binary: install busybox-static"
    );
    std::fs::copy(BUSYBOX, to).unwrap();
}

/// A 64-bit little-endian ELF without a PT_INTERP program header (no dynamic loader).
fn is_static_elf64(b: &[u8]) -> bool {
    let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return false;
    }
    let phoff = u64::from_le_bytes(b[0x20..0x28].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x36), u16_at(0x38));
    (0..count).all(|i| {
        let o = phoff + i * size;
        o + 4 <= b.len() && u32::from_le_bytes(b[o..o + 4].try_into().unwrap()) != 3
    })
}

/// A TOML basic string (JSON's escaping is valid TOML for these paths).
fn toml(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn log_file(node: &Node) -> PathBuf {
    node.config_dir.0.join("cni.log")
}

/// A pod with one dual-stack VMI on the cluster network, as kube-manager makes for a pod without
/// network annotations; the container gets the pod's name, in namespace `default`. The
/// fixture's netns and container id go unused: podman makes its own.
fn cluster_pod() -> (Fixture, VmiSpec) {
    let vmi = VmiSpec::new("default", 7).dual_stack();
    let fx = Fixture::new(vec![vmi.clone()]);
    assert_eq!(fx.pod.namespace, "default", "podman sends no namespace");
    (fx, vmi)
}

fn cni_cache_entry(network: &str, cid: &str) -> PathBuf {
    Path::new(CNI_CACHE).join(format!("{network}-{cid}-eth0"))
}

/// While the container runs: podman's view, the agent's port, the state file and the host end
/// agree with the VMI. Returns the host-side interface name.
fn assert_attached(
    podman: &Podman,
    fx: &Fixture,
    vmi: &VmiSpec,
    cid: &str,
    sandbox: &str,
) -> String {
    let (node, pod) = (&fx.node, &fx.pod);
    let ports = fx.sim.ports();
    assert_eq!(ports.len(), 1, "agent ports: {ports:?}");
    let (uuid, host, vm_ifname) = ports[0].clone();
    assert_eq!(
        (uuid.as_str(), vm_ifname.as_str()),
        (vmi.uuid.as_str(), "eth0")
    );
    assert!(host.starts_with("tap"), "host end {host}");
    assert!(host_link_exists(&host), "host end {host} missing");

    assert_eq!(node.state_files(pod), [vmi.uuid.as_str()]);
    let state: Value = serde_json::from_slice(
        &std::fs::read(node.ports_dir().join(pod.vm_name()).join(&vmi.uuid)).unwrap(),
    )
    .unwrap();
    // What podman passed: its container id and its netns.
    assert_eq!(state["vm-id"], cid);
    assert_eq!(state["vm-namespace"], sandbox);
    assert_eq!(state["host-ifname"], host.as_str());

    assert!(
        sandbox.starts_with("/run/netns/") && Path::new(sandbox).exists(),
        "podman's netns {sandbox}"
    );
    assert!(cni_cache_entry(&podman.network, cid).exists());
    host
}

/// Once podman has removed the container: DEL happened and nothing is left anywhere.
fn assert_gone(podman: &Podman, fx: &Fixture, cid: &str, host: &str, sandbox: &str) {
    wait_for("the agent port to be deregistered", BOUND, || {
        fx.sim.ports().is_empty()
    });
    wait_for("the pod's state dir to go", BOUND, || {
        !fx.node.pod_dir_exists(&fx.pod)
    });
    wait_for("the host end to go", BOUND, || !host_link_exists(host));
    wait_for("podman's netns to go", BOUND, || {
        !Path::new(sandbox).exists()
    });
    wait_for("libcni's cached result to go", BOUND, || {
        !cni_cache_entry(&podman.network, cid).exists()
    });
    wait_for("podman and conmon processes to exit", BOUND, || {
        podman.processes().is_empty()
    });
    assert!(podman.containers().is_empty(), "{:?}", podman.containers());
    assert!(podman.mounts().is_empty(), "{:?}", podman.mounts());
    assert_calls_read_node_file(&fx.node, cid);
}

/// Every plugin call (ADD and DEL, both proven by the agent) read this test's node-wide file,
/// so CONTRAIL_CNI_CONF_DIR reached it, also in podman's asynchronous cleanup: a call that
/// missed it would have used the built-in defaults, and its line would not be in this node's
/// log.
fn assert_calls_read_node_file(node: &Node, cid: &str) {
    let log = std::fs::read_to_string(log_file(node))
        .unwrap_or_else(|e| panic!("the plugin never opened its log file: {e}"));
    for command in ["ADD", "DEL"] {
        let line = format!("{command} container={cid} ifname=eth0 network=default");
        assert!(
            log.lines()
                .any(|l| l.contains(&line) && l.contains(": ok in")),
            "no successful {command} of {cid} in the node's log ({}):\n{log}",
            node.conf_dir.0.display()
        );
    }
}

/// Lines of `section` in the container's output (each section starts with `== name`).
fn section<'a>(out: &'a str, name: &str) -> Vec<Vec<&'a str>> {
    out.split("== ")
        .find_map(|s| s.strip_prefix(name).and_then(|s| s.strip_prefix('\n')))
        .unwrap_or_else(|| panic!("no section {name} in:\n{out}"))
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[track_caller]
fn has_line(lines: &[Vec<&str>], starts: &[&str], what: &str, out: &str) {
    assert!(
        lines.iter().any(|l| l.starts_with(starts)),
        "{what}: no line starting with {starts:?} in:\n{out}"
    );
}

/// `podman run --rm` in the foreground, as a user tries a network: the container shows its
/// interface, then waits on stdin so the test can look at the running container from outside.
/// Exiting, it is cleaned up and removed by podman itself (not by `podman stop`).
#[test]
fn podman_run_shows_the_vmi_in_the_container() {
    let (fx, vmi) = cluster_pod();
    let mut podman = Podman::new(&fx);

    let sysctl_paths: Vec<&str> = podman.sysctls.iter().map(|(p, _)| p.as_str()).collect();
    let script = format!(
        "echo '== links'; ls /sys/class/net; \
         echo '== iflink'; cat /sys/class/net/eth0/iflink; \
         echo '== sysctl'; for f in {}; do cat $f; done; \
         echo '== addr'; ip addr show dev eth0; \
         echo '== route'; ip route; \
         echo '== route6'; ip -6 route; \
         echo '== end'; read x",
        sysctl_paths.join(" ")
    );
    let mut args = podman.run_args();
    args.splice(1..1, ["--rm", "--interactive"].map(String::from));
    args.extend([BUSYBOX, "sh", "-c", &script].map(String::from));
    let mut run = Foreground::spawn(podman.cmd().args(&args));
    let out = run.read_until("== end");

    let links: Vec<&str> = section(&out, "links").into_iter().flatten().collect();
    assert_eq!(links, ["eth0", "lo"], "{out}");
    let addr = section(&out, "addr");
    has_line(&addr, &["link/ether", &vmi.mac], "MAC", &out);
    has_line(&addr, &["inet", &vmi.addr()], "IPv4", &out);
    let v6 = format!("{}/128", vmi.ip6.as_ref().unwrap());
    has_line(&addr, &["inet6", &v6, "scope", "global"], "IPv6", &out);
    let gw = vmi.gateway.as_ref().unwrap();
    has_line(
        &section(&out, "route"),
        &["default", "via", gw, "dev", "eth0"],
        "route",
        &out,
    );
    let gw6 = vmi.v6_gateway.as_ref().unwrap();
    has_line(
        &section(&out, "route6"),
        &["default", "via", gw6, "dev", "eth0"],
        "route6",
        &out,
    );
    // The conflist's later plugin, tuning, ran in the container after ours: its sysctls hold.
    let sysctls: Vec<Vec<&str>> = podman
        .sysctls
        .iter()
        .map(|(_, v)| vec![v.as_str()])
        .collect();
    assert_eq!(section(&out, "sysctl"), sysctls, "{sysctl_paths:?}\n{out}");

    // From outside, while it runs: the host end is eth0's peer.
    let inspect = podman.inspect();
    let cid = inspect["Id"].as_str().unwrap().to_string();
    let sandbox = inspect["NetworkSettings"]["SandboxKey"]
        .as_str()
        .unwrap()
        .to_string();
    podman.sandbox = Some(sandbox.clone());
    let host = assert_attached(&podman, &fx, &vmi, &cid, &sandbox);
    let ifindex = std::fs::read_to_string(format!("/sys/class/net/{host}/ifindex")).unwrap();
    assert_eq!(section(&out, "iflink"), [[ifindex.trim()]], "{out}");

    run.finish();
    assert_gone(&podman, &fx, &cid, &host, &sandbox);
}

/// A detached container: the port is registered while it runs, `podman stop` makes the DEL,
/// `podman rm` leaves nothing.
#[test]
fn podman_registers_the_port_while_the_container_runs() {
    let (fx, vmi) = cluster_pod();
    let mut podman = Podman::new(&fx);

    let mut args = podman.run_args();
    args.insert(1, "--detach".into());
    // PID 1 ignores SIGTERM unless it handles it: without the trap, stop would wait 10 s.
    args.extend([BUSYBOX, "sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cid = podman.podman(&args).trim().to_string();
    assert_eq!(cid.len(), 64, "container id {cid:?}");

    let inspect = podman.inspect();
    assert_eq!(inspect["Id"], cid.as_str());
    assert_eq!(inspect["State"]["Running"], true);
    let sandbox = inspect["NetworkSettings"]["SandboxKey"]
        .as_str()
        .unwrap()
        .to_string();
    podman.sandbox = Some(sandbox.clone());
    // podman understood the plugin's result.
    let net = &inspect["NetworkSettings"]["Networks"][&podman.network];
    let (ip, plen) = vmi
        .addr()
        .split_once('/')
        .map(|(a, p)| (a.to_string(), p.parse::<u64>().unwrap()))
        .unwrap();
    assert_eq!(net["IPAddress"], ip.as_str(), "{net}");
    assert_eq!(net["IPPrefixLen"], plen, "{net}");
    assert_eq!(net["Gateway"], vmi.gateway.as_deref().unwrap(), "{net}");
    assert_eq!(net["MacAddress"], vmi.mac.as_str(), "{net}");
    assert_eq!(
        net["GlobalIPv6Address"],
        vmi.ip6.as_deref().unwrap(),
        "{net}"
    );
    assert_eq!(net["GlobalIPv6PrefixLen"], 128, "{net}");
    assert_eq!(
        net["IPv6Gateway"],
        vmi.v6_gateway.as_deref().unwrap(),
        "{net}"
    );

    let host = assert_attached(&podman, &fx, &vmi, &cid, &sandbox);

    podman.podman(&["stop", &podman.name]);
    // The DEL belongs to stopping, not to removal: checked before `rm`.
    wait_for("the agent port to be deregistered on stop", BOUND, || {
        fx.sim.ports().is_empty()
    });
    wait_for("the host end to go on stop", BOUND, || {
        !host_link_exists(&host)
    });
    wait_for("podman's netns to go on stop", BOUND, || {
        !Path::new(&sandbox).exists()
    });
    assert!(!fx.node.pod_dir_exists(&fx.pod));
    podman.podman(&["rm", &podman.name]);
    assert_gone(&podman, &fx, &cid, &host, &sandbox);
}

/// A foreground `podman run -i`: its output read with a bound, its stdin held until `finish`.
/// Dropped early (a failed test), it kills the podman client it started.
struct Foreground {
    child: Child,
    stdin: Option<ChildStdin>,
    /// stdout lines, and stderr lines marked `true` (podman's warnings and errors).
    lines: mpsc::Receiver<(bool, String)>,
    out: String,
    err: String,
}

impl Foreground {
    fn spawn(cmd: &mut Command) -> Foreground {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run podman ({e}): install {PACKAGES}"));
        let (tx, lines) = mpsc::channel();
        let streams: [(bool, Box<dyn Read + Send>); 2] = [
            (false, Box::new(child.stdout.take().unwrap())),
            (true, Box::new(child.stderr.take().unwrap())),
        ];
        for (is_err, stream) in streams {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send((is_err, line));
                }
            });
        }
        Foreground {
            stdin: child.stdin.take(),
            child,
            lines,
            out: String::new(),
            err: String::new(),
        }
    }

    fn take(&mut self, (is_err, line): (bool, String)) {
        let buf = if is_err { &mut self.err } else { &mut self.out };
        buf.push_str(&line);
        buf.push('\n');
    }

    /// stdout up to the line `end`; podman's failure (its stderr) fails the test.
    fn read_until(&mut self, end: &str) -> String {
        let deadline = Instant::now() + RUN_BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(item) => {
                    let last = !item.0 && item.1 == end;
                    self.take(item);
                    if last {
                        return self.out.clone();
                    }
                }
                Err(e) => panic!(
                    "podman run: no {end:?} ({e}); exit {:?}\nstdout:\n{}stderr:\n{}",
                    self.child.try_wait(),
                    self.out,
                    self.err
                ),
            }
        }
    }

    /// Lets the container exit and waits for podman to have removed it.
    fn finish(&mut self) {
        let mut stdin = self.stdin.take().unwrap();
        stdin.write_all(b"\n").unwrap();
        drop(stdin);
        let mut status = None;
        wait_for("podman run to return", BOUND, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        while let Ok(item) = self.lines.recv_timeout(Duration::from_secs(1)) {
            self.take(item);
        }
        assert!(
            status.unwrap().success(),
            "podman run: {status:?}\nstdout:\n{}stderr:\n{}",
            self.out,
            self.err
        );
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
