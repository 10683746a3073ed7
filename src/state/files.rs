//! Files the plugin reads and writes, opened the one careful way: relative to a directory the
//! node configured, never through a symbolic link, never blocking (a FIFO fails at once instead
//! of hanging a call), regular files only, and reads bounded. One atomic write (temp file beside
//! the target, rename) for state files, the metrics file and installed files.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crate::crash::{self, Step};
use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

pub(crate) fn mode(bits: u32) -> Mode {
    Mode::from_bits_truncate(bits)
}

/// Open flags below a node directory: never through a symlink, never blocking, never inherited.
pub(crate) fn flags(extra: OFlag) -> OFlag {
    OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | extra
}

pub(crate) fn is_kind(st: &FileStat, kind: SFlag) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == kind
}

pub(crate) fn io(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// A directory the node configured (config-dir, the metrics file's), followed if it is a
/// symlink: the operator places it. Everything below it is opened relative to this fd.
pub(crate) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        mode(0),
    )
    .map_err(io)
}

/// What a name in `dir` is, without following it.
pub(crate) fn stat_at(dir: impl AsFd, name: &str) -> io::Result<Option<FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(io(e)),
    }
}

/// The names in a directory (by fd), with their types as the directory reports them.
pub(crate) fn entries(dir: impl AsFd) -> io::Result<Vec<(String, Option<Type>)>> {
    let fd = dir.as_fd().try_clone_to_owned()?;
    let mut d = Dir::from_fd(fd).map_err(io)?;
    let mut names = Vec::new();
    for e in d.iter() {
        let e = e.map_err(io)?;
        let Ok(name) = e.file_name().to_str() else {
            continue;
        };
        if name != "." && name != ".." {
            names.push((name.to_string(), e.file_type()));
        }
    }
    Ok(names)
}

/// A file that is not a regular one, refused: the error says what it is instead.
fn refused(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{what}, not a regular file"),
    )
}

/// What a file is, for messages.
pub(crate) fn kind_of(st: &FileStat) -> &'static str {
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFLNK => "a symbolic link",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFSOCK => "a socket",
        _ => "something else",
    }
}

/// Opens `name` in `dir` with `how` (plus [`flags`]): a regular file, or an error (kind
/// `InvalidData`) saying what it is instead: a symbolic link, a FIFO, a device, a directory.
pub(crate) fn open_regular(dir: impl AsFd, name: &str, how: OFlag, perm: u32) -> io::Result<File> {
    let fd = match openat(dir, name, flags(how), mode(perm)) {
        Ok(fd) => fd,
        Err(Errno::ELOOP) => return Err(refused("a symbolic link")),
        // A non-blocking open of a FIFO for writing fails when it has no reader.
        Err(Errno::ENXIO) => return Err(refused("a FIFO")),
        Err(Errno::EISDIR) => return Err(refused("a directory")),
        Err(e) => return Err(io(e)),
    };
    let st = fstat(&fd).map_err(io)?;
    if !is_kind(&st, SFlag::S_IFREG) {
        return Err(refused(kind_of(&st)));
    }
    Ok(File::from(fd))
}

/// Reads a regular file of at most `max` bytes; a larger one is refused (`InvalidData`).
pub(crate) fn read_bounded(dir: impl AsFd, name: &str, max: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(dir, name, OFlag::O_RDONLY, 0)?;
    let size = file.metadata()?.len();
    let too_large = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        )
    };
    if size > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Removes `name` from `dir` if it is there.
#[allow(
    clippy::disallowed_methods,
    reason = "the one remover of a state file, in a directory its caller opened"
)]
pub(crate) fn unlink(dir: impl AsFd, name: &str) -> io::Result<()> {
    match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Whether a name is a temp file of [`write_atomic`].
pub(crate) fn is_temp(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".tmp")
}

/// The kernel's id of this boot (`/proc/sys/kernel/random/boot_id`, a uuid); empty when it
/// cannot be read.
pub(crate) fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Time since boot on CLOCK_BOOTTIME, which no clock step moves (suspend included).
pub(crate) fn uptime() -> std::time::Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map_or(std::time::Duration::ZERO, |t| {
            std::time::Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
        })
}

/// Whether a file was last written before this boot: a call in flight never leaves one, only
/// a machine that went down. The boot time is the wall clock now minus the time since boot, as
/// the kernel itself reports it (`btime`), so a wall clock stepped forward after boot by more
/// than a file's age makes that file look older than the boot.
pub(crate) fn written_before_boot(st: &FileStat) -> bool {
    let Ok(up) = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME) else {
        return false;
    };
    let up = std::time::Duration::new(up.tv_sec() as u64, up.tv_nsec() as u32);
    let Some(boot) = std::time::SystemTime::now().checked_sub(up) else {
        return false;
    };
    let written = std::time::UNIX_EPOCH
        + std::time::Duration::new(st.st_mtime as u64, st.st_mtime_nsec as u32);
    written < boot
}

/// Whether [`write_atomic`] makes the content durable before the rename (fsync).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sync {
    /// A kill cannot tear the file either way; a power loss may leave it empty (state files:
    /// see `state::PodFiles::torn`).
    No,
    /// After a power loss the file is the old one or the whole new one.
    Yes,
}

/// Writes `name` in `dir` atomically: a temp file beside it (a stale one, even a symlink, removed
/// first; created exclusively, never followed), optionally fsynced, renamed over the target.
/// Readers never see half a file; on failure the temp file goes.
#[allow(
    clippy::disallowed_methods,
    reason = "renames the temporary file it wrote into place"
)]
pub(crate) fn write_atomic(
    dir: impl AsFd + Copy,
    name: &str,
    body: &[u8],
    perm: u32,
    sync: Sync,
) -> io::Result<()> {
    let tmp = format!(".{name}.tmp");
    unlink(dir, &tmp)?;
    let mut file = open_regular(
        dir,
        &tmp,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        perm,
    )?;
    let written = (|| {
        file.write_all(body)?;
        if sync == Sync::Yes {
            file.sync_all()?;
        }
        crash::point(Step::Renaming);
        renameat(dir, tmp.as_str(), dir, name).map_err(io)
    })();
    if written.is_err() {
        let _ = unlink(dir, &tmp);
    }
    written
}
