//! The host side of a vhost-user attachment (docs/vhost-user.md): no kernel interface, but a
//! per-pod directory `<vhost-dir>/<pod-uid>` the pod mounts (and only it), where the DPDK
//! application creates and listens on `<ifname>.sock`, and a symlink
//! `<vrouter-socket-dir>/uvh_vif_<system-name>` into it, the fixed path vrouter-dpdk connects to
//! (as the vhost-user client; `connect()` follows symlinks). The application makes its socket;
//! the attachment's removal takes it (an application that exits, or is killed, leaves it
//! behind, and without the port it leads nowhere).
//!
//! The pod's directory is the pod's: it may put anything at any name there. Everything in it is
//! reached through the directory's descriptor, opened without following a link, and only what
//! is of the kind this plugin makes is removed (a regular file at the JSON file's name, a socket
//! at the socket's); anything else is left, and said so, and never stops a release. Every name
//! the plugin writes or removes is derived from the attachment: the pod's UID (checked to be no
//! other pod's), the interface, and for the device-info file the network and the sandbox.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{SFlag, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::config::Contrail;
use crate::crash::{self, Step};
use crate::error::{Error, Result};
use crate::kernel::conflict::Conflict;
use crate::state::files;

/// A unix socket's path is at most 108 bytes with its NUL (`sun_path`); vrouter-dpdk and DPDK
/// 22.11's virtio-user silently cut it at 107. Every path is checked, never cut.
pub const MAX_SOCKET_PATH: usize = 107;

/// The kernel's `ST_NOSYMFOLLOW` (`linux/statfs.h`, Linux 5.10; not in the libc crate).
const ST_NOSYMFOLLOW: libc::c_ulong = 0x2000;

/// The prefix vrouter-dpdk gives the socket of a vhost-user port in its socket directory.
pub const UVH_PREFIX: &str = "uvh_vif_";

/// The node's directories for vhost-user attachments, from its (node-scoped) keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    /// `vrouter-socket-dir`.
    pub vrouter: PathBuf,
    /// `vhost-dir`: the root of the per-pod directories.
    pub root: PathBuf,
    /// `vhost-pod-dir`: where a pod mounts its own directory.
    pub pod_mount: PathBuf,
    /// `device-info-dir`: the only directory a device-info file is written in.
    pub device_info: PathBuf,
}

/// Where one attachment's pieces are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `<vrouter-socket-dir>/uvh_vif_<system-name>`, the symlink vrouter-dpdk connects to.
    pub link: PathBuf,
    /// `<vhost-dir>/<pod-uid>`.
    pub pod_dir: PathBuf,
    /// The socket as the node sees it, the symlink's target.
    pub socket: PathBuf,
    /// The socket as the pod sees it (`socketPath`, the application's `path=`).
    pub pod_socket: PathBuf,
    /// The JSON file next to the socket that tells the application who it is.
    pub info: PathBuf,
    /// The runtime's device-info file (NPWG), when it asked for one.
    pub device_info: Option<PathBuf>,
}

impl Dirs {
    pub fn new(conf: &Contrail) -> Dirs {
        Dirs {
            vrouter: conf.vrouter_socket_dir.clone(),
            root: conf.vhost_dir.clone(),
            pod_mount: conf.vhost_pod_dir.clone(),
            device_info: conf.device_info_dir.clone(),
        }
    }

    /// The paths of the attachment `ifname` of pod `pod_uid`, registered as `system_name`
    /// (identifiers already checked: no `/`, never `..`). Not checked for length: for removal.
    pub fn paths(&self, pod_uid: &str, system_name: &str, ifname: &str) -> Paths {
        let pod_dir = self.root.join(pod_uid);
        let socket_name = format!("{ifname}.sock");
        Paths {
            link: link_path(self, system_name),
            socket: pod_dir.join(&socket_name),
            pod_socket: self.pod_mount.join(&socket_name),
            info: pod_dir.join(format!("{ifname}.json")),
            pod_dir,
            device_info: None,
        }
    }

    /// [`Dirs::paths`], refused (code 7, naming the key whose directory makes it too long) when
    /// a socket path, as the node, vrouter-dpdk or the pod sees it, is over
    /// [`MAX_SOCKET_PATH`] bytes: checked before anything is made.
    pub fn checked_paths(&self, pod_uid: &str, system_name: &str, ifname: &str) -> Result<Paths> {
        let p = self.paths(pod_uid, system_name, ifname);
        for (key, path) in [
            ("contrail.vrouter-socket-dir", &p.link),
            ("contrail.vhost-dir", &p.socket),
            ("contrail.vhost-pod-dir", &p.pod_socket),
        ] {
            let len = path.as_os_str().len();
            if len > MAX_SOCKET_PATH {
                return Err(Error::config(
                    key,
                    format!(
                        "the vhost-user socket path {} is {len} bytes: unix sockets take at \
                         most {MAX_SOCKET_PATH} (vrouter-dpdk and DPDK would cut it)",
                        path.display()
                    ),
                ));
            }
        }
        Ok(p)
    }

