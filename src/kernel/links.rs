//! An attachment's links in the kernel: made, configured, observed and removed. The kind of
//! host side (`vif-type`) is behind one seam, [`Links`]: check the node is ready, create,
//! remove by host-side name, observe; what happens inside the pod (addresses, routes) is the
//! same for every kind.
//!
//! - `veth`: a veth pair, the host end `tap<hash>` (the name and MAC fixed by the VMI), the other
//!   end made directly in the pod.
//! - `macvlan` (nested mode): an 802.1Q sub-interface `cvl<hash>` of `parent-interface` with
//!   the VMI's tag, up, and on it a macvlan made directly in the pod (under a name of its own,
//!   renamed there to `CNI_IFNAME`) in VEPA mode: every frame
//!   goes out to the hypervisor's vRouter, which applies the network's policy; nothing is
//!   bridged on the node. Removing the VLAN link removes the macvlan with it. The kernel allows
//!   one VLAN link per tag and parent: one named as this plugin names them that no other pod's
//!   state names is a leftover of a sandbox whose DEL never came, and is replaced; any other is
//!   refused, naming it.
//! - vhost-user (a record registered through `POST /port`, on any `vif-type` `veth` node whose
//!   vRouter is DPDK): no kernel interface; the pod's directory under `vhost-dir` and the link
//!   `uvh_vif_<host-ifname>` vrouter-dpdk connects to ([`vhost`]). Chosen per record, not per
//!   node: a pod may mix it with veth attachments.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::config::{Contrail, VifType};
use crate::error::{Conflict, Error, Result};
use crate::kernel::interface::{LinkSeen, Seen, Spec};
use crate::kernel::names;
use crate::kernel::netlink::{Link, Netns, Route, Socket, VethEnd, VlanLink};
use crate::kernel::vhost;
use crate::state::ledger::seal::Seal;
use crate::state::{Record, Route as PortRoute, StateDir};
use crate::vmi::Mac;

/// A record's host link: its name and its kind, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostLink {
    pub name: String,
    pub kind: &'static str,
}

/// A record whose host link could not be removed: its VMI, the link, why.
#[derive(Debug)]
pub(crate) struct Unremoved {
    pub vmi: String,
    pub link: String,
    pub error: Error,
}

/// The host side of the node's attachments, of one kind.
pub(crate) struct Links {
    kind: VifType,
    /// Nested mode's parent interface.
    parent: String,
    /// The node's directories for vhost-user attachments (records registered through
    /// `POST /port`, whatever the node's `vif-type`).
    vhost: vhost::Dirs,
    host: Socket,
}

impl Links {
    pub(crate) fn new(conf: &Contrail) -> Result<Links> {
        Ok(Links {
            kind: conf.vif_type,
            parent: conf.parent_interface.clone(),
            vhost: vhost::Dirs::new(conf),
            host: Socket::host()?,
        })
    }

    /// The host link of a record's attachment, named as its maker names them: this plugin's
    /// records name theirs (`host-ifname`, derived from the VMI when the claim was made); the
    /// OpenSDN Go plugin's ([`Record::is_legacy`]) are its naming of (`vm-ifname`, `vm-uuid`),
    /// in veth mode only when the file names that link too (in nested mode its file names the
    /// node's parent interface, never the attachment's). `None`: no kernel link is the
    /// attachment's (a vhost-user attachment's host side is in [`vhost`]).
    pub(crate) fn host_link(&self, r: &Record) -> Option<HostLink> {
        if r.route == PortRoute::Port {
            return None;
        }
        let kind = match self.kind {
            VifType::Veth => "veth",
            VifType::Macvlan => "vlan",
        };
        let name = if r.is_legacy() {
            let nested = self.kind == VifType::Macvlan;
            let derived = names::legacy_link(nested, &r.ifname, r.vm_uuid.as_str());
            if !nested && *r.host_ifname != derived {
                return None;
            }
            derived
        } else {
            r.host_ifname.to_string()
        };
        Some(HostLink { name, kind })
    }

