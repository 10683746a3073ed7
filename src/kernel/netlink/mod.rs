//! Netlink operations of the plugin on a blocking socket: veth pairs, links, addresses and
//! routes, in the host's netns and in a container's. Small named operations on [`Socket`], each
//! one request and its replies; no async runtime. A socket belongs to the netns it was created
//! in: a container's is created inside it behind a guard that always switches back, and then
//! works from the host side.

mod error;
mod message;
mod netns;
#[cfg(test)]
mod tests;

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use ipnetwork::IpNetwork;
use netlink_packet_core::{
    NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader,
    NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoMacVlan, InfoVeth, InfoVlan, LinkAttribute, LinkFlags, LinkInfo,
    LinkMessage, MacVlanMode,
};
use netlink_packet_route::route::{RouteHeader, RouteMessage, RouteType};
use netlink_sys::{SocketAddr, protocols::NETLINK_ROUTE};

pub use error::{Detail, Error, Op};

use message::{Message, RECV_BUF, Reply, addr_from, route_from, route_message, veth_end};
pub use netns::Netns;
use netns::NetnsGuard;
pub(crate) use netns::netns_gone;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub mac: Option<[u8; 6]>,
    pub mtu: u32,
    pub name: String,
    /// Administratively up (`IFF_UP`), not carrier.
    pub up: bool,
    /// The link's kind (`veth`, `vlan`, `macvlan`, ...); `None` for a plain device.
    pub kind: Option<String>,
    /// The device it sits on (`IFLA_LINK`: a VLAN's parent, a macvlan's lower device, a veth's
    /// peer).
    pub lower: Option<u32>,
    /// Whether that device is in another network namespace (`IFLA_LINK_NETNSID`).
    pub lower_elsewhere: bool,
    /// A VLAN's tag.
    pub vlan: Option<u16>,
}

/// An 802.1Q sub-interface to create: up, on `parent`, with `tag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlanLink<'a> {
    pub name: &'a str,
    pub parent: u32,
    pub tag: u16,
    pub mtu: u32,
    /// Shown by `ip -d link` (IFLA_IFALIAS): who made the link, for operators.
    pub alias: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNetwork,
    pub gateway: Option<IpAddr>,
    pub oif: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VethEnd<'a> {
    pub name: &'a str,
    /// None lets the kernel pick a random MAC.
    pub mac: Option<[u8; 6]>,
    /// 0 keeps the kernel default (1500 for veth).
    pub mtu: u32,
}

