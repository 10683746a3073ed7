//! An attachment's interfaces: made, configured, observed and removed. Each kind of
//! attachment is one implementation of one seam, [`Kind`], in a file of its own:
//!
//! - [`veth`]: a veth pair, the host end `tap<hash>`, the other end in the pod;
//! - [`nested`] (`vif-type` `macvlan`): a VLAN sub-interface of the node's parent interface,
//!   and a macvlan on it in the pod;
//! - [`vhost_user`] (`interface-type` `vhost-user`): no kernel interface, a socket for the
//!   pod's DPDK application.
//!
//! [`Kinds`] holds the node's kinds and picks one per record (the node's `vif-type`, unless the
//! record's `port-route` is `port`) or per network (`interface-type`), in `Which` alone: the
//! commands, the ledger and `inspect` never ask which kind an attachment is. The ledger asks a
//! record's kind how the agent holds its port ([`Registration`]); everything else goes through
//! [`Links`], the kinds with a netlink socket on the host. What happens inside the pod
//! (addresses, routes: [`configure`]) is the same for every kind that has an end there.

mod nested;
mod veth;
mod vhost_user;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ipnetwork::IpNetwork;
use serde_json::{Map, Value};

use crate::agent::{Agent, Registration};
use crate::cni::{Env, Outcome};
use crate::config::{Contrail, InterfaceType, NetConf, VifType};
use crate::error::{Conflict, Error, Result};
use crate::ids::{ContainerId, IfName, VmiUuid};
use crate::kernel::interface::{self, LinkSeen, Seen, Spec};
use crate::kernel::names;
use crate::kernel::netlink::{Link, Netns, Route, Socket, VethEnd};
use crate::kernel::vhost;
use crate::state::ledger::seal::Seal;
use crate::state::{Record, Route as PortRoute, StateDir, sandbox_gone};
use crate::vmi::{IpConfig, Mac, Vmi};

use nested::Nested;
use veth::Veth;
use vhost_user::VhostUser;

/// A record's host link: its name and its kind, as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostLink {
    pub name: String,
    pub kind: &'static str,
}

/// A record whose host side could not be removed: its VMI, the link, why.
#[derive(Debug)]
pub(crate) struct Unremoved {
    pub vmi: VmiUuid,
    pub link: String,
    pub error: Error,
}

/// A call's new attachment, as its kind needs to know it before anything is made.
pub(crate) struct Intent<'a> {
    pub conf: &'a NetConf,
    pub env: &'a Env,
    pub container_id: &'a ContainerId,
    pub ifname: &'a IfName,
}

/// Where an attachment is made: the host, the pod (its netns, and a socket there), the node's
/// state (which says whose a leftover link is), the attachment's MTU.
pub(crate) struct Site<'a> {
    pub host: &'a mut Socket,
    pub netns: &'a Netns,
    pub ctr: &'a mut Socket,
    pub state: &'a StateDir,
    pub mtu: u32,
}

/// What `inspect` sees of an attachment on the node, the agent's view apart.
pub(crate) struct Observation {
    /// Its sandbox may still be there (its netns, of this boot).
    pub sandbox: bool,
    /// Its pieces are all there: the pod's end (for a kind that has one) and the host side.
    pub whole: bool,
    /// What the kind calls its pieces, for when they are not whole.
    pub pieces: &'static str,
    /// What CHECK would find different, when there is something to compare.
    pub differs: Option<String>,
    /// The MAC and the addresses to show.
    pub mac: Option<Mac>,
    pub addresses: Vec<String>,
}

/// Something on the node of a kind's making that no attachment explains, for `inspect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Debris {
    /// A host link named as this plugin names them.
    Link(String),
    /// A `uvh_vif_` link into `vhost-dir`.
    VhostLink { name: String, path: PathBuf },
    /// A pod's directory in `vhost-dir` no attachment owns, and what it holds.
    VhostDirLeft { path: PathBuf, held: String },
    /// A pod's directory other pods' records name (made with its UID), by those pods.
    VhostDirNamedByOthers { path: PathBuf, pods: String },
}

/// One kind of attachment: everything that differs between kinds. The provided methods are
/// those of a kind with a kernel interface in the pod.
pub(crate) trait Kind {
    /// The host side's name for a VMI's attachment (the record's `host-ifname`).
    fn host_name(&self, vmi_uuid: &VmiUuid) -> String;

    /// Whether the node can take one for `call`, before anything is made.
    fn ready(&self, _host: &mut Socket, _call: &Intent) -> Result<()> {
        Ok(())
    }

