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

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::dir::Type;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat};
use nix::sys::stat::{SFlag, fstat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use serde::{Deserialize, Serialize};

use crate::cni::{check_ifname, valid_name};
use crate::kernel::names::attachment_lock;
use crate::state::files::{
    Sync, entries, flags, io, is_kind, is_temp, mode, stat_at, written_before_boot,
};
use crate::vmi::{Claim, valid_uuid};

/// Written into every state file, so a later format can tell ours apart.
pub const STATE_VERSION: &str = "1";
/// The locks' directory, in `config-dir`.
const LOCKS: &str = ".locks";
/// The longest pause between two tries of a busy lock.
const MAX_LOCK_PAUSE: Duration = Duration::from_millis(10);
/// Version 0.1.0's marker of a pending deregistration (a file holding the pod's vm-uuid); read
/// so that one an upgrade finds is finished.
const LEGACY_RESYNC: &str = ".resync";
/// A state file is a few hundred bytes: anything larger is not one.
pub const MAX_FILE: u64 = 64 * 1024;

/// One attachment. The agent's keys first (all strings, as the agent reads them), then ours;
/// the agent tolerates extra keys, and files the agent wrote itself lack ours.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default)]
    pub time: String,
    /// CNI_CONTAINERID of the sandbox that holds the attachment.
    #[serde(rename = "vm-id")]
    pub container_id: String,
    #[serde(rename = "vm-uuid")]
    pub vm_uuid: String,
    #[serde(rename = "vm-name")]
    pub vm_name: String,
    #[serde(rename = "host-ifname")]
    pub host_ifname: String,
    #[serde(rename = "vm-ifname")]
    pub ifname: String,
    #[serde(rename = "vm-namespace", default)]
    pub netns: String,
    #[serde(rename = "vn-uuid")]
    pub vn_uuid: String,
    #[serde(rename = "vmi-uuid")]
    pub vmi_uuid: String,
    #[serde(
        rename = "contrail-k8s-cni-state",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub state_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network: String,
    #[serde(
        rename = "mac-address",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub mac: String,
    /// Whether this interface carries the pod's default route; written as "true"/"false"
    /// like the agent's own keys, absent from files the agent wrote.
    #[serde(rename = "default-gw", default, with = "string_bool")]
    pub default_gw: bool,
    /// The MTU the attachment was made with (the network's config may set it), for `inspect`
    /// to compare as CHECK does; absent from older files.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mtu: String,
    /// The boot the claim was made in (the kernel's boot_id) and when, in ms since that boot
    /// (CLOCK_BOOTTIME): times no clock step moves, for the sweep's grace. Absent from files of
    /// 0.1 and the agent's own.
    #[serde(
        rename = "claimed-boot",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub claimed_boot: String,
    #[serde(
        rename = "claimed-uptime-ms",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub claimed_uptime_ms: String,
    /// Nested mode: the VLAN tag of the attachment's sub-interface.
    #[serde(
        rename = "vlan-id",
        default,
        skip_serializing_if = "Option::is_none",
        with = "string_tag"
    )]
    pub vlan: Option<u16>,
}

/// A VLAN tag kept as a string (every value in these files is a string).
mod string_tag {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(tag: &Option<u16>, s: S) -> Result<S::Ok, S::Error> {
        match tag {
            Some(t) => s.serialize_str(&t.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map(Some).map_err(D::Error::custom)
    }
}

/// A bool kept as the string "true" or "false" (every value in these files is a string).
mod string_bool {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &bool, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if *b { "true" } else { "false" })
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        Ok(String::deserialize(d)? == "true")
    }
}

impl Record {
    pub fn claim(&self) -> Claim {
        Claim {
            vmi: self.vmi_uuid.clone(),
            container_id: Some(self.container_id.clone()),
            ifname: self.ifname.clone(),
        }
    }

    pub fn is(&self, container_id: &str, ifname: &str) -> bool {
        self.container_id == container_id && self.ifname == ifname
    }

