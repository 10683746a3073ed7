//! Records the git revision for `contrail-k8s-cni --version`.

use std::process::Command;

fn main() {
    // --no-optional-locks: `git status` would otherwise refresh .git/index, which is what
    // makes cargo run this script again, and rebuild the plugin, on the next build.
    let rev = Command::new("git")
        .args(["--no-optional-locks", "rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string());
    let dirty = Command::new("git")
        .args([
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ])
        .output()
        .ok()
        .is_some_and(|o| !o.stdout.is_empty());
    println!(
        "cargo:rustc-env=GIT_REVISION={rev}{}",
        if dirty { "-dirty" } else { "" }
    );
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/index");
}