    /// What a new attachment's record keeps of its kind, from the call and its VMI, beyond
    /// what every record has.
    fn keep(&self, _agent: &Agent, _call: &Intent, _vmi: &Vmi, _record: &mut Record) -> Result<()> {
        Ok(())
    }

    /// Makes it at `site`: the host side, and the pod's end named as the record says, with the
    /// VMI's MAC and the site's MTU, down ([`configure`] brings it up). A failure leaves
    /// nothing of it.
    fn create(&self, site: &mut Site, record: &Record) -> Result<()>;

    /// How the agent comes to hold its port: `POST /vm` with the record itself.
    fn registration(&self) -> Registration {
        Registration::ByVm
    }

    /// The kernel link on the host a record's attachment holds, if the kind makes one: this
    /// plugin's records name theirs (`host-ifname`); the OpenSDN Go plugin's
    /// ([`Record::is_legacy`]) are its naming of (`vm-ifname`, `vm-uuid`).
    fn host_link(&self, r: &Record) -> Option<HostLink>;

    /// The MAC of the host side, for the result.
    fn host_mac(&self, host: &mut Socket, r: &Record) -> Result<Option<Mac>>;

    /// Removes the records' host sides (the pod's end goes with them, netns or not); the ones
    /// already gone count as removed. Returns each one that could not be removed, with why.
    fn remove(&self, host: &mut Socket, records: &[&Record], until: Instant) -> Vec<Unremoved> {
        remove_host_links(self, host, records, until)
    }

    /// Whether it has an end in the pod's netns.
    fn in_pod(&self) -> bool {
        true
    }

    /// Once the agent has its IP configuration: the pod's end configured as `spec` says; the
    /// result.
    fn finish(
        &self,
        host: &mut Socket,
        ctr: &mut Socket,
        spec: &Spec,
        r: &Record,
    ) -> Result<Outcome> {
        let defaults = configure(ctr, spec)?;
        Ok(spec.outcome(self.host_mac(host, r)?, &defaults))
    }

    /// CHECK: what `finish` left is still there as `spec` says, and `prev` (the runtime's
    /// `prevResult`) lists nothing it lacks.
    fn verify(
        &self,
        host: &mut Socket,
        ctr: &mut Socket,
        spec: &Spec,
        r: &Record,
        prev: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let seen = observe(self, host, ctr, r)?;
        spec.verify(&seen)?;
        if let Some(prev) = prev {
            interface::verify_listed(prev, spec, &seen)?;
        }
        Ok(())
    }

    /// What `inspect` sees of it, given the agent's IP configuration (`mtu`: the one it was
    /// made with).
    fn observe(
        &self,
        host: &mut Socket,
        r: &Record,
        ip: Option<&IpConfig>,
        mtu: u32,
    ) -> Observation {
        observe_in_pod(self, host, r, ip, mtu)
    }

    /// Its host side as `inspect` names it.
    fn shown_host(&self, r: &Record) -> String {
        self.host_link(r)
            .map_or_else(|| "-".to_string(), |l| l.name)
    }

    /// What is on the node of the kind's making that none of `records` (the kind's) explains.
    fn debris(&self, host: &mut Socket, records: &[&Record]) -> Vec<Debris> {
        let held: Vec<String> = records
            .iter()
            .filter_map(|r| self.host_link(r).map(|l| l.name))
            .collect();
        let Ok(links) = host.links() else {
            return Vec::new();
        };
        let mut names: Vec<String> = links
            .into_iter()
            .map(|l| l.name)
            .filter(|n| names::is_ours(n) && !held.contains(n))
            .collect();
        names.sort();
        names.into_iter().map(Debris::Link).collect()
    }
}

/// Which of the node's kinds an attachment is: the one place that tells. A record keeps it as
/// its `port-route` (the agent's route its port was registered through), a network asks for it
/// with `interface-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    /// The node's kernel kind (`vif-type`).
    Node = 0,
    VhostUser = 1,
}

impl Which {
    fn of_record(r: &Record) -> Which {
        match r.route {
            PortRoute::Vm => Which::Node,
            PortRoute::Port => Which::VhostUser,
        }
    }

    fn of_network(conf: &Contrail) -> Which {
        match conf.interface_type {
            InterfaceType::Veth => Which::Node,
            InterfaceType::VhostUser => Which::VhostUser,
        }
    }