    /// The host side's name for a VMI's attachment.
    pub(crate) fn host_name(&self, vmi_uuid: &str) -> String {
        match self.kind {
            VifType::Veth => names::host_ifname(vmi_uuid),
            VifType::Macvlan => names::vlan_ifname(vmi_uuid),
        }
    }

    /// Whether the node can take an attachment of `mtu`, before anything is made: nested mode
    /// needs its parent interface, up, with at least that MTU.
    pub(crate) fn ready(&mut self, mtu: u32) -> Result<()> {
        match self.kind {
            VifType::Veth => Ok(()),
            VifType::Macvlan => self.parent(mtu).map(drop),
        }
    }

    /// Nested mode's parent interface, checked to carry `mtu`.
    fn parent(&mut self, mtu: u32) -> Result<Link> {
        let name = self.parent.clone();
        let parent = self
            .host
            .link(&name)?
            .ok_or_else(|| Error::Interface(Conflict::ParentMissing { name: name.clone() }))?;
        if !parent.up {
            return Err(Error::Interface(Conflict::ParentDown { name }));
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

    /// Makes the attachment's interface: its host side, and its end in the pod (`ctr` is a
    /// socket there) named as the record says, with the VMI's MAC and `mtu` (down: [`configure`]
    /// brings it up). A failure leaves nothing of it.
    pub(crate) fn create(
        &mut self,
        _: &Seal,
        state: &StateDir,
        record: &Record,
        mtu: u32,
        netns: &Netns,
        ctr: &mut Socket,
    ) -> Result<()> {
        if record.route == PortRoute::Port {
            return self.create_vhost(record);
        }
        let mac = Mac::parse(&record.mac).ok_or_else(|| {
            Error::Interface(Conflict::NoMac {
                vmi: record.vmi_uuid.to_string(),
            })
        })?;
        let end = VethEnd {
            name: &record.ifname,
            mac: Some(mac.0),
            mtu,
        };
        match self.kind {
            VifType::Veth => self.create_veth(state, record, &end, netns),
            VifType::Macvlan => self.create_nested(state, record, &end, netns, ctr),
        }
    }

    /// A vhost-user attachment's host side: nothing in the pod, the pod's directory and the
    /// link vrouter-dpdk connects to (see [`vhost`]), paths checked before anything is made.
    fn create_vhost(&mut self, record: &Record) -> Result<()> {
        let paths = self.vhost_paths(record, true)?;
        vhost::create(&self.vhost, &paths)
    }

    /// Where a vhost-user record's pieces are; checked for length when `checked`.
    pub(crate) fn vhost_paths(&self, record: &Record, checked: bool) -> Result<vhost::Paths> {
        let uid = record.pod_uid.as_ref().ok_or_else(|| {
            Error::config(
                "CNI_ARGS K8S_POD_UID",
                "a vhost-user attachment needs the pod's UID (it names the pod's directory)",
            )
        })?;
        let mut paths = if checked {
            self.vhost
                .checked_paths(uid, &record.host_ifname, &record.ifname)?
        } else {
            self.vhost.paths(uid, &record.host_ifname, &record.ifname)
        };
        // Only the attachment's own: a record of an earlier version may name another file.
        let ours =
            self.vhost
                .device_info_path(&record.network, &record.container_id, &record.ifname);
        paths.device_info = record.device_info.clone().filter(|d| *d == ours);
        Ok(paths)
    }

    /// The node's directories of vhost-user attachments.
    pub(crate) fn vhost_dirs(&self) -> &vhost::Dirs {
        &self.vhost
    }

    /// A veth: the host end by its derived name (up), the other end directly in the pod.
    #[allow(
        clippy::disallowed_methods,
        reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
    )]
    fn create_veth(
        &mut self,
        state: &StateDir,
        record: &Record,
        end: &VethEnd,
        netns: &Netns,
    ) -> Result<()> {
        let host_end = VethEnd {
            name: &record.host_ifname,
            mac: Some(names::host_mac(&record.vmi_uuid)),
            mtu: end.mtu,
        };
        match self.host.create_veth(&host_end, end, netns) {
            // The host name is derived from the VMI this pod now holds: a veth of that name
            // that no other pod's state names is a leftover of an earlier sandbox or of a
            // crashed ADD whose DEL never came. Replace it; anything else is left alone.
            Err(e) if e.is_exists() => {
                let leftover = self.host.link(&record.host_ifname)?;
                self.take_leftover(state, record, leftover, "veth")?;
                self.host.create_veth(&host_end, end, netns)
            }
            other => other,
        }?;
        Ok(())
    }

