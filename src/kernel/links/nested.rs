//! Nested mode (`vif-type` `macvlan`, the node an OpenStack VM): an 802.1Q sub-interface
//! `cvl<hash>` of `parent-interface` with the VMI's tag, up, and on it a macvlan made directly
//! in the pod (under a name of its own, renamed there to `CNI_IFNAME`) in VEPA mode: every frame
//! goes out to the hypervisor's vRouter, which applies the network's policy; nothing is bridged
//! on the node, and nothing is registered with a local agent. Removing the VLAN link removes the
//! macvlan with it. The kernel allows one VLAN link per tag and parent: one named as this plugin
//! names them that no other pod's state names is a leftover of a sandbox whose DEL never came,
//! and is replaced; any other is refused, naming it.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
)]

use super::{HostLink, Intent, Kind, Site, pod_end, seen, take_leftover};
use crate::agent::{Agent, Registration};
use crate::error::{Conflict, Error, Malformed, Result};
use crate::ids::{IfName, VmiUuid};
use crate::kernel::names;
use crate::kernel::netlink::{Link, Socket, VethEnd, VlanLink};
use crate::state::Record;
use crate::vmi::{Mac, Vmi};

pub(super) struct Nested {
    /// The interface that carries the pods' VLANs.
    pub(super) parent: String,
}

impl Nested {
    /// The parent interface, checked to carry `mtu`.
    fn parent(&self, host: &mut Socket, mtu: u32) -> Result<Link> {
        let name = &self.parent;
        let parent = host
            .link(name)?
            .ok_or_else(|| Error::Interface(Conflict::ParentMissing { name: name.clone() }))?;
        if !parent.up {
            return Err(Error::Interface(Conflict::ParentDown {
                name: name.clone(),
            }));
        }
        if mtu > parent.mtu {
            return Err(Error::config(
                "contrail.mtu",
                format!(
                    "{mtu} is more than the {} of parent interface {name}, which carries the \
                     pods' VLANs",
                    parent.mtu
                ),
            ));
        }
        Ok(parent)
    }

    /// The macvlan on the record's VLAN link, made in the pod under a name of its own (see
    /// [`names::macvlan_tmp_ifname`]), then renamed there.
    fn create_macvlan(site: &mut Site, record: &Record, end: &VethEnd) -> Result<()> {
        let vanished = |name: &IfName| Error::Interface(Conflict::Vanished { name: name.clone() });
        let vlan = site.host.link(record.host_ifname.as_str())?;
        let vlan = vlan.ok_or_else(|| vanished(&record.host_ifname))?;
        let tmp = IfName::parse(names::macvlan_tmp_ifname(record.vmi_uuid.as_str()))
            .map_err(|_| Error::Internal)?;
        let made = VethEnd {
            name: tmp.as_str(),
            ..*end
        };
        site.host.create_macvlan(&made, vlan.index, site.netns)?;
        let link = site.ctr.link(tmp.as_str())?.ok_or_else(|| vanished(&tmp))?;
        site.ctr.rename(link.index, end.name)?;
        Ok(())
    }
}

impl Kind for Nested {
    fn host_name(&self, vmi_uuid: &VmiUuid) -> String {
        names::vlan_ifname(vmi_uuid.as_str())
    }

    /// The parent interface, up, with at least the network's MTU.
    fn ready(&self, host: &mut Socket, call: &Intent) -> Result<()> {
        self.parent(host, call.conf.contrail.mtu).map(drop)
    }

    /// The VMI's VLAN tag, which it must have (1..=4094: kube-manager's range the controller
    /// accepts, and the kernel's).
    fn keep(&self, agent: &Agent, _: &Intent, vmi: &Vmi, record: &mut Record) -> Result<()> {
        match vmi.vlan {
            Some(tag @ 1..=4094) => {
                record.vlan = Some(tag);
                Ok(())
            }
            _ => Err(agent.refused_pod(
                &record.vm_name,
                Malformed::Field {
                    what: format!("VMI {}", vmi.uuid),
                    field: "vlan-id",
                    problem: "is not a VLAN tag (1..4094), which nested mode needs: is this \
                              node a VM of the vRouter's hypervisor?",
                },
            )),
        }
    }

    /// The hypervisor's vRouter has the port already, named after the VMI; this node has no
    /// agent to register with.
    fn registration(&self) -> Registration {
        Registration::Elsewhere
    }

    /// The VLAN sub-interface with the VMI's tag, then the macvlan on it.
    fn create(&self, site: &mut Site, record: &Record) -> Result<()> {
        let end = &pod_end(record, site.mtu)?;
        let tag = record.vlan.ok_or_else(|| {
            Error::Interface(Conflict::NoTag {
                vmi: record.vmi_uuid.clone(),
            })
        })?;
        let parent = self.parent(site.host, site.mtu)?;
        let alias = format!("contrail-k8s-cni {} {}", record.vmi_uuid, record.vm_name);
        let vlan = VlanLink {
            name: record.host_ifname.as_str(),
            parent: parent.index,
            tag,
            mtu: site.mtu,
            alias: &alias,
        };
        match site.host.create_vlan(&vlan) {
            // The name, or the tag on this parent, is taken: by a leftover of this plugin's,
            // replaced, or by something else, refused.
            Err(e) if e.is_exists() => {
                let taken = site.host.links()?.into_iter().find(|l| {
                    l.name == record.host_ifname.as_str()
                        || (l.lower == Some(parent.index) && l.vlan == Some(tag))
                });
                take_leftover(site, record, taken, "vlan")?;
                site.host.create_vlan(&vlan)
            }
            other => other,
        }?;
        let macvlan = Nested::create_macvlan(site, record, end);
        if macvlan.is_err() {
            // The attachment was not made: nothing of it stays.
            let _ = site.host.delete_link(record.host_ifname.as_str());
        }
        macvlan
    }

    /// The Go plugin's file names the node's parent interface, never the attachment's: its VLAN
    /// link is named after (`vm-ifname`, `vm-uuid`).
    fn host_link(&self, r: &Record) -> Option<HostLink> {
        let name = if r.is_legacy() {
            names::legacy_link(true, r.ifname.as_str(), r.vm_uuid.as_str())
        } else {
            r.host_ifname.to_string()
        };
        Some(HostLink { name, kind: "vlan" })
    }

    /// A VLAN link's MAC is its parent's.
    fn host_mac(&self, host: &mut Socket, record: &Record) -> Result<Option<Mac>> {
        let Some(link) = self.host_link(record) else {
            return Ok(None);
        };
        Ok(host.link(&link.name)?.map(seen).and_then(|l| l.mac))
    }
}