    /// The registration body: the record itself (the agent ignores the keys it does not know).
    pub fn port(&self) -> serde_json::Value {
        // Cannot fail: every field is a string or a bool.
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// A state file that could not be read: reported, left in place, and treated as held by
/// someone else.
#[derive(Debug)]
pub struct Unreadable {
    pub path: PathBuf,
    pub vmi_uuid: String,
    pub why: String,
    /// The file as the agent reads it on restart, when it is a JSON object for this VMI (a
    /// future version's file, say): it stays registered when the pod is re-registered.
    pub port: Option<serde_json::Value>,
}

impl Unreadable {
    pub fn claim(&self) -> Claim {
        Claim {
            vmi: self.vmi_uuid.clone(),
            container_id: None,
            ifname: String::new(),
        }
    }
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
    pub fn pods(&self) -> io::Result<Vec<String>> {
        let mut pods = Vec::new();
        for (name, kind) in entries(&self.fd)? {
            if !valid_name(&name) {
                continue;
            }
            let dir = match kind {
                Some(t) => t == Type::Directory,
                None => stat_at(&self.fd, &name)?.is_some_and(|st| is_kind(&st, SFlag::S_IFDIR)),
            };
            if dir {
                pods.push(name);
            }
        }
        pods.sort();
        Ok(pods)
    }

    /// Whether `vm_name` is a pod with state here (a real directory).
    pub fn has_pod(&self, vm_name: &str) -> io::Result<bool> {
        Ok(stat_at(&self.fd, vm_name)?.is_some_and(|st| is_kind(&st, SFlag::S_IFDIR)))
    }

    /// The pod holding an attachment of this container (on `ifname`, or on any interface)
    /// when the pod's name is unknown (a DEL without CNI_ARGS): a scan of every pod, unlocked.
    pub fn find_pod(&self, container_id: &str, ifname: Option<&str>) -> io::Result<Option<String>> {
        for vm_name in self.pods()? {
            let files = self.read_pod(&vm_name)?;
            let ours =
                |r: &Record| r.container_id == container_id && ifname.is_none_or(|i| r.ifname == i);
            if files.records.iter().chain(&files.reserved).any(ours) {
                return Ok(Some(vm_name));
            }
        }
        Ok(None)
    }

    /// Another pod whose state file names host interface `host_ifname` (a scan of every pod but
    /// `vm_name`, unlocked): such a link is that pod's, never one to replace.
    pub fn other_holder(&self, host_ifname: &str, vm_name: &str) -> io::Result<Option<String>> {
        for pod in self.pods()? {
            if pod == vm_name {
                continue;
            }
            if self
                .read_pod(&pod)?
                .records
                .iter()
                .any(|r| r.host_ifname == host_ifname)
            {
                return Ok(Some(pod));
            }
        }
        Ok(None)
    }

    /// What a pod's directory holds, read without its lock (for reports and scans).
    pub fn read_pod(&self, vm_name: &str) -> io::Result<PodFiles> {
        let dir = open_pod_dir(&self.fd, vm_name)?;
        PodFiles::read(dir.as_ref(), &self.path.join(vm_name))
    }

    /// Takes the pod's lock, and removes the temp files a killed writer left (every writer
    /// holds the lock, so any temp file seen here is stale).
    pub fn lock_pod(&self, vm_name: &str, deadline: Instant) -> io::Result<PodDir> {
        let lock = Lock::take(self, vm_name.to_string(), deadline)?;
        self.pod_dir(vm_name, lock)
    }

    /// [`StateDir::lock_pod`] if no call holds the pod's lock now: GC and the sweep skip a pod
    /// a call is working on rather than wait for it.
    pub fn try_lock_pod(&self, vm_name: &str) -> io::Result<Option<PodDir>> {
        match Lock::try_take(&self.locks()?, vm_name)? {
            Some(lock) => self.pod_dir(vm_name, lock).map(Some),
            None => Ok(None),
        }
    }

    fn pod_dir(&self, vm_name: &str, lock: Lock) -> io::Result<PodDir> {
        let dir = open_pod_dir(&self.fd, vm_name)?;
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
        vm_name: &str,
        container_id: &str,
        ifname: &str,
        deadline: Instant,
    ) -> io::Result<Lock> {
        Lock::take(
            self,
            attachment_lock(vm_name, container_id, ifname),
            deadline,
        )
    }

    /// [`StateDir::lock_attachment`] if no call holds it now.
    pub fn try_lock_attachment(
        &self,
        vm_name: &str,
        container_id: &str,
        ifname: &str,
    ) -> io::Result<Option<Lock>> {
        Lock::try_take(
            &self.locks()?,
            &attachment_lock(vm_name, container_id, ifname),
        )
    }

    /// Asks the call holding an attachment's lock (an ADD its runtime gave up on) to stop: it
    /// looks for this between its polls of the agent ([`Lock::stop_probe`]).
    pub fn stop_attachment(
        &self,
        vm_name: &str,
        container_id: &str,
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
            let pod = name.split('@').next().unwrap_or_default();
            let is_add = name.contains('@');
            if !is_add && self.has_pod(pod)? {
                continue;
            }
            if let Some(lock) = Lock::try_take(&locks, &name)? {
                if remove {
                    lock.remove()?;
                }
                stale.push(name);
            }
        }
        Ok(stale)
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
                name != LOCKS && name != crate::agent::budget::FILE && !pods.contains(name)
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

/// The file that asks the holder of a lock to stop; swept like a stale lock when left.
fn stop_marker(lock: &str) -> String {
    format!("{lock}.stop")
}

/// The regular files in the locks' directory (anything else there is not a lock of ours).
fn lock_files(locks: &OwnedFd) -> io::Result<Vec<String>> {
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

/// What a released record becomes once the agent no longer has its registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Nothing: the file goes (`.release`).
    Gone,
    /// The attachment's reservation (`.reserve`, then `.reserved`).
    Reserved,
}

impl Then {
    fn suffix(self) -> &'static str {
        match self {
            Then::Gone => "release",
            Then::Reserved => "reserve",
        }
    }
}

const RESERVED: &str = "reserved";

/// `.<vmi-uuid>.<suffix>`: hidden from the agent's reload, which takes names starting with a
/// uuid.
fn dotted(vmi_uuid: &str, suffix: &str) -> String {
    format!(".{vmi_uuid}.{suffix}")
}

/// A released record whose deregistration is pending.
#[derive(Debug, Clone)]
pub struct Pending {
    pub vmi_uuid: String,
    pub then: Then,
    /// `None` when the file cannot be read (torn by a power loss).
    pub record: Option<Record>,
}

/// What a pod's directory holds.
#[derive(Default)]
pub struct PodFiles {
    /// The attachments of the pod, of any sandbox.
    pub records: Vec<Record>,
    /// Attachment files that could not be read.
    pub unreadable: Vec<Unreadable>,
    /// State files (an attachment's or a reservation) that a power loss left empty or torn:
    /// regular files that are no JSON object for their VMI, last written before this boot.
    /// State files are not fsynced, so a power loss may keep a rename and lose the content; a
    /// call in flight never leaves one (it renames whole files into place), and the sandbox
    /// such a file was for died with the node. Removed by whoever locks the pod next
    /// ([`PodDir::files`]); they hold no VMI. One of this boot is `unreadable` instead.
    pub torn: Vec<String>,
    /// Failed attachments' claims (`.reserved`, and `.reserve` still pending).
    pub reserved: Vec<Record>,
    /// Released records whose deregistration is pending.
    pub pending: Vec<Pending>,
    /// A pending deregistration version 0.1.0 recorded: the pod's vm-uuid.
    pub legacy_resync: Option<String>,
    /// Temp files a killed writer left.
    pub temps: Vec<String>,
    /// Names that are none of the above: not this plugin's, left alone.
    pub others: Vec<String>,
}

impl PodFiles {
    fn read(dir: Option<&OwnedFd>, path: &Path) -> io::Result<PodFiles> {
        let mut files = PodFiles {
            records: Vec::new(),
            unreadable: Vec::new(),
            torn: Vec::new(),
            reserved: Vec::new(),
            pending: Vec::new(),
            legacy_resync: None,
            temps: Vec::new(),
            others: Vec::new(),
        };
        let Some(dir) = dir else {
            return Ok(files);
        };
        let read = |name: &str, vmi: &str| {
            let bytes = files::read_bounded(dir, name, MAX_FILE).map_err(|e| e.to_string());
            let record = bytes
                .as_deref()
                .map_err(Clone::clone)
                .and_then(|b| parse_record(b, vmi));
            (bytes, record)
        };
        // Read whole (a regular file within bounds) yet not a port of this VMI, and older than
        // the boot: see `torn`.
        let torn = |name: &str, port: &Option<serde_json::Value>, bytes: &Result<_, _>| {
            port.is_none()
                && bytes.is_ok()
                && stat_at(dir, name).is_ok_and(|st| st.is_some_and(|st| written_before_boot(&st)))
        };
        for (name, _) in entries(dir)? {
            if is_temp(&name) {
                files.temps.push(name);
            } else if name == LEGACY_RESYNC {
                let bytes = files::read_bounded(dir, LEGACY_RESYNC, MAX_FILE).unwrap_or_default();
                let vm = String::from_utf8_lossy(&bytes).trim().to_string();
                files.legacy_resync = valid_uuid(&vm).then_some(vm);
            } else if valid_uuid(&name) {
                match read(&name, &name) {
                    (_, Ok(r)) => files.records.push(r),
                    (bytes, Err(why)) => {
                        let port = port_of(bytes.as_deref().ok(), &name);
                        if torn(&name, &port, &bytes) {
                            files.torn.push(name);
                        } else {
                            files.unreadable.push(Unreadable {
                                path: path.join(&name),
                                port,
                                vmi_uuid: name,
                                why,
                            });
                        }
                    }
                }
            } else if let Some((vmi, suffix)) = name
                .strip_prefix('.')
                .and_then(|n| n.split_once('.'))
                .filter(|(vmi, _)| valid_uuid(vmi))
            {
                let (bytes, record) = read(&name, vmi);
                let record = record.ok();
                let then = match suffix {
                    "release" => Some(Then::Gone),
                    "reserve" => Some(Then::Reserved),
                    RESERVED => None,
                    _ => {
                        files.others.push(name.clone());
                        continue;
                    }
                };
                match (then, record) {
                    (Some(then), record) => {
                        if let (Then::Reserved, Some(r)) = (then, &record) {
                            files.reserved.push(r.clone());
                        }
                        files.pending.push(Pending {
                            vmi_uuid: vmi.to_string(),
                            then,
                            record,
                        });
                    }
                    (None, Some(r)) => files.reserved.push(r),
                    (None, None) if torn(&name, &None, &bytes) => files.torn.push(name.clone()),
                    // A reservation that cannot be read holds nothing: it is debris.
                    (None, None) => files.others.push(name.clone()),
                }
            } else {
                files.others.push(name);
            }
        }
        files.records.sort_by(|a, b| a.vmi_uuid.cmp(&b.vmi_uuid));
        files.unreadable.sort_by(|a, b| a.vmi_uuid.cmp(&b.vmi_uuid));
        files.reserved.sort_by(|a, b| a.vmi_uuid.cmp(&b.vmi_uuid));
        files.pending.sort_by(|a, b| a.vmi_uuid.cmp(&b.vmi_uuid));
        files.others.sort();
        files.torn.sort();
        Ok(files)
    }

    /// Every claim on a VMI: attachments, reservations, and files that cannot be read (held by
    /// someone unknown).
    pub fn claims(&self) -> Vec<Claim> {
        self.records
            .iter()
            .chain(&self.reserved)
            .map(Record::claim)
            .chain(self.unreadable.iter().map(Unreadable::claim))
            .collect()
    }
}

/// A file's content as the agent reads it on restart, when it is a JSON object for `vmi`.
fn port_of(bytes: Option<&[u8]>, vmi: &str) -> Option<serde_json::Value> {
    bytes
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .filter(|v| v.get("vmi-uuid").and_then(|u| u.as_str()) == Some(vmi))
}

fn parse_record(bytes: &[u8], name: &str) -> Result<Record, String> {
    let r: Record = serde_json::from_slice(bytes).map_err(|e| format!("not a state file: {e}"))?;
    if r.vmi_uuid != name {
        return Err(format!(
            "names VMI {} but the file is named {name}",
            r.vmi_uuid
        ));
    }
    if !(r.state_version.is_empty() || r.state_version == STATE_VERSION) {
        return Err(format!(
            "state version {:?} is not one this plugin knows",
            r.state_version
        ));
    }
    check_names(&r)?;
    Ok(r)
}

/// A record's identifiers, as strictly as the agent's answers' are checked: they become
/// request paths to the agent, interface names, lock and directory names. Why one is refused
/// names the key, never its bytes (which may hold anything, a line break and a header).
fn check_names(r: &Record) -> Result<(), String> {
    for (key, value) in [("vm-uuid", &r.vm_uuid), ("vn-uuid", &r.vn_uuid)] {
        if !valid_uuid(value) {
            return Err(format!("its {key} is not a lowercase uuid"));
        }
    }
    for (key, value) in [("host-ifname", &r.host_ifname), ("vm-ifname", &r.ifname)] {
        check_ifname(value).map_err(|why| format!("its {key} is no interface name: it {why}"))?;
    }
    for (key, value) in [("vm-id", &r.container_id), ("vm-name", &r.vm_name)] {
        if !valid_name(value) {
            return Err(format!(
                "its {key} does not match [a-zA-Z0-9][a-zA-Z0-9_.-]* (at most 253 bytes)"
            ));
        }
    }
    Ok(())
}

/// A flock on `config-dir/.locks/<name>`, created on demand. Whoever finds the file no longer
/// needed removes it while holding it; a waiter that then gets the lock sees that the path is
/// another file (or none) and starts over on a fresh one.
pub struct Lock {
    /// Held until dropped.
    _file: Flock<File>,
    locks: OwnedFd,
    name: String,
}

impl Lock {
    /// The lock, waited for until `deadline` at most: a holder that is stopped (SIGSTOP, a
    /// frozen cgroup) or slow never holds a call up beyond its own deadline. Past it, an error
    /// of kind `TimedOut` (see [`crate::error::Error::locking`]). Asked again and again with a
    /// pause that grows to [`MAX_LOCK_PAUSE`]: a blocking flock cannot be given a deadline.
    fn take(state: &StateDir, name: String, deadline: Instant) -> io::Result<Lock> {
        let locks = state.locks()?;
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(lock) = Lock::try_take(&locks, &name)? {
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
    fn try_take(locks: &OwnedFd, name: &str) -> io::Result<Option<Lock>> {
        let file = Lock::open(locks, name)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) if Lock::current(locks, name, &file)? => Ok(Some(Lock {
                _file: file,
                locks: locks.try_clone()?,
                name: name.to_string(),
            })),
            Ok(_) | Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, e)) => Err(io(e)),
        }
    }