    /// Nested mode: the VLAN sub-interface with the VMI's tag, then the macvlan on it.
    #[allow(
        clippy::disallowed_methods,
        reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
    )]
    fn create_nested(
        &mut self,
        state: &StateDir,
        record: &Record,
        end: &VethEnd,
        netns: &Netns,
        ctr: &mut Socket,
    ) -> Result<()> {
        let tag = record.vlan.ok_or_else(|| {
            Error::Interface(Conflict::NoTag {
                vmi: record.vmi_uuid.to_string(),
            })
        })?;
        let parent = self.parent(end.mtu)?;
        let alias = format!("contrail-k8s-cni {} {}", record.vmi_uuid, record.vm_name);
        let vlan = VlanLink {
            name: &record.host_ifname,
            parent: parent.index,
            tag,
            mtu: end.mtu,
            alias: &alias,
        };
        match self.host.create_vlan(&vlan) {
            // The name, or the tag on this parent, is taken: by a leftover of this plugin's,
            // replaced, or by something else, refused.
            Err(e) if e.is_exists() => {
                let taken = self.host.links()?.into_iter().find(|l| {
                    l.name == record.host_ifname
                        || (l.lower == Some(parent.index) && l.vlan == Some(tag))
                });
                self.take_leftover(state, record, taken, "vlan")?;
                self.host.create_vlan(&vlan)
            }
            other => other,
        }?;
        let macvlan = self.create_macvlan(record, end, netns, ctr);
        if macvlan.is_err() {
            // The attachment was not made: nothing of it stays.
            let _ = self.host.delete_link(&record.host_ifname);
        }
        macvlan
    }

    /// Nested mode: the macvlan on the record's VLAN link, made in the pod under a name of its
    /// own (see [`names::macvlan_tmp_ifname`]), then renamed there.
    #[allow(
        clippy::disallowed_methods,
        reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
    )]
    fn create_macvlan(
        &mut self,
        record: &Record,
        end: &VethEnd,
        netns: &Netns,
        ctr: &mut Socket,
    ) -> Result<()> {
        let vanished = |name: &str| {
            Error::Interface(Conflict::Vanished {
                name: name.to_string(),
            })
        };
        let vlan = self.host.link(&record.host_ifname)?;
        let vlan = vlan.ok_or_else(|| vanished(&record.host_ifname))?;
        let tmp = names::macvlan_tmp_ifname(&record.vmi_uuid);
        let made = VethEnd { name: &tmp, ..*end };
        self.host.create_macvlan(&made, vlan.index, netns)?;
        let link = ctr.link(&tmp)?.ok_or_else(|| vanished(&tmp))?;
        ctr.rename(link.index, end.name)?;
        Ok(())
    }

    /// Deletes a leftover host link (`link`) in the way of the record's, unless it is not one
    /// this plugin makes, not of `kind`, or another pod's state names it.
    #[allow(
        clippy::disallowed_methods,
        reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
    )]
    fn take_leftover(
        &mut self,
        state: &StateDir,
        record: &Record,
        link: Option<Link>,
        kind: &str,
    ) -> Result<()> {
        let Some(link) = link else {
            // Gone meanwhile: nothing to take.
            return Ok(());
        };
        let name = link.name.clone();
        if !names::is_ours(&name) || link.kind.as_deref() != Some(kind) {
            return Err(Error::Interface(Conflict::NotOurs { name }));
        }
        let holder = state
            .other_holder(&name, &record.vm_name)
            .map_err(Error::io("reading", state.path()))?;
        if let Some(pod) = holder {
            return Err(Error::Interface(Conflict::HeldByPod { name, pod }));
        }
        log::info!("replacing leftover host interface {name}");
        self.host.delete_link(&name)?;
        Ok(())
    }

    /// Removes the records' interfaces by their host side (it works when the pod's netns is
    /// gone; the end in the pod goes with it); the ones already gone count as removed. A Go
    /// plugin's link goes only when it is of the kind it made: a link of that name that is
    /// something else is not the attachment's, and is left alone. Returns each one that could
    /// not be removed, with why.
    #[allow(
        clippy::disallowed_methods,
        reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
    )]
    pub(crate) fn remove(&mut self, _: &Seal, records: &[Record]) -> Vec<Unremoved> {
        let vhost: Vec<&Record> = records
            .iter()
            .filter(|r| r.route == PortRoute::Port)
            .collect();
        let mut kernel: Vec<(&Record, HostLink)> = Vec::new();
        for r in records {
            let Some(link) = self.host_link(r) else {
                if r.route != PortRoute::Port {
                    log::warn!(
                        "{} of sandbox {}: its file names host interface {}, not the one the \
                         OpenSDN Go plugin makes for it: no host link removed",
                        r.ifname,
                        r.container_id,
                        r.host_ifname
                    );
                }
                continue;
            };
            if r.is_legacy() {
                match self.host.link(&link.name) {
                    Ok(Some(l)) if l.kind.as_deref() != Some(link.kind) => {
                        log::warn!(
                            "{} is not a {} as the OpenSDN Go plugin made it: left alone",
                            link.name,
                            link.kind
                        );
                        continue;
                    }
                    Ok(None) => continue,
                    _ => {}
                }
            }
            kernel.push((r, link));
        }
        let names: Vec<&str> = kernel.iter().map(|(_, l)| l.name.as_str()).collect();
        let mut failed: Vec<Unremoved> = self
            .host
            .delete_links(&names)
            .into_iter()
            .map(|(name, e)| Unremoved {
                vmi: kernel
                    .iter()
                    .find(|(_, l)| l.name == name)
                    .map(|(r, _)| r.vmi_uuid.to_string())
                    .unwrap_or_default(),
                link: name,
                error: Error::from(e),
            })
            .collect();
        for r in vhost {
            let removed = match self.vhost_paths(r, false) {
                Ok(paths) => vhost::remove(&self.vhost, &paths, r.owns_its_vhost_dir()),
                // No pod UID (a file edited by hand): the link, by its fixed name, at least.
                Err(_) => {
                    vhost::remove_link(&self.vhost, &vhost::link_path(&self.vhost, &r.host_ifname))
                }
            };
            if let Err(e) = removed {
                failed.push(Unremoved {
                    vmi: r.vmi_uuid.to_string(),
                    link: r.host_ifname.to_string(),
                    error: e,
                });
            }
        }
        failed
    }

    /// The MAC of the record's host side, for the result: a veth end's is fixed by its VMI (no
    /// need to ask), a VLAN link's is its parent's.
    pub(crate) fn host_mac(&mut self, record: &Record) -> Result<Option<Mac>> {
        if record.route == PortRoute::Port {
            // No host interface: the vRouter's end is a vhost-user socket.
            return Ok(None);
        }
        match self.kind {
            VifType::Veth => Ok(Some(Mac(names::host_mac(&record.vmi_uuid)))),
            VifType::Macvlan => Ok(self.host_side(record)?.and_then(|l| l.mac)),
        }
    }

    /// What the host shows of the record's host side.
    pub(crate) fn host_side(&mut self, record: &Record) -> Result<Option<LinkSeen>> {
        let Some(link) = self.host_link(record) else {
            return Ok(None);
        };
        Ok(self.host.link(&link.name)?.map(seen))
    }

    /// The `uvh_vif_` links into `vhost-dir` in vrouter-dpdk's socket directory, for
    /// `inspect`: (name, path).
    pub(crate) fn vhost_links(&self) -> Vec<(String, std::path::PathBuf)> {
        vhost::our_links(&self.vhost)
    }

    /// The node's links named as this plugin names them, for `inspect`.
    pub(crate) fn ours(&mut self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .host
            .links()?
            .into_iter()
            .map(|l| l.name)
            .filter(|n| names::is_ours(n))
            .collect();
        names.sort();
        Ok(names)
    }
}

