//! Network namespaces: a handle on one, and the guard that enters it and always switches back.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sched::{CloneFlags, setns};

use super::Error;
use super::error::{HOME, Op};

/// An opened network namespace (the `CNI_NETNS` path).
///
/// The open file pins the namespace and names it by fd (for `setns` and `IFLA_NET_NS_FD`), so a
/// later unmount of the path cannot swap it under us.
#[derive(Debug)]
pub struct Netns {
    pub(super) file: File,
    pub(super) path: PathBuf,
}

/// Whether the network namespace at `path` (a sandbox's, as its runtime gave it) is provably
/// gone: its path no longer exists while the directory that held it does (the runtime's
/// `/run/netns`, mounted from the host). A `/proc/<pid>` path proves nothing from another PID
/// namespace, and a directory this process cannot see proves nothing either.
pub(crate) fn netns_gone(path: &str) -> bool {
    let p = Path::new(path);
    if !p.is_absolute() || p.starts_with("/proc") {
        return false;
    }
    let parent_there = p.parent().is_some_and(Path::is_dir);
    parent_there
        && matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

impl Netns {
    /// The plain `io::Error` is kept so that callers can tell a netns that is already gone
    /// (`NotFound`, fine for CNI DEL) from other failures. Refused here, before anything is
    /// created: a file that is not a namespace (`/etc/hostname`, a directory), a namespace of
    /// another kind (`/proc/self/ns/mnt`), and the network namespace this plugin runs in (the
    /// node's own, by whatever path), which a pod must never be given.
    pub fn open(path: &Path) -> io::Result<Netns> {
        let refuse = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        let file = File::open(path)?;
        let fs = nix::sys::statfs::fstatfs(&file)?;
        if fs.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
            return refuse("not a network namespace".into());
        }
        // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd's namespace.
        let kind = unsafe { libc::ioctl(file.as_raw_fd(), NS_GET_NSTYPE) };
        if kind != libc::CLONE_NEWNET {
            return refuse(format!(
                "a {} namespace, not a network namespace",
                ns_kind(kind)
            ));
        }
        let ours = std::fs::metadata("/proc/thread-self/ns/net")?;
        let theirs = file.metadata()?;
        if (ours.dev(), ours.ino()) == (theirs.dev(), theirs.ino()) {
            return refuse(
                "the network namespace this plugin runs in (the node's own): refusing to \
                 configure it"
                    .into(),
            );
        }
        Ok(Netns {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `_IO(0xb7, 0x3)` from linux/nsfs.h (libc does not define it): the kind of a namespace fd,
/// as a `CLONE_NEW*` flag.
pub(super) const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

pub(super) fn ns_kind(kind: libc::c_int) -> &'static str {
    match kind {
        libc::CLONE_NEWNS => "mount",
        libc::CLONE_NEWUTS => "UTS",
        libc::CLONE_NEWIPC => "IPC",
        libc::CLONE_NEWUSER => "user",
        libc::CLONE_NEWPID => "PID",
        libc::CLONE_NEWCGROUP => "cgroup",
        _ => "non-network",
    }
}

/// Keeps this thread in another netns until `leave` or drop, so that an early return or a
/// panic never leaves the thread in the container's netns.
pub(super) struct NetnsGuard {
    home: Option<File>,
}

impl NetnsGuard {
    pub(super) fn enter(ns: &Netns) -> Result<NetnsGuard, Error> {
        let home = File::open(HOME).map_err(|e| Error::new(Op::OpenHome, e))?;
        setns(&ns.file, CloneFlags::CLONE_NEWNET).map_err(|e| {
            let path = ns.path.clone();
            Error::new(Op::EnterNetns { path }, e.into())
        })?;
        Ok(NetnsGuard { home: Some(home) })
    }

    /// Switch back and report failure, which drop can only log.
    pub(super) fn leave(mut self) -> Result<(), Error> {
        self.home.take().map_or(Ok(()), |home| switch_back(&home))
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            if let Err(e) = switch_back(&home) {
                log::error!("{e}");
            }
        }
    }
}

pub(super) fn switch_back(home: &File) -> Result<(), Error> {
    setns(home, CloneFlags::CLONE_NEWNET).map_err(|e| Error::new(Op::SwitchBack, e.into()))
}
