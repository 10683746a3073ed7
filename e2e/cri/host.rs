//! What the CRI harness (`containerd.rs`) needs of the node besides containerd: a private
//! tmpfs, the process table, a binary on the usual paths, and a TOML string for containerd's
//! config.

use std::path::{Path, PathBuf};

use contrail_testkit::*;

/// A tmpfs over `path` in the node's mount namespace: private to the test, gone with it.
pub(crate) fn private_mount(path: &str) {
    std::fs::create_dir_all(path).unwrap();
    sh("mount", &["-t", "tmpfs", "-o", "mode=0755", "tmpfs", path]);
}

/// Every process: (pid, parent pid, argv).
pub(crate) fn all_processes() -> Vec<(u32, u32, Vec<String>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold anything: the fields follow the last.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        let argv = std::fs::read(e.path().join("cmdline"))
            .unwrap_or_default()
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        out.push((pid, ppid, argv));
    }
    out
}

pub(crate) fn which(bin: &str) -> Option<PathBuf> {
    [
        "/usr/local/sbin",
        "/usr/local/bin",
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
    ]
    .iter()
    .map(|d| Path::new(d).join(bin))
    .find(|p| p.exists())
}

/// A TOML basic string (JSON's escaping is valid TOML for these paths).
pub(crate) fn toml(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}
