//! An attachment's links in the kernel: made, configured, observed and removed. The kind of
//! host side (`vif-type`) is behind one seam, [`Links`]: create, remove by host-side name,
//! observe; what happens inside the pod (addresses, routes) is the same for every kind.

use std::net::IpAddr;

use ipnetwork::IpNetwork;

use crate::config::{Contrail, VifType};
use crate::error::{Conflict, Error, Result};
use crate::interface::{LinkSeen, Seen, Spec};
use crate::netlink::{Link, Netns, Route, Socket, VethEnd};
use crate::state::{Record, StateDir};
use crate::vmi::Mac;

/// The host side of the node's attachments, of one kind.
pub(crate) struct Links {
    kind: VifType,
    host: Socket,
}

impl Links {
    pub(crate) fn new(conf: &Contrail) -> Result<Links> {
        Ok(Links {
            kind: conf.vif_type,
            host: Socket::host()?,
        })
    }

    /// Makes the attachment's interface: its host side, and its end in the pod named as the
    /// record says, with the VMI's MAC and `mtu` (down: [`configure`] brings it up).
    pub(crate) fn create(
        &mut self,
        state: &StateDir,
        record: &Record,
        mtu: u32,
        netns: &Netns,
    ) -> Result<()> {
        let mac = Mac::parse(&record.mac).ok_or_else(|| {
            Error::Interface(Conflict::NoMac {
                vmi: record.vmi_uuid.clone(),
            })
        })?;
        match self.kind {
            VifType::Veth => self.create_veth(state, record, mac, mtu, netns),
        }
    }

    /// A veth: the host end by its derived name (up), the container end directly in the pod's
    /// netns.
    fn create_veth(
        &mut self,
        state: &StateDir,
        record: &Record,
        mac: Mac,
        mtu: u32,
        netns: &Netns,
    ) -> Result<()> {
        let host_end = VethEnd {
            name: &record.host_ifname,
            mac: Some(crate::names::host_mac(&record.vmi_uuid)),
            mtu,
        };
        let peer = VethEnd {
            name: &record.ifname,
            mac: Some(mac.0),
            mtu,
        };
        match self.host.create_veth(&host_end, &peer, netns) {
            // The host name is derived from the VMI this pod now holds: a veth of that name
            // that no other pod's state names is a leftover of an earlier sandbox or of a
            // crashed ADD whose DEL never came. Replace it; anything else is left alone.
            Err(e) if e.is_exists() => {
                self.take_leftover(state, record, "veth")?;
                self.host.create_veth(&host_end, &peer, netns)
            }
            other => other,
        }?;
        Ok(())
    }

    /// Deletes a leftover host link of the record's name, unless another pod's state names it or
    /// it is not of `kind`.
    fn take_leftover(&mut self, state: &StateDir, record: &Record, kind: &str) -> Result<()> {
        let name = &record.host_ifname;
        let holder = state
            .other_holder(name, &record.vm_name)
            .map_err(Error::io("reading", state.path()))?;
        if let Some(pod) = holder {
            return Err(Error::Interface(Conflict::HeldByPod {
                name: name.clone(),
                pod,
            }));
        }
        if self
            .host
            .link(name)?
            .is_some_and(|l| l.kind.as_deref() != Some(kind))
        {
            return Err(Error::Interface(Conflict::NotOurs { name: name.clone() }));
        }
        log::info!("replacing leftover host interface {name}");
        self.host.delete_link(name)?;
        Ok(())
    }

    /// Removes the records' interfaces by their host side (it works when the pod's netns is
    /// gone; the end in the pod goes with it); the ones already gone count as removed. Returns
    /// each one that could not be removed, with why.
    pub(crate) fn remove(&mut self, records: &[Record]) -> Vec<(String, Error)> {
        let names: Vec<&str> = records.iter().map(|r| r.host_ifname.as_str()).collect();
        self.host
            .delete_links(&names)
            .into_iter()
            .map(|(name, e)| (name, Error::from(e)))
            .collect()
    }

    /// What the host shows of the record's host side.
    pub(crate) fn host_side(&mut self, record: &Record) -> Result<Option<LinkSeen>> {
        Ok(self.host.link(&record.host_ifname)?.map(seen))
    }
}

fn seen(l: Link) -> LinkSeen {
    LinkSeen {
        index: l.index,
        mac: l.mac.map(Mac),
        mtu: l.mtu,
        up: l.up,
    }
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
    let defaults = if spec.defaults.is_empty() {
        Vec::new()
    } else {
        let routes = routes(ctr)?;
        spec.defaults_to_add(&routes, link.index)
    };
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