    fn open(locks: &OwnedFd, name: &str) -> io::Result<File> {
        files::open_regular(locks, name, OFlag::O_RDWR | OFlag::O_CREAT, 0o600)
            .map_err(|e| io::Error::new(e.kind(), format!("lock {name}: {e}: refusing it")))
    }

    /// Whether the locked file is still the one at the path.
    fn current(locks: &OwnedFd, name: &str, file: &Flock<File>) -> io::Result<bool> {
        let held = fstat(file.as_fd()).map_err(io)?;
        Ok(stat_at(locks, name)?
            .is_some_and(|st| st.st_ino == held.st_ino && st.st_dev == held.st_dev))
    }

    /// Removes the lock file (while it is held) and releases it.
    pub fn remove(self) -> io::Result<()> {
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

/// A pod's state, locked for as long as this lives.
pub struct PodDir {
    root: OwnedFd,
    name: String,
    path: PathBuf,
    /// None until the pod has a file.
    dir: Option<OwnedFd>,
    lock: Lock,
}

impl PodDir {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pod's VM name (its directory's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the pod's directory holds, once what a power loss left torn is gone (see
    /// [`PodFiles::torn`]): every call for the pod, GC and the sweep read it here.
    pub fn files(&self) -> io::Result<PodFiles> {
        let mut files = PodFiles::read(self.dir.as_ref(), &self.path)?;
        if let Some(dir) = &self.dir {
            for name in files.torn.drain(..) {
                let path = self.path.join(&name);
                log::warn!(
                    "removing {}: empty or torn and last written before this boot, left by a \
                     power loss",
                    path.display()
                );
                if let Err(e) = files::unlink(dir, &name) {
                    log::warn!("could not remove {}: {e}", path.display());
                }
            }
        }
        Ok(files)
    }

    /// The pod's directory, created (0700) on its first file.
    fn dir(&mut self) -> io::Result<&OwnedFd> {
        if self.dir.is_none() {
            match mkdirat(&self.root, self.name.as_str(), mode(0o700)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(io(e)),
            }
            self.dir = open_pod_dir(&self.root, &self.name)?;
        }
        self.dir
            .as_ref()
            .ok_or_else(|| io::Error::other(format!("{} vanished", self.path.display())))
    }

    /// Writes an attachment's record atomically, in place of a reservation of its VMI.
    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        let body = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        let dir = self.dir()?;
        files::write_atomic(dir, &record.vmi_uuid, &body, 0o600, Sync::No)?;
        for suffix in [RESERVED, Then::Reserved.suffix()] {
            files::unlink(dir, &dotted(&record.vmi_uuid, suffix))?;
        }
        Ok(())
    }

    /// Renames an attachment's file to its pending name (see [`Then`]): no new space.
    pub fn mark_released(&self, vmi_uuid: &str, then: Then) -> io::Result<()> {
        self.rename(vmi_uuid, &dotted(vmi_uuid, then.suffix()))
    }

    /// Removes an attachment's file at once: for one the agent never heard of.
    pub fn remove(&self, vmi_uuid: &str) -> io::Result<()> {
        self.unlink(vmi_uuid)
    }

    /// Renames an attachment's file to a reservation at once: for one the agent never heard of.
    pub fn reserve(&self, vmi_uuid: &str) -> io::Result<()> {
        self.rename(vmi_uuid, &dotted(vmi_uuid, RESERVED))
    }

    /// What a pending record becomes once the agent dropped its registration.
    pub fn settled(&self, p: &Pending) -> io::Result<()> {
        let from = dotted(&p.vmi_uuid, p.then.suffix());
        match p.then {
            Then::Gone => self.unlink(&from),
            Then::Reserved => self.rename(&from, &dotted(&p.vmi_uuid, RESERVED)),
        }
    }

    /// Drops a reservation: settled, it goes; pending, it becomes a pending release.
    pub fn drop_reservation(&self, vmi_uuid: &str) -> io::Result<()> {
        self.unlink(&dotted(vmi_uuid, RESERVED))?;
        let pending = dotted(vmi_uuid, Then::Reserved.suffix());
        match self.rename(&pending, &dotted(vmi_uuid, Then::Gone.suffix())) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Removes version 0.1.0's marker once its deregistration is done.
    pub fn clear_legacy_resync(&self) -> io::Result<()> {
        self.unlink(LEGACY_RESYNC)
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let dir = self
            .dir
            .as_ref()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        nix::fcntl::renameat(dir, from, dir, to).map_err(io)
    }

    fn unlink(&self, name: &str) -> io::Result<()> {
        match &self.dir {
            Some(dir) => files::unlink(dir, name),
            None => Ok(()),
        }
    }

    /// Ends the critical section: when nothing is left in the pod's directory (no attachment,
    /// no pending resync), the directory goes, and its lock file with it.
    pub fn close(self) -> io::Result<()> {
        if let Some(dir) = &self.dir {
            if !entries(dir)?.is_empty() {
                return Ok(());
            }
            match unlinkat(&self.root, self.name.as_str(), UnlinkatFlags::RemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                // Written into meanwhile: not ours to remove.
                Err(Errno::ENOTEMPTY | Errno::EEXIST) => return Ok(()),
                Err(e) => return Err(io(e)),
            }
        }
        self.lock.remove()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{PermissionsExt, symlink};

    /// A deadline no test reaches.
    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    fn tempdir(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ck8s-state-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    fn record(vmi: &str, container_id: &str, ifname: &str) -> Record {
        Record {
            time: "0".into(),
            container_id: container_id.into(),
            vm_uuid: "40936d96-cf0e-11e8-9892-002590aaa964".into(),
            vm_name: POD.into(),
            host_ifname: crate::kernel::names::host_ifname(vmi),
            ifname: ifname.into(),
            netns: "/run/netns/x".into(),
            vn_uuid: "f95af4cc-e4ba-44c8-9936-269d891e0ee9".into(),
            vmi_uuid: vmi.into(),
            state_version: STATE_VERSION.into(),
            network: "net-a".into(),
            mac: "02:00:00:00:00:01".into(),
            default_gw: false,
            mtu: String::new(),
            claimed_boot: String::new(),
            claimed_uptime_ms: String::new(),
            vlan: None,
        }
    }

    const POD: &str = "k8s__default__p";
    const A: &str = "b86ac068-cf0e-11e8-b196-002590aaa964";
    const B: &str = "b86ac068-cf0e-11e8-b196-002590aaa965";

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .map(|d| {
                d.map(|e| e.unwrap().file_name().into_string().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn write_read_remove_close_and_permissions() {
        let root = tempdir("rw");
        let state = StateDir::open(&root).unwrap();
        let mut pod = state.lock_pod(POD, later()).unwrap();
        assert!(!root.join(POD).exists(), "no directory before a file");
        pod.write(&record(A, "c1", "net1")).unwrap();
        pod.write(&record(B, "c1", "net2")).unwrap();
        let files = pod.files().unwrap();
        assert_eq!(
            files.records,
            vec![record(A, "c1", "net1"), record(B, "c1", "net2")]
        );
        assert!(files.unreadable.is_empty());
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(pod.path()), 0o700);
        assert_eq!(mode(&pod.path().join(A)), 0o600);
        // No temp files left behind; the agent's own keys, as strings.
        assert_eq!(names(pod.path()), [A, B]);
        let raw: serde_json::Value =
            serde_json::from_slice(&fs::read(pod.path().join(A)).unwrap()).unwrap();
        assert_eq!(raw["vm-id"], "c1");
        assert_eq!(raw["default-gw"], "false");
        pod.remove(A).unwrap();
        pod.remove(A).unwrap();
        assert_eq!(names(pod.path()), [B]);
        pod.close().unwrap();
        assert_eq!(names(&root.join(POD)), [B], "a pod with a file stays");
        assert_eq!(names(&root.join(LOCKS)), [POD], "and so does its lock");
        let pod = state.lock_pod(POD, later()).unwrap();
        pod.remove(B).unwrap();
        pod.close().unwrap();
        assert!(!root.join(POD).exists());
        assert!(
            names(&root.join(LOCKS)).is_empty(),
            "the lock goes with the pod"
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_call_with_nothing_to_write_leaves_no_directory() {
        let root = tempdir("noop");
        let state = StateDir::open(&root).unwrap();
        state.lock_pod(POD, later()).unwrap().close().unwrap();
        assert_eq!(names(&root), [LOCKS]);
        assert!(names(&root.join(LOCKS)).is_empty());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn temp_files_of_killed_writers_go_when_the_pod_is_locked() {
        let root = tempdir("tmp");
        let state = StateDir::open(&root).unwrap();
        let mut pod = state.lock_pod(POD, later()).unwrap();
        pod.write(&record(A, "c1", "net1")).unwrap();
        drop(pod);
        fs::write(root.join(POD).join(format!(".{B}.tmp")), "{ half").unwrap();
        assert_eq!(state.read_pod(POD).unwrap().temps, [format!(".{B}.tmp")]);
        let pod = state.lock_pod(POD, later()).unwrap();
        assert_eq!(names(pod.path()), [A]);
        fs::remove_dir_all(&root).unwrap();
    }

    /// The boot time as `written_before_boot` computes it, give or take microseconds.
    fn boot() -> std::time::SystemTime {
        let up = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
        std::time::SystemTime::now()
            - std::time::Duration::new(up.tv_sec() as u64, up.tv_nsec() as u32)
    }

    #[test]
    fn what_a_power_loss_tore_goes_when_the_pod_is_locked_and_nothing_else() {
        let (c, d, e) = (
            "b86ac068-cf0e-11e8-b196-002590aaa966",
            "b86ac068-cf0e-11e8-b196-002590aaa967",
            "b86ac068-cf0e-11e8-b196-002590aaa968",
        );
        let root = tempdir("torn");
        let state = StateDir::open(&root).unwrap();
        state
            .lock_pod(POD, later())
            .unwrap()
            .write(&record(A, "c1", "eth0"))
            .unwrap();
        let dir = root.join(POD);
        let before = boot() - std::time::Duration::from_secs(2);
        let after = boot() + std::time::Duration::from_secs(2);
        let future = format!(r#"{{"vmi-uuid": "{c}", "contrail-k8s-cni-state": "9"}}"#);
        let reserved = |v: &str| format!(".{v}.reserved");
        // (name, content, last written): empty, torn (zeros, as XFS shows a lost write), half.
        let files = [
            (B.to_string(), String::new(), before),
            (c.to_string(), future, before),
            (d.to_string(), String::new(), after),
            (reserved(d), "\0\0\0".to_string(), before),
            (reserved(e), "{ half".to_string(), after),
            (e.to_string(), "{ half".to_string(), before),
        ];
        for (name, content, when) in &files {
            fs::write(dir.join(name), content).unwrap();
            let f = fs::File::options()
                .write(true)
                .open(dir.join(name))
                .unwrap();
            f.set_modified(*when).unwrap();
        }
        let mut torn = vec![B.to_string(), e.to_string(), reserved(d)];
        torn.sort();
        let seen = state.read_pod(POD).unwrap();
        assert_eq!(seen.torn, torn, "reported without the lock");
        let unreadable: Vec<&str> = seen
            .unreadable
            .iter()
            .map(|u| u.vmi_uuid.as_str())
            .collect();
        assert_eq!(
            unreadable,
            [c, d],
            "a future version's file, a torn one of this boot"
        );
        let pod = state.lock_pod(POD, later()).unwrap();
        let files = pod.files().unwrap();
        assert!(files.torn.is_empty());
        let claimed: Vec<String> = files.claims().into_iter().map(|c| c.vmi).collect();
        assert_eq!(claimed, [A, c, d], "what a power loss tore holds no VMI");
        let mut left = vec![A.to_string(), c.to_string(), d.to_string(), reserved(e)];
        left.sort();
        assert_eq!(names(pod.path()), left);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn agent_written_corrupt_and_future_files() {
        let root = tempdir("corrupt");
        let state = StateDir::open(&root).unwrap();
        let mut pod = state.lock_pod(POD, later()).unwrap();
        pod.write(&record(B, "c1", "net1")).unwrap();
        // A file the agent wrote from a legacy plugin's POST: no keys of ours.
        let agent = serde_json::json!({"time": "t", "vm-id": "c0", "vm-uuid": "40936d96-cf0e-11e8-9892-002590aaa964",
            "vm-name": POD, "host-ifname": "tapeth0fe3edca", "vm-ifname": "eth0",
            "vm-namespace": "/proc/1/ns/net", "vn-uuid": "f95af4cc-e4ba-44c8-9936-269d891e0ee9", "vmi-uuid": A,
            "author": "/usr/bin/contrail-vrouter-agent"});
        fs::write(pod.path().join(A), agent.to_string()).unwrap();
        fs::write(pod.path().join("not-a-uuid"), "x").unwrap();
        let files = pod.files().unwrap();
        assert_eq!(files.records.len(), 2);
        assert_eq!(
            files.records[0].claim(),
            Claim {
                vmi: A.into(),
                container_id: Some("c0".into()),
                ifname: "eth0".into()
            }
        );
        assert!(files.unreadable.is_empty());
        let mut future = record(B, "c1", "net1");
        future.state_version = "9".into();
        pod.write(&future).unwrap();
        let bad = pod.files().unwrap().unreadable;
        assert!(bad[0].why.contains("state version"), "{}", bad[0].why);
        // Still a port the agent would reload: it stays registered (see ledger::settle).
        assert_eq!(bad[0].port.as_ref().unwrap()["vmi-uuid"], B);
        fs::write(pod.path().join(B), "{ torn").unwrap();
        let bad = pod.files().unwrap().unreadable;
        assert!(bad[0].port.is_none());
        drop(pod);
        assert_eq!(
            state.find_pod("c0", Some("eth0")).unwrap().as_deref(),
            Some(POD)
        );
        assert_eq!(state.find_pod("c0", Some("eth1")).unwrap(), None);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn hostile_entries_are_refused_not_followed_and_never_hang() {
        let root = tempdir("hostile");
        let outside = tempdir("hostile-outside");
        fs::create_dir_all(&outside).unwrap();
        let state = StateDir::open(&root).unwrap();
        // A pod directory that is a symlink elsewhere: not a pod, and never written through.
        symlink(&outside, root.join(POD)).unwrap();
        assert_eq!(state.pods().unwrap(), [] as [String; 0]);
        assert!(!state.has_pod(POD).unwrap());
        assert_eq!(state.strays().unwrap(), [POD]);
        let err = match state.lock_pod(POD, later()) {
            Ok(mut pod) => pod.write(&record(A, "c1", "net1")).unwrap_err(),
            Err(e) => e,
        };
        assert!(err.to_string().contains("not a directory"), "{err}");
        assert!(names(&outside).is_empty(), "written outside config-dir");
        fs::remove_file(root.join(POD)).unwrap();

        // A temp file that is a symlink: its target is not overwritten.
        let target = outside.join("precious");
        fs::write(&target, "keep").unwrap();
        let mut pod = state.lock_pod(POD, later()).unwrap();
        pod.write(&record(B, "c1", "net1")).unwrap();
        symlink(&target, root.join(POD).join(format!(".{A}.tmp"))).unwrap();
        pod.write(&record(A, "c1", "net2")).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
        drop(pod);

        // A dangling lock symlink: its target is not created.
        let planted = outside.join("planted");
        symlink(&planted, root.join(LOCKS).join("k8s__default__q")).unwrap();
        assert!(state.lock_pod("k8s__default__q", later()).is_err());
        assert!(!planted.exists());

        // A FIFO and a symlink to /dev/zero as state files: unreadable at once, no hang.
        let dir = root.join(POD);
        fs::remove_file(dir.join(A)).unwrap();
        fs::remove_file(dir.join(B)).unwrap();
        nix::unistd::mkfifo(&dir.join(A), mode(0o600)).unwrap();
        symlink("/dev/zero", dir.join(B)).unwrap();
        let started = Instant::now();
        let files = state.read_pod(POD).unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
        let why: Vec<&str> = files.unreadable.iter().map(|u| u.why.as_str()).collect();
        assert_eq!(
            why,
            [
                "a FIFO, not a regular file",
                "a symbolic link, not a regular file"
            ]
        );
        // An oversized file.
        fs::remove_file(dir.join(B)).unwrap();
        fs::write(dir.join(B), vec![b' '; MAX_FILE as usize + 1]).unwrap();
        let files = state.read_pod(POD).unwrap();
        assert!(files.unreadable[1].why.contains("larger than"));
        fs::remove_dir_all(&root).unwrap();
        fs::remove_dir_all(&outside).unwrap();
    }

    #[test]
    fn a_lock_held_past_the_deadline_is_refused_and_one_removed_is_taken_fresh() {
        let root = tempdir("lock");
        let state = StateDir::open(&root).unwrap();
        let first = state.lock_pod(POD, later()).unwrap();
        // A holder that never lets go (stopped, stuck) holds nobody beyond their deadline.
        let started = Instant::now();
        let busy = state.lock_pod(POD, started + Duration::from_millis(50));
        let e = busy.err().expect("the lock is held");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains(&format!("{LOCKS}/{POD}")), "{e}");
        assert!(started.elapsed() >= Duration::from_millis(50));
        // The holder removes the lock file while another call waits for it: the waiter locks a
        // fresh file, never the removed one (whichever it had opened meanwhile).
        let root2 = root.clone();
        let waiter = std::thread::spawn(move || {
            let state = StateDir::open(&root2).unwrap();
            let mut pod = state.lock_pod(POD, later()).unwrap();
            pod.write(&record(A, "c2", "net1")).unwrap();
        });
        first.close().unwrap();
        waiter.join().unwrap();
        let pod = state.lock_pod(POD, later()).unwrap();
        assert_eq!(pod.files().unwrap().records.len(), 1);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn released_files_go_pending_then_settle_and_reservations_hold_their_vmi() {
        let root = tempdir("release");
        let state = StateDir::open(&root).unwrap();
        let mut pod = state.lock_pod(POD, later()).unwrap();
        let (a, b) = (record(A, "c1", "net1"), record(B, "c1", "net2"));
        pod.write(&a).unwrap();
        pod.write(&b).unwrap();
        pod.mark_released(A, Then::Gone).unwrap();
        pod.mark_released(B, Then::Reserved).unwrap();
        assert_eq!(
            names(pod.path()),
            [format!(".{A}.release"), format!(".{B}.reserve")]
        );
        let files = pod.files().unwrap();
        assert!(files.records.is_empty());
        assert_eq!(
            files.reserved,
            std::slice::from_ref(&b),
            "pending, it already holds its VMI"
        );
        let pending: Vec<(&str, Then, bool)> = files
            .pending
            .iter()
            .map(|p| (p.vmi_uuid.as_str(), p.then, p.record.is_some()))
            .collect();
        assert_eq!(pending, [(A, Then::Gone, true), (B, Then::Reserved, true)]);
        assert_eq!(files.claims().len(), 1, "a release claims nothing");
        for p in &files.pending {
            pod.settled(p).unwrap();
        }
        assert_eq!(names(pod.path()), [format!(".{B}.reserved")]);
        let files = pod.files().unwrap();
        assert_eq!(files.reserved, std::slice::from_ref(&b));
        assert!(files.pending.is_empty());
        // The attachment's retry takes its reservation back.
        pod.write(&b).unwrap();
        assert_eq!(names(pod.path()), [B]);
        // One never registered becomes a reservation at once; dropped, it is gone.
        pod.reserve(B).unwrap();
        pod.drop_reservation(B).unwrap();
        assert!(names(pod.path()).is_empty());
        // A pending reservation dropped becomes a pending release.
        pod.write(&b).unwrap();
        pod.mark_released(B, Then::Reserved).unwrap();
        pod.drop_reservation(B).unwrap();
        assert_eq!(names(pod.path()), [format!(".{B}.release")]);
        fs::write(pod.path().join(format!(".{B}.release")), "").unwrap();
        assert!(
            pod.files().unwrap().pending[0].record.is_none(),
            "torn by a power loss"
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_pending_deregistration_of_version_0_1_0_is_read() {
        let root = tempdir("legacy");
        let state = StateDir::open(&root).unwrap();
        let mut pod = state.lock_pod(POD, later()).unwrap();
        pod.write(&record(A, "c1", "net1")).unwrap();
        let vm = "40936d96-cf0e-11e8-9892-002590aaa964";
        // Its vm-uuid names a request path: anything but a uuid is no marker.
        for hostile in [
            format!("{vm}\r\nX-Injected: 1"),
            vm.to_uppercase(),
            "../x".into(),
        ] {
            fs::write(pod.path().join(LEGACY_RESYNC), hostile).unwrap();
            assert_eq!(pod.files().unwrap().legacy_resync, None);
        }
        fs::write(pod.path().join(LEGACY_RESYNC), format!("{vm}\n")).unwrap();
        assert_eq!(pod.files().unwrap().legacy_resync.as_deref(), Some(vm));
        pod.clear_legacy_resync().unwrap();
        assert_eq!(names(pod.path()), [A]);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn records_whose_identifiers_break_the_rules_are_unreadable() {
        let root = tempdir("names");
        let state = StateDir::open(&root).unwrap();
        let mut pod = state.lock_pod(POD, later()).unwrap();
        let vm = "40936d96-cf0e-11e8-9892-002590aaa964";
        let injected = format!("{vm} HTTP/1.1\r\nX-Injected: 1");
        // Makes the pod's directory, and is replaced by each case.
        pod.write(&record(A, "c1", "net1")).unwrap();
        for (key, value) in [
            ("vm-uuid", injected.as_str()),
            ("vm-uuid", "40936D96-CF0E-11E8-9892-002590AAA964"),
            ("vn-uuid", "../../x"),
            ("host-ifname", "tap\r\nX-Injected"),
            ("host-ifname", "a-name-far-too-long"),
            ("vm-ifname", "eth0/x"),
            ("vm-ifname", ""),
            ("vm-id", "../etc"),
            ("vm-id", "c1\nX-Injected: 1"),
            ("vm-name", "k8s__default__p/../q"),
        ] {
            let mut raw = serde_json::to_value(record(A, "c1", "net1")).unwrap();
            raw[key] = value.into();
            fs::write(pod.path().join(A), raw.to_string()).unwrap();
            let files = pod.files().unwrap();
            assert!(files.records.is_empty(), "{key} {value:?} was read");
            let why = &files.unreadable[0].why;
            assert!(why.contains(key) && !why.contains("Injected"), "{why}");
            // The same as a reservation or a pending release: no record either.
            fs::rename(pod.path().join(A), pod.path().join(dotted(A, RESERVED))).unwrap();
            assert!(pod.files().unwrap().reserved.is_empty());
            fs::rename(
                pod.path().join(dotted(A, RESERVED)),
                pod.path().join(dotted(A, "release")),
            )
            .unwrap();
            assert!(pod.files().unwrap().pending[0].record.is_none());
            fs::remove_file(pod.path().join(dotted(A, "release"))).unwrap();
        }
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn stale_locks_are_swept_and_held_ones_kept() {
        let root = tempdir("sweep");
        let state = StateDir::open(&root).unwrap();
        let held = state.lock_attachment(POD, "c1", "net1", later()).unwrap();
        fs::write(root.join(LOCKS).join("k8s__default__gone"), "").unwrap();
        let mut live = state.lock_pod("k8s__default__live", later()).unwrap();
        live.write(&record(A, "c1", "net1")).unwrap();
        drop(live);
        assert_eq!(state.stale_locks(false).unwrap(), ["k8s__default__gone"]);
        assert_eq!(state.sweep_locks().unwrap(), ["k8s__default__gone"]);
        assert_eq!(
            names(&root.join(LOCKS)).len(),
            2,
            "the held and the live pod's"
        );
        held.remove().unwrap();
        assert_eq!(names(&root.join(LOCKS)), ["k8s__default__live"]);
        fs::remove_dir_all(&root).unwrap();
    }
}
