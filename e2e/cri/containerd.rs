//! kubelet's side of containerd's CRI, for e2e/cri: a private containerd ([`Version`]: Debian's
//! 1.6 or the peers' 2.2.7, with its CRI plugin and runc) in the test's node, a sandbox image
//! built by the test, and a CRI client (`k8s-cri`, tonic's generated client of the
//! kubernetes/cri-api protos) on the test's own thread.
//!
//! Everything containerd keeps is the test's: its root, state, socket, CNI config and plugin
//! directories in a temp dir; `/run/containerd` (the shims' sockets and runc's state, paths
//! containerd's config does not move) and `/var/lib/cni` (libcni's cache, which go-cni does not
//! move either) are tmpfs mounts of the node's own mount namespace; the pods' network
//! namespaces (`/var/run/netns/cni-<uuid>`) are in the node's `/run/netns`. So tests run in
//! parallel, never touch the machine's containerd, and the caches they check are theirs.
//!
//! A meta-plugin in front (Multus thick) fits in: [`Containerd::install_plugin`] puts its shim
//! into the CNI plugin directory, [`Containerd::install_conflist_as`] its config first by name,
//! and `env` of [`Containerd::start`] is containerd's environment, which every plugin call
//! inherits.

use std::cell::Cell;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use contrail_testkit::*;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use serde_json::Value;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::host::{all_processes, private_mount, which};
use crate::version::{Paths, Version};

/// What these tests need from Debian (scripts/test installs them).
pub const PACKAGES: &str =
    "containerd runc catatonit busybox-static containernetworking-plugins protobuf-compiler";
/// The sandbox image the test builds and imports; also the probe containers' image.
pub const IMAGE: &str = "ck8s.test/pause:1";
/// The runtime handler whose runc is `/bin/false`: the sandbox's container cannot be created.
pub const BROKEN_RUNTIME: &str = "broken";
/// kubelet's namespace in containerd.
const NAMESPACE: &str = "k8s.io";
/// Upper bound for one CRI request or for containerd to come up: each takes well under a
/// second here; a plugin that fails waits for the agent at most 0.5 s x 6 (the test node's).
pub const BOUND: Duration = Duration::from_secs(60);
const PLUGIN: &str = "contrail-k8s-cni";

/// A private containerd, killed on drop with its shims and their containers (after the CRI has
/// been asked to stop and remove what is left, so that the plugin's DEL runs: declare it after
/// the test's simulator).
pub struct Containerd {
    /// Which containerd it is (its programs, plugins and config form).
    pub version: Version,
    pub dir: TempDir,
    /// containerd's own environment, which libcni hands on to every plugin call.
    env: Vec<(String, String)>,
    child: Option<Child>,
    rt: tokio::runtime::Runtime,
    client: Option<RuntimeServiceClient<Channel>>,
    /// The pods' cgroup parent, per test (`/ck8s-<tag>` in each hierarchy), removed on drop.
    pub cgroup_parent: String,
    /// The CRI plugin's CNI config directory (`conf_dir`).
    pub conf_dir: PathBuf,
    /// Its CNI settings are `examples/containerd/config.toml`'s, imported.
    example: bool,
    /// CRI `Status` requests sent (containerd 2.2.7 asks the plugin's STATUS on each).
    statuses: Cell<usize>,
}

impl Containerd {
    /// containerd `version` with the plugin as the node's CNI (`conflist` in its CNI config
    /// directory, when given) and the node's `CONTRAIL_CNI_CONF_DIR`; `env` is added to its
    /// environment.
    pub fn start(
        version: Version,
        node: &Node,
        conflist: Option<&Value>,
        env: &[(&str, &str)],
    ) -> Containerd {
        Containerd::new(version, node, None, conflist, env)
    }

    /// containerd whose CNI config directory is the node's own (the node-wide file's, as
    /// `/etc/cni/net.d` is on a node), with nothing else in it.
    pub fn start_in_node_dir(version: Version, node: &Node) -> Containerd {
        Containerd::start_in(version, node, &node.conf_dir.0, &[])
    }

    /// containerd whose CNI config directory is `conf_dir` (one a meta-plugin was installed
    /// into, say), as it is.
    pub fn start_in(
        version: Version,
        node: &Node,
        conf_dir: &Path,
        env: &[(&str, &str)],
    ) -> Containerd {
        Containerd::new(version, node, Some(conf_dir.to_path_buf()), None, env)
    }

