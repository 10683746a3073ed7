//! Local state, in `config-dir/<vm-name>/`, one file per VMI a pod's attachment holds, in one of
//! three kinds (only the first is a port file the agent reloads on restart: it takes names that
//! start with a uuid, never a dot):
//! - `<vmi-uuid>`: an attachment, in the agent's POST /vm body format;
//! - `.<vmi-uuid>.reserved`: the claim of an attachment whose ADD failed: no interface, no
//!   registration; the attachment's retry takes it, its DEL (or the sandbox's replacement, or GC)
//!   drops it, and no other attachment takes its VMI;
//! - `.<vmi-uuid>.release` / `.<vmi-uuid>.reserve`: an attachment's file renamed when it is
//!   released, while the agent may still hold its registration; once the agent dropped it, the
//!   first goes and the second becomes `.reserved`. A rename needs no new space, so a DEL works
//!   on a full disk (`teardown` owns the order).
//!
//! Nothing is fsynced: a killed call cannot tear a file (each is renamed into place whole), and
//! what a power loss tears is recognised by its age and removed (see [`PodFiles::torn`]).
//!
//! Locks live in `config-dir/.locks/`, so that a lock never keeps a pod's directory alive.
//!
//! The directory is trusted no further than needed: everything below `config-dir` is opened
//! relative to it without following symlinks; a state file must be a regular file of at most
//! [`MAX_FILE`] bytes, opened without blocking (a FIFO does not hang a call); anything else is
//! reported as unreadable and left alone, and nothing is created or written outside
//! `config-dir`.

