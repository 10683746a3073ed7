//! `install --watch`, the DaemonSet's container, run as a process of the test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::bins::{plugin_bin, sh};
use crate::files::TempDir;

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
