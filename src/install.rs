//! `contrail-k8s-cni install`: puts this binary and the node-wide config in place, as the
//! DaemonSet's init container does on every node.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Copy this binary, and the node-wide config, into place.
#[derive(Debug, clap::Args)]
pub struct Options {
    /// Where CNI plugins live on the node (the kubelet's CNI bin dir).
    #[arg(long, value_name = "DIR")]
    pub bin_dir: PathBuf,
    /// Where the node's CNI configs live.
    #[arg(long, value_name = "DIR", requires = "conf")]
    pub conf_dir: Option<PathBuf>,
    /// The node-wide config to install there (checked as the plugin would read it).
    #[arg(long, value_name = "FILE", requires = "conf_dir")]
    pub conf: Option<PathBuf>,
}

/// Writes `bytes` to `dest` atomically: a temp file beside it, fsync, rename. A kubelet that
/// runs the plugin meanwhile executes either the old file or the new one, never half of one,
/// and replacing a binary that is running never fails with "text file busy".
fn put(dest: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = dest
        .parent()
        .ok_or_else(|| Error::config(dest.display(), "has no parent directory"))?;
    fs::create_dir_all(dir).map_err(Error::io("creating", dir))?;
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
        Error::io("installing", dest)(e)
    })
}

/// Installs; the message is for the operator's terminal.
pub fn run(opts: &Options) -> Result<String> {
    let mut done = Vec::new();
    let me = std::env::current_exe().map_err(Error::io("finding", Path::new("this binary")))?;
    let bytes = fs::read(&me).map_err(Error::io("reading", &me))?;
    let dest = opts.bin_dir.join("contrail-k8s-cni");
    put(&dest, &bytes, 0o755)?;
    done.push(format!(
        "installed {} ({} bytes)",
        dest.display(),
        bytes.len()
    ));
    if let (Some(dir), Some(file)) = (&opts.conf_dir, &opts.conf) {
        let text = fs::read(file).map_err(Error::io("reading", file))?;
        // Refuse to install a config the plugin itself would reject on every pod.
        crate::config::parse_named(&text, &file.display().to_string(), None)?;
        let name = file
            .file_name()
            .ok_or_else(|| Error::config(file.display(), "is not a file name"))?;
        let dest = dir.join(name);
        put(&dest, &text, 0o644)?;
        done.push(format!("installed {}", dest.display()));
    }
    Ok(done.join("\n"))
}
