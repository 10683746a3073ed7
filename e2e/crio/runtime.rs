//! kubelet's side of CRI-O, for e2e/crio: a private CRI-O 1.36.3 (the real `crio` and `pinns`
//! of `../shared/peers`, with Debian's conmon and runc) in the test's node, its pause image made
//! by the test and copied into its storage with Debian's skopeo, and the real `crictl` 1.36 as
//! kubelet's CRI client.
//!
//! Everything CRI-O keeps is the test's: its root, runroot, socket, logs, pinned namespaces
//! (`namespaces_dir`), version and shutdown files in a temp dir, and every path it would write on
//! the machine moved there in `crio.conf` (/etc/crio/auth and /etc/crio/policies included, which
//! it creates even when absent). What no option moves is hidden by mounts of the node's own
//! mount namespace: libcni's result cache `/var/lib/cni` (hardcoded in CRI-O and libcni) and
//! skopeo's `/var/lib/containers/cache` (a private `/var/lib`), skopeo's temp files (`/var/tmp`).
//! Its network directory is the node's CNI directory, where the node-wide file is too, as on a
//! node; its plugin directory holds every CNI plugin behind a wrapper that records each call.
//! Pods get a cgroup parent of the test's own (cgroupfs is the machine's), removed at the end.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use contrail_testkit::*;
use serde_json::{Value, json};

/// What these tests need from Debian (scripts/test installs them): the programs CRI-O runs,
/// the pause image's parts and the libraries `crio` links.
pub const PACKAGES: &str = "conmon runc skopeo catatonit libseccomp2 libsqlite3-0";
/// The pause image the test makes: CRI-O needs it in its storage even for sandboxes without an
/// infra container.
const PAUSE_IMAGE: &str = "localhost/pause:test";
/// Upper bound for one CRI request or for CRI-O to come up: each takes well under a second
/// here (a restore CHECK can hold CRI-O's start for the plugin's whole request budget).
pub const BOUND: Duration = Duration::from_secs(60);
/// How long `crictl version` waits while CRI-O comes up.
const PROBE: Duration = Duration::from_secs(2);
/// The storage driver: vfs needs no mount (the pause image's one layer is 1 MB).
const DRIVER: &str = "vfs";
/// The programs CRI-O runs, where `crio.conf` names them.
const CONMON: &str = "/usr/bin/conmon";
const RUNC: &str = "/usr/sbin/runc";
const SKOPEO: &str = "/usr/bin/skopeo";
const CATATONIT: &str = "/usr/bin/catatonit";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One CNI call CRI-O made, as the plugin directory's wrapper recorded it.
#[derive(Clone, Debug)]
pub struct Call {
    /// The plugin's name (`contrail-k8s-cni`, `tuning`, `bridge`...).
    pub plugin: String,
    pub command: String,
    /// When it started (seconds since the epoch).
    pub at: f64,
    /// Its exit code.
    pub rc: i32,
    pub container: String,
    pub netns: String,
    pub args: String,
    /// Its stdin, as JSON.
    pub stdin: Value,
}

/// A private CRI-O in the test's node, stopped on drop (after its sandboxes were stopped and
/// removed through the CRI, so that the plugin's DELs run: declare it after the test's
/// simulator), with its conmons, mounts and cgroups.
pub struct Crio {
    pub dir: TempDir,
    /// Its `network_dir`: the node's CNI directory, the node-wide file's.
    pub network_dir: PathBuf,
    /// CRI-O's own environment, which libcni hands on to every plugin call.
    env: Vec<(String, String)>,
    child: Option<Child>,
    /// The pods' cgroup parent (`/ck8s-crio-<tag>` in each hierarchy), removed on drop.
    pub cgroup_parent: String,
    /// The node's private `/var/lib` and `/var/tmp`.
    _private: [TempDir; 2],
    /// Its drop-in directory (`--config-dir`): the test's own, empty, or `examples/crio/`'s.
    config_dir: PathBuf,
}

