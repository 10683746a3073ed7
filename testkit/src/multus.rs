//! Multus 4.3.0, the real one (`../shared/peers`), in both its forms, installed into a node's
//! CNI directories ([`CniDirs`]) as its DaemonSet installs it and called as a runtime calls its
//! CNI plugin:
//! - thin: `multus` is the CNI plugin; each call reads the pod and its NADs from the API
//!   through a kubeconfig, runs the delegates itself and writes the pod's network-status back;
//! - thick: `multus-daemon` (an in-cluster client: informers on the node's pods and on the
//!   NADs) runs the delegates; `multus-shim` is the CNI plugin, which hands each call to the
//!   daemon over its unix socket. One daemon per [`Multus`], started once: pay its start-up
//!   once per test, not per pod.
//!
//! Multus keeps its cache (`cniDir`: the delegates of each sandbox, and libcni's cached results,
//! from which it lists GC's valid attachments) in a directory of its own, [`Multus::cache_dir`].

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::bins::{peer_bin, wait_for};
use crate::cni::{CniDirs, Output, run_cni};
use crate::files::TempDir;
use crate::kube::{KubeApi, NODE_NAME};
use crate::node::Node;
use crate::pod::PodSpec;

/// Multus's form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MultusMode {
    Thin,
    Thick,
}

/// The longest the daemon may take to answer on its socket: its informers' first sync is
/// bounded by 20 s each (`pkg/server/server.go`), which only a broken API reaches.
const DAEMON_START: Duration = Duration::from_secs(50);

/// The file name of Multus's config in the node's config directory.
pub const MULTUS_CONF: &str = "00-multus.conf";

/// Multus on a node, removed (its daemon stopped) on drop.
pub struct Multus {
    pub mode: MultusMode,
    /// The config a runtime hands it on stdin: `00-multus.conf` as installed (thin) or as the
    /// daemon wrote it (thick).
    conf: Value,
    /// The CNI plugin a runtime calls: `multus` or `multus-shim`, in the node's plugin directory.
    bin: PathBuf,
    cni_path: PathBuf,
    node_conf_dir: PathBuf,
    dir: TempDir,
    daemon: Option<Daemon>,
}

impl Multus {
    /// Multus in `mode` on a node whose cluster network is `cluster` (a network config, whose
    /// `cniVersion` Multus's config takes). Thin: `00-multus.conf` names it as its delegate.
    /// Thick: it is the config directory's `10-<name>.conf`, which the daemon, started here,
    /// finds (`multusConfigFile: auto`) and names as `clusterNetwork` in the `00-multus.conf`
    /// it writes for the shim. `node` is ours: its `CONTRAIL_CNI_CONF_DIR` is in the
    /// environment of whoever runs the delegates.
    ///
    /// Thick's daemon reads its service account where the kubelet mounts it, in a `/run` of the
    /// node's own ([`KubeApi::in_cluster`]): install it before starting anything that keeps
    /// its sockets in `/run` (a runtime), which would be hidden from then on.
    pub fn install(
        mode: MultusMode,
        dirs: &CniDirs,
        api: &KubeApi,
        node: &Node,
        cluster: Value,
    ) -> Multus {
        let version = cluster["cniVersion"].clone();
        match mode {
            MultusMode::Thin => {
                let conf = json!({"cniVersion": version, "name": "multus-cni-network",
                    "type": "multus", "delegates": [cluster]});
                Multus::thin(dirs, api, node, conf)
            }
            MultusMode::Thick => Multus::thick(dirs, api, node, cluster),
        }
    }