    /// Whether `vhost-dir` is on a mount that follows no symlink (`nosymfollow`), refused
    /// (code 7) otherwise, before anything is made. A pod can put a symlink where its socket
    /// goes, and vrouter-dpdk, root in the host's mount namespace, would connect wherever it
    /// points: another pod's socket, the vRouter's own. On such a mount that connect fails
    /// (`ELOOP`), while the link in the vRouter's directory, on another mount, still leads in.
    pub fn check_guarded(&self) -> Result<()> {
        let refuse = |why: String| {
            Err(Error::config(
                "contrail.vhost-dir",
                format!(
                    "{} {why}: a pod could put a symlink where its socket goes, which \
                     vrouter-dpdk would follow; mount it first (Linux 5.10 or later): mount -t \
                     tmpfs -o nosymfollow,nodev,noexec,nosuid,mode=0755 tmpfs {}",
                    self.root.display(),
                    self.root.display()
                ),
            ))
        };
        match nosymfollow(&self.root) {
            Ok(true) => Ok(()),
            Ok(false) => refuse("is not on a nosymfollow mount".into()),
            Err(e) => refuse(format!("cannot be checked ({e})")),
        }
    }

    /// The device-info file a runtime asks for (`runtimeConfig.CNIDeviceInfoFile`, which Multus
    /// sets when the pod got a device for the network), if any. The path arrives with the
    /// network's config, which a tenant may write: it is taken only when it is this call's, the
    /// name Multus gives it ([`device_info_name`]) in `device-info-dir`, and refused (code 7)
    /// otherwise, before anything is made: a NAD naming another attachment's file could
    /// overwrite it, and its DEL delete it.
    pub fn device_info_file(
        &self,
        asked: Option<&serde_json::Value>,
        network: &str,
        container_id: &str,
        ifname: &str,
    ) -> Result<Option<PathBuf>> {
        let Some(asked) = asked else {
            return Ok(None);
        };
        const KEY: &str = "runtimeConfig.CNIDeviceInfoFile";
        let path = asked
            .as_str()
            .map(Path::new)
            .ok_or_else(|| Error::config(KEY, "must be a path"))?;
        let ours = self.device_info_path(network, container_id, ifname);
        if path != ours {
            return Err(Error::config(
                KEY,
                format!(
                    "{} is not this attachment's device-info file, {}: a device-info file is \
                     written only under the name Multus gives the attachment's \
                     (<network>-<CNI_CONTAINERID>_<CNI_IFNAME>) in device-info-dir, the node's",
                    crate::text::Shown(&path.display().to_string()),
                    ours.display()
                ),
            ));
        }
        Ok(Some(ours))
    }

    /// The device-info file of the attachment `ifname` of sandbox `container_id` on `network`.
    pub fn device_info_path(&self, network: &str, container_id: &str, ifname: &str) -> PathBuf {
        self.device_info
            .join(device_info_name(network, container_id, ifname))
    }
}

/// The name Multus gives a delegate's device-info file (multus-cni `pkg/types/conf.go`
/// `delegateRuntimeConfig`, network-attachment-definition-client `GetCNIDeviceInfoPath`):
/// `<network>-<CNI_CONTAINERID>_<CNI_IFNAME>`, every `/` made `-`. Derived from the call only:
/// the network's name, the sandbox and the interface, each checked to hold no `/` or `..`
/// anyway.
pub fn device_info_name(network: &str, container_id: &str, ifname: &str) -> String {
    format!("{network}-{container_id}_{ifname}").replace('/', "-")
}

/// The NPWG device-info (spec 1.1.0) of a vhost-user attachment: the application is the server,
/// at its socket path as the pod sees it.
pub fn device_info(p: &Paths) -> serde_json::Value {
    serde_json::json!({
        "type": "vhost-user",
        "version": "1.1.0",
        "vhost-user": { "mode": "server", "path": p.pod_socket },
    })
}

