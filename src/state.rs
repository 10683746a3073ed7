//! Local state: one file per attachment in `config-dir/<vm-name>/<vmi-uuid>`, in the agent's
//! POST /vm body format so the agent can re-register it on restart, a per-pod lock, and a
//! marker for a pod whose registrations with the agent are not yet in line with its files.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::vmi::{Claim, valid_uuid};

/// Written into every state file, so a later format can tell ours apart.
pub const STATE_VERSION: &str = "1";
const LOCK_NAME: &str = ".lock";
/// Present while the agent may hold registrations of the pod that its files no longer
/// explain (a released attachment not yet deregistered); holds the pod's vm-uuid.
const RESYNC_NAME: &str = ".resync";

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

pub fn create_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// A pod's state directory, locked for as long as this lives.
pub struct PodDir {
    path: PathBuf,
    _lock: Flock<File>,
}

impl PodDir {
    /// Takes the pod's lock, creating its directory. Concurrent invocations for the pod wait
    /// here; a waiter whose lock file was removed by a finishing DEL starts over.
    pub fn lock(config_dir: &Path, vm_name: &str) -> io::Result<PodDir> {
        let path = config_dir.join(vm_name);
        let lock_path = path.join(LOCK_NAME);
        loop {
            create_dir(&path)?;
            let file = match OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .open(&lock_path)
            {
                Ok(f) => f,
                // The directory went away between create and open: a DEL just removed it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let lock =
                Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io::Error::from(e))?;
            let same = fs::metadata(&lock_path)
                .map(|m| m.ino() == lock.metadata().map(|l| l.ino()).unwrap_or(0));
            if same.unwrap_or(false) {
                return Ok(PodDir { path, _lock: lock });
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every UUID-named file: the attachments of this pod, of any sandbox.
    pub fn records(&self) -> io::Result<(Vec<Record>, Vec<Unreadable>)> {
        read_records(&self.path)
    }

    /// Writes a record atomically (see [`PodDir::put`]).
    pub fn write(&self, record: &Record) -> io::Result<()> {
        let body = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
        self.put(&record.vmi_uuid, &body)
    }

    /// Writes a file atomically: temp file, fsync, rename. Readers never see half a file.
    fn put(&self, name: &str, body: &[u8]) -> io::Result<()> {
        let tmp = self.path.join(format!(".{name}.tmp"));
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
        fs::rename(&tmp, self.path.join(name))
    }

    /// Records that the agent's registrations for pod `vm_uuid` must be brought in line with
    /// the files, before any file that explains a registration goes.
    pub fn mark_resync(&self, vm_uuid: &str) -> io::Result<()> {
        self.put(RESYNC_NAME, vm_uuid.as_bytes())
    }

    /// The pod's vm-uuid when a resync is pending.
    pub fn resync_pending(&self) -> io::Result<Option<String>> {
        read_resync(&self.path)
    }

    pub fn clear_resync(&self) -> io::Result<()> {
        match fs::remove_file(self.path.join(RESYNC_NAME)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The registration bodies of the pod's attachments, as the agent would reload them: every
    /// record, and every unreadable file that is still a port of this VMI.
    pub fn ports(&self) -> io::Result<Vec<serde_json::Value>> {
        let (records, unreadable) = self.records()?;
        let mut ports = records
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()
            .map_err(io::Error::other)?;
        ports.extend(unreadable.into_iter().filter_map(|u| u.port));
        Ok(ports)
    }

    /// Removes one attachment's file; `Ok(false)` when it was already gone.
    pub fn remove(&self, vmi_uuid: &str) -> io::Result<bool> {
        match fs::remove_file(self.path.join(vmi_uuid)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Ends the critical section: removes the directory when nothing but the lock is left in
    /// it (no attachment, no pending resync), so that no call leaves an empty pod behind.
    pub fn close(self) -> io::Result<()> {
        self.remove_if_empty().map(drop)
    }

    /// Removes the directory when no attachment file is left; the lock goes with it.
    pub fn remove_if_empty(self) -> io::Result<bool> {
        let mut others = false;
        for entry in fs::read_dir(&self.path)? {
            let name = entry?.file_name();
            if name != LOCK_NAME {
                others = true;
            }
        }
        if others {
            return Ok(false);
        }
        fs::remove_file(self.path.join(LOCK_NAME))?;
        fs::remove_dir(&self.path)?;
        Ok(true)
    }
}

fn read_resync(pod_dir: &Path) -> io::Result<Option<String>> {
    match fs::read_to_string(pod_dir.join(RESYNC_NAME)) {
        Ok(s) => Ok(Some(s.trim().to_string()).filter(|s| valid_uuid(s))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The pod's vm-uuid when its directory holds a pending resync (for reports; unlocked).
pub fn resync_pending(pod_dir: &Path) -> Option<String> {
    read_resync(pod_dir).ok().flatten()
}

pub fn read_records(dir: &Path) -> io::Result<(Vec<Record>, Vec<Unreadable>)> {
    let mut records = Vec::new();
    let mut bad = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((records, bad)),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(uuid) = name.to_str().filter(|n| valid_uuid(n)) else {
            continue;
        };
        let path = entry.path();
        let bytes = fs::read(&path).map_err(|e| e.to_string());
        let parsed = bytes.as_ref().map_err(Clone::clone).and_then(|b| {
            let r: Record =
                serde_json::from_slice(b).map_err(|e| format!("not a state file: {e}"))?;
            if r.vmi_uuid != uuid {
                return Err(format!(
                    "names VMI {} but the file is named {uuid}",
                    r.vmi_uuid
                ));
            }
            if !(r.state_version.is_empty() || r.state_version == STATE_VERSION) {
                return Err(format!(
                    "state version {:?} is not one this plugin knows",
                    r.state_version
                ));
            }
            Ok(r)
        });
        match parsed {
            Ok(r) => records.push(r),
            Err(why) => bad.push(Unreadable {
                path,
                vmi_uuid: uuid.to_string(),
                why,
                port: bytes
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .filter(|v| v.get("vmi-uuid").and_then(|u| u.as_str()) == Some(uuid)),
            }),
        }
    }
    records.sort_by(|a, b| a.vmi_uuid.cmp(&b.vmi_uuid));
    Ok((records, bad))
}

/// Whether the record's file is still in place (unlocked: a hint between polls).
pub fn exists(config_dir: &Path, record: &Record) -> bool {
    config_dir
        .join(&record.vm_name)
        .join(&record.vmi_uuid)
        .exists()
}

/// Finds the pod directory holding an attachment of this container (on `ifname`, or on any
/// interface) when the pod's name is unknown (a DEL without CNI_ARGS): a scan of every pod.
pub fn find_pod(
    config_dir: &Path,
    container_id: &str,
    ifname: Option<&str>,
) -> io::Result<Option<String>> {
    let entries = match fs::read_dir(config_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let (records, _) = read_records(&entry.path())?;
        let ours =
            |r: &Record| r.container_id == container_id && ifname.is_none_or(|i| r.ifname == i);
        if records.iter().any(ours) {
            return Ok(entry.file_name().to_str().map(str::to_string));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
            vm_name: "k8s__default__p".into(),
            host_ifname: crate::vmi::host_ifname(vmi),
            ifname: ifname.into(),
            netns: "/run/netns/x".into(),
            vn_uuid: "f95af4cc-e4ba-44c8-9936-269d891e0ee9".into(),
            vmi_uuid: vmi.into(),
            state_version: STATE_VERSION.into(),
            network: "net-a".into(),
            mac: "02:00:00:00:00:01".into(),
            default_gw: false,
        }
    }

    const A: &str = "b86ac068-cf0e-11e8-b196-002590aaa964";
    const B: &str = "b86ac068-cf0e-11e8-b196-002590aaa965";

    #[test]
    fn write_read_remove_and_permissions() {
        let root = tempdir("rw");
        let pod = PodDir::lock(&root, "k8s__default__p").unwrap();
        pod.write(&record(A, "c1", "net1")).unwrap();
        pod.write(&record(B, "c1", "net2")).unwrap();
        let (records, bad) = pod.records().unwrap();
        assert_eq!(
            records,
            vec![record(A, "c1", "net1"), record(B, "c1", "net2")]
        );
        assert!(bad.is_empty());
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(pod.path()), 0o700);
        assert_eq!(mode(&pod.path().join(A)), 0o600);
        // No temp files left behind.
        let names: Vec<_> = fs::read_dir(pod.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 3, "{names:?}");
        // The agent's own keys, as strings.
        let raw: serde_json::Value =
            serde_json::from_slice(&fs::read(pod.path().join(A)).unwrap()).unwrap();
        assert_eq!(raw["vm-id"], "c1");
        assert_eq!(raw["vm-ifname"], "net1");
        assert_eq!(raw["host-ifname"], record(A, "c1", "net1").host_ifname);
        assert!(pod.remove(A).unwrap());
        assert!(!pod.remove(A).unwrap());
        assert!(!pod.remove_if_empty().unwrap());
        let pod = PodDir::lock(&root, "k8s__default__p").unwrap();
        pod.remove(B).unwrap();
        let path = pod.path().to_path_buf();
        assert!(pod.remove_if_empty().unwrap());
        assert!(!path.exists());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn agent_written_and_corrupt_files() {
        let root = tempdir("corrupt");
        let pod = PodDir::lock(&root, "k8s__default__p").unwrap();
        // A file the agent wrote from a legacy plugin's POST: no keys of ours.
        let agent = serde_json::json!({"time": "t", "vm-id": "c0", "vm-uuid": "40936d96-cf0e-11e8-9892-002590aaa964",
            "vm-name": "k8s__default__p", "host-ifname": "tapeth0fe3edca", "vm-ifname": "eth0",
            "vm-namespace": "/proc/1/ns/net", "vn-uuid": "f95af4cc-e4ba-44c8-9936-269d891e0ee9", "vmi-uuid": A,
            "author": "/usr/bin/contrail-vrouter-agent"});
        fs::write(pod.path().join(A), agent.to_string()).unwrap();
        fs::write(pod.path().join(B), "{ torn").unwrap();
        fs::write(pod.path().join("not-a-uuid"), "x").unwrap();
        let (records, bad) = pod.records().unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(
            records[0].claim(),
            Claim {
                vmi: A.into(),
                container_id: Some("c0".into()),
                ifname: "eth0".into()
            }
        );
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].path, pod.path().join(B));
        let mut future = record(B, "c1", "net1");
        future.state_version = "9".into();
        pod.write(&future).unwrap();
        let (_, bad) = pod.records().unwrap();
        assert!(bad[0].why.contains("state version"), "{}", bad[0].why);
        assert_eq!(
            find_pod(&root, "c0", Some("eth0")).unwrap().as_deref(),
            Some("k8s__default__p")
        );
        assert_eq!(find_pod(&root, "c0", Some("eth1")).unwrap(), None);
        assert_eq!(find_pod(&root.join("absent"), "c0", None).unwrap(), None);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn lock_excludes_and_survives_directory_removal() {
        let root = tempdir("lock");
        let first = PodDir::lock(&root, "k8s__default__p").unwrap();
        let root2 = root.clone();
        let waiter = std::thread::spawn(move || {
            let pod = PodDir::lock(&root2, "k8s__default__p").unwrap();
            pod.write(&record(A, "c2", "net1")).unwrap();
        });
        // The holder removes the directory while the other thread waits on the old lock file;
        // the waiter must start over on a fresh directory rather than write into a dead one.
        // (If the waiter has not reached the lock yet, it simply creates the directory anew.)
        std::thread::yield_now();
        assert!(first.remove_if_empty().unwrap());
        waiter.join().unwrap();
        let pod = PodDir::lock(&root, "k8s__default__p").unwrap();
        assert_eq!(pod.records().unwrap().0.len(), 1);
        fs::remove_dir_all(&root).unwrap();
    }
}
