//! Files of a test: a temporary directory, a file as an earlier boot left it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::bins::tag;

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
