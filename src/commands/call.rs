//! One CNI call on a pod's attachments: its inputs, which attachments it is about (by mode), and
//! where their state is. `add`, `del` and `check` are built on it.

use std::path::Path;
use std::time::Instant;

use crate::cni::pod::Pod;
use crate::cni::{BadEnv, Env, EnvProblem};
use crate::config::{MetaPlugin, Mode, NetConf};
use crate::error::{Error, Result};
use crate::ids::{ContainerId, IfName, VmName, VmiUuid};
use crate::kernel::netlink::Netns;
use crate::state::{Lock, PodFiles, Record, StateDir};

/// One CNI call's inputs.
pub struct Call<'a> {
    pub env: &'a Env,
    /// CNI_CONTAINERID and CNI_IFNAME, which every ADD, DEL and CHECK has.
    pub container_id: &'a ContainerId,
    pub interface: &'a IfName,
    pub conf: &'a NetConf,
    pub pod: Option<&'a Pod>,
    /// When the call started: its every wait (for the agent, for a lock) ends by then +
    /// poll-timeout x poll-retries.
    pub started: Instant,
}

/// What a command did: the VMIs it acted on, which the call's log line names whatever the
/// outcome, and its result.
pub struct Acted<T> {
    pub vmis: Vec<VmiUuid>,
    pub result: Result<T>,
}

impl<T> Acted<T> {
    /// `result`, of acting on `vmis`.
    pub(crate) fn on(vmis: Vec<VmiUuid>, result: Result<T>) -> Acted<T> {
        Acted { vmis, result }
    }

    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Acted<U> {
        Acted::on(self.vmis, self.result.map(f))
    }
}

/// A result before the command knew of any VMI.
impl<T> From<Result<T>> for Acted<T> {
    fn from(result: Result<T>) -> Acted<T> {
        Acted::on(Vec::new(), result)
    }
}

/// The attachment lock's interface for an attachment on `ifname`, by mode: its own, or none
/// (thick mode locks the whole sandbox).
pub(crate) fn lock_scope(mode: Mode, ifname: &IfName) -> Option<&IfName> {
    match mode {
        Mode::Plugin => Some(ifname),
        #[cfg(feature = "thick")]
        Mode::Thick => None,
    }
}

/// Which of a sandbox's attachments a DEL or CHECK is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope<'a> {
    /// The one on `CNI_IFNAME`, of the network on stdin (plugin mode).
    Interface(&'a IfName),
    /// Every one of the network on stdin (plugin mode under CNI-Genie, whose DEL carries the
    /// runtime's `CNI_IFNAME`, not the one its ADD gave the attachment).
    Network,
    /// Every one (thick mode).
    Sandbox,
}

impl<'a> Scope<'a> {
    /// The interface it names, if it names one.
    pub(crate) fn interface(self) -> Option<&'a IfName> {
        match self {
            Scope::Interface(i) => Some(i),
            Scope::Network | Scope::Sandbox => None,
        }
    }
}

/// This call's attachments and reservations in a pod.
pub(crate) struct Ours {
    pub records: Vec<Record>,
    pub reserved: Vec<Record>,
}

impl Ours {
    /// Their VMIs, for the call's log line.
    pub(crate) fn vmis(&self) -> Vec<VmiUuid> {
        let mut vmis: Vec<VmiUuid> = Vec::new();
        for r in self.records.iter().chain(&self.reserved) {
            if !vmis.contains(&r.vmi_uuid) {
                vmis.push(r.vmi_uuid.clone());
            }
        }
        vmis
    }
}