fn seen(l: Link) -> LinkSeen {
    LinkSeen {
        index: l.index,
        mac: l.mac.map(Mac),
        mtu: l.mtu,
        up: l.up,
        vlan: l.vlan,
        veth: l.kind.as_deref() == Some("veth"),
        lower: l.lower,
        lower_elsewhere: l.lower_elsewhere,
    }
}

/// Whether the pod has a link named as `record`'s interface that is not that interface (it
/// does not lead to the record's host side): a retried ADD must not take it for its own.
pub(crate) fn in_the_way(links: &mut Links, ctr: &mut Socket, record: &Record) -> Result<bool> {
    if record.route == PortRoute::Port {
        // A vhost-user attachment makes nothing in the pod's netns.
        return Ok(false);
    }
    let Some(pod) = ctr.link(&record.ifname)?.map(seen) else {
        return Ok(false);
    };
    let host = links.host_side(record)?;
    Ok(!host.is_some_and(|h| crate::kernel::interface::leads_to(&pod, &h)))
}

/// Fails with code 102, before anything is created, when one of `ifnames` exists in the pod:
/// another attachment owns that name.
pub(crate) fn check_free(ctr: &mut Socket, netns: &Netns, ifnames: &[&str]) -> Result<()> {
    for name in ifnames {
        if ctr.link(name)?.is_some() {
            return Err(Error::Interface(Conflict::NameTaken {
                name: name.to_string(),
                netns: netns.path().display().to_string(),
            }));
        }
    }
    Ok(())
}