/// A blocking rtnetlink socket bound to one netns.
pub struct Socket {
    socket: netlink_sys::Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl Socket {
    /// A socket in the caller's (host) netns.
    pub fn host() -> Result<Socket, Error> {
        Socket::new(None)
    }

    /// A socket in `ns`, created inside it; the thread switches straight back.
    pub fn open(ns: &Netns) -> Result<Socket, Error> {
        let guard = NetnsGuard::enter(ns)?;
        let socket = Socket::new(Some(&ns.path));
        guard.leave()?;
        socket
    }

    fn new(netns: Option<&std::path::Path>) -> Result<Socket, Error> {
        let op = || Op::OpenSocket {
            netns: netns.map(std::path::Path::to_path_buf),
        };
        let err = |e| Error::new(op(), e);
        let shown = || netns.map_or("host netns".into(), |p| format!("netns {}", p.display()));
        let mut socket = netlink_sys::Socket::new(NETLINK_ROUTE).map_err(err)?;
        socket.bind_auto().map_err(err)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(err)?;
        // Extended acks carry the kernel's reason for an error ("Nexthop has invalid gateway");
        // without them (kernels before 4.12) errors still work, only less precise.
        if let Err(e) = socket.set_ext_ack(true) {
            log::debug!("netlink extended acks unavailable in {}: {e}", shown());
        }
        // Lets the kernel filter a dump (the addresses of one link) by the request's header.
        if let Err(e) = socket.set_netlink_get_strict_chk(true) {
            log::debug!("netlink strict checking unavailable in {}: {e}", shown());
        }
        Ok(Socket {
            socket,
            seq: 0,
            buf: Vec::with_capacity(RECV_BUF),
        })
    }

    /// Sends one request and collects its replies, up to the kernel's ack (or the end of a
    /// dump). An error reply is the request's error.
    fn request(
        &mut self,
        op: &dyn Fn() -> Op,
        message: Message,
        flags: u16,
    ) -> Result<Vec<Reply>, Error> {
        self.seq = self.seq.wrapping_add(1);
        let mut packet = NetlinkMessage::new(NetlinkHeader::default(), message.into());
        packet.header.flags = NLM_F_REQUEST | flags;
        packet.header.sequence_number = self.seq;
        packet.finalize();
        let mut bytes = vec![0; packet.buffer_len()];
        packet.serialize(&mut bytes);
        self.socket
            .send(&bytes, 0)
            .map_err(|e| Error::new(op(), e))?;
        let mut replies = Vec::new();
        loop {
            self.buf.clear();
            let n = self
                .socket
                .recv(&mut self.buf, 0)
                .map_err(|e| Error::new(op(), e))?;
            let mut rest = &self.buf[..n];
            while !rest.is_empty() {
                let reply = NetlinkMessage::<Reply>::deserialize(rest)
                    .map_err(|e| Error::invalid(op(), e))?;
                let len = (reply.header.length as usize).next_multiple_of(4);
                rest = rest.get(len..).unwrap_or_default();
                // A late reply to an earlier request of this socket is not ours.
                if reply.header.sequence_number != self.seq {
                    continue;
                }
                match reply.payload {
                    NetlinkPayload::Done(_) => return Ok(replies),
                    NetlinkPayload::Error(e) if e.code.is_some() => {
                        return Err(Error::netlink(op(), &e));
                    }
                    // The ack.
                    NetlinkPayload::Error(_) => return Ok(replies),
                    NetlinkPayload::InnerMessage(m) => replies.push(m),
                    _ => {}
                }
                if len == 0 {
                    break;
                }
            }
        }
    }

    /// A change the kernel acks, with `extra` flags (NLM_F_CREATE, ...).
    fn change(&mut self, op: &dyn Fn() -> Op, message: Message, extra: u16) -> Result<(), Error> {
        self.request(op, message, NLM_F_ACK | extra).map(drop)
    }

    /// Every link of this netns.
    pub fn links(&mut self) -> Result<Vec<Link>, Error> {
        let op = || Op::ListLinks;
        let replies = self.request(
            &op,
            Message::Link(libc::RTM_GETLINK, LinkMessage::default()),
            NLM_F_DUMP,
        )?;
        Ok(replies
            .into_iter()
            .filter_map(|r| match r {
                Reply::Link(l) => Some(l),
                _ => None,
            })
            .collect())
    }

    /// None when there is no link of that name.
    pub fn link(&mut self, name: &str) -> Result<Option<Link>, Error> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        let op = || Op::GetLink {
            name: name.to_string(),
        };
        match self.request(&op, Message::Link(libc::RTM_GETLINK, m), NLM_F_ACK) {
            Ok(replies) => Ok(replies.into_iter().find_map(|r| match r {
                Reply::Link(l) => Some(l),
                _ => None,
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Waits until no link of `names` is left in this socket's netns, or `until`; the names
    /// still there then. A link the kernel is already unregistering (a veth whose peer's netns
    /// is being torn down, on the machine's one cleanup workqueue) is not found by
    /// RTM_DELLINK, yet listed for a while; and an unregistered link's `/sys/class/net` entry
    /// goes only an RCU grace period after netlink stops listing it, while a new link of its
    /// name cannot be made ("File exists"). Gone is both: none listed, no entry (the sysfs of
    /// the host the plugin runs in is its netns's).
    pub fn wait_gone(&mut self, names: &[&str], until: Instant) -> Vec<String> {
        let mut pause = Duration::from_millis(1);
        loop {
            let left: Vec<String> = names
                .iter()
                .filter(|n| {
                    !matches!(self.link(n), Ok(None))
                        || std::path::Path::new("/sys/class/net").join(n).exists()
                })
                .map(|n| n.to_string())
                .collect();
            let now = Instant::now();
            if left.is_empty() || now >= until {
                return left;
            }
            std::thread::sleep(pause.min(until - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Creates a veth pair: the `host` end in this socket's netns, up; the `peer` end (down)
    /// created directly inside `ns` (its link message carries `IFLA_NET_NS_FD`, name, MAC and
    /// MTU), so the container side never exists under its name on the host, where it could
    /// clash with a host link.
    pub fn create_veth(&mut self, host: &VethEnd, peer: &VethEnd, ns: &Netns) -> Result<(), Error> {
        let op = || Op::CreateVeth {
            host: host.name.to_string(),
            peer: peer.name.to_string(),
        };
        for name in [host.name, peer.name] {
            check_name(&op, name)?;
        }
        let mut peer_message = veth_end(peer);
        peer_message
            .attributes
            .push(LinkAttribute::NetNsFd(ns.file.as_raw_fd()));
        let mut message = veth_end(host);
        // The host end comes up with its creation (a lookup and a request less). Not the peer:
        // the kernel configures it before the pair is joined, and a veth without its peer
        // refuses to come up (ENOTCONN).
        message.header.flags = LinkFlags::Up;
        message.header.change_mask = LinkFlags::Up;
        message.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Veth),
            LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer_message))),
        ]));
        self.change(
            &op,
            Message::Link(libc::RTM_NEWLINK, message),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| e.mtu_detail(host.mtu, peer.mtu))
    }

    /// Creates a VLAN sub-interface, up, with its alias.
    pub fn create_vlan(&mut self, vlan: &VlanLink) -> Result<(), Error> {
        let op = || Op::CreateVlan {
            name: vlan.name.to_string(),
            tag: vlan.tag,
            parent: vlan.parent,
        };
        check_name(&op, vlan.name)?;
        let mut m = LinkMessage::default();
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        m.attributes
            .push(LinkAttribute::IfName(vlan.name.to_string()));
        m.attributes.push(LinkAttribute::Link(vlan.parent));
        m.attributes.push(LinkAttribute::Mtu(vlan.mtu));
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::Vlan),
            LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(vlan.tag)])),
        ]));
        self.change(
            &op,
            Message::Link(libc::RTM_NEWLINK, m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| e.mtu_detail(vlan.mtu, vlan.mtu))?;
        // The kernel takes no alias with a new link: it is set on the link made.
        let mut m = LinkMessage::default();
        m.attributes
            .push(LinkAttribute::IfName(vlan.name.to_string()));
        m.attributes
            .push(LinkAttribute::IfAlias(vlan.alias.to_string()));
        let op = || Op::SetAlias {
            name: vlan.name.to_string(),
        };
        self.change(&op, Message::Link(libc::RTM_SETLINK, m), 0)
    }

    /// Creates a macvlan (VEPA: everything goes out to the lower device, nothing is bridged
    /// here) on link `lower` of this socket's netns, directly inside `ns` as `end` (down).
    pub fn create_macvlan(&mut self, end: &VethEnd, lower: u32, ns: &Netns) -> Result<(), Error> {
        let op = || Op::CreateMacvlan {
            name: end.name.to_string(),
            lower,
        };
        check_name(&op, end.name)?;
        let mut m = veth_end(end);
        m.attributes.push(LinkAttribute::Link(lower));
        m.attributes
            .push(LinkAttribute::NetNsFd(ns.file.as_raw_fd()));
        m.attributes.push(LinkAttribute::LinkInfo(vec![
            LinkInfo::Kind(InfoKind::MacVlan),
            LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(
                MacVlanMode::Vepa,
            )])),
        ]));
        self.change(
            &op,
            Message::Link(libc::RTM_NEWLINK, m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
        .map_err(|e| e.mtu_detail(end.mtu, end.mtu))
    }

    /// Ok(false) when the link is already gone. Deleting either end of a veth removes both.
    pub fn delete_link(&mut self, name: &str) -> Result<bool, Error> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        let op = || Op::DeleteLink {
            name: name.to_string(),
        };
        match self.change(&op, Message::Link(libc::RTM_DELLINK, m), 0) {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deletes links by name, the ones already gone included; returns each link that could
    /// not be deleted with why. The kernel makes every deletion wait for an RCU grace period
    /// (~20 ms): several links are put in a netdev group of their own and deleted with one
    /// request, which waits once for all of them.
    #[allow(
        clippy::disallowed_methods,
        reason = "the socket's own removal of several links, for kernel::links"
    )]
    pub(crate) fn delete_links(&mut self, names: &[&str]) -> Vec<(String, Error)> {
        let group = match names {
            [] => return Vec::new(),
            [_] => None,
            _ => Some(private_group()),
        };
        let mut single: Vec<&str> = names.to_vec();
        if let Some(group) = group {
            single.retain(|name| match self.set_group(name, group) {
                Ok(()) => false,
                Err(e) if e.is_not_found() => false,
                Err(e) => {
                    log::debug!("{e}: deleting {name} by itself");
                    true
                }
            });
            if let Err(e) = self.delete_group(group) {
                log::debug!("{e}: deleting the links one by one");
                single = names.to_vec();
            }
        }
        single
            .into_iter()
            .filter_map(|name| self.delete_link(name).err().map(|e| (name.to_string(), e)))
            .collect()
    }

    fn set_group(&mut self, name: &str, group: u32) -> Result<(), Error> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        m.attributes.push(LinkAttribute::Group(group));
        let op = || Op::SetGroup {
            name: name.to_string(),
            group,
        };
        self.change(&op, Message::Link(libc::RTM_SETLINK, m), 0)
    }

    /// Deletes every link of `group` in this netns; Ok when there is none.
    fn delete_group(&mut self, group: u32) -> Result<(), Error> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::Group(group));
        let op = || Op::DeleteGroup { group };
        match self.change(&op, Message::Link(libc::RTM_DELLINK, m), 0) {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
    }

    /// Renames a link (down: the kernel refuses to rename one that is up).
    pub(crate) fn rename(&mut self, index: u32, name: &str) -> Result<(), Error> {
        let op = || Op::Rename {
            index,
            name: name.to_string(),
        };
        check_name(&op, name)?;
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.attributes.push(LinkAttribute::IfName(name.to_string()));
        self.change(&op, Message::Link(libc::RTM_SETLINK, m), 0)
    }

    pub fn set_up(&mut self, index: u32) -> Result<(), Error> {
        let mut m = LinkMessage::default();
        m.header.index = index;
        m.header.flags = LinkFlags::Up;
        m.header.change_mask = LinkFlags::Up;
        let op = || Op::SetUp { index };
        self.change(&op, Message::Link(libc::RTM_SETLINK, m), 0)
    }

    /// Add an address; IPv6 with `IFA_F_NODAD` so it is usable at once: DAD would keep it
    /// tentative (not usable as a source) for a second or more, and the IPAM already made it
    /// unique.
    pub fn add_addr(&mut self, index: u32, addr: IpNetwork) -> Result<(), Error> {
        let mut m = AddressMessage::default();
        m.header.index = index;
        m.header.prefix_len = addr.prefix();
        match addr.ip() {
            IpAddr::V4(ip) => {
                m.header.family = AddressFamily::Inet;
                m.attributes.push(AddressAttribute::Address(ip.into()));
                m.attributes.push(AddressAttribute::Local(ip.into()));
                if addr.prefix() < 31 {
                    let brd = u32::from(ip) | (u32::MAX >> addr.prefix());
                    m.attributes
                        .push(AddressAttribute::Broadcast(Ipv4Addr::from(brd)));
                }
            }
            IpAddr::V6(ip) => {
                m.header.family = AddressFamily::Inet6;
                m.header.flags = AddressHeaderFlags::Nodad;
                m.attributes.push(AddressAttribute::Address(ip.into()));
                m.attributes.push(AddressAttribute::Local(ip.into()));
            }
        }
        let op = || Op::AddAddr { addr, index };
        self.change(
            &op,
            Message::Address(libc::RTM_NEWADDR, m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    pub fn addrs(&mut self, index: u32) -> Result<Vec<IpNetwork>, Error> {
        let mut m = AddressMessage::default();
        m.header.index = index;
        let op = || Op::ListAddrs { index };
        let replies = self.request(&op, Message::Address(libc::RTM_GETADDR, m), NLM_F_DUMP)?;
        replies
            .iter()
            .filter_map(|r| match r {
                // Without strict checking the kernel sends every link's addresses.
                Reply::Address(a) if a.header.index == index => addr_from(a),
                _ => None,
            })
            .collect::<Result<_, _>>()
            .map_err(|e| Error::invalid(op(), e))
    }

    /// Route with gateway, or on-link (scope link, no gateway) when gateway is None. Main
    /// table. Fails with EEXIST when the destination has a route already, on any interface.
    pub fn add_route(&mut self, route: &Route) -> Result<(), Error> {
        self.new_route(false, route, NLM_F_EXCL)
    }

    /// Like [`Socket::add_route`], but a route to the same destination on another interface
    /// is kept beside this one (`NLM_F_APPEND`, as the kernel adds connected routes); only the
    /// same route twice is EEXIST.
    pub(crate) fn append_route(&mut self, route: &Route) -> Result<(), Error> {
        self.new_route(true, route, NLM_F_APPEND)
    }

    fn new_route(&mut self, append: bool, route: &Route, how: u16) -> Result<(), Error> {
        let op = || Op::NewRoute {
            append,
            route: route.clone(),
        };
        let message = route_message(route);
        self.change(
            &op,
            Message::Route(libc::RTM_NEWROUTE, message),
            NLM_F_CREATE | how,
        )
    }

    /// Main-table unicast routes of one family (v4 when `v6` is false) in this netns;
    /// blackhole/unreachable routes are left out, as they would read like on-link routes here.
    pub fn routes(&mut self, v6: bool) -> Result<Vec<Route>, Error> {
        let mut m = RouteMessage::default();
        m.header.address_family = if v6 {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        let op = || Op::ListRoutes { v6 };
        let replies = self.request(&op, Message::Route(libc::RTM_GETROUTE, m), NLM_F_DUMP)?;
        replies
            .iter()
            .filter_map(|r| match r {
                // A dump without strict checking returns every table.
                Reply::Route(m)
                    if m.header.table == RouteHeader::RT_TABLE_MAIN
                        && m.header.kind == RouteType::Unicast =>
                {
                    Some(route_from(m, v6).map_err(|e| Error::invalid(op(), e)))
                }
                _ => None,
            })
            .collect()
    }
}

/// A netdev group number for one call's links: high (far from the small numbers admins
/// use), and different for calls running at once. Two calls that drew the same number would
/// only delete each other's links, which both are deleting.
fn private_group() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mix = (u64::from(std::process::id()) << 32) ^ t.as_nanos() as u64;
    // iproute2 shows groups up to i32::MAX: stay within it.
    0x4000_0000 | (mix.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 34) as u32
}

/// Refuses a name the kernel would refuse with the same bare EINVAL as a bad MTU, so that the
/// two can be told apart: the plugin's one interface-name rule, which the kernel's
/// `dev_valid_name()` never refuses less than.
fn check_name(op: &dyn Fn() -> Op, name: &str) -> Result<(), Error> {
    if crate::ids::check_ifname(name).is_ok() {
        return Ok(());
    }
    Err(Error {
        op: op(),
        detail: Some(Detail::InvalidName {
            name: name.to_string(),
        }),
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}