/// Makes the pod's directory (and the root) and the symlink vrouter-dpdk connects to. A symlink
/// already there that points into `root` is a leftover of this plugin's (the name is fixed by
/// the VMI) and is replaced; anything else is refused, as is a pod's directory that is not one.
/// A failure leaves no symlink of ours.
#[allow(
    clippy::disallowed_methods,
    reason = "replaces the attachment's own uvh_vif_ link, named from its VMI"
)]
pub fn create(dirs: &Dirs, p: &Paths) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&dirs.root)
        .map_err(Error::io("making the vhost-user directory", &dirs.root))?;
    let root = files::open_dir(&dirs.root)
        .map_err(Error::io("opening the vhost-user directory", &dirs.root))?;
    match mkdirat(&root, pod_uid(p), files::mode(0o755)) {
        // The kubelet may have made it for the pod's subPathExpr mount: a directory will do.
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => {
            return Err(Error::io("making the vhost-user directory", &p.pod_dir)(
                files::io(e),
            ));
        }
    }
    // What the pod put where the JSON file goes refuses the attachment before it is registered.
    writable(&pod_dir_to_fill(&root, p)?, &p.info)?;
    crash::point(Step::VhostDir);
    match symlink(&p.socket, &p.link) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if !is_our_link(&p.link, &dirs.root) {
                return Err(not_ours(&p.link));
            }
            log::info!("replacing leftover vhost-user link {}", p.link.display());
            fs::remove_file(&p.link).map_err(Error::io("removing the vhost-user link", &p.link))?;
            symlink(&p.socket, &p.link)
        }
        other => other,
    }
    .map_err(Error::io("making the vhost-user link", &p.link))
}

/// Removes what is the attachment's: the symlink (only one pointing into `root`), the
/// device-info file (only this attachment's, a regular file), and in the pod's directory the
/// JSON file (a regular file) and the application's socket (a socket); then the directory when
/// nothing else is in it. What is already gone counts as removed; anything else at those names,
/// a pod's directory that is not one, and one that is not the attachment's pod's (`owner`
/// false, see [`Record::owns_its_vhost_dir`](crate::state::Record::owns_its_vhost_dir)) are
/// left alone, logged, and stop nothing. An error is the node's (the link's directory, the
/// vhost-user root).
pub fn remove(dirs: &Dirs, p: &Paths, owner: bool) -> Result<()> {
    remove_link(dirs, &p.link)?;
    let mut left = Vec::new();
    if let Some(d) = &p.device_info {
        match (d.parent(), d.file_name().and_then(|n| n.to_str())) {
            (Some(dir), Some(name)) if dir == dirs.device_info => match files::open_dir(dir) {
                Ok(fd) => remove_at(&fd, dir, name, SFlag::S_IFREG, &mut left),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => left.push(format!("{}: {e}", d.display())),
            },
            _ => left.push(format!(
                "{}: not this attachment's device-info file",
                d.display()
            )),
        }
    }
    if owner {
        remove_in_pod_dir(dirs, p, &mut left)?;
    } else {
        left.push(format!(
            "{}: another pod's directory (the attachment was made with that pod's UID)",
            p.pod_dir.display()
        ));
    }
    for why in &left {
        log::warn!("left alone, not this plugin's to remove: {why}");
    }
    Ok(())
}

/// [`remove`] in the pod's directory, then the directory when empty.
#[allow(
    clippy::disallowed_methods,
    reason = "removes the pod's directory once empty, through vhost-dir's descriptor, never following a link"
)]
fn remove_in_pod_dir(dirs: &Dirs, p: &Paths, left: &mut Vec<String>) -> Result<()> {
    let root = match files::open_dir(&dirs.root) {
        Ok(fd) => fd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("opening the vhost-user directory", &dirs.root)(e)),
    };
    match open_pod_dir(&root, p) {
        Ok(Some(dir)) => {
            // Without its port the socket leads nowhere. No liveness probe: a DPDK 22.11
            // virtio-user server accepts one connection only, and a probe's would leave it deaf.
            for (path, kind) in [
                (&p.info, SFlag::S_IFREG),
                (&tmp_of(&p.info), SFlag::S_IFREG),
                (&p.socket, SFlag::S_IFSOCK),
            ] {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                remove_at(&dir, &p.pod_dir, name, kind, left);
            }
        }
        Ok(None) => {
            left.push(format!("{}: not a directory", p.pod_dir.display()));
            return Ok(());
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            left.push(format!("{}: {e}", p.pod_dir.display()));
            return Ok(());
        }
    }
    match unlinkat(&root, pod_uid(p), UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(Errno::ENOTEMPTY | Errno::EEXIST) => {
            log::debug!("{} is not empty: kept", p.pod_dir.display());
        }
        Err(e) => left.push(format!("{}: {e}", p.pod_dir.display())),
    }
    Ok(())
}

