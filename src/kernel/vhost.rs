//! The host side of a vhost-user attachment (docs/vhost-user.md): no kernel interface, but a
//! per-pod directory `<vhost-dir>/<pod-uid>` the pod mounts (and only it), where the DPDK
//! application creates and listens on `<ifname>.sock`, and a symlink
//! `<vrouter-socket-dir>/uvh_vif_<system-name>` into it, the fixed path vrouter-dpdk connects to
//! (as the vhost-user client; `connect()` follows symlinks). The application makes its socket;
//! the attachment's removal takes it (an application that exits, or is killed, leaves it
//! behind, and without the port it leads nowhere).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, symlink};
use std::path::{Path, PathBuf};

use crate::config::Contrail;
use crate::error::{Error, Result};
use crate::kernel::conflict::Conflict;

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
    /// network's config, which a tenant may write: it is taken only as a plain file name right
    /// in `device-info-dir`, and refused (code 7) otherwise, before anything is made.
    pub fn device_info_file(&self, asked: Option<&serde_json::Value>) -> Result<Option<PathBuf>> {
        let Some(asked) = asked else {
            return Ok(None);
        };
        const KEY: &str = "runtimeConfig.CNIDeviceInfoFile";
        let path = asked
            .as_str()
            .map(Path::new)
            .ok_or_else(|| Error::config(KEY, "must be a path"))?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && name.len() <= 255
            && !name.chars().any(char::is_control);
        if !plain || path.parent() != Some(self.device_info.as_path()) {
            return Err(Error::config(
                KEY,
                format!(
                    "{} is not a file in {} (device-info-dir, the node's): a device-info file \
                     is written nowhere else",
                    crate::text::Shown(&path.display().to_string()),
                    self.device_info.display()
                ),
            ));
        }
        Ok(Some(path.to_path_buf()))
    }
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
/// the VMI) and is replaced; anything else is refused. A failure leaves no symlink of ours.
pub fn create(dirs: &Dirs, p: &Paths) -> Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true).mode(0o755);
    b.create(&dirs.root)
        .map_err(Error::io("making the vhost-user directory", &dirs.root))?;
    match fs::DirBuilder::new().mode(0o755).create(&p.pod_dir) {
        // The kubelet may have made it for the pod's subPathExpr mount: a directory will do.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let m = fs::symlink_metadata(&p.pod_dir)
                .map_err(Error::io("reading the vhost-user directory", &p.pod_dir))?;
            if !m.is_dir() {
                return Err(not_ours(&p.pod_dir));
            }
        }
        other => other.map_err(Error::io("making the vhost-user directory", &p.pod_dir))?,
    }
    crate::crash::point("vhost-dir");
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

/// Removes the symlink (only one pointing into `root`), the JSON file, the device-info file
/// (only one in `device-info-dir`), the application's socket, and the pod's directory when
/// nothing else is in it: another attachment's files, or anything that is not a socket where
/// the socket should be, keep it. What is already gone counts as removed.
pub fn remove(dirs: &Dirs, p: &Paths) -> Result<()> {
    remove_link(dirs, &p.link)?;
    let device_info = p
        .device_info
        .as_ref()
        .filter(|d| d.parent() == Some(dirs.device_info.as_path()));
    for file in [Some(&p.info), device_info].into_iter().flatten() {
        gone_ok(fs::remove_file(file)).map_err(Error::io("removing", file))?;
    }
    // Without its port the socket leads nowhere. No liveness probe: a DPDK 22.11 virtio-user
    // server accepts one connection only, and a probe's would leave it deaf.
    if is_socket(&p.socket) {
        gone_ok(fs::remove_file(&p.socket)).map_err(Error::io("removing", &p.socket))?;
    }
    match fs::remove_dir(&p.pod_dir) {
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::ENOTEMPTY as i32) => {
            log::debug!("{} is not empty: kept", p.pod_dir.display());
            Ok(())
        }
        other => gone_ok(other).map_err(Error::io("removing", &p.pod_dir)),
    }
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
/// one.
pub fn write_info(p: &Paths, info: &serde_json::Value) -> Result<()> {
    write_json(&p.info, info)?;
    match &p.device_info {
        Some(path) => {
            let dir = path.parent().unwrap_or(Path::new("/"));
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(Error::io("making the device-info directory", dir))?;
            write_json(path, &device_info(p))
        }
        None => Ok(()),
    }
}

