//! `contrail-k8s-cni install`: puts this binary and the node-wide config in place, as the
//! DaemonSet's init container does on every node.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const USAGE: &str =
    "usage: contrail-k8s-cni install --bin-dir DIR [--conf-dir DIR --conf FILE]";

/// Writes `bytes` to `dest` atomically: a temp file beside it, fsync, rename. A kubelet that
/// runs the plugin meanwhile executes either the old file or the new one, never half of one,
/// and replacing a binary that is running never fails with "text file busy".
fn put(dest: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    let dir = dest
        .parent()
        .ok_or_else(|| format!("{} has no parent directory", dest.display()))?;
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let name = dest.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, dest)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("installing {}: {e}", dest.display())
    })
}

/// Runs the subcommand with its arguments; the message is for the operator's terminal.
pub fn run(args: &[String]) -> Result<String, String> {
    let (mut bin_dir, mut conf_dir, mut conf) = (None, None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .map(PathBuf::from)
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        match flag.as_str() {
            "--bin-dir" => bin_dir = Some(value),
            "--conf-dir" => conf_dir = Some(value),
            "--conf" => conf = Some(value),
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    let bin_dir = bin_dir.ok_or_else(|| format!("--bin-dir is required\n{USAGE}"))?;
    let mut done = Vec::new();
    let me = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let bytes = fs::read(&me).map_err(|e| format!("reading {}: {e}", me.display()))?;
    let dest = bin_dir.join("contrail-k8s-cni");
    put(&dest, &bytes, 0o755)?;
    done.push(format!(
        "installed {} ({} bytes)",
        dest.display(),
        bytes.len()
    ));
    match (conf_dir, conf) {
        (Some(dir), Some(file)) => {
            let text = fs::read(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
            // Refuse to install a config the plugin itself would reject on every pod.
            crate::config::parse(&text, None).map_err(|e| format!("{}: {e}", file.display()))?;
            let name = file
                .file_name()
                .ok_or_else(|| format!("{} is not a file name", file.display()))?;
            let dest = dir.join(name);
            put(&dest, &text, 0o644)?;
            done.push(format!("installed {}", dest.display()));
        }
        (None, None) => {}
        _ => return Err(format!("--conf-dir and --conf go together\n{USAGE}")),
    }
    Ok(done.join("\n"))
}
