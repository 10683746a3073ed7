//! vhost-user (a network's `interface-type`, on a `vif-type` `veth` node whose vRouter is DPDK;
//! a record's `port-route` `port`): no kernel interface. The host side is the pod's directory
//! under `vhost-dir` and the link `uvh_vif_<host-ifname>` vrouter-dpdk connects to
//! ([`vhost`]); the port is registered through `POST /port`. Chosen per network, kept per
//! record: a pod may mix it with veth attachments.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel::links makes and removes the ledger's links and vhost-user files (its creators and removers take the ledger's Seal)"
)]

use std::path::Path;
use std::time::Instant;

use serde_json::{Map, Value};

use super::{Debris, HostLink, Intent, Kind, Observation, Site, Unremoved};
use crate::agent::{Agent, Registration};
use crate::cni::{BadEnv, EnvProblem, Outcome};
use crate::config::{Mode, VifType, VrouterMode};
use crate::error::{Conflict, Error, Result};
use crate::ids::{PodUid, VmiUuid};
use crate::kernel::interface::{Mismatch, Spec};
use crate::kernel::names;
use crate::kernel::netlink::Socket;
use crate::kernel::vhost;
use crate::state::{Record, Route};
use crate::vmi::{IpConfig, Mac, Vmi};

pub(super) struct VhostUser {
    pub(super) dirs: vhost::Dirs,
}

impl VhostUser {
    /// Where a record's pieces are; checked for length when `checked`.
    fn paths(&self, record: &Record, checked: bool) -> Result<vhost::Paths> {
        let uid = record.pod_uid.as_ref().ok_or_else(|| {
            Error::Interface(Conflict::NoPodUid {
                vmi: record.vmi_uuid.clone(),
            })
        })?;
        let mut paths = if checked {
            self.dirs.checked_paths(
                uid.as_str(),
                record.host_ifname.as_str(),
                record.ifname.as_str(),
            )?
        } else {
            self.dirs.paths(
                uid.as_str(),
                record.host_ifname.as_str(),
                record.ifname.as_str(),
            )
        };
        // Only the attachment's own: a record of an earlier version may name another file.
        let ours = self.dirs.device_info_path(
            &record.network,
            record.container_id.as_str(),
            record.ifname.as_str(),
        );
        paths.device_info = record.device_info.clone().filter(|d| *d == ours);
        Ok(paths)
    }

    /// The pod's UID, which names its directory: the runtime must send it.
    fn uid(call: &Intent) -> Result<PodUid> {
        Ok(crate::cni::pod::uid_from_args(&call.env.args)?
            .ok_or_else(|| BadEnv::new("CNI_ARGS", EnvProblem::NoPodUid))?)
    }

    /// The device-info file the runtime asked for, checked to be the attachment's own in
    /// `device-info-dir` (Multus's name).
    fn device_info(&self, call: &Intent) -> Result<Option<std::path::PathBuf>> {
        let asked = call
            .conf
            .runtime_config
            .as_ref()
            .and_then(|r| r.get("CNIDeviceInfoFile"));
        self.dirs.device_info_file(
            asked,
            &call.conf.network,
            call.container_id.as_str(),
            call.ifname.as_str(),
        )
    }
}

impl Kind for VhostUser {
    /// The port's `system-name`, which names vrouter-dpdk's socket link.
    fn host_name(&self, vmi_uuid: &VmiUuid) -> String {
        names::host_ifname(vmi_uuid.as_str())
    }

    /// Refused (code 7) where it cannot work: the node's vRouter is DPDK (`vrouter-mode`, or
    /// `dpdk_netlink` in its socket directory), it has its own vRouter (`vif-type` `veth`), the
    /// runtime sent the pod's UID, every socket path fits in 107 bytes, `vhost-dir` follows no
    /// symlink, and a device-info file it asks for is the attachment's own.
    fn ready(&self, _: &mut Socket, call: &Intent) -> Result<()> {
        let c = &call.conf.contrail;
        let refuse = |why: &str| Err(Error::config("contrail.interface-type", why));
        if c.mode != Mode::Plugin {
            return refuse("vhost-user is for plugin mode (one attachment per call) so far");
        }
        if c.vif_type != VifType::Veth {
            return refuse(
                "vhost-user needs the node's own DPDK vRouter; this node is nested (vif-type \
                 macvlan)",
            );
        }
        if !c.vrouter_is_dpdk() {
            let how = match c.vrouter_mode {
                VrouterMode::Kernel => "vrouter-mode kernel".to_string(),
                _ => format!(
                    "no {} in {}",
                    crate::config::DPDK_NETLINK,
                    c.vrouter_socket_dir.display()
                ),
            };
            return refuse(&format!(
                "vhost-user needs a DPDK vRouter; this node's vRouter is in kernel mode ({how})"
            ));
        }
        let uid = VhostUser::uid(call)?;
        // Every host-side name has the same length: any VMI's checks the paths.
        let system_name = names::host_ifname("00000000-0000-0000-0000-000000000000");
        self.dirs
            .checked_paths(uid.as_str(), &system_name, call.ifname.as_str())?;
        self.dirs.check_guarded()?;
        self.device_info(call).map(drop)
    }