impl Call<'_> {
    /// Which of the sandbox's attachments a DEL or CHECK is about: in thick mode every one; in
    /// plugin mode the one on CNI_IFNAME, or, on a CNI-Genie node, every one of the network.
    pub(crate) fn scope(&self) -> Scope<'_> {
        let contrail = &self.conf.contrail;
        match (
            lock_scope(contrail.mode, self.interface),
            contrail.meta_plugin,
        ) {
            (None, _) => Scope::Sandbox,
            (Some(ifname), MetaPlugin::Multus) => Scope::Interface(ifname),
            (Some(_), MetaPlugin::Genie) => Scope::Network,
        }
    }

    /// When the call's every wait ends: started + poll-timeout x poll-retries.
    pub(crate) fn deadline(&self) -> Instant {
        self.started + self.conf.contrail.poll_budget()
    }

    /// The interface of the attachment lock an ADD, or a DEL of this interface, takes.
    pub(crate) fn lock_ifname(&self) -> Option<&IfName> {
        lock_scope(self.conf.contrail.mode, self.interface)
    }

    /// The lock of this call's attachment (see [`StateDir::lock_attachment`]).
    pub(crate) fn lock(&self, state: &StateDir, vm_name: &VmName) -> Result<Lock> {
        self.lock_on(state, vm_name, self.lock_ifname())
    }

    /// The lock of the sandbox's attachment on `ifname` (`None`: the whole sandbox's).
    pub(crate) fn lock_on(
        &self,
        state: &StateDir,
        vm_name: &VmName,
        ifname: Option<&IfName>,
    ) -> Result<Lock> {
        let ifname = ifname.map_or("", IfName::as_str);
        let deadline = self.deadline();
        state
            .lock_attachment(vm_name, self.container_id, ifname, deadline)
            .map_err(Error::locking(
                "locking the attachment in",
                state.path(),
                self.started,
            ))
    }

    /// Whether record `r` is one this call is about: its sandbox's, in the call's scope, and of
    /// the network on stdin. A record without a network (the OpenSDN Go plugin's) or a DEL whose
    /// config could not be read does not tell networks apart.
    pub(crate) fn covers(&self, r: &Record) -> bool {
        let of_network =
            || r.network.is_empty() || self.conf.read_network().is_none_or(|n| r.network == n);
        r.container_id == *self.container_id
            && match self.scope() {
                Scope::Interface(ifname) => r.ifname == *ifname && of_network(),
                Scope::Network => of_network(),
                Scope::Sandbox => true,
            }
    }

    /// The state directory and the pod of this call's attachments: the pod from CNI_ARGS,
    /// else the one holding them (a DEL from a caller that sends no pod name). `None` when
    /// there is nothing to act on.
    pub(crate) fn locate(&self) -> Result<Option<(StateDir, VmName)>> {
        let dir = &self.conf.contrail.config_dir;
        let Some(state) = StateDir::existing(dir).map_err(Error::io("opening", dir))? else {
            return Ok(None);
        };
        let vm_name = match self.pod {
            Some(p) => match p.vm_name(&self.conf.contrail.cluster_name) {
                Ok(name) => name,
                // No directory of the state can have that name: nothing of it to act on.
                Err(e) => {
                    log::warn!("{e}: no state can be this pod's");
                    return Ok(None);
                }
            },
            None => match state
                .find_pod(self.container_id, self.scope().interface())
                .map_err(Error::io("searching", dir))?
            {
                Some(name) => name,
                None => return Ok(None),
            },
        };
        Ok(Some((state, vm_name)))
    }

    /// This call's attachments and reservations among a pod's files (older sandboxes' are left
    /// alone).
    pub(crate) fn ours(&self, files: PodFiles) -> Ours {
        let records: Vec<Record> = files
            .records
            .into_iter()
            .filter(|r| self.covers(r))
            .collect();
        let reserved: Vec<Record> = files
            .reserved
            .into_iter()
            .filter(|r| self.covers(r))
            .collect();
        Ours { records, reserved }
    }
}

/// The pod's network namespace (`CNI_NETNS`), opened once.
pub(crate) fn open_netns(path: &str) -> Result<Netns> {
    Netns::open(Path::new(path)).map_err(|source| {
        Error::Env(BadEnv::new(
            "CNI_NETNS",
            EnvProblem::Netns {
                path: path.to_string(),
                source,
            },
        ))
    })
}