    /// Thin Multus with `conf` as its `00-multus.conf` (the shipped one, say), its kubeconfig,
    /// directories and log pointed at this node's.
    pub fn thin(dirs: &CniDirs, api: &KubeApi, node: &Node, mut conf: Value) -> Multus {
        let mut multus = Multus::new(MultusMode::Thin, dirs, node, "multus");
        for (key, value) in [
            ("kubeconfig", api.https_kubeconfig()),
            ("confDir", dirs.conf.clone()),
            ("cniDir", multus.cache_dir()),
            ("binDir", dirs.bin.clone()),
            ("logFile", multus.log_file()),
        ] {
            conf[key] = json!(value);
        }
        conf["logLevel"] = json!("debug");
        dirs.write_conf(MULTUS_CONF, &conf);
        multus.conf = conf;
        multus
    }

    fn thick(dirs: &CniDirs, api: &KubeApi, node: &Node, cluster: Value) -> Multus {
        let mut multus = Multus::new(MultusMode::Thick, dirs, node, "multus-shim");
        let name = cluster["name"]
            .as_str()
            .expect("the cluster network's name");
        dirs.write_conf(&format!("10-{name}.conf"), &cluster);
        let socket_dir = multus.dir.0.join("run");
        let config = json!({
            "cniVersion": cluster["cniVersion"],
            "logLevel": "debug",
            "logFile": multus.log_file(),
            "cniConfigDir": dirs.conf,
            "multusAutoconfigDir": dirs.conf,
            "multusConfigFile": "auto",
            "socketDir": socket_dir,
            "daemonSocketDir": socket_dir,
            "binDir": dirs.bin,
            "cniDir": multus.cache_dir(),
        });
        let config_file = multus.dir.0.join("daemon-config.json");
        std::fs::write(&config_file, config.to_string()).unwrap();
        let daemon = Daemon::start(&config_file, &socket_dir, api, node, &multus);
        // The daemon writes it in place: wait for the whole of it.
        let written = dirs.conf.join(MULTUS_CONF);
        let read =
            || -> Option<Value> { serde_json::from_slice(&std::fs::read(&written).ok()?).ok() };
        wait_for("the daemon's 00-multus.conf", DAEMON_START, || {
            read().is_some()
        });
        multus.conf = read().unwrap();
        multus.daemon = Some(daemon);
        multus
    }

    fn new(mode: MultusMode, dirs: &CniDirs, node: &Node, bin: &str) -> Multus {
        std::os::unix::fs::symlink(peer_bin(bin), dirs.bin.join(bin)).unwrap();
        let multus = Multus {
            mode,
            conf: Value::Null,
            bin: dirs.bin.join(bin),
            cni_path: dirs.bin.clone(),
            node_conf_dir: node.conf_dir.0.clone(),
            dir: TempDir::new(),
            daemon: None,
        };
        std::fs::create_dir(multus.cache_dir()).unwrap();
        multus
    }

    /// The config a runtime hands Multus on stdin.
    pub fn conf(&self) -> &Value {
        &self.conf
    }