    /// containerd 2.2.7 with the CNI settings of `examples/containerd/config.toml`, imported as
    /// they are: the node's `/etc/cni/net.d` is the node's CNI directory (the node-wide file's)
    /// and `/opt/cni/bin` containerd's plugin directory, both of the test's node.
    pub fn start_as_example(node: &Node) -> Containerd {
        let mut c = Containerd::prepare(Version::V2_2, node, Some(node.conf_dir.0.clone()), &[]);
        bind_dir(&c.conf_dir, "/etc/cni/net.d");
        bind_dir(&c.path("cni-bin"), "/opt/cni/bin");
        c.example = true;
        c.write_config();
        c.run();
        c.import_image();
        c
    }

    fn new(
        version: Version,
        node: &Node,
        conf_dir: Option<PathBuf>,
        conflist: Option<&Value>,
        env: &[(&str, &str)],
    ) -> Containerd {
        let mut c = Containerd::prepare(version, node, conf_dir, env);
        c.write_config();
        if let Some(list) = conflist {
            c.install_conflist(list);
        }
        c.run();
        c.import_image();
        c
    }

    /// A containerd not yet started: its directories, its environment, its plugins.
    fn prepare(
        version: Version,
        node: &Node,
        conf_dir: Option<PathBuf>,
        env: &[(&str, &str)],
    ) -> Containerd {
        enter_node();
        assert!(
            which("runc").is_some(),
            "runc is missing: install {PACKAGES} (scripts/test does)"
        );
        let dir = TempDir::new();
        for sub in ["root", "state", "cni-conf", "cni-bin", "logs", "opt"] {
            std::fs::create_dir_all(dir.0.join(sub)).unwrap();
        }
        private_mount("/run/containerd");
        private_mount("/var/lib/cni");
        let mut env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.push((
            "CONTRAIL_CNI_CONF_DIR".into(),
            node.conf_dir.0.to_str().unwrap().into(),
        ));
        env.push(("PATH".into(), version.search_path(&dir.0.join("shim-bin"))));
        let c = Containerd {
            version,
            env,
            child: None,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            client: None,
            cgroup_parent: format!("/ck8s-{}", tag()),
            conf_dir: conf_dir.unwrap_or_else(|| dir.0.join("cni-conf")),
            dir,
            statuses: Cell::new(0),
            example: false,
        };
        c.install_plugins();
        c
    }

    pub fn path(&self, sub: &str) -> PathBuf {
        self.dir.0.join(sub)
    }

    fn socket(&self) -> PathBuf {
        self.path("containerd.sock")
    }

