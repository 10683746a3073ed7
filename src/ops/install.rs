//! `contrail-k8s-cni install`: puts this binary and the node-wide config in place, as the
//! DaemonSet's init container does on every node.

use std::fs::{self, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::state::files::{self, Sync};

const BINARY: &str = "contrail-k8s-cni";

/// What to install, and whether to keep watching (`cli` documents each option).
#[derive(Debug)]
pub struct Options {
    pub bin_dir: PathBuf,
    /// With `conf`: the node's CNI config directory.
    pub conf_dir: Option<PathBuf>,
    pub conf: Option<PathBuf>,
    pub watch: bool,
    /// Seconds; 0: no sweep.
    pub sweep_interval: u64,
    /// Seconds.
    pub sweep_grace: u64,
}

/// Writes `bytes` to `dest` atomically and durably (see [`files::write_atomic`]): a kubelet
/// that runs the plugin meanwhile executes either the old file or the new one, never half of
/// one, and replacing a binary that is running never fails with "text file busy".
#[allow(
    clippy::disallowed_methods,
    reason = "the operator's install writes the node's CNI config and binary"
)]
fn put(dest: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let (dir, name) = match (dest.parent(), dest.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) => (dir, name),
        _ => {
            return Err(Error::NotAFile {
                path: dest.to_path_buf(),
            });
        }
    };
    fs::create_dir_all(dir).map_err(Error::io("creating", dir))?;
    files::open_dir(dir)
        .and_then(|d| files::write_atomic(&d, name, bytes, mode, Sync::Yes))
        .map_err(Error::io("installing", dest))
}

/// Installs; the message is for the operator's terminal. With `--watch`, then keeps running.
pub fn run(opts: &Options) -> Result<String> {
    let me = own_binary()?;
    let dest = opts.bin_dir.join(BINARY);
    put(&dest, &me, 0o755)?;
    let mut done = vec![format!("installed {} ({} bytes)", dest.display(), me.len())];
    if let (Some(dir), Some(file)) = (&opts.conf_dir, &opts.conf) {
        let dest = install_conf(dir, file)?;
        done.push(format!("installed {}", dest.display()));
    }
    let done = done.join("\n");
    if !opts.watch {
        return Ok(done);
    }
    crate::ops::logging::init(None, log::LevelFilter::Info);
    log::info!("{}", done.replace('\n', "; "));
    watch(opts, &me);
    Ok("stopped on a signal".into())
}

fn own_binary() -> Result<Vec<u8>> {
    let me = std::env::current_exe().map_err(Error::io("finding", Path::new("this binary")))?;
    fs::read(&me).map_err(Error::io("reading", &me))
}

/// Installs the node-wide config `file` into `dir`, refusing a config the plugin itself would
/// reject on every pod.
fn install_conf(dir: &Path, file: &Path) -> Result<PathBuf> {
    let text = fs::read(file).map_err(Error::io("reading", file))?;
    // The node's settings, and the same file as kubelet hands it to the plugin on stdin.
    let node = crate::config::load_node_from(file)?;
    let conf = crate::config::parse(&text, &node)?;
    if let Some(refusal) = conf.refusal() {
        return Err(refusal);
    }
    let name = file.file_name().ok_or_else(|| Error::NotAFile {
        path: file.to_path_buf(),
    })?;
    let dest = dir.join(name);
    put(&dest, &text, 0o644)?;
    Ok(dest)
}

/// Set by SIGTERM or SIGINT: `--watch` ends its loop and exits 0.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// How often `--watch` looks at the ConfigMap and the installed binary: a change reaches the
/// node within this.
const WATCH_TICK: Duration = Duration::from_millis(200);

/// What tells a file changed without reading it.
fn stamp(m: &Metadata) -> (u64, u64, i64, i64) {
    (m.ino(), m.len(), m.mtime(), m.mtime_nsec())
}

/// `install --watch`: installs the config again when the mounted ConfigMap changes (kubelet
/// swaps its `..data` link; the file is read through it), installs this binary again when
/// something else replaced the node's copy, and sweeps (see [`crate::commands::node::sweep`]) every
/// `--sweep-interval`, until SIGTERM.
fn watch(opts: &Options, me: &[u8]) {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, stop as *const () as libc::sighandler_t);
    }
    let bin = opts.bin_dir.join(BINARY);
    let stamp_of = |p: &Path| fs::metadata(p).ok().map(|m| stamp(&m));
    let mut seen_bin = stamp_of(&bin);
    let mut seen_conf = opts.conf.as_ref().and_then(|f| fs::read(f).ok());
    let interval = Duration::from_secs(opts.sweep_interval);
    let mut next_sweep = Instant::now() + interval;
    while !STOP.load(Ordering::Relaxed) {
        if stamp_of(&bin) != seen_bin {
            if fs::read(&bin).ok().as_deref() != Some(me) {
                match put(&bin, me, 0o755) {
                    Ok(()) => {
                        log::info!("{} was replaced: installed this one again", bin.display())
                    }
                    Err(e) => log::error!("{e}"),
                }
            }
            seen_bin = stamp_of(&bin);
        }
        if let (Some(dir), Some(file)) = (&opts.conf_dir, &opts.conf) {
            let text = fs::read(file).ok();
            if text.is_some() && text != seen_conf {
                match install_conf(dir, file) {
                    Ok(dest) => {
                        log::info!("{} changed: installed {}", file.display(), dest.display())
                    }
                    Err(e) => log::error!(
                        "{} changed but is refused; the node's copy is left as it was: {e}",
                        file.display()
                    ),
                }
                seen_conf = text;
            }
        }
        if let Some(file) = opts.conf.as_ref().filter(|_| !interval.is_zero()) {
            if Instant::now() >= next_sweep {
                sweep(file, Duration::from_secs(opts.sweep_grace));
                next_sweep = Instant::now() + interval;
            }
        }
        std::thread::sleep(WATCH_TICK);
    }
    log::info!("stopping on a signal");
}

/// One sweep with the config as it is now; a failure is logged, and the next sweep tries again.
fn sweep(file: &Path, grace: Duration) {
    let swept = crate::config::load_node_from(file)
        .and_then(|node| crate::commands::node::sweep(&node.contrail, grace));
    if let Err(e) = swept {
        log::error!("sweep: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destination_that_names_no_file_is_refused_as_such() {
        let e = put(Path::new("/"), b"", 0o644).unwrap_err();
        assert_eq!(e.code(), crate::error::code::INVALID_CONFIG);
        assert_eq!(e.to_string(), "/: is not a file's path");
    }
}