impl Crio {
    /// CRI-O prepared on `node`, not started: its directories and config, the plugin directory
    /// with the plugin and the reference `tuning` (the shipped conflist chains it), the pause
    /// image in its storage. Put network configs in place ([`Crio::install`]), other plugins
    /// ([`Crio::add_plugin`]) and environment ([`Crio::env`]), then [`Crio::start`].
    pub fn new(node: &Node) -> Crio {
        enter_node();
        for bin in [CONMON, RUNC, SKOPEO, CATATONIT] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: install {PACKAGES} (scripts/test does)"
            );
        }
        let private = [private_dir("/var/lib"), private_dir("/var/tmp")];
        let dir = TempDir::new();
        for sub in ["bin", "real", "crio.conf.d", "log", "specs", "tmp", "lib"] {
            std::fs::create_dir_all(dir.0.join(sub)).unwrap();
        }
        let crio = Crio {
            network_dir: node.conf_dir.0.clone(),
            env: vec![(
                "CONTRAIL_CNI_CONF_DIR".into(),
                node.conf_dir.0.to_str().unwrap().into(),
            )],
            child: None,
            cgroup_parent: format!("/ck8s-crio-{}", tag()),
            _private: private,
            config_dir: dir.0.join("crio.conf.d"),
            dir,
        };
        crio.write_wrapper();
        crio.add_plugin("contrail-k8s-cni", &plugin_bin());
        crio.add_plugin("tuning", &peer_bin("cni-tuning"));
        crio.write_config();
        crio.import_pause_image();
        crio
    }

    /// [`Crio::new`] with the shipped `netconf/contrail.conflist` as `05-contrail.conflist`
    /// beside the node-wide `10-contrail.conf` (the layout docs/runtimes.md recommends), started.
    pub fn with_shipped_conflist(node: &Node) -> Crio {
        let mut crio = Crio::new(node);
        crio.install("05-contrail.conflist", &shipped_conflist());
        crio.start();
        crio
    }

    /// With `examples/crio/crio.conf.d/` as its drop-in directory, as it is: its network
    /// directory is the node's `/etc/cni/net.d` (the node's CNI directory, the node-wide file's)
    /// and its plugin directory `/opt/cni/bin` (this CRI-O's), both of the test's node.
    pub fn as_example(&mut self) -> &mut Crio {
        bind_dir(&self.network_dir, "/etc/cni/net.d");
        bind_dir(&self.path("bin"), "/opt/cni/bin");
        self.config_dir = repo_file("examples/crio/crio.conf.d");
        self
    }

    pub fn path(&self, sub: &str) -> PathBuf {
        self.dir.0.join(sub)
    }

    fn socket(&self) -> PathBuf {
        self.path("run/crio.sock")
    }

    /// One more variable in CRI-O's environment, from its next start on.
    pub fn env(&mut self, key: &str, value: &str) -> &mut Crio {
        self.env.push((key.into(), value.into()));
        self
    }

    /// A network config into the network directory as `install` puts the node's file there: a
    /// temp file beside it (a name libcni does not load), renamed into place.
    pub fn install(&self, name: &str, conf: &Value) {
        let tmp = self.network_dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, serde_json::to_string_pretty(conf).unwrap()).unwrap();
        std::fs::rename(&tmp, self.network_dir.join(name)).unwrap();
    }

    /// A CNI plugin `name` in the plugin directory: `bin`, behind the recording wrapper.
    pub fn add_plugin(&self, name: &str, bin: &Path) {
        std::os::unix::fs::symlink(bin, self.path("real").join(name)).unwrap();
        std::os::unix::fs::symlink("wrapper", self.path("bin").join(name)).unwrap();
    }

    /// The wrapper every plugin is called through: it runs the real plugin with the same
    /// environment and stdin, then records the call (plugin, command, start time, exit code,
    /// container, netns, CNI_ARGS, stdin: a line each, under a lock) and answers as it did.
    fn write_wrapper(&self) {
        let script = format!(
            "#!/bin/sh\n\
             name=${{0##*/}}\n\
             in=$(cat)\n\
             t0=$(date +%s.%N)\n\
             out=$(printf '%s' \"$in\" | {real}/\"$name\")\n\
             rc=$?\n\
             {{ flock 9; printf '%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\t%s\\n' \"$name\" \
             \"$CNI_COMMAND\" \"$t0\" \"$rc\" \"$CNI_CONTAINERID\" \"$CNI_NETNS\" \"$CNI_ARGS\" \
             \"$in\" >&9; }} 9>>{calls}\n\
             printf '%s' \"$out\"\n\
             exit $rc\n",
            real = self.path("real").display(),
            calls = self.path("calls.tsv").display(),
        );
        let wrapper = self.path("bin/wrapper");
        std::fs::write(&wrapper, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// `crio.conf`: every directory in the test's, the programs by path, no infra containers
    /// (`drop_infra_ctr`: a sandbox is pinned namespaces, no process), cgroupfs, no NRI.
    fn write_config(&self) {
        let p = |sub: &str| toml(self.path(sub).to_str().unwrap());
        let config = format!(
            "[crio]\n\
             root = {root}\n\
             runroot = {runroot}\n\
             storage_driver = \"{DRIVER}\"\n\
             log_dir = {pod_logs}\n\
             version_file = {version}\n\
             version_file_persist = {version_persist}\n\
             clean_shutdown_file = {clean}\n\
             [crio.api]\n\
             listen = {sock}\n\
             stream_address = \"127.0.0.1\"\n\
             stream_port = \"0\"\n\
             [crio.runtime]\n\
             default_runtime = \"runc\"\n\
             cgroup_manager = \"cgroupfs\"\n\
             conmon_cgroup = \"pod\"\n\
             container_exits_dir = {exits}\n\
             container_attach_socket_dir = {attach}\n\
             namespaces_dir = {ns}\n\
             pinns_path = {pinns}\n\
             drop_infra_ctr = true\n\
             hooks_dir = []\n\
             cdi_spec_dirs = []\n\
             decryption_keys_path = {keys}\n\
             apparmor_profile = \"\"\n\
             enable_criu_support = false\n\
             irqbalance_config_file = \"\"\n\
             irqbalance_config_restore_file = \"disable\"\n\
             log_level = \"info\"\n\
             [crio.runtime.runtimes.runc]\n\
             runtime_path = \"{RUNC}\"\n\
             runtime_type = \"oci\"\n\
             runtime_root = {runc_root}\n\
             monitor_path = \"{CONMON}\"\n\
             monitor_cgroup = \"pod\"\n\
             [crio.image]\n\
             pause_image = \"{PAUSE_IMAGE}\"\n\
             pause_command = \"\"\n\
             signature_policy = {policy}\n\
             signature_policy_dir = {policies}\n\
             namespaced_auth_dir = {auth}\n\
             short_name_mode = \"disabled\"\n\
             [crio.network]\n\
             network_dir = {net}\n\
             plugin_dirs = [{bin}]\n\
             [crio.nri]\n\
             enable_nri = false\n",
            root = p("root"),
            runroot = p("runroot"),
            pod_logs = p("log/pods"),
            version = p("run/version"),
            version_persist = p("lib/version"),
            clean = p("lib/clean.shutdown"),
            sock = toml(self.socket().to_str().unwrap()),
            exits = p("run/exits"),
            attach = p("run/attach"),
            ns = p("run/ns"),
            pinns = toml(peer_bin("pinns").to_str().unwrap()),
            keys = p("lib/keys"),
            runc_root = p("run/runc"),
            policy = p("policy.json"),
            policies = p("lib/policies"),
            auth = p("lib/auth"),
            net = toml(self.network_dir.to_str().unwrap()),
            bin = p("bin"),
        );
        std::fs::write(self.path("crio.conf"), config).unwrap();
        let policy = json!({"default": [{"type": "insecureAcceptAnything"}]});
        std::fs::write(self.path("policy.json"), policy.to_string()).unwrap();
    }

    /// The pause image: FROM scratch, `/pause` a static catatonit, entrypoint `/pause -P`, as
    /// an OCI layout, copied into CRI-O's storage by skopeo as a node without a registry would.
    fn import_pause_image(&self) {
        let layout = self.path("pause-oci");
        oci_layout(&layout, &[(CATATONIT, "pause")], &["/pause", "-P"], "test");
        let out = Command::new(SKOPEO)
            .env("TMPDIR", self.path("tmp"))
            .arg("--policy")
            .arg(self.path("policy.json"))
            .args(["copy", "--quiet"])
            .arg(format!("oci:{}:test", layout.display()))
            .arg(format!(
                "containers-storage:[{DRIVER}@{}+{}]{PAUSE_IMAGE}",
                self.path("root").display(),
                self.path("runroot").display()
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "skopeo copy of the pause image: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts CRI-O and waits for its CRI to answer (after its restore: a slow restore CHECK
    /// holds it).
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "CRI-O is running already");
        // A socket a killed CRI-O left: not an answer.
        let _ = std::fs::remove_file(self.socket());
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.path("log/crio.log"))
            .unwrap();
        let child = Command::new(peer_bin("crio"))
            .arg("--config")
            .arg(self.path("crio.conf"))
            .arg("--config-dir")
            .arg(&self.config_dir)
            .env_clear()
            .env("PATH", PATH)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        wait_for("CRI-O's CRI to answer", BOUND, || {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "crio exited ({status}; it needs {PACKAGES}, which scripts/test \
                     installs):\n{}",
                    self.log()
                );
            }
            // A short deadline: the socket is there before CRI-O serves it.
            let probe = self.crictl_command(PROBE, &["version"]).output().unwrap();
            probe.status.success()
        });
    }

    /// CRI-O stops as systemd stops it (SIGTERM), and is waited for: its sandboxes live on.
    pub fn stop(&mut self) {
        let mut child = self.child.take().expect("CRI-O is running");
        sh("kill", &["-TERM", &child.id().to_string()]);
        child.wait().unwrap();
    }

    /// CRI-O dies (SIGKILL, a crash): its sandboxes live on.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("CRI-O is running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// CRI-O's own log (shown when something fails).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("log/crio.log")).unwrap_or_default()
    }

    /// `crictl` against this CRI-O: its stdout, or what went wrong.
    pub fn crictl(&self, args: &[&str]) -> Result<String, String> {
        let out = self.crictl_command(BOUND, args).output().unwrap();
        if !out.status.success() {
            return Err(format!(
                "crictl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8(out.stdout).unwrap())
    }

    /// `crictl` with this CRI-O's socket and no config file of the machine's.
    fn crictl_command(&self, timeout: Duration, args: &[&str]) -> Command {
        let endpoint = format!("unix://{}", self.socket().display());
        let mut cmd = Command::new(peer_bin("crictl"));
        cmd.args(["--config", "/dev/null", "--runtime-endpoint", &endpoint])
            .args(["--image-endpoint", &endpoint, "--timeout"])
            .arg(format!("{}ms", timeout.as_millis()))
            .args(args);
        cmd
    }

    /// `crictl` that must succeed: its stdout.
    #[track_caller]
    pub fn cri(&self, args: &[&str]) -> String {
        self.crictl(args)
            .unwrap_or_else(|e| panic!("{e}\nCRI-O's log:\n{}", self.log()))
    }

    /// The sandbox config kubelet sends for `pod` (its name, namespace and uid; the pod's PID
    /// namespace per container, as kubelet sends it unless `shareProcessNamespace`, so no infra
    /// container runs), with a log directory and the test's cgroup parent, written for `crictl
    /// runp`.
    fn sandbox_config(&self, pod: &PodSpec) -> PathBuf {
        let config = json!({
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uuid,
                         "attempt": 0},
            "hostname": pod.name,
            "log_directory": self.path("log/pods").join(&pod.name),
            "linux": {"cgroup_parent": self.cgroup_parent,
                      "security_context": {"namespace_options":
                                           {"network": 0, "pid": 1, "ipc": 0}}},
        });
        let file = self.path("specs").join(format!("{}.json", pod.name));
        std::fs::write(&file, config.to_string()).unwrap();
        file
    }

    /// `crictl`, started and not waited for (kubelet's pod workers run at once).
    pub fn spawn_crictl(&self, args: &[&str]) -> Child {
        self.crictl_command(BOUND, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// What a started `crictl` printed; it must have succeeded.
    #[track_caller]
    pub fn finish(&self, child: Child) -> String {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "crictl: {}\nCRI-O's log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// RunPodSandbox, started and not waited for: [`Crio::finish`] gives its sandbox id.
    pub fn spawn_run_pod(&self, pod: &PodSpec) -> Child {
        let config = self.sandbox_config(pod);
        self.spawn_crictl(&["runp", config.to_str().unwrap()])
    }

    /// RunPodSandbox, which must succeed: the sandbox id.
    #[track_caller]
    pub fn run_pod(&self, pod: &PodSpec) -> String {
        self.finish(self.spawn_run_pod(pod))
    }

    #[track_caller]
    pub fn stop_pod(&self, id: &str) {
        self.cri(&["stopp", id]);
    }

    #[track_caller]
    pub fn remove_pod(&self, id: &str) {
        self.cri(&["rmp", id]);
    }

    /// The sandboxes CRI-O knows (`crictl pods`): (id, state).
    pub fn pods(&self) -> Vec<(String, String)> {
        let list: Value = serde_json::from_str(&self.cri(&["pods", "-o", "json"])).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let s = |k: &str| p[k].as_str().unwrap().to_string();
                (s("id"), s("state"))
            })
            .collect()
    }

    /// `crictl inspectp`: the sandbox's status and CRI-O's info (its runtime spec).
    pub fn inspect(&self, id: &str) -> Value {
        serde_json::from_str(&self.cri(&["inspectp", "-o", "json", id])).unwrap()
    }

    /// The sandbox's network namespace, as CRI-O's runtime spec names it.
    pub fn netns(&self, id: &str) -> String {
        netns_in_runtime_spec(&self.inspect(id)["info"]["runtimeSpec"])
    }

    /// The network namespaces CRI-O has pinned (`<namespaces_dir>/netns`).
    pub fn netns_files(&self) -> Vec<String> {
        std::fs::read_dir(self.path("run/ns/netns"))
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().path().display().to_string())
            .collect()
    }

    /// The CRI's `NetworkReady` condition (`crictl info`): (status, reason, message).
    pub fn network_ready(&self) -> (bool, String, String) {
        let info: Value = serde_json::from_str(&self.cri(&["info", "-o", "json"])).unwrap();
        let c = info["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "NetworkReady")
            .unwrap_or_else(|| panic!("no NetworkReady in {info}"))
            .clone();
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        (c["status"] == true, s("reason"), s("message"))
    }

    /// Every CNI call CRI-O made, in the order they ended.
    pub fn calls(&self) -> Vec<Call> {
        std::fs::read_to_string(self.path("calls.tsv"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.splitn(8, '\t').collect();
                assert_eq!(f.len(), 8, "a recorded call: {l:?}");
                Call {
                    plugin: f[0].into(),
                    command: f[1].into(),
                    at: f[2].parse().unwrap(),
                    rc: f[3].parse().unwrap(),
                    container: f[4].into(),
                    netns: f[5].into(),
                    args: f[6].into(),
                    stdin: serde_json::from_str(f[7]).unwrap_or(Value::Null),
                }
            })
            .collect()
    }

    /// The calls of the plugin under test (`contrail-k8s-cni`) but VERSION, from the `from`th
    /// on: (command, container).
    pub fn plugin_calls(&self, from: usize) -> Vec<(String, String)> {
        self.calls()[from..]
            .iter()
            .filter(|c| c.plugin == "contrail-k8s-cni" && c.command != "VERSION")
            .map(|c| (c.command.clone(), c.container.clone()))
            .collect()
    }

    /// libcni's cached results (`/var/lib/cni/results`, the node's own).
    pub fn cached_results(&self) -> Vec<PathBuf> {
        std::fs::read_dir("/var/lib/cni/results")
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().path())
            .collect()
    }

    /// Whether CRI-O is running.
    fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().unwrap().is_none())
    }

    /// Stops and removes every container and sandbox through the CRI, as kubelet drains a node:
    /// best effort, never panicking (after a passing test nothing is left).
    fn drain(&self) {
        let ids = |args: &[&str]| -> Vec<String> {
            let out = self.crictl(args).unwrap_or_default();
            out.split_whitespace().map(String::from).collect()
        };
        for c in ids(&["ps", "-aq"]) {
            let _ = self.crictl(&["stop", "-t", "0", &c]);
            let _ = self.crictl(&["rm", &c]);
        }
        for p in ids(&["pods", "-q"]) {
            let _ = self.crictl(&["stopp", &p]);
            let _ = self.crictl(&["rmp", &p]);
        }
    }
}

