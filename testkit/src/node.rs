//! The node and its config: the plugin's directories and node-wide file, calls as the runtime
//! makes them, and what the plugin left on the node.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::bins::plugin_bin;
use crate::cni::{Output, run_wrapped};
use crate::files::TempDir;
use crate::netns::enter_node;
use crate::netns::{host_ifname, host_link_exists};
use crate::pod::{PodSpec, VmiSpec};
use crate::sim::Sim;

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

    /// A sandbox's attachment as the plugin left it on this node: the host end of `vmi`, the
    /// agent's port of it under that end on `ifname`, and the state file naming the sandbox `id`
    /// and its `netns`. The host end's name.
    #[track_caller]
    pub fn assert_recorded(
        &self,
        sim: &Sim,
        pod: &PodSpec,
        vmi: &VmiSpec,
        id: &str,
        netns: &str,
        ifname: &str,
    ) -> String {
        let host = host_ifname(&vmi.uuid);
        assert!(host_link_exists(&host), "host end {host} missing");
        let ports = sim.ports();
        assert!(
            ports.contains(&(vmi.uuid.clone(), host.clone(), ifname.into())),
            "agent ports: {ports:?}"
        );
        let file = self.ports_dir().join(pod.vm_name()).join(&vmi.uuid);
        let state: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
        assert_eq!(state["vm-id"], id, "the state file is the sandbox's");
        assert_eq!(state["vm-namespace"], netns);
        host
    }

    /// The node's log file.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.config_dir.0.join("cni.log")).unwrap_or_default()
    }

    /// The log's warnings and errors, for a failed assertion to say what the calls met.
    pub fn warnings(&self) -> String {
        let log = self.log();
        let bad = log
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "));
        bad.collect::<Vec<_>>().join("\n")
    }

    /// The network config Multus hands a delegate: the NAD's config plus its injected name.
    pub fn netconf(&self, version: &str, network: &str) -> Value {
        json!({"cniVersion": version, "name": network, "type": "contrail-k8s-cni"})
    }

    /// A `command` call to the plugin on this node, as a runtime makes it: see [`Call`].
    pub fn cni<'a>(&'a self, command: &'a str) -> Call<'a> {
        Call {
            node: self,
            command,
            container: "",
            netns: "",
            ifname: "",
            args: "",
            extra: Vec::new(),
        }
    }

    /// GC (cniVersion 1.1.0) with `valid` as the valid attachments.
    pub fn gc(&self, valid: Value) -> Output {
        let mut conf = self.netconf("1.1.0", "contrail-k8s-cni");
        conf["cni.dev/valid-attachments"] = valid;
        self.cni("GC").run(&conf)
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

/// A CNI call as a runtime makes it on a node: the command, the sandbox's container id and
/// netns, the interface, CNI_ARGS, and any extra environment (crash points, trace context). What
/// is not set goes to the plugin empty, as a runtime sends GC and STATUS.
pub struct Call<'a> {
    node: &'a Node,
    command: &'a str,
    container: &'a str,
    netns: &'a str,
    ifname: &'a str,
    args: &'a str,
    extra: Vec<(&'a str, &'a str)>,
}

impl<'a> Call<'a> {
    /// CNI_CONTAINERID.
    pub fn container(mut self, id: &'a str) -> Call<'a> {
        self.container = id;
        self
    }

    /// CNI_NETNS: the path of the sandbox's network namespace.
    pub fn netns(mut self, path: &'a str) -> Call<'a> {
        self.netns = path;
        self
    }

    /// CNI_IFNAME.
    pub fn ifname(mut self, ifname: &'a str) -> Call<'a> {
        self.ifname = ifname;
        self
    }

    /// CNI_ARGS.
    pub fn args(mut self, args: &'a str) -> Call<'a> {
        self.args = args;
        self
    }

    /// One more environment variable, after the runtime's.
    pub fn env(mut self, key: &'a str, value: &'a str) -> Call<'a> {
        self.extra.push((key, value));
        self
    }

    /// The environment the plugin gets: for a test that starts the plugin itself.
    pub fn environment(&self) -> Vec<(&'a str, &'a str)> {
        let mut env = vec![
            ("CNI_COMMAND", self.command),
            ("CNI_CONTAINERID", self.container),
            ("CNI_NETNS", self.netns),
            ("CNI_IFNAME", self.ifname),
            ("CNI_ARGS", self.args),
            ("CNI_PATH", "/opt/cni/bin"),
            (
                "CONTRAIL_CNI_CONF_DIR",
                self.node.conf_dir.0.to_str().unwrap(),
            ),
        ];
        env.extend_from_slice(&self.extra);
        env
    }

    /// Runs the plugin, under the node's wrapper, with `conf` on stdin.
    pub fn run(&self, conf: &Value) -> Output {
        run_wrapped(
            &self.node.wrapper,
            &plugin_bin(),
            &self.environment(),
            conf.to_string().as_bytes(),
        )
    }
}
