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
