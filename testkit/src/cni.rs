//! Running a CNI plugin as a runtime does (its environment and stdin), and what it printed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::bins::{peer_bin, plugin_bin};
use crate::files::TempDir;
use crate::netns::enter_node;

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
    finish(spawn(wrapper, bin, env, stdin))
}

/// Starts the plugin binary as a runtime does, without waiting for it: for a test that signals
/// a call while it runs. [`finish`] collects it.
pub fn start_plugin(env: &[(&str, &str)], stdin: &[u8]) -> Child {
    spawn(&[], &plugin_bin(), env, stdin)
}

/// What a started call printed and how it exited.
pub fn finish(child: Child) -> Output {
    let out = child.wait_with_output().unwrap();
    Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

/// The one way the tests start a CNI call: only PATH and the call's own environment, stdin
/// written and closed.
fn spawn(wrapper: &[String], bin: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Child {
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
    child
}

/// The reference plugins of `../shared/peers` (containernetworking/plugins 1.9.1) a node has.
const REFERENCE_PLUGINS: [&str; 7] = [
    "bridge",
    "host-local",
    "loopback",
    "macvlan",
    "ptp",
    "static",
    "tuning",
];

/// A node's CNI directories as a runtime reads them: the network configs (a node's
/// `/etc/cni/net.d`) and the plugins (`/opt/cni/bin`), with our plugin and the reference
/// plugins 1.9.1 installed in the latter under their own names, as a node's packages install
/// them (`../shared/peers` has them with a `cni-` prefix).
pub struct CniDirs {
    pub conf: PathBuf,
    pub bin: PathBuf,
    _own: Vec<TempDir>,
}

impl CniDirs {
    /// Two directories of the test's own.
    pub fn new() -> CniDirs {
        enter_node();
        let (conf, bin) = (TempDir::new(), TempDir::new());
        let dirs = CniDirs {
            conf: conf.0.clone(),
            bin: bin.0.clone(),
            _own: vec![conf, bin],
        };
        dirs.install_plugins();
        dirs
    }

    /// Directories the test made (a runtime's private `/etc/cni/net.d` and `/opt/cni/bin`).
    pub fn at(conf: &Path, bin: &Path) -> CniDirs {
        let dirs = CniDirs {
            conf: conf.to_path_buf(),
            bin: bin.to_path_buf(),
            _own: Vec::new(),
        };
        dirs.install_plugins();
        dirs
    }

    fn install_plugins(&self) {
        let mut plugins = vec![("contrail-k8s-cni".to_string(), plugin_bin())];
        for name in REFERENCE_PLUGINS {
            plugins.push((name.to_string(), peer_bin(&format!("cni-{name}"))));
        }
        for (name, bin) in plugins {
            std::os::unix::fs::symlink(&bin, self.bin.join(&name))
                .unwrap_or_else(|e| panic!("installing {name} in {}: {e}", self.bin.display()));
        }
    }

    /// A network config of the node, `<name>` in the config directory.
    pub fn write_conf(&self, name: &str, conf: &Value) {
        std::fs::write(self.conf.join(name), conf.to_string()).unwrap();
    }
}