/// Removes `name` in `dir` (shown as `shown`) when it is of `kind`; anything else there is left,
/// and said in `left`.
fn remove_at(dir: &OwnedFd, shown: &Path, name: &str, kind: SFlag, left: &mut Vec<String>) {
    let path = shown.join(name);
    let removed = match files::stat_at(dir, name) {
        Ok(None) => Ok(()),
        Ok(Some(st)) if files::is_kind(&st, kind) => files::unlink(dir, name),
        Ok(Some(st)) => {
            left.push(format!("{} is {}", path.display(), files::kind_of(&st)));
            Ok(())
        }
        Err(e) => Err(e),
    };
    if let Err(e) = removed {
        left.push(format!("{}: {e}", path.display()));
    }
}

/// Refuses to write `path` (and its temporary file) in `dir` when what is at either name is not
/// a regular file: the pod's, or anyone's but this plugin's (a rename would replace it; a
/// directory fails the rename).
fn writable(dir: &OwnedFd, path: &Path) -> Result<()> {
    for path in [path.to_path_buf(), tmp_of(path)] {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        match files::stat_at(dir, name).map_err(Error::io("reading", &path))? {
            Some(st) if !files::is_kind(&st, SFlag::S_IFREG) => {
                return Err(Error::Interface(Conflict::InTheWay {
                    path: path.display().to_string(),
                    is: files::kind_of(&st),
                }));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The pod's directory, opened without following a link; `None` when it is no directory (a
/// symlink or a file where it should be).
fn open_pod_dir(root: &OwnedFd, p: &Paths) -> io::Result<Option<OwnedFd>> {
    let how = files::flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY);
    match openat(root, pod_uid(p), how, files::mode(0)) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ELOOP | Errno::ENOTDIR) => Ok(None),
        Err(e) => Err(files::io(e)),
    }
}

/// [`open_pod_dir`] for a call that makes something in it: a pod's directory that is not one
/// is refused.
fn pod_dir_to_fill(root: &OwnedFd, p: &Paths) -> Result<OwnedFd> {
    if let Some(dir) = open_pod_dir(root, p).map_err(Error::io("opening", &p.pod_dir))? {
        return Ok(dir);
    }
    let is = files::stat_at(root, pod_uid(p))
        .ok()
        .flatten()
        .map_or("gone", |st| files::kind_of(&st));
    Err(Error::Interface(Conflict::InTheWay {
        path: p.pod_dir.display().to_string(),
        is,
    }))
}

/// The pod directory's name in `vhost-dir`: the pod's UID.
fn pod_uid(p: &Paths) -> &str {
    p.pod_dir.file_name().and_then(|n| n.to_str()).unwrap_or("")
}

/// The temporary file `path` is written as before it is renamed into place.
fn tmp_of(path: &Path) -> PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    PathBuf::from(tmp)
}

/// The JSON file next to the socket, for applications that read no Kubernetes API: where the
/// socket is as the pod sees it, that the application is the vhost-user server, and the
/// interface's MAC, MTU, addresses, routes and DNS as the CNI result has them.
pub fn info(outcome: &crate::cni::Outcome, vmi: &str) -> serde_json::Value {
    let result = outcome.to_json(crate::cni::Version::V110);
    let first = &result["interfaces"][0];
    serde_json::json!({
        "socketPath": first["socketPath"],
        "mode": "server",
        "mac": first["mac"],
        "mtu": first["mtu"],
        "vmi": vmi,
        "ips": result["ips"],
        "routes": result.get("routes").cloned().unwrap_or_else(|| serde_json::json!([])),
        "dns": result.get("dns").cloned().unwrap_or_else(|| serde_json::json!({})),
    })
}

/// Writes [`info`] next to the socket, and the [`device_info`] file when the runtime asked for
/// one; each in its directory by its descriptor, never through a link.
pub fn write_info(dirs: &Dirs, p: &Paths, info: &serde_json::Value) -> Result<()> {
    let root = files::open_dir(&dirs.root)
        .map_err(Error::io("opening the vhost-user directory", &dirs.root))?;
    let dir = pod_dir_to_fill(&root, p)?;
    write_json(&dir, &p.info, info)?;
    match &p.device_info {
        Some(path) => {
            let parent = path.parent().unwrap_or(Path::new("/"));
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)
                .map_err(Error::io("making the device-info directory", parent))?;
            let dir = files::open_dir(parent)
                .map_err(Error::io("opening the device-info directory", parent))?;
            write_json(&dir, path, &device_info(p))
        }
        None => Ok(()),
    }
}