    /// The port route, the pod's UID and the device-info file. The UID names the pod's
    /// directory, so it must be the pod's own: kube-manager makes the pod's VM with it, so the
    /// VMI says which it is. Another pod's (a runtime's or meta-plugin's bug) would reach that
    /// pod's directory.
    fn keep(&self, _: &Agent, call: &Intent, vmi: &Vmi, record: &mut Record) -> Result<()> {
        let uid = VhostUser::uid(call)?;
        if !vmi.vm_uuid.as_str().eq_ignore_ascii_case(uid.as_str()) {
            return Err(BadEnv::new(
                "CNI_ARGS",
                EnvProblem::UidNotThePods {
                    uid: uid.clone(),
                    vm_uuid: vmi.vm_uuid.clone(),
                },
            )
            .into());
        }
        record.route = Route::Port;
        record.pod_uid = Some(uid);
        record.device_info = self.device_info(call)?;
        Ok(())
    }

    /// `POST /port` with [`Record::port_body`]: a PMD port, whose transport the agent fixes by
    /// its own mode.
    fn registration(&self) -> Registration {
        Registration::ByPort
    }

    /// Nothing in the pod: the pod's directory and the link vrouter-dpdk connects to, paths
    /// checked before anything is made.
    fn create(&self, _: &mut Site, record: &Record) -> Result<()> {
        vhost::create(&self.dirs, &self.paths(record, true)?)
    }

    fn remove(&self, _: &mut Socket, records: &[&Record], _: Instant) -> Vec<Unremoved> {
        records
            .iter()
            .filter_map(|r| {
                let removed = match self.paths(r, false) {
                    Ok(paths) => vhost::remove(&self.dirs, &paths, r.owns_its_vhost_dir()),
                    // No pod UID (a file edited by hand): the link, by its fixed name, at least.
                    Err(_) => vhost::remove_link(
                        &self.dirs,
                        &vhost::link_path(&self.dirs, r.host_ifname.as_str()),
                    ),
                };
                removed.err().map(|error| Unremoved {
                    vmi: r.vmi_uuid.clone(),
                    link: r.host_ifname.to_string(),
                    error,
                })
            })
            .collect()
    }

    /// No kernel link: the vRouter's end is a vhost-user socket.
    fn host_link(&self, _: &Record) -> Option<HostLink> {
        None
    }

    fn host_mac(&self, _: &mut Socket, _: &Record) -> Result<Option<Mac>> {
        Ok(None)
    }

    fn in_pod(&self) -> bool {
        false
    }

    /// Nothing in the pod's netns: the application configures its port itself, from the JSON
    /// file next to its socket (and the device-info file).
    fn finish(&self, _: &mut Socket, _: &mut Socket, spec: &Spec, r: &Record) -> Result<Outcome> {
        let paths = self.paths(r, true)?;
        let outcome = spec.vhost_outcome(&paths.pod_socket.to_string_lossy());
        vhost::write_info(
            &self.dirs,
            &paths,
            &vhost::info(&outcome, r.vmi_uuid.as_str()),
        )?;
        Ok(outcome)
    }

    /// Its link must lead to the pod's socket.
    fn verify(
        &self,
        _: &mut Socket,
        _: &mut Socket,
        _: &Spec,
        r: &Record,
        _: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let paths = self.paths(r, false)?;
        if !vhost::intact(&paths) {
            return Err(Mismatch::SocketLinkMissing { link: paths.link }.into());
        }
        Ok(())
    }

    /// Its link to the pod's socket, and the agent's MAC and addresses.
    fn observe(&self, _: &mut Socket, r: &Record, ip: Option<&IpConfig>, _: u32) -> Observation {
        let (differs, addresses) = match ip {
            Some(ip) => (
                (r.mac != Some(ip.mac)).then(|| {
                    let has = r.mac.map_or_else(|| "none".to_string(), |m| m.to_string());
                    format!("the agent has MAC {}, the attachment {has}", ip.mac)
                }),
                [ip.v4.map(|n| n.to_string()), ip.v6.map(|n| n.to_string())]
                    .into_iter()
                    .flatten()
                    .collect(),
            ),
            None => (None, Vec::new()),
        };
        Observation {
            sandbox: Path::new(&r.netns).exists(),
            whole: self.paths(r, false).is_ok_and(|p| vhost::intact(&p)),
            pieces: "vhost-user link",
            differs,
            mac: r.mac,
            addresses,
        }
    }

    fn shown_host(&self, r: &Record) -> String {
        vhost::link_name(r.host_ifname.as_str())
    }

    /// The pods' directories no attachment owns, and the `uvh_vif_` links into `vhost-dir`
    /// that none explains.
    fn debris(&self, _: &mut Socket, records: &[&Record]) -> Vec<Debris> {
        let mut found: Vec<Debris> = vhost::pod_dirs(&self.dirs)
            .into_iter()
            .filter_map(|(uid, held)| {
                let naming = records
                    .iter()
                    .filter(|r| r.pod_uid.as_ref().is_some_and(|u| u.as_str() == uid));
                let (owners, others): (Vec<&&Record>, Vec<&&Record>) =
                    naming.partition(|r| r.owns_its_vhost_dir());
                let mut others: Vec<&str> = others.iter().map(|r| r.vm_name.as_str()).collect();
                others.sort();
                others.dedup();
                let path = self.dirs.root.join(&uid);
                match (owners.is_empty(), others.is_empty()) {
                    (true, true) => Some(Debris::VhostDirLeft { path, held }),
                    (_, false) => Some(Debris::VhostDirNamedByOthers {
                        path,
                        pods: others.join(", "),
                    }),
                    (false, true) => None,
                }
            })
            .collect();
        found.extend(
            vhost::our_links(&self.dirs)
                .into_iter()
                .filter(|(name, _)| !records.iter().any(|r| *name == self.shown_host(r)))
                .map(|(name, path)| Debris::VhostLink { name, path }),
        );
        found
    }
}
