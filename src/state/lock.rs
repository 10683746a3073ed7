//! Locks in `config-dir/.locks/`.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::dir::Type;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::{SFlag, fstat};

use super::{LOCKS, MAX_LOCK_PAUSE, StateDir, files};
use crate::state::files::{entries, io, is_kind, stat_at};

/// The file that asks the holder of a lock to stop; swept like a stale lock when left.
pub(super) fn stop_marker(lock: &str) -> String {
    format!("{lock}.stop")
}

/// The regular files in the locks' directory (anything else there is not a lock of ours).
pub(super) fn lock_files(locks: &OwnedFd) -> io::Result<Vec<String>> {
    let mut files = Vec::new();
    for (name, kind) in entries(locks)? {
        let regular = match kind {
            Some(t) => t == Type::File,
            None => stat_at(locks, &name)?.is_some_and(|st| is_kind(&st, SFlag::S_IFREG)),
        };
        if regular {
            files.push(name);
        }
    }
    Ok(files)
}

/// A flock on `config-dir/.locks/<name>`, created on demand, held until dropped. Whoever finds
/// the file no longer needed removes it while holding it; a waiter that then gets the lock sees
/// that the path is another file (or none) and starts over on a fresh one.
///
/// A guard: a lock taken with [`Discard::OnDrop`] (an attachment's: one call's) removes its
/// file when dropped, on every return path; a pod's stays while the pod has a directory.
pub struct Lock {
    /// Held until dropped (after [`Drop::drop`] removed the file, when it does).
    _file: Flock<File>,
    locks: OwnedFd,
    name: String,
    discard: Discard,
}

/// What becomes of a lock's file when the lock is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Discard {
    /// Removed: nothing outlives the call that took the lock.
    OnDrop,
    /// Kept (a pod's lock while the pod has files; [`PodDir::close`](super::PodDir::close)
    /// removes it with the directory).
    Keep,
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.discard == Discard::OnDrop {
            if let Err(e) = files::unlink(&self.locks, &self.name) {
                log::warn!("removing lock {LOCKS}/{}: {e}", self.name);
            }
        }
    }
}

impl Lock {
    /// The lock, waited for until `deadline` at most: a holder that is stopped (SIGSTOP, a
    /// frozen cgroup) or slow never holds a call up beyond its own deadline. Past it, an error
    /// of kind `TimedOut` (see [`crate::error::Error::locking`]). Asked again and again with a
    /// pause that grows to [`MAX_LOCK_PAUSE`]: a blocking flock cannot be given a deadline.
    pub(super) fn take(
        state: &StateDir,
        name: String,
        discard: Discard,
        deadline: Instant,
    ) -> io::Result<Lock> {
        let locks = state.locks()?;
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(lock) = Lock::try_take(&locks, &name, discard)? {
                return Ok(lock);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("lock {LOCKS}/{name} is held by another call"),
                ));
            }
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(MAX_LOCK_PAUSE);
        }
    }

    /// The lock if nobody holds it now.
    pub(super) fn try_take(
        locks: &OwnedFd,
        name: &str,
        discard: Discard,
    ) -> io::Result<Option<Lock>> {
        let file = Lock::open(locks, name)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) if Lock::current(locks, name, &file)? => Ok(Some(Lock {
                _file: file,
                locks: locks.try_clone()?,
                name: name.to_string(),
                discard,
            })),
            Ok(_) | Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(io(e)),
        }
    }

    pub(super) fn open(locks: &OwnedFd, name: &str) -> io::Result<File> {
        files::open_regular(locks, name, OFlag::O_RDWR | OFlag::O_CREAT, 0o600)
            .map_err(|e| io::Error::new(e.kind(), format!("lock {name}: {e}: refusing it")))
    }

    /// Whether the locked file is still the one at the path.
    fn current(locks: &OwnedFd, name: &str, file: &Flock<File>) -> io::Result<bool> {
        let held = fstat(file.as_fd()).map_err(io)?;
        Ok(stat_at(locks, name)?
            .is_some_and(|st| st.st_ino == held.st_ino && st.st_dev == held.st_dev))
    }

    /// Removes the lock file (while it is held) and releases it, saying whether the removal
    /// failed (dropping the lock only logs that).
    pub(super) fn remove(mut self) -> io::Result<()> {
        self.discard = Discard::Keep;
        files::unlink(&self.locks, &self.name)
    }

    /// What tells whether another call asked this lock's holder to stop
    /// ([`StateDir::stop_attachment`]), for the holder to ask between its polls.
    pub fn stop_probe(&self) -> io::Result<StopProbe> {
        Ok(StopProbe {
            locks: self.locks.try_clone()?,
            marker: stop_marker(&self.name),
        })
    }

    /// Withdraws a request to stop: the one this call answers, or one a killed call left.
    pub fn clear_stop(&self) -> io::Result<()> {
        files::unlink(&self.locks, &stop_marker(&self.name))
    }
}

/// See [`Lock::stop_probe`].
pub struct StopProbe {
    locks: OwnedFd,
    marker: String,
}

impl StopProbe {
    pub fn requested(&self) -> bool {
        matches!(stat_at(&self.locks, &self.marker), Ok(Some(_)))
    }
}
