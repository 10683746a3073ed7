//! A pod's directory: what it holds, and the pod locked while it is changed.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{SFlag, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::name::{FileName, Then};
use super::{Lock, MAX_FILE, Record, Unreadable, files, open_pod_dir};
use crate::ids::{VmUuid, VmiUuid};
use crate::state::files::{Sync, entries, io, mode, stat_at, written_before_boot};
use crate::vmi::Claim;

use super::record::{parse_record, port_of};

/// The OpenSDN Go plugin's directory of pods' cached VMIs under Multus, beside `config-dir`
/// (its `<config-dir>/../<meta-plugin>`; `multus` is the only meta-plugin it knows).
const LEGACY_META_PLUGIN_DIR: &str = "multus";

/// A released record whose deregistration is pending.
#[derive(Debug, Clone)]
pub struct Pending {
    pub vmi_uuid: VmiUuid,
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
    pub legacy_resync: Option<VmUuid>,
    /// Temp files a killed writer left.
    pub temps: Vec<String>,
    /// Names that are none of the above: not this plugin's, left alone.
    pub others: Vec<String>,
}

impl PodFiles {
    pub(super) fn read(dir: Option<&OwnedFd>, path: &Path) -> io::Result<PodFiles> {
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
                .and_then(|b| parse_record(b, vmi))
                .map(|mut r| {
                    // The Go plugin's file says nothing of its boot: its age does.
                    if r.is_legacy() {
                        r.written_before_boot = stat_at(dir, name)
                            .is_ok_and(|st| st.is_some_and(|st| written_before_boot(&st)));
                    }
                    r
                });
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
            match FileName::parse(&name) {
                FileName::Temp => files.temps.push(name),
                FileName::LegacyResync => {
                    let bytes = files::read_bounded(dir, &name, MAX_FILE).unwrap_or_default();
                    let vm = String::from_utf8_lossy(&bytes).trim().to_string();
                    files.legacy_resync = VmUuid::parse(vm).ok();
                }
                FileName::Record(vmi) => match read(&name, vmi.as_str()) {
                    (_, Ok(r)) => files.records.push(r),
                    (bytes, Err(why)) => {
                        let port = port_of(bytes.as_deref().ok(), vmi.as_str());
                        if torn(&name, &port, &bytes) {
                            files.torn.push(name);
                        } else {
                            files.unreadable.push(Unreadable {
                                path: path.join(&name),
                                port,
                                vmi_uuid: vmi,
                                why,
                            });
                        }
                    }
                },
                FileName::Pending(vmi, then) => {
                    let record = read(&name, vmi.as_str()).1.ok();
                    if let (Then::Reserved, Some(r)) = (then, &record) {
                        files.reserved.push(r.clone());
                    }
                    files.pending.push(Pending {
                        vmi_uuid: vmi,
                        then,
                        record,
                    });
                }
                FileName::Reserved(vmi) => match read(&name, vmi.as_str()) {
                    (_, Ok(r)) => files.reserved.push(r),
                    (bytes, Err(_)) if torn(&name, &None, &bytes) => files.torn.push(name),
                    // A reservation that cannot be read holds nothing: it is debris.
                    (_, Err(_)) => files.others.push(name),
                },
                FileName::Other => files.others.push(name),
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

/// A pod's state, locked for as long as this lives.
pub struct PodDir {
    pub(super) root: OwnedFd,
    pub(super) name: String,
    pub(super) path: PathBuf,
    /// None until the pod has a file.
    pub(super) dir: Option<OwnedFd>,
    pub(super) lock: Lock,
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
    #[allow(
        clippy::disallowed_methods,
        reason = "state::pod writes the ledger's records"
    )]
    pub(super) fn write(&mut self, record: &Record) -> io::Result<()> {
        let body = serde_json::to_vec_pretty(&record.file_json()).map_err(io::Error::other)?;
        let dir = self.dir()?;
        let vmi = &record.vmi_uuid;
        files::write_atomic(dir, vmi.as_str(), &body, 0o600, Sync::No)?;
        for name in [
            FileName::Reserved(vmi.clone()),
            FileName::Pending(vmi.clone(), Then::Reserved),
        ] {
            files::unlink(dir, &name.to_string())?;
        }
        Ok(())
    }

    /// Renames an attachment's file to its pending name (see [`Then`]): no new space.
    pub(super) fn mark_released(&self, vmi: &VmiUuid, then: Then) -> io::Result<()> {
        self.rename(
            FileName::Record(vmi.clone()),
            FileName::Pending(vmi.clone(), then),
        )
    }

    /// Removes an attachment's file at once: for one the agent never heard of.
    pub(super) fn remove(&self, vmi: &VmiUuid) -> io::Result<()> {
        self.unlink(FileName::Record(vmi.clone()))
    }

    /// Renames an attachment's file to a reservation at once: for one the agent never heard of.
    pub(super) fn reserve(&self, vmi: &VmiUuid) -> io::Result<()> {
        self.rename(
            FileName::Record(vmi.clone()),
            FileName::Reserved(vmi.clone()),
        )
    }

    /// What a pending record becomes once the agent dropped its registration.
    pub(super) fn settled(&self, p: &Pending) -> io::Result<()> {
        let from = FileName::Pending(p.vmi_uuid.clone(), p.then);
        match p.then {
            Then::Gone => self.unlink(from),
            Then::Reserved => self.rename(from, FileName::Reserved(p.vmi_uuid.clone())),
        }
    }

    /// Drops a reservation: settled, it goes; pending, it becomes a pending release.
    pub(super) fn drop_reservation(&self, vmi: &VmiUuid) -> io::Result<()> {
        self.unlink(FileName::Reserved(vmi.clone()))?;
        let pending = FileName::Pending(vmi.clone(), Then::Reserved);
        match self.rename(pending, FileName::Pending(vmi.clone(), Then::Gone)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Removes version 0.1.0's marker once its deregistration is done.
    pub(super) fn clear_legacy_resync(&self) -> io::Result<()> {
        self.unlink(FileName::LegacyResync)
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "the ledger's renames of a pod's state files to and from their pending names"
    )]
    fn rename(&self, from: FileName, to: FileName) -> io::Result<()> {
        let dir = self
            .dir
            .as_ref()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        nix::fcntl::renameat(dir, from.to_string().as_str(), dir, to.to_string().as_str())
            .map_err(io)
    }

    fn unlink(&self, name: FileName) -> io::Result<()> {
        match &self.dir {
            Some(dir) => files::unlink(dir, &name.to_string()),
            None => Ok(()),
        }
    }

    /// Ends the critical section: when nothing is left in the pod's directory (no attachment,
    /// no pending resync), the directory goes, and its lock file with it.
    #[allow(
        clippy::disallowed_methods,
        reason = "removes the pod's state directory once nothing is left in it"
    )]
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
            self.remove_legacy_cache();
        }
        self.lock.remove()
    }

    /// The OpenSDN Go plugin's cache of the pod's VMIs under Multus,
    /// `<config-dir>/../multus/<vm-name>` (tf-controller `src/container/cni/internal/contrail/
    /// cni.go` `getMetaPluginDir`, `writeVrouterPollResults`), goes with the pod's directory:
    /// the pod has no attachment left, and the Go plugin, rolled back to, would give a new pod
    /// of the same name the VMIs it read there. A regular file only, never followed.
    #[allow(
        clippy::disallowed_methods,
        reason = "the OpenSDN Go plugin's cache directory of this pod, under Multus's"
    )]
    fn remove_legacy_cache(&self) {
        let open_dir = |at: &OwnedFd, name: &str| {
            openat(
                at,
                name,
                files::flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY),
                mode(0),
            )
        };
        let Ok(parent) = open_dir(&self.root, "..") else {
            return;
        };
        let Ok(dir) = open_dir(&parent, LEGACY_META_PLUGIN_DIR) else {
            return;
        };
        let regular = |st: Option<nix::sys::stat::FileStat>| {
            st.is_some_and(|st| files::is_kind(&st, SFlag::S_IFREG))
        };
        if !stat_at(&dir, &self.name).is_ok_and(regular) {
            return;
        }
        let path = (self.path.parent().and_then(Path::parent))
            .map(|p| p.join(LEGACY_META_PLUGIN_DIR).join(&self.name))
            .unwrap_or_default();
        match files::unlink(&dir, &self.name) {
            Ok(()) => log::info!(
                "removed the OpenSDN Go plugin's cache of pod {}: {}",
                self.name,
                path.display()
            ),
            Err(e) => log::warn!("removing {}: {e}", path.display()),
        }
        // Its directory goes with its last cache: ENOTEMPTY while another pod's is there.
        let _ = unlinkat(&parent, LEGACY_META_PLUGIN_DIR, UnlinkatFlags::RemoveDir);
    }
}