    /// The CNI plugin directory: the conflist's plugins and `loopback` (the CRI plugin adds a
    /// loopback network to every pod), of the version this containerd's libcni speaks to. Ours
    /// is the release binary behind a wrapper that records what the runtime passed (command,
    /// container, netns, CNI_ARGS, TRACEPARENT) and execs it with the same environment and
    /// stdin.
    fn install_plugins(&self) {
        for kind in ["tuning", "loopback"] {
            self.install_plugin(kind, &self.version.reference_plugin(kind));
        }
        let script = format!(
            "#!/bin/sh\n\
             printf '%s\\t%s\\t%s\\t%s\\t%s\\n' \"$CNI_COMMAND\" \"$CNI_CONTAINERID\" \
             \"$CNI_NETNS\" \"$CNI_ARGS\" \"$TRACEPARENT\" >> {}\n\
             exec {}\n",
            self.path("calls.tsv").display(),
            plugin_bin().display()
        );
        let wrapper = self.path("cni-bin").join(PLUGIN);
        std::fs::write(&wrapper, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Puts the program at `path` into the CNI plugin directory as `name` (a link: libcni runs
    /// it from there).
    pub fn install_plugin(&self, name: &str, path: &Path) {
        std::os::unix::fs::symlink(path, self.path("cni-bin").join(name)).unwrap();
    }

    /// Puts a conflist into the CNI config directory as `install` puts the node's file there: a
    /// temp file beside it (a name libcni does not load), renamed into place. containerd 1.6's
    /// conf watch ignores fsnotify's Create events, which is all a file moved in from another
    /// directory makes; the temp file's rename away is what it reloads on.
    pub fn install_conflist(&self, list: &Value) {
        self.install_conflist_as("10-contrail.conflist", list);
    }

    /// [`Containerd::install_conflist`] under another name.
    pub fn install_conflist_as(&self, name: &str, list: &Value) {
        let tmp = self.conf_dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, serde_json::to_string_pretty(list).unwrap()).unwrap();
        std::fs::rename(&tmp, self.conf_dir.join(name)).unwrap();
    }

    fn write_config(&self) {
        let config = self.version.config(&Paths {
            root: &self.path("root"),
            state: &self.path("state"),
            socket: &self.socket(),
            ttrpc: &self.path("containerd.sock.ttrpc"),
            opt: &self.path("opt"),
            cni_bin: &self.path("cni-bin"),
            cni_conf: &self.conf_dir,
            cni_import: self
                .example
                .then(|| repo_file("examples/containerd/config.toml"))
                .as_deref(),
        });
        std::fs::write(self.path("config.toml"), config).unwrap();
    }

    /// Starts containerd and waits for its CRI to answer.
    fn run(&mut self) {
        // A socket a killed containerd left: not an answer.
        let _ = std::fs::remove_file(self.socket());
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.path("containerd.log"))
            .unwrap();
        let child = Command::new(self.version.bin("containerd"))
            .arg("--config")
            .arg(self.path("config.toml"))
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run containerd ({e}): install {PACKAGES}"));
        self.child = Some(child);
        let sock = self.socket();
        wait_for("containerd's socket", BOUND, || {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("containerd exited ({status}):\n{}", self.log());
            }
            sock.exists()
        });
        // Connected on first use, and again after a failure: the wait below retries.
        let _guard = self.rt.enter();
        let channel = Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .timeout(BOUND)
            .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                let sock = sock.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(sock).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                }
            }));
        self.client = Some(RuntimeServiceClient::new(channel));
        // The CRI plugin answers once it has loaded (the socket comes first).
        wait_for("containerd's CRI to answer", BOUND, || {
            self.try_cri(|mut c| async move { c.version(VersionRequest::default()).await })
                .is_ok()
        });
    }

    /// containerd dies (SIGKILL: the shims and the pods' containers live on, as under
    /// systemd's `KillMode=process`) and starts again with the same configuration.
    pub fn restart(&mut self) {
        self.client = None;
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        self.run();
    }

    /// containerd's own log (shown when something fails).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("containerd.log")).unwrap_or_default()
    }

    /// The plugin calls containerd made, in order: (command, container id, netns, CNI_ARGS,
    /// TRACEPARENT).
    pub fn calls(&self) -> Vec<[String; 5]> {
        std::fs::read_to_string(self.path("calls.tsv"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                assert_eq!(f.len(), 5, "a recorded call: {l:?}");
                [0, 1, 2, 3, 4].map(|i| f[i].to_string())
            })
            .collect()
    }

    /// The recorded calls of one command for one sandbox: (netns, CNI_ARGS, TRACEPARENT).
    pub fn calls_of(&self, command: &str, sandbox: &str) -> Vec<[String; 3]> {
        self.calls()
            .into_iter()
            .filter(|c| c[0] == command && c[1] == sandbox)
            .map(|[_, _, netns, args, trace]| [netns, args, trace])
            .collect()
    }

    /// The sandbox image, made here: an OCI archive whose one layer holds catatonit (a static
    /// pause: `-P`) and busybox-static, imported with `ctr` as a node without a registry would.
    fn import_image(&self) {
        let img = self.path("image");
        for bin in ["/usr/bin/catatonit", "/bin/busybox"] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: install {PACKAGES}"
            );
        }
        let files = [
            ("/usr/bin/catatonit", "catatonit"),
            ("/bin/busybox", "bin/busybox"),
        ];
        let (name, tag) = IMAGE.rsplit_once(':').unwrap();
        oci_layout(&img, &files, &["/catatonit", "-P"], tag);
        let archive = self.path("image.tar");
        sh(
            "tar",
            &[
                "-C",
                img.to_str().unwrap(),
                "-cf",
                archive.to_str().unwrap(),
                ".",
            ],
        );
        let sock = self.socket();
        let ctr = self.version.bin("ctr");
        let out = sh(
            ctr.to_str().unwrap(),
            &[
                "--address",
                sock.to_str().unwrap(),
                "-n",
                NAMESPACE,
                "images",
                "import",
                "--snapshotter",
                "native",
                "--base-name",
                name,
                archive.to_str().unwrap(),
            ],
        );
        assert!(out.contains(IMAGE), "ctr images import: {out}");
    }

    /// One CRI request with this test's bound; the gRPC error as it came.
    pub fn try_cri<T, F>(
        &self,
        call: impl FnOnce(RuntimeServiceClient<Channel>) -> F,
    ) -> Result<T, tonic::Status>
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = self.client.clone().expect("containerd is running");
        self.rt
            .block_on(async { tokio::time::timeout(BOUND, call(client)).await })
            .unwrap_or_else(|_| panic!("no CRI answer in {BOUND:?}:\n{}", self.log()))
            .map(tonic::Response::into_inner)
    }

    /// A CRI request that must succeed.
    #[track_caller]
    pub fn cri<T, F>(&self, what: &str, call: impl FnOnce(RuntimeServiceClient<Channel>) -> F) -> T
    where
        F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.try_cri(call)
            .unwrap_or_else(|e| panic!("{what}: {e:?}\ncontainerd's log:\n{}", self.log()))
    }

    /// The sandbox config kubelet sends for `pod` (its name, namespace and uid), with a log
    /// directory and a cgroup parent of this test's.
    pub fn sandbox_config(&self, pod: &PodSpec) -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: pod.name.clone(),
                uid: pod.uuid.clone(),
                namespace: pod.namespace.clone(),
                attempt: 0,
            }),
            hostname: pod.name.clone(),
            log_directory: self.path("logs").join(&pod.name).display().to_string(),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// RunPodSandbox as kubelet sends it; the runtime's answer.
    pub fn try_run_pod(
        &self,
        pod: &PodSpec,
        runtime_handler: &str,
    ) -> Result<String, tonic::Status> {
        let req = RunPodSandboxRequest {
            config: Some(self.sandbox_config(pod)),
            runtime_handler: runtime_handler.into(),
        };
        self.try_cri(|mut c| async move { c.run_pod_sandbox(req).await })
            .map(|r| r.pod_sandbox_id)
    }

    /// RunPodSandbox, which must succeed: the sandbox id.
    #[track_caller]
    pub fn run_pod(&self, pod: &PodSpec) -> String {
        self.try_run_pod(pod, "")
            .unwrap_or_else(|e| panic!("RunPodSandbox: {e:?}\ncontainerd's log:\n{}", self.log()))
    }

    /// PodSandboxStatus (verbose): the status and containerd's info (`info`: its JSON, with the
    /// runtime spec and the CNI result it keeps).
    pub fn status(&self, id: &str) -> (PodSandboxStatus, Value) {
        let req = PodSandboxStatusRequest {
            pod_sandbox_id: id.into(),
            verbose: true,
        };
        let r = self.cri("PodSandboxStatus", |mut c| async move {
            c.pod_sandbox_status(req).await
        });
        let info = r
            .info
            .get("info")
            .map(|i| serde_json::from_str(i).unwrap())
            .unwrap_or(Value::Null);
        (r.status.expect("a sandbox status"), info)
    }

    /// The sandbox's network namespace, as containerd's runtime spec names it.
    pub fn netns(&self, id: &str) -> String {
        netns_in_runtime_spec(&self.status(id).1["runtimeSpec"])
    }

    #[track_caller]
    pub fn stop_pod(&self, id: &str) {
        let req = StopPodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.cri("StopPodSandbox", |mut c| async move {
            c.stop_pod_sandbox(req).await
        });
    }

    #[track_caller]
    pub fn remove_pod(&self, id: &str) {
        let req = RemovePodSandboxRequest {
            pod_sandbox_id: id.into(),
        };
        self.cri("RemovePodSandbox", |mut c| async move {
            c.remove_pod_sandbox(req).await
        });
    }

    /// The sandboxes containerd knows.
    pub fn pods(&self) -> Vec<PodSandbox> {
        self.cri("ListPodSandbox", |mut c| async move {
            c.list_pod_sandbox(ListPodSandboxRequest::default()).await
        })
        .items
    }

    /// The runtime's conditions (`RuntimeReady`, `NetworkReady`): (status, reason, message).
    pub fn conditions(&self) -> HashMap<String, (bool, String, String)> {
        self.runtime_status(false)
            .status
            .unwrap()
            .conditions
            .into_iter()
            .map(|c| (c.r#type, (c.status, c.reason, c.message)))
            .collect()
    }

    /// The CRI `Status` (kubelet asks for it every few seconds), counted.
    fn runtime_status(&self, verbose: bool) -> StatusResponse {
        self.statuses.set(self.statuses.get() + 1);
        self.cri("Status", |mut c| async move {
            c.status(StatusRequest { verbose }).await
        })
    }

    /// How many CRI `Status` requests the test sent.
    pub fn statuses(&self) -> usize {
        self.statuses.get()
    }

    /// Waits for the CRI's `NetworkReady` (its conf watch has loaded a CNI config); on timeout,
    /// fails with the condition's last reason and containerd's log.
    pub fn wait_network_ready(&self) {
        let start = std::time::Instant::now();
        loop {
            let (ready, reason, message) = self.conditions()["NetworkReady"].clone();
            if ready {
                return;
            }
            assert!(
                start.elapsed() < BOUND,
                "NetworkReady still false after {BOUND:?}: {reason}: {message}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The CNI configuration the CRI plugin has loaded (containerd's `Status` info
    /// `cniconfig`, what `crictl info` shows): the type of each plugin of its pod network, in
    /// order; empty before a network config is loaded.
    pub fn cni_plugins(&self) -> Vec<String> {
        let r = self.runtime_status(true);
        let config: Value = r
            .info
            .get("cniconfig")
            .map(|c| serde_json::from_str(c).unwrap())
            .unwrap_or(Value::Null);
        // Networks[0] is the loopback network containerd adds; the pod network follows.
        let Some(net) = config["Networks"].as_array().and_then(|n| n.get(1)) else {
            return Vec::new();
        };
        let list: Value = serde_json::from_str(net["Config"]["Source"].as_str().unwrap()).unwrap();
        match list["plugins"].as_array() {
            Some(plugins) => plugins
                .iter()
                .map(|p| p["type"].as_str().unwrap().into())
                .collect(),
            None => vec![list["type"].as_str().unwrap().into()],
        }
    }

    /// A container in the sandbox from the test's image, running `sleep`: its id.
    pub fn start_probe(&self, sandbox: &str, pod: &PodSpec) -> String {
        let req = CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(ContainerConfig {
                metadata: Some(ContainerMetadata {
                    name: "probe".into(),
                    attempt: 0,
                }),
                image: Some(ImageSpec {
                    image: IMAGE.into(),
                    ..Default::default()
                }),
                command: ["/bin/busybox", "sleep", "3600"].map(String::from).to_vec(),
                log_path: "probe.log".into(),
                linux: Some(LinuxContainerConfig::default()),
                ..Default::default()
            }),
            sandbox_config: Some(self.sandbox_config(pod)),
        };
        let id = self
            .cri("CreateContainer", |mut c| async move {
                c.create_container(req).await
            })
            .container_id;
        let req = StartContainerRequest {
            container_id: id.clone(),
        };
        self.cri("StartContainer", |mut c| async move {
            c.start_container(req).await
        });
        id
    }

    /// ExecSync of a shell script in a container: (exit code, stdout, stderr).
    pub fn exec(&self, container: &str, script: &str) -> (i32, String, String) {
        let req = ExecSyncRequest {
            container_id: container.into(),
            cmd: ["/bin/busybox", "sh", "-c", script]
                .map(String::from)
                .to_vec(),
            timeout: BOUND.as_secs() as i64,
        };
        let r = self.cri("ExecSync", |mut c| async move { c.exec_sync(req).await });
        (
            r.exit_code,
            String::from_utf8_lossy(&r.stdout).into_owned(),
            String::from_utf8_lossy(&r.stderr).into_owned(),
        )
    }

    /// StopContainer (SIGKILL at once) and RemoveContainer.
    pub fn remove_container(&self, id: &str) {
        let req = StopContainerRequest {
            container_id: id.into(),
            timeout: 0,
        };
        self.cri("StopContainer", |mut c| async move {
            c.stop_container(req).await
        });
        let req = RemoveContainerRequest {
            container_id: id.into(),
        };
        self.cri("RemoveContainer", |mut c| async move {
            c.remove_container(req).await
        });
    }

    /// Runs futures on the client concurrently (kubelet's pod workers do): their results in
    /// order.
    pub fn concurrently<T: 'static, F>(&self, calls: Vec<F>) -> Vec<T>
    where
        F: Future<Output = T> + 'static,
    {
        self.rt.block_on(async {
            let local = tokio::task::LocalSet::new();
            let handles: Vec<_> = calls.into_iter().map(|f| local.spawn_local(f)).collect();
            local
                .run_until(async {
                    let mut out = Vec::new();
                    for h in handles {
                        out.push(h.await.unwrap());
                    }
                    out
                })
                .await
        })
    }

    /// The CRI client, for [`Containerd::concurrently`].
    pub fn client(&self) -> RuntimeServiceClient<Channel> {
        self.client.clone().expect("containerd is running")
    }

    /// What containerd still keeps of a sandbox: its directories under the CRI plugin's root
    /// and state, its libcni cache entries (ours and the loopback network's).
    pub fn kept(&self, sandbox: &str) -> Vec<PathBuf> {
        let cri_root = self.path("root/io.containerd.grpc.v1.cri/sandboxes");
        let cri_state = self.path("state/io.containerd.grpc.v1.cri/sandboxes");
        let mut kept: Vec<PathBuf> = [cri_root.join(sandbox), cri_state.join(sandbox)]
            .into_iter()
            .filter(|p| p.exists())
            .collect();
        kept.extend(
            std::fs::read_dir("/var/lib/cni/results")
                .into_iter()
                .flatten()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().contains(sandbox)),
        );
        kept
    }

    /// The result libcni cached for the sandbox's pod network (its `eth0`), as a later DEL
    /// hands it to the plugins.
    pub fn cached_result(&self, sandbox: &str) -> Value {
        let cached = self
            .kept(sandbox)
            .into_iter()
            .find(|p| {
                p.starts_with("/var/lib/cni/results") && p.to_string_lossy().ends_with("-eth0")
            })
            .unwrap_or_else(|| panic!("libcni cached no result for {sandbox}"));
        let entry: Value = serde_json::from_slice(&std::fs::read(cached).unwrap()).unwrap();
        entry["result"].clone()
    }

    /// containerd's processes: itself, the shims of its sandboxes and what they run (the pause
    /// and probe containers).
    fn processes(&self) -> Vec<u32> {
        let sock = self.socket();
        let all = all_processes();
        let mut pids: Vec<u32> = all
            .iter()
            .filter(|(_, _, argv)| argv.iter().any(|a| Path::new(a) == sock))
            .map(|(pid, _, _)| *pid)
            .collect();
        if let Some(c) = &self.child {
            pids.push(c.id());
        }
        // Their descendants (the shims are the containers' subreapers).
        loop {
            let more: Vec<u32> = all
                .iter()
                .filter(|(pid, ppid, _)| pids.contains(ppid) && !pids.contains(pid))
                .map(|(pid, _, _)| *pid)
                .collect();
            if more.is_empty() {
                return pids;
            }
            pids.extend(more);
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Best effort, never panicking: after a passing test the sandboxes are gone already.
        if self.client.is_some() && self.child.is_some() {
            let pods = self.try_cri(|mut c| async move {
                c.list_pod_sandbox(ListPodSandboxRequest::default()).await
            });
            for p in pods.map(|r| r.items).unwrap_or_default() {
                let id = p.id;
                let stop = StopPodSandboxRequest {
                    pod_sandbox_id: id.clone(),
                };
                let _ = self.try_cri(|mut c| async move { c.stop_pod_sandbox(stop).await });
                let remove = RemovePodSandboxRequest { pod_sandbox_id: id };
                let _ = self.try_cri(|mut c| async move { c.remove_pod_sandbox(remove).await });
            }
        }
        self.client = None;
        for pid in self.processes() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
        procfs::release_runtime(&self.dir.0, &self.cgroup_parent);
    }
}
