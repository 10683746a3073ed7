//! Where the binaries under test are, and running commands: the release build's plugin and
//! simulator, a repository file, unique names, a shell command, a bounded wait.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Where the binaries under test are: the release build of the plugin and the simulator, in
/// `target/<triple>/release/`. A test binary runs from `target/<triple>/<profile>/deps` (the
/// `testing` profile), a program of the release build (the benchmark) from the release directory
/// itself; `CONTRAIL_BIN_DIR` names another.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CONTRAIL_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let mut dir = exe.parent().expect("a binary in a directory");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("deps in a profile's directory");
    }
    dir.parent()
        .expect("a profile's directory in target/<triple>")
        .join("release")
}

/// A binary of the release build, which the tests need built beforehand.
fn built(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --release -p contrail-k8s-cni -p contrail-agent-sim` \
         first (scripts/test does)",
        p.display()
    );
    p
}

/// The plugin binary under test. Its features must be the ones these tests were built with
/// (`thick`, `crash-points`: scripts/test builds both with the same), or the tests of a feature
/// would be left out, or fail for the wrong reason.
pub fn plugin_bin() -> PathBuf {
    static CHECKED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let bin = built("contrail-k8s-cni");
            let version = sh(bin.to_str().unwrap(), &["--version"]);
            // "contrail-k8s-cni 0.2.0 (git ...); CNI versions ...; features thick, crash-points"
            let features = version.trim().split("; features ").nth(1).unwrap_or("");
            let has = |f: &str| features.split(", ").any(|w| w == f);
            for (feature, built_with) in [
                ("thick", cfg!(feature = "thick")),
                ("crash-points", cfg!(feature = "crash-points")),
            ] {
                assert_eq!(
                    has(feature),
                    built_with,
                    "{} says {version:?}: the tests were built {} feature {feature}; build both \
                     with the same features (scripts/test)",
                    bin.display(),
                    if built_with { "with" } else { "without" },
                );
            }
            bin
        })
        .clone()
}

/// The agent simulator (package `contrail-agent-sim`).
pub fn sim_bin() -> PathBuf {
    built("contrail-agent-sim")
}

/// A real caller or runtime of `../shared/peers` (Multus, CNI-Genie, containerd, CRI-O,
/// cnitool, the reference plugins), as scripts/test unpacks them into `target/peers/`
/// (`CONTRAIL_PEERS_BIN` names another directory). A missing one fails the test: these tests
/// are about the real programs, never a stand-in.
pub fn peer_bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("CONTRAIL_PEERS_BIN")
        .map_or_else(|| repo_file("target/peers"), PathBuf::from);
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/test, which unpacks ../shared/peers there          (`../shared/peers/install target/peers`)",
        p.display()
    );
    p
}

/// A file of this repository, by its path from the top (`netconf/contrail.conflist`).
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ in the repository")
        .join(rel)
}

pub fn uuid() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/uuid")
        .unwrap()
        .trim()
        .to_string()
}

/// A short random tag for names that must be unique across parallel tests.
pub fn tag() -> String {
    uuid()[..8].to_string()
}

/// Runs a command: its stdout, or what went wrong.
pub fn try_sh(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{cmd} {args:?}: {e}"))
}

/// Runs a command that must succeed: its stdout.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    try_sh(cmd, args).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits for a condition with a bound; panics with `what` when it does not hold in time.
pub fn wait_for(what: &str, bound: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() >= bound {
            // One last look: a condition slow to evaluate may have crossed the bound itself.
            assert!(cond(), "timed out after {bound:?} waiting for {what}");
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