    /// `records` by kind, in the order of the kinds.
    fn grouped(records: &[Record]) -> [(Which, Vec<&Record>); 2] {
        [Which::Node, Which::VhostUser].map(|w| {
            (
                w,
                records
                    .iter()
                    .filter(|r| Which::of_record(r) == w)
                    .collect(),
            )
        })
    }
}

/// The node's kinds of attachment, by [`Which`]: the node's kernel kind (`vif-type`),
/// vhost-user. What they say needs no socket: the ledger asks them how the agent holds a
/// record's port.
pub(crate) struct Kinds([Box<dyn Kind>; 2]);

impl Kinds {
    pub(crate) fn new(conf: &Contrail) -> Kinds {
        let node: Box<dyn Kind> = match conf.vif_type {
            VifType::Veth => Box::new(Veth),
            VifType::Macvlan => Box::new(Nested {
                parent: conf.parent_interface.clone(),
            }),
        };
        let vhost_user = Box::new(VhostUser {
            dirs: vhost::Dirs::new(conf),
        });
        Kinds([node, vhost_user])
    }

    fn get(&self, which: Which) -> &dyn Kind {
        self.0[which as usize].as_ref()
    }

    /// How the agent holds a record's port (see [`Kind::registration`]).
    pub(crate) fn registration(&self, r: &Record) -> Registration {
        self.get(Which::of_record(r)).registration()
    }

    /// How the agent holds the ports of a network's attachments.
    pub(crate) fn registration_for(&self, conf: &Contrail) -> Registration {
        self.get(Which::of_network(conf)).registration()
    }

    /// How the agent holds the ports of the node's kernel kind: the only kind version 0.1.0
    /// made, whose `.resync` marker names a VM to bring in line.
    pub(crate) fn legacy_registration(&self) -> Registration {
        self.get(Which::Node).registration()
    }
}

/// The node's kinds of attachment, and a netlink socket on the host, for a call that ends by
/// `until`.
pub(crate) struct Links {
    kinds: Kinds,
    host: Socket,
    until: Instant,
}

impl Links {
    /// For a call whose every wait ends by `until` (the kernel's end of a link a release found
    /// it tearing down already, see [`Socket::wait_gone`]).
    pub(crate) fn new(kinds: Kinds, until: Instant) -> Result<Links> {
        Ok(Links {
            kinds,
            host: Socket::host()?,
            until,
        })
    }

    pub(crate) fn kinds(&self) -> &Kinds {
        &self.kinds
    }

    fn kind(&self, which: Which) -> &dyn Kind {
        self.kinds.get(which)
    }

    /// A kind and the host's socket.
    fn with_host(&mut self, which: Which) -> (&dyn Kind, &mut Socket) {
        (self.kinds.get(which), &mut self.host)
    }

    /// Whether the node can take the call's attachment, before anything is made.
    pub(crate) fn ready(&mut self, call: &Intent) -> Result<()> {
        let (kind, host) = self.with_host(Which::of_network(&call.conf.contrail));
        kind.ready(host, call)
    }

    /// A new attachment's host-side name.
    pub(crate) fn host_name(&self, conf: &Contrail, vmi_uuid: &VmiUuid) -> String {
        self.kind(Which::of_network(conf)).host_name(vmi_uuid)
    }

    /// See [`Kind::keep`].
    pub(crate) fn keep(
        &self,
        agent: &Agent,
        call: &Intent,
        vmi: &Vmi,
        record: &mut Record,
    ) -> Result<()> {
        self.kind(Which::of_network(&call.conf.contrail))
            .keep(agent, call, vmi, record)
    }

    /// See [`Kind::create`].
    pub(crate) fn create(
        &mut self,
        _: &Seal,
        state: &StateDir,
        record: &Record,
        mtu: u32,
        netns: &Netns,
        ctr: &mut Socket,
    ) -> Result<()> {
        let (kind, host) = self.with_host(Which::of_record(record));
        let mut site = Site {
            host,
            netns,
            ctr,
            state,
            mtu,
        };
        kind.create(&mut site, record)
    }

    /// See [`Kind::remove`]: each kind's records together.
    pub(crate) fn remove(&mut self, _: &Seal, records: &[Record]) -> Vec<Unremoved> {
        let mut failed = Vec::new();
        let until = self.until;
        for (which, records) in Which::grouped(records) {
            let (kind, host) = self.with_host(which);
            failed.extend(kind.remove(host, &records, until));
        }
        failed
    }

    /// See [`Kind::finish`].
    pub(crate) fn finish(&mut self, ctr: &mut Socket, spec: &Spec, r: &Record) -> Result<Outcome> {
        let (kind, host) = self.with_host(Which::of_record(r));
        kind.finish(host, ctr, spec, r)
    }