impl Drop for Crio {
    fn drop(&mut self) {
        if self.running() {
            self.drain();
            if let Some(mut child) = self.child.take() {
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                let exited = (0..BOUND.as_millis() / 10).any(|_| {
                    std::thread::sleep(Duration::from_millis(10));
                    child.try_wait().ok().flatten().is_some()
                });
                if !exited {
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        // conmon daemonizes (its parent becomes init): whatever still names the test's
        // directory is CRI-O's.
        for pid in processes_naming(&self.dir.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        // The pinned namespaces (busy while anything holds them: detached), the cgroups.
        procfs::release_runtime(&self.dir.0, &self.cgroup_parent);
    }
}

/// The shipped `netconf/contrail.conflist`, as a node gets it.
pub fn shipped_conflist() -> Value {
    let p = repo_file("netconf/contrail.conflist");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

/// A TOML basic string (JSON's escaping is valid TOML for these paths).
fn toml(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The processes whose command line names `dir`.
fn processes_naming(dir: &Path) -> Vec<u32> {
    let needle = dir.to_str().unwrap().as_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            cmdline
                .windows(needle.len())
                .any(|w| w == needle)
                .then_some(pid)
        })
        .collect()
}

/// A pod's network namespace that CRI-O pinned, seen through testkit's [`Netns`] by a name in
/// the node's own `/run/netns` (a symlink, removed on drop); never deleted by it.
pub struct PodNetns {
    ns: std::mem::ManuallyDrop<Netns>,
}

impl PodNetns {
    pub fn of(path: &str) -> PodNetns {
        let name = format!("crio-{}", Path::new(path).file_name().unwrap().display());
        let link = Path::new("/run/netns").join(&name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(path, &link).unwrap();
        PodNetns {
            ns: std::mem::ManuallyDrop::new(Netns { name }),
        }
    }
}

impl std::ops::Deref for PodNetns {
    type Target = Netns;
    fn deref(&self) -> &Netns {
        &self.ns
    }
}

impl Drop for PodNetns {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(Path::new("/run/netns").join(&self.ns.name));
    }
}