/// Whole or not at all: a new temporary file in `dir` renamed over `path`'s name there. Either
/// name holding anything but a regular file is refused, and left.
#[allow(
    clippy::disallowed_methods,
    reason = "renames the attachment's own JSON file into place in the pod's directory"
)]
fn write_json(dir: &OwnedFd, path: &Path, value: &serde_json::Value) -> Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let tmp_path = tmp_of(path);
    let tmp = tmp_path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    writable(dir, path)?;
    files::unlink(dir, tmp).map_err(Error::io("removing", &tmp_path))?;
    let bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    let how = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
    let made = openat(dir, tmp, files::flags(how), files::mode(0o644))
        .map_err(files::io)
        .map_err(Error::io("writing", &tmp_path))?;
    io::Write::write_all(&mut fs::File::from(made), &bytes)
        .and_then(|()| renameat(dir, tmp, dir, name).map_err(files::io))
        .map_err(|e| {
            // Ours: made by the open above, O_EXCL.
            let _ = files::unlink(dir, tmp);
            Error::io("writing", path)(e)
        })
}

/// Whether `dir`'s mount follows no symlink.
fn nosymfollow(dir: &Path) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated; statvfs fills `st` when it returns 0. (nix's statvfs
    // drops the flags it does not know, this one among them.)
    if unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: filled above.
    let st = unsafe { st.assume_init() };
    Ok(st.f_flag & ST_NOSYMFOLLOW != 0)
}

/// Whether the link vrouter-dpdk connects to is there and leads to the pod's socket (CHECK; the
/// socket itself is the application's, there or not).
pub fn intact(p: &Paths) -> bool {
    fs::read_link(&p.link).is_ok_and(|t| t == p.socket)
}

/// Removes `link` if it is a symlink into `vhost-dir` (one of this plugin's).
#[allow(
    clippy::disallowed_methods,
    reason = "removes a uvh_vif_ link that leads into vhost-dir (the caller's check)"
)]
pub fn remove_link(dirs: &Dirs, link: &Path) -> Result<()> {
    if is_our_link(link, &dirs.root) {
        gone_ok(fs::remove_file(link)).map_err(Error::io("removing the vhost-user link", link))?;
    }
    Ok(())
}

/// The link vrouter-dpdk connects to for the port `system_name`.
pub fn link_path(dirs: &Dirs, system_name: &str) -> PathBuf {
    dirs.vrouter.join(link_name(system_name))
}

/// The name vrouter-dpdk gives the socket of the port `system_name`.
pub fn link_name(system_name: &str) -> String {
    format!("{UVH_PREFIX}{system_name}")
}

/// What is in `vhost-dir` by name, for `inspect`: each pod's directory and what it holds
/// ("holding net1.json (a regular file), ..."), or what is there in place of one; sorted, read
/// without following a link.
pub fn pod_dirs(dirs: &Dirs) -> Vec<(String, String)> {
    let Ok(root) = files::open_dir(&dirs.root) else {
        return Vec::new();
    };
    let kind_at = |dir: &OwnedFd, name: &str| match files::stat_at(dir, name) {
        Ok(Some(st)) => files::kind_of(&st),
        _ => "gone",
    };
    let mut found = Vec::new();
    for (name, _) in files::entries(&root).unwrap_or_default() {
        let how = files::flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY);
        let Ok(dir) = openat(&root, name.as_str(), how, files::mode(0)) else {
            let is = kind_at(&root, &name);
            found.push((name, format!("{is} in place of a directory")));
            continue;
        };
        let mut held: Vec<String> = files::entries(&dir)
            .unwrap_or_default()
            .into_iter()
            .map(|(entry, _)| format!("{entry} ({})", kind_at(&dir, &entry)))
            .collect();
        held.sort();
        let held = if held.is_empty() {
            "holding nothing".into()
        } else {
            format!("holding {}", held.join(", "))
        };
        found.push((name, held));
    }
    found.sort();
    found
}

/// This plugin's links in vrouter-dpdk's socket directory (symlinks `uvh_vif_*` into
/// `vhost-dir`), sorted: (name, path).
pub fn our_links(dirs: &Dirs) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = fs::read_dir(&dirs.vrouter)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let path = e.path();
            (name.starts_with(UVH_PREFIX) && is_our_link(&path, &dirs.root)).then_some((name, path))
        })
        .collect();
    found.sort();
    found
}

/// Whether `link` is a symlink whose target is inside `root`.
fn is_our_link(link: &Path, root: &Path) -> bool {
    fs::read_link(link).is_ok_and(|t| t.starts_with(root))
}

fn gone_ok(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn not_ours(path: &Path) -> Error {
    Error::Interface(Conflict::NotOurs {
        name: path.display().to_string(),
    })
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests make and remove their own scratch files"
)]
mod tests;