    /// See [`Kind::verify`].
    pub(crate) fn verify(
        &mut self,
        ctr: &mut Socket,
        spec: &Spec,
        r: &Record,
        prev: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let (kind, host) = self.with_host(Which::of_record(r));
        kind.verify(host, ctr, spec, r, prev)
    }

    /// See [`Kind::observe`].
    pub(crate) fn observe(&mut self, r: &Record, ip: Option<&IpConfig>, mtu: u32) -> Observation {
        let (kind, host) = self.with_host(Which::of_record(r));
        kind.observe(host, r, ip, mtu)
    }

    /// See [`Kind::shown_host`].
    pub(crate) fn shown_host(&self, r: &Record) -> String {
        self.kind(Which::of_record(r)).shown_host(r)
    }

    /// What no record explains, of every kind.
    pub(crate) fn debris(&mut self, records: &[Record]) -> Vec<Debris> {
        let mut found = Vec::new();
        for (which, records) in Which::grouped(records) {
            let (kind, host) = self.with_host(which);
            found.extend(kind.debris(host, &records));
        }
        found
    }

    /// Whether the pod has a link named as `record`'s interface that is not that interface (it
    /// does not lead to the record's host side): a retried ADD must not take it for its own.
    pub(crate) fn in_the_way(&mut self, ctr: &mut Socket, record: &Record) -> Result<bool> {
        let (kind, host) = self.with_host(Which::of_record(record));
        if !kind.in_pod() {
            return Ok(false);
        }
        let Some(pod) = ctr.link(record.ifname.as_str())?.map(seen) else {
            return Ok(false);
        };
        let host = host_side(kind, host, record)?;
        Ok(!host.is_some_and(|h| interface::leads_to(&pod, &h)))
    }
}

/// The pod's end of a kernel kind: named as the record says, with the VMI's MAC and `mtu`.
fn pod_end(record: &Record, mtu: u32) -> Result<VethEnd<'_>> {
    let mac = record.mac.ok_or_else(|| {
        Error::Interface(Conflict::NoMac {
            vmi: record.vmi_uuid.clone(),
        })
    })?;
    Ok(VethEnd {
        name: record.ifname.as_str(),
        mac: Some(mac.0),
        mtu,
    })
}

/// What the host shows of the record's host link.
fn host_side<K: Kind + ?Sized>(
    kind: &K,
    host: &mut Socket,
    record: &Record,
) -> Result<Option<LinkSeen>> {
    let Some(link) = kind.host_link(record) else {
        return Ok(None);
    };
    Ok(host.link(&link.name)?.map(seen))
}

/// Deletes a leftover host link (`link`) in the way of the record's, unless it is not one
/// this plugin makes, not of `kind`, or another pod's state names it.
#[allow(
    clippy::disallowed_methods,
    reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
)]
fn take_leftover(site: &mut Site, record: &Record, link: Option<Link>, kind: &str) -> Result<()> {
    let Some(link) = link else {
        // Gone meanwhile: nothing to take.
        return Ok(());
    };
    let name = link.name.clone();
    if !names::is_ours(&name) || link.kind.as_deref() != Some(kind) {
        return Err(Error::Interface(Conflict::NotOurs { name }));
    }
    let holder = site
        .state
        .other_holder(&name, &record.vm_name)
        .map_err(Error::io("reading", site.state.path()))?;
    if let Some(pod) = holder {
        return Err(Error::Interface(Conflict::HeldByPod { name, pod }));
    }
    log::info!("replacing leftover host interface {name}");
    site.host.delete_link(&name)?;
    Ok(())
}

