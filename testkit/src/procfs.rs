//! What `/proc` says about the test's node.

use std::path::Path;

/// Mount points below `dir` in the calling thread's mount namespace: the node's, once the
/// thread entered it ([`crate::enter_node`]). `/proc/self` would name the main thread's, which
/// stays in the machine's and sees none of the node's mounts.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    std::fs::read_to_string("/proc/thread-self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// What a runtime the test ran leaves in the machine's kernel once its processes are gone: the
/// mounts below its directory `dir` (its pinned namespaces, its storage), detached, and the
/// cgroups of `cgroup_parent` in every hierarchy, the deepest first (a cgroup goes only when
/// it has none below it).
pub fn release_runtime(dir: &Path, cgroup_parent: &str) {
    for m in mounts_under(dir).iter().rev() {
        let _ = std::process::Command::new("umount")
            .args(["-l", m])
            .status();
    }
    fn remove_cgroup(dir: &Path) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&e.path());
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").into_iter().flatten() {
        remove_cgroup(
            &hierarchy
                .unwrap()
                .path()
                .join(cgroup_parent.trim_start_matches('/')),
        );
    }
}