    /// Multus's cache (`cniDir`): a file per sandbox with its delegates (what a DEL runs;
    /// without it, Multus reads the pod and its NADs from the API again), and libcni's
    /// `results/` of each delegate (GC's list).
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.0.join("cache")
    }

    /// Multus's cache is lost (a node whose `/var/lib/cni` was wiped): from now on it knows a
    /// sandbox only from the API.
    pub fn lose_cache(&self) {
        std::fs::remove_dir_all(self.cache_dir()).unwrap();
        std::fs::create_dir(self.cache_dir()).unwrap();
    }

    /// Multus's cache of one sandbox is lost: every file of the cache that names it.
    pub fn lose_cache_of(&self, container_id: &str) {
        fn walk(dir: &Path, container_id: &str) {
            for e in std::fs::read_dir(dir).into_iter().flatten() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    walk(&path, container_id);
                } else if path
                    .file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .contains(container_id)
                {
                    std::fs::remove_file(&path).unwrap();
                }
            }
        }
        walk(&self.cache_dir(), container_id);
    }

    fn log_file(&self) -> PathBuf {
        self.dir.0.join("multus.log")
    }

    /// Multus's log (thin's, or the daemon's and the shim's), for a failing test to show.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_file()).unwrap_or_default()
    }

    /// How long the daemon took from its start to answering on its socket (thick).
    pub fn started_in(&self) -> Option<Duration> {
        self.daemon.as_ref().map(|d| d.started_in)
    }

    /// A `command` call for the sandbox `container_id` of `pod` (netns `netns`), as a runtime
    /// calls its CNI plugin: `CNI_IFNAME` eth0, the runtime's CNI_ARGS, its plugin directory as
    /// CNI_PATH, Multus's config on stdin.
    pub fn call(&self, command: &str, pod: &PodSpec, container_id: &str, netns: &str) -> Output {
        let args = pod.runtime_args(container_id);
        self.run(
            &[
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", container_id),
                ("CNI_NETNS", netns),
                ("CNI_IFNAME", "eth0"),
                ("CNI_ARGS", &args),
            ],
            &self.conf,
        )
    }

    /// A call for no sandbox (GC, STATUS) with `conf` on stdin, as libcni makes it: the
    /// sandbox's variables empty.
    pub fn call_node(&self, command: &str, conf: &Value) -> Output {
        let mut env = vec![("CNI_COMMAND", command)];
        env.extend(["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS"].map(|k| (k, "")));
        self.run(&env, conf)
    }

    fn run(&self, env: &[(&str, &str)], conf: &Value) -> Output {
        let cni_path = self.cni_path.to_str().unwrap();
        let mut env = env.to_vec();
        env.push(("CNI_PATH", cni_path));
        // Thin runs the delegates, with the runtime's environment: on a test's node, ours
        // must find the node-wide file there. (The daemon has it in its own.)
        let node_conf = self.node_conf_dir.to_str().unwrap();
        if self.mode == MultusMode::Thin {
            env.push(("CONTRAIL_CNI_CONF_DIR", node_conf));
        }
        run_cni(&self.bin, &env, conf.to_string().as_bytes())
    }
}

/// Thick Multus's daemon, stopped (SIGTERM, as the kubelet stops its pod) on drop.
struct Daemon {
    child: Child,
    started_in: Duration,
}

impl Daemon {
    /// Starts it as its DaemonSet does (root, in-cluster, `MULTUS_NODE_NAME`), with our node's
    /// `CONTRAIL_CNI_CONF_DIR`, and waits for it to answer on its socket.
    fn start(
        config: &Path,
        socket_dir: &Path,
        api: &KubeApi,
        node: &Node,
        multus: &Multus,
    ) -> Daemon {
        let log = std::fs::File::create(multus.dir.0.join("daemon.out")).unwrap();
        let start = Instant::now();
        let child = Command::new(peer_bin("multus-daemon"))
            .arg("-config")
            .arg(config)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .envs(api.in_cluster())
            .env("MULTUS_NODE_NAME", NODE_NAME)
            .env("CONTRAIL_CNI_CONF_DIR", &node.conf_dir.0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut daemon = Daemon {
            child,
            started_in: Duration::ZERO,
        };
        let socket = socket_dir.join("multus.sock");
        let deadline = start + DAEMON_START;
        while !healthy(&socket) {
            let exited = daemon.child.try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                panic!(
                    "multus-daemon did not answer on {} ({exited:?}): {}\n{}",
                    socket.display(),
                    std::fs::read_to_string(multus.dir.0.join("daemon.out")).unwrap_or_default(),
                    multus.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon.started_in = start.elapsed();
        daemon
    }
}

/// Whether the daemon answers `GET /healthz` on its socket, as the shim asks before a call
/// (`api.WaitUntilAPIReady`): it does once its informers have synced.
fn healthy(socket: &Path) -> bool {
    let Ok(mut conn) = UnixStream::connect(socket) else {
        return false;
    };
    let mut answer = String::new();
    conn.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").is_ok()
        && conn.read_to_string(&mut answer).is_ok()
        && answer.split_whitespace().nth(1) == Some("200")
}

impl Drop for Daemon {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