/// Whole or not at all: a new temporary file renamed over `path` (which replaces a symlink
/// there rather than follow it).
fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    let _ = fs::remove_file(&tmp);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| io::Write::write_all(&mut f, &bytes))
        .and_then(|()| fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = fs::remove_file(&tmp);
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

/// Whether `path` is a unix socket (not a link, a file or a directory of that name).
fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Whether the link vrouter-dpdk connects to is there and leads to the pod's socket (CHECK; the
/// socket itself is the application's, there or not).
pub fn intact(p: &Paths) -> bool {
    fs::read_link(&p.link).is_ok_and(|t| t == p.socket)
}

/// Removes `link` if it is a symlink into `vhost-dir` (one of this plugin's).
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
mod tests {
    use super::*;

    const UID: &str = "7f1a2b3c-0000-4000-8000-000000000001";

    fn dirs(base: &Path) -> Dirs {
        Dirs {
            vrouter: base.join("vrouter"),
            root: base.join("vhost"),
            pod_mount: PathBuf::from("/var/run/vhost"),
            device_info: base.join("devinfo"),
        }
    }

    fn tempdir(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ck8s-vhost-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(p.join("vrouter")).unwrap();
        p
    }

    #[test]
    fn paths_follow_the_vrouters_fixed_name_and_the_pods_uid() {
        let d = Dirs {
            vrouter: "/var/run/vrouter".into(),
            root: "/var/run/contrail-k8s-cni/vhost".into(),
            pod_mount: "/var/run/vhost".into(),
            device_info: "/var/run/k8s.cni.cncf.io/devinfo/cni".into(),
        };
        let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
        assert_eq!(p.link, Path::new("/var/run/vrouter/uvh_vif_tap0123456789a"));
        assert_eq!(
            p.socket,
            Path::new("/var/run/contrail-k8s-cni/vhost")
                .join(UID)
                .join("net1.sock")
        );
        assert_eq!(p.pod_socket, Path::new("/var/run/vhost/net1.sock"));
        assert_eq!(p.info, p.pod_dir.join("net1.json"));
    }

    #[test]
    fn a_path_over_107_bytes_is_refused_naming_its_key() {
        let long = |n: usize| PathBuf::from(format!("/{}", "d".repeat(n)));
        let ok = Dirs {
            vrouter: "/var/run/vrouter".into(),
            root: "/r".into(),
            pod_mount: "/p".into(),
            device_info: "/d".into(),
        };
        // /r/<36>/<15>.sock: 2 + 1 + 36 + 1 + 20 = 60 bytes; 107 exactly passes.
        let at_limit = Dirs {
            root: long(107 - 1 - 36 - 1 - "net1.sock".len() - 1),
            ..ok.clone()
        };
        assert_eq!(
            at_limit
                .checked_paths(UID, "tap0123456789a", "net1")
                .unwrap()
                .socket
                .as_os_str()
                .len(),
            107
        );
        for (d, key) in [
            (
                Dirs {
                    root: long(80),
                    ..ok.clone()
                },
                "vhost-dir",
            ),
            (
                Dirs {
                    vrouter: long(90),
                    ..ok.clone()
                },
                "vrouter-socket-dir",
            ),
            (
                Dirs {
                    pod_mount: long(100),
                    ..ok.clone()
                },
                "vhost-pod-dir",
            ),
        ] {
            let e = d.checked_paths(UID, "tap0123456789a", "net1").unwrap_err();
            assert!(e.to_string().contains(key), "{key}: {e}");
            assert_eq!(e.code(), 7, "{e}");
        }
    }

    #[test]
    fn create_then_remove_with_a_retry_and_a_file_that_keeps_the_directory() {
        let base = tempdir("life");
        let d = dirs(&base);
        let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
        create(&d, &p).unwrap();
        assert_eq!(fs::read_link(&p.link).unwrap(), p.socket);
        // Again (a retried ADD): the leftover link is ours and replaced.
        create(&d, &p).unwrap();
        // Something that is not the application's socket keeps the directory.
        fs::write(&p.socket, b"").unwrap();
        fs::write(&p.info, b"{}").unwrap();
        remove(&d, &p).unwrap();
        assert!(fs::symlink_metadata(&p.link).is_err());
        assert!(!p.info.exists());
        assert!(p.socket.exists());
        fs::remove_file(&p.socket).unwrap();
        remove(&d, &p).unwrap();
        assert!(!p.pod_dir.exists());
        // Removing what is gone is done.
        remove(&d, &p).unwrap();
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_info_file_tells_the_application_where_and_who_it_is() {
        use crate::cni::{Interface, IpConfig, Outcome};
        let out = Outcome {
            interfaces: vec![Interface {
                name: "net1".into(),
                mac: "02:00:00:00:00:01".into(),
                mtu: 1500,
                sandbox: Some("/run/netns/x".into()),
                socket_path: Some("/var/run/vhost/net1.sock".into()),
            }],
            ips: vec![IpConfig {
                address: "10.0.0.5/24".parse().unwrap(),
                gateway: Some("10.0.0.1".parse().unwrap()),
                interface: 0,
            }],
            ..Outcome::default()
        };
        let i = info(&out, "b86ac068-cf0e-11e8-b196-002590000001");
        assert_eq!(i["socketPath"], "/var/run/vhost/net1.sock");
        assert_eq!(i["mode"], "server");
        assert_eq!(i["mac"], "02:00:00:00:00:01");
        assert_eq!(i["ips"][0]["address"], "10.0.0.5/24");
        assert_eq!(i["ips"][0]["gateway"], "10.0.0.1");
        let base = tempdir("info");
        let d = dirs(&base);
        let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
        create(&d, &p).unwrap();
        write_info(&p, &i).unwrap();
        let back: serde_json::Value = serde_json::from_slice(&fs::read(&p.info).unwrap()).unwrap();
        assert_eq!(back, i);
        remove(&d, &p).unwrap();
        assert!(!p.pod_dir.exists());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_link_that_is_not_ours_is_refused_and_kept() {
        let base = tempdir("foreign");
        let d = dirs(&base);
        let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
        symlink("/elsewhere/sock", &p.link).unwrap();
        assert!(create(&d, &p).is_err());
        remove(&d, &p).unwrap();
        assert_eq!(
            fs::read_link(&p.link).unwrap(),
            Path::new("/elsewhere/sock")
        );
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_device_info_file_is_taken_only_right_in_the_nodes_directory() {
        let d = dirs(Path::new("/n"));
        let ok = serde_json::json!("/n/devinfo/cni-net1-0.json");
        assert_eq!(
            d.device_info_file(Some(&ok)).unwrap(),
            Some(PathBuf::from("/n/devinfo/cni-net1-0.json"))
        );
        assert_eq!(d.device_info_file(None).unwrap(), None);
        for bad in [
            serde_json::json!("/etc/cron.d/x"),
            serde_json::json!("/n/devinfo/../../etc/x"),
            serde_json::json!("/n/devinfo/sub/x"),
            serde_json::json!("devinfo/x"),
            serde_json::json!("/n/devinfo/.hidden"),
            serde_json::json!("/n/devinfo/"),
            serde_json::json!("/n/devinfo/a\nb"),
            serde_json::json!(7),
        ] {
            let e = d.device_info_file(Some(&bad)).unwrap_err();
            assert_eq!(e.code(), 7, "{bad}: {e}");
            assert!(e.to_string().contains("CNIDeviceInfoFile"), "{e}");
        }
    }

    #[test]
    fn the_device_info_file_is_npwg_1_1_and_goes_with_the_attachment() {
        let base = tempdir("devinfo");
        let d = dirs(&base);
        let mut p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
        p.device_info = Some(d.device_info.join("net1.json"));
        create(&d, &p).unwrap();
        write_info(&p, &serde_json::json!({})).unwrap();
        let back: serde_json::Value =
            serde_json::from_slice(&fs::read(p.device_info.as_ref().unwrap()).unwrap()).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"type": "vhost-user", "version": "1.1.0",
                "vhost-user": {"mode": "server", "path": "/var/run/vhost/net1.sock"}})
        );
        remove(&d, &p).unwrap();
        assert!(!p.device_info.as_ref().unwrap().exists());
        assert!(!p.pod_dir.exists());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_socket_goes_with_the_attachment_and_a_file_in_its_place_stays() {
        use std::os::unix::net::UnixListener;
        let base = tempdir("socket");
        let d = dirs(&base);
        let p = d.checked_paths(UID, "tap0123456789a", "net1").unwrap();
        create(&d, &p).unwrap();
        // Still listening or not, the socket goes: without the port it leads nowhere.
        let _live = UnixListener::bind(&p.socket).unwrap();
        remove(&d, &p).unwrap();
        assert!(!p.socket.exists());
        assert!(!p.pod_dir.exists());
        // Not a socket: not the application's socket, left with its directory.
        create(&d, &p).unwrap();
        fs::write(&p.socket, b"").unwrap();
        remove(&d, &p).unwrap();
        assert!(p.socket.exists());
        fs::remove_dir_all(&base).unwrap();
    }
}