/// [`Kind::remove`] of a kind with host links, by name. A Go plugin's link goes only when it
/// is of the kind it made: a link of that name that is something else is not the attachment's,
/// and is left alone. Then waits (until `until`) for the kernel to be done with the links it
/// was tearing down already: what a release returns is final, and a new sandbox's ADD of the
/// same attachment finds its host name free.
#[allow(
    clippy::disallowed_methods,
    reason = "kernel::links makes and removes the ledger's links (its creators and removers take the ledger's Seal)"
)]
fn remove_host_links<K: Kind + ?Sized>(
    kind: &K,
    host: &mut Socket,
    records: &[&Record],
    until: Instant,
) -> Vec<Unremoved> {
    let mut doomed: Vec<(&Record, HostLink)> = Vec::new();
    for &r in records {
        let Some(link) = kind.host_link(r) else {
            log::warn!(
                "{} of sandbox {}: its file names host interface {}, not the one the OpenSDN Go \
                 plugin makes for it: no host link removed",
                r.ifname,
                r.container_id,
                r.host_ifname
            );
            continue;
        };
        if r.is_legacy() {
            match host.link(&link.name) {
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
        doomed.push((r, link));
    }
    let names: Vec<&str> = doomed.iter().map(|(_, l)| l.name.as_str()).collect();
    let failed: Vec<Unremoved> = host
        .delete_links(&names)
        .into_iter()
        .filter_map(|(name, e)| {
            let (r, _) = doomed.iter().find(|(_, l)| l.name == name)?;
            Some(Unremoved {
                vmi: r.vmi_uuid.clone(),
                link: name,
                error: Error::from(e),
            })
        })
        .collect();
    let deleted: Vec<&str> = names
        .into_iter()
        .filter(|n| !failed.iter().any(|u| u.link == *n))
        .collect();
    for name in host.wait_gone(&deleted, until) {
        log::warn!(
            "{name}: the kernel is still tearing it down (its pod's netns went) at the deadline"
        );
    }
    failed
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

/// What the pod shows of the record's interface (its link, addresses and the pod's routes), and
/// the host of its host side.
fn observe<K: Kind + ?Sized>(
    kind: &K,
    host: &mut Socket,
    ctr: &mut Socket,
    record: &Record,
) -> Result<Seen> {
    let link = ctr.link(record.ifname.as_str())?;
    let addresses = match &link {
        Some(l) => ctr.addrs(l.index)?,
        None => Vec::new(),
    };
    Ok(Seen {
        link: link.map(seen),
        addresses,
        routes: routes(ctr)?,
        host: host_side(kind, host, record)?,
    })
}

/// [`Kind::observe`] of a kind with an end in the pod: that end, the host side (a nested one
/// only with the VMI's tag), and what CHECK would find different.
fn observe_in_pod<K: Kind + ?Sized>(
    kind: &K,
    host: &mut Socket,
    r: &Record,
    ip: Option<&IpConfig>,
    mtu: u32,
) -> Observation {
    let host_if = host_side(kind, host, r)
        .ok()
        .flatten()
        .is_some_and(|h| r.vlan.is_none() || h.vlan == r.vlan);
    // A sandbox of an earlier boot is gone, whatever its namespace path holds now.
    let boot = crate::state::files::boot_id();
    let netns = (!sandbox_gone(r, &boot))
        .then(|| Netns::open(Path::new(&r.netns)).ok())
        .flatten();
    let mut ctr = netns.as_ref().and_then(|ns| Socket::open(ns).ok());
    let link = ctr.as_mut().and_then(|ctr| {
        let link = ctr.link(r.ifname.as_str()).ok()??;
        let addrs = ctr.addrs(link.index).unwrap_or_default();
        Some((link, addrs))
    });
    // What CHECK compares, compared the same way.
    let differs = match (ip, ctr.as_mut()) {
        (Some(ip), Some(ctr)) => {
            match (interface::describe(r, ip, mtu), observe(kind, host, ctr, r)) {
                (Ok(spec), Ok(seen)) => spec.verify(&seen).err().map(|m| m.to_string()),
                (Err(e), _) | (_, Err(e)) => Some(e.to_string()),
            }
        }
        _ => None,
    };
    let (mac, addresses) = match &link {
        Some((l, a)) => (
            l.mac.map(Mac),
            a.iter()
                .filter(|n| !n.ip().is_loopback() && !is_link_local(n))
                .map(|n| n.to_string())
                .collect(),
        ),
        None => (r.mac, Vec::new()),
    };
    Observation {
        sandbox: netns.is_some(),
        whole: link.is_some() && host_if,
        pieces: "interface",
        differs,
        mac,
        addresses,
    }
}

fn is_link_local(n: &IpNetwork) -> bool {
    matches!(n.ip(), IpAddr::V6(a) if (a.segments()[0] & 0xffc0) == 0xfe80)
}

/// Fails with code 102, before anything is created, when one of `ifnames` exists in the pod:
/// another attachment owns that name.
pub(crate) fn check_free(ctr: &mut Socket, netns: &Netns, ifnames: &[&IfName]) -> Result<()> {
    for &name in ifnames {
        if ctr.link(name.as_str())?.is_some() {
            return Err(Error::Interface(Conflict::NameTaken {
                name: name.clone(),
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
    let link = ctr.link(spec.ifname.as_str())?.ok_or_else(vanished)?;
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