pub(crate) mod files;
pub(crate) mod ledger;
mod lock;
mod name;
mod pod;
mod record;
#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests make and remove their own scratch files"
)]
mod tests;

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::dir::Type;
use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{SFlag, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::ids::{ContainerId, IfName, VmName};
use crate::kernel::names::attachment_lock;
use crate::state::files::{entries, flags, io, is_kind, is_temp, mode, stat_at};

pub use lock::Lock;
use lock::{Discard, lock_files, stop_marker};
pub use name::Then;
pub use pod::{Pending, PodDir, PodFiles};
pub use record::{Record, Route, Unreadable};

/// Written into every state file, so a later format can tell ours apart.
pub const STATE_VERSION: &str = "1";
/// The locks' directory, in `config-dir`.
const LOCKS: &str = ".locks";
/// The longest pause between two tries of a busy lock.
const MAX_LOCK_PAUSE: Duration = Duration::from_millis(10);
/// A state file is a few hundred bytes: anything larger is not one.
pub const MAX_FILE: u64 = 64 * 1024;

/// Whether the sandbox holding `r` is provably gone: the path of its network namespace no
/// longer exists while the directory that held it does (see [`netns_gone`]), or it is of an
/// earlier boot (`boot` is this one's id: no network namespace survives a boot). A live
/// sandbox, or one whose namespace path proves nothing (a `/proc/<pid>` path), is not.
///
/// [`netns_gone`]: crate::kernel::netlink::netns_gone
pub(crate) fn sandbox_gone(r: &Record, boot: &str) -> bool {
    r.of_an_earlier_boot(boot) || crate::kernel::netlink::netns_gone(&r.netns)
}

/// `config-dir`, opened once per call; every path below it is resolved relative to it.
pub struct StateDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl StateDir {
    /// Opens `config-dir`, creating it (0700) and its locks' directory when missing.
    pub fn open(path: &Path) -> io::Result<StateDir> {
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .recursive(true)
            .create(path)?;
        StateDir::at(path)
    }

    /// Opens `config-dir` when it exists (a call with nothing to create).
    pub fn existing(path: &Path) -> io::Result<Option<StateDir>> {
        match StateDir::at(path) {
            Ok(dir) => Ok(Some(dir)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn at(path: &Path) -> io::Result<StateDir> {
        // config-dir itself is the operator's to place: followed if it is a symlink.
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            mode(0),
        )
        .map_err(io)?;
        Ok(StateDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pods: real directories with a VM name (never a symlink; dot-names are ours).
    pub fn pods(&self) -> io::Result<Vec<VmName>> {
        let mut pods = Vec::new();
        for (name, kind) in entries(&self.fd)? {
            let Ok(vm_name) = VmName::parse(name.as_str()) else {
                continue;
            };
            let dir = match kind {
                Some(t) => t == Type::Directory,
                None => stat_at(&self.fd, &name)?.is_some_and(|st| is_kind(&st, SFlag::S_IFDIR)),
            };
            if dir {
                pods.push(vm_name);
            }
        }
        pods.sort();
        Ok(pods)
    }

    /// Whether `vm_name` is a pod with state here (a real directory).
    pub fn has_pod(&self, vm_name: &VmName) -> io::Result<bool> {
        Ok(stat_at(&self.fd, vm_name.as_str())?.is_some_and(|st| is_kind(&st, SFlag::S_IFDIR)))
    }

    /// The pod holding an attachment of this container (on `ifname`, or on any interface)
    /// when the pod's name is unknown (a DEL without CNI_ARGS): a scan of every pod, unlocked.
    pub fn find_pod(
        &self,
        container_id: &ContainerId,
        ifname: Option<&IfName>,
    ) -> io::Result<Option<VmName>> {
        for vm_name in self.pods()? {
            let files = self.read_pod(&vm_name)?;
            let ours = |r: &Record| {
                r.container_id == *container_id && ifname.is_none_or(|i| r.ifname == *i)
            };
            if files.records.iter().chain(&files.reserved).any(ours) {
                return Ok(Some(vm_name));
            }
        }
        Ok(None)
    }

    /// Another pod whose state file names host interface `host_ifname` (a scan of every pod but
    /// `vm_name`, unlocked): such a link is that pod's, never one to replace.
    pub fn other_holder(&self, host_ifname: &str, vm_name: &VmName) -> io::Result<Option<VmName>> {
        for pod in self.pods()? {
            if pod == *vm_name {
                continue;
            }
            if self
                .read_pod(&pod)?
                .records
                .iter()
                .any(|r| r.host_ifname.as_str() == host_ifname)
            {
                return Ok(Some(pod));
            }
        }
        Ok(None)
    }

    /// What a pod's directory holds, read without its lock (for reports and scans).
    pub fn read_pod(&self, vm_name: &VmName) -> io::Result<PodFiles> {
        let dir = open_pod_dir(&self.fd, vm_name.as_str())?;
        PodFiles::read(dir.as_ref(), &self.path.join(vm_name))
    }

    /// Takes the pod's lock, and removes the temp files a killed writer left (every writer
    /// holds the lock, so any temp file seen here is stale).
    pub fn lock_pod(&self, vm_name: &VmName, deadline: Instant) -> io::Result<PodDir> {
        let lock = Lock::take(self, vm_name.to_string(), Discard::Keep, deadline)?;
        self.pod_dir(vm_name, lock)
    }

    /// [`StateDir::lock_pod`] if no call holds the pod's lock now: GC and the sweep skip a pod
    /// a call is working on rather than wait for it.
    pub fn try_lock_pod(&self, vm_name: &VmName) -> io::Result<Option<PodDir>> {
        match Lock::try_take(&self.locks()?, vm_name.as_str(), Discard::Keep)? {
            Some(lock) => self.pod_dir(vm_name, lock).map(Some),
            None => Ok(None),
        }
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "removes temporary files a killed call left in the pod's state directory"
    )]
    fn pod_dir(&self, vm_name: &VmName, lock: Lock) -> io::Result<PodDir> {
        let dir = open_pod_dir(&self.fd, vm_name.as_str())?;
        if let Some(dir) = &dir {
            for (name, _) in entries(dir)? {
                if is_temp(&name) {
                    log::info!("removing {name}, left in pod {vm_name} by a call that was killed");
                    let _ = unlinkat(dir, name.as_str(), UnlinkatFlags::NoRemoveDir);
                }
            }
        }
        Ok(PodDir {
            root: self.fd.try_clone()?,
            name: vm_name.to_string(),
            path: self.path.join(vm_name),
            dir,
            lock,
        })
    }

    /// The lock of one attachment (in thick mode, `ifname` "": the sandbox), held by its ADD
    /// for the whole call and by its DEL: a duplicate ADD waits for the first instead of
    /// undoing its work, and a DEL never runs alongside an ADD of what it deletes.
    pub fn lock_attachment(
        &self,
        vm_name: &VmName,
        container_id: &ContainerId,
        ifname: &str,
        deadline: Instant,
    ) -> io::Result<Lock> {
        Lock::take(
            self,
            attachment_lock(vm_name, container_id, ifname),
            Discard::OnDrop,
            deadline,
        )
    }

    /// [`StateDir::lock_attachment`] if no call holds it now.
    pub fn try_lock_attachment(
        &self,
        vm_name: &VmName,
        container_id: &ContainerId,
        ifname: &str,
    ) -> io::Result<Option<Lock>> {
        Lock::try_take(
            &self.locks()?,
            &attachment_lock(vm_name, container_id, ifname),
            Discard::OnDrop,
        )
    }

    /// Asks the call holding an attachment's lock (an ADD its runtime gave up on) to stop: it
    /// looks for this between its polls of the agent ([`Lock::stop_probe`]).
    pub fn stop_attachment(
        &self,
        vm_name: &VmName,
        container_id: &ContainerId,
        ifname: &str,
    ) -> io::Result<()> {
        let name = stop_marker(&attachment_lock(vm_name, container_id, ifname));
        Lock::open(&self.locks()?, &name).map(drop)
    }

    /// Lock files that nobody holds and no pod needs (left by a killed call, or a pod's whose
    /// directory went with a killed DEL): removed, and their names returned.
    pub fn sweep_locks(&self) -> io::Result<Vec<String>> {
        self.stale_locks(true)
    }

    /// The lock files [`StateDir::sweep_locks`] would remove, left in place.
    pub fn stale_locks(&self, remove: bool) -> io::Result<Vec<String>> {
        let Some(locks) = self.locks_dir()? else {
            return Ok(Vec::new());
        };
        let mut stale = Vec::new();
        for name in lock_files(&locks)? {
            if self.stale_lock(&locks, &name, remove)? {
                stale.push(name);
            }
        }
        Ok(stale)
    }

    /// The pod's lock file, when the pod has no directory and no call holds the lock: a call
    /// killed between taking the lock and writing the pod's first file (or while closing its
    /// directory) left it. Removed, for the DEL that finds nothing recorded; nothing is
    /// created when there is none (a DEL on a full disk still succeeds).
    pub fn drop_stale_pod_lock(&self, vm_name: &VmName) -> io::Result<()> {
        let Some(locks) = self.locks_dir()? else {
            return Ok(());
        };
        let name = vm_name.as_str();
        if stat_at(&locks, name)?.is_some() && self.stale_lock(&locks, name, true)? {
            log::info!("removed lock {LOCKS}/{name}, left by a call that was killed");
        }
        Ok(())
    }

    /// Whether lock `name` is stale (nobody holds it, and it is an attachment's, or a pod's
    /// without a directory); removed when `remove`.
    fn stale_lock(&self, locks: &OwnedFd, name: &str, remove: bool) -> io::Result<bool> {
        let pod = VmName::parse(name.split('@').next().unwrap_or_default()).ok();
        let is_add = name.contains('@');
        let held = match &pod {
            Some(pod) => self.has_pod(pod)?,
            None => false,
        };
        if !is_add && held {
            return Ok(false);
        }
        let Some(lock) = Lock::try_take(locks, name, Discard::Keep)? else {
            return Ok(false);
        };
        if remove {
            lock.remove()?;
        }
        Ok(true)
    }

    /// The locks' directory, created when missing (a config-dir an older version made).
    fn locks(&self) -> io::Result<OwnedFd> {
        match mkdirat(&self.fd, LOCKS, mode(0o700)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(io(e)),
        }
        openat(
            &self.fd,
            LOCKS,
            flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY),
            mode(0),
        )
        .map_err(io)
    }

    fn locks_dir(&self) -> io::Result<Option<OwnedFd>> {
        match openat(
            &self.fd,
            LOCKS,
            flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY),
            mode(0),
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io(e)),
        }
    }

    /// Entries of `config-dir` that are not pods (files, symlinks, other names), and entries
    /// of its locks' directory that are not lock files: not this plugin's, left alone.
    pub fn strays(&self) -> io::Result<Vec<String>> {
        let pods = self.pods()?;
        let mut strays: Vec<String> = entries(&self.fd)?
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| {
                name != LOCKS
                    && name != crate::agent::budget::FILE
                    && !pods.iter().any(|p| p.as_str() == name)
            })
            .collect();
        if let Some(locks) = self.locks_dir()? {
            let files = lock_files(&locks)?;
            strays.extend(
                entries(&locks)?
                    .into_iter()
                    .filter(|(name, _)| !files.contains(name))
                    .map(|(name, _)| format!("{LOCKS}/{name}")),
            );
        }
        strays.sort();
        Ok(strays)
    }
}

fn open_pod_dir(root: &OwnedFd, vm_name: &str) -> io::Result<Option<OwnedFd>> {
    match openat(
        root,
        vm_name,
        flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY),
        mode(0),
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ENOENT) => Ok(None),
        Err(Errno::ELOOP | Errno::ENOTDIR) => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "pod state {} is not a directory (a symlink?): left alone",
                vm_name
            ),
        )),
        Err(e) => Err(io(e)),
    }
}