/// Configures a created interface in the pod as `spec` says: up, its addresses, its on-link
/// routes, and the default routes no other interface of the pod holds. Returns those added.
pub(crate) fn configure(ctr: &mut Socket, spec: &Spec) -> Result<Vec<(IpNetwork, IpAddr)>> {
    let vanished = || {
        Error::Interface(Conflict::Vanished {
            name: spec.ifname.clone(),
        })
    };
    let link = ctr.link(&spec.ifname)?.ok_or_else(vanished)?;
    ctr.set_up(link.index)?;
    for (address, _) in &spec.addresses {
        ctr.add_addr(link.index, *address)?;
    }
    // A network attached twice has one gateway for both interfaces: each gets its own host
    // route to it, appended next to the other's rather than refused as a duplicate.
    for dst in &spec.on_link {
        ctr.append_route(&Route {
            dst: *dst,
            gateway: None,
            oif: Some(link.index),
        })?;
    }
    // A default route can only be held by a route of its own family: one dump per family.
    let mut routes = Vec::new();
    for v6 in [false, true] {
        if spec.defaults.iter().any(|(dst, _)| dst.is_ipv6() == v6) {
            routes.extend(ctr.routes(v6)?);
        }
    }
    let defaults = spec.defaults_to_add(&routes, link.index);
    for (dst, gw) in spec.defaults.iter().filter(|d| !defaults.contains(d)) {
        log::info!(
            "{}: the pod's {dst} route is on another interface already: leaving it (not via {gw})",
            spec.ifname
        );
    }
    for (dst, gw) in &defaults {
        ctr.add_route(&Route {
            dst: *dst,
            gateway: Some(*gw),
            oif: Some(link.index),
        })?;
    }
    Ok(defaults)
}

/// The pod's routes of both families.
fn routes(ctr: &mut Socket) -> Result<Vec<Route>> {
    let mut routes = ctr.routes(false)?;
    routes.extend(ctr.routes(true)?);
    Ok(routes)
}

/// What the pod shows of `spec`'s interface (its link, addresses and the pod's routes), and
/// the host of its host side.
pub(crate) fn observe(links: &mut Links, ctr: &mut Socket, record: &Record) -> Result<Seen> {
    let link = ctr.link(&record.ifname)?;
    let addresses = match &link {
        Some(l) => ctr.addrs(l.index)?,
        None => Vec::new(),
    };
    Ok(Seen {
        link: link.map(seen),
        addresses,
        routes: routes(ctr)?,
        host: links.host_side(record)?,
    })
}
