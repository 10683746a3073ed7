//! Netlink operations of the plugin on a blocking socket: veth pairs, links, addresses and
//! routes, in the host's netns and in a container's. Small named operations on [`Socket`], each
//! one request and its replies; no async runtime. A socket belongs to the netns it was created
//! in: a container's is created inside it behind a guard that always switches back, and then
//! works from the host side.

use std::fmt;
use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ipnetwork::IpNetwork;
use netlink_packet_core::{
    DecodeError, Emitable, ErrorMessage, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_EXCL, NLM_F_REQUEST, NetlinkDeserializable, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable, NlasIterator, Parseable,
};
use netlink_packet_route::AddressFamily;
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoMacVlan, InfoVeth, InfoVlan, LinkAttribute, LinkFlags, LinkInfo,
    LinkMessage, MacVlanMode,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
    RouteVia,
};
use netlink_sys::{SocketAddr, protocols::NETLINK_ROUTE};
use nix::sched::{CloneFlags, setns};

/// Room for one datagram of a dump: the kernel fills them up to 32 KiB for a reader with a
/// buffer that large. Allocated, not zeroed: only what the kernel writes is touched.
const RECV_BUF: usize = 32 * 1024;

/// The rtnetlink requests this module sends, with their message type (`RTM_*`). Only these are
/// encoded, and only [`Reply`] is decoded: the crate's codecs of every other rtnetlink family
/// (traffic control, neighbours, rules, ...) stay out of the binary, whose pages every call
/// touches.
#[derive(Debug)]
enum Message {
    Link(u16, LinkMessage),
    Address(u16, AddressMessage),
    Route(u16, RouteMessage),
}

impl NetlinkSerializable for Message {
    fn message_type(&self) -> u16 {
        match self {
            Message::Link(t, _) | Message::Address(t, _) | Message::Route(t, _) => *t,
        }
    }

    fn buffer_len(&self) -> usize {
        match self {
            Message::Link(_, m) => m.buffer_len(),
            Message::Address(_, m) => m.buffer_len(),
            Message::Route(_, m) => m.buffer_len(),
        }
    }

    fn serialize(&self, buffer: &mut [u8]) {
        match self {
            Message::Link(_, m) => m.emit(buffer),
            Message::Address(_, m) => m.emit(buffer),
            Message::Route(_, m) => m.emit(buffer),
        }
    }
}

/// The replies to this module's requests: links, addresses and routes (a dump's).
#[derive(Debug)]
enum Reply {
    Link(Link),
    Address(AddressMessage),
    Route(RouteMessage),
}

impl NetlinkDeserializable for Reply {
    type Error = DecodeError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Reply, DecodeError> {
        Ok(match header.message_type {
            libc::RTM_NEWLINK => Reply::Link(parse_link(payload)?),
            libc::RTM_NEWADDR => Reply::Address(AddressMessage::parse(payload)?),
            libc::RTM_NEWROUTE => Reply::Route(RouteMessage::parse(payload)?),
            t => return Err(format!("unexpected rtnetlink message type {t}").into()),
        })
    }
}

/// A link message as [`Link`], reading only the attributes it keeps. The crate's parser decodes
/// every one of a link's ~50 attributes (statistics, per-family settings, ...), building an
/// error context string for each: most of the user-space time of a call that reads a link.
fn parse_link(payload: &[u8]) -> Result<Link, DecodeError> {
    // struct ifinfomsg: family u8, pad u8, type u16, index i32, flags u32, change u32.
    let header = payload
        .get(..16)
        .ok_or_else(|| DecodeError::from("link message shorter than its header"))?;
    let word = |at: usize| u32_of(&header[at..at + 4]);
    let mut link = Link {
        index: word(4)?,
        mac: None,
        mtu: 0,
        name: String::new(),
        up: word(8)? & libc::IFF_UP as u32 != 0,
        kind: None,
        lower: None,
        lower_elsewhere: false,
        vlan: None,
    };
    for attribute in attributes(&payload[16..]) {
        let (kind, value) = attribute?;
        match kind {
            libc::IFLA_IFNAME => link.name = c_string(value)?,
            libc::IFLA_LINK => link.lower = Some(u32_of(value)?),
            libc::IFLA_LINK_NETNSID => link.lower_elsewhere = true,
            libc::IFLA_MTU => link.mtu = u32_of(value)?,
            // Non-Ethernet links (lo, tunnels) have other address lengths.
            libc::IFLA_ADDRESS => link.mac = value.try_into().ok(),
            libc::IFLA_LINKINFO => {
                // The kernel puts the kind before its kind-specific data.
                for info in attributes(value) {
                    let (info, value) = info?;
                    match info {
                        libc::IFLA_INFO_KIND => link.kind = Some(c_string(value)?),
                        libc::IFLA_INFO_DATA if link.kind.as_deref() == Some("vlan") => {
                            for data in attributes(value) {
                                let (data, value) = data?;
                                if data == IFLA_VLAN_ID {
                                    link.vlan = Some(u16_of(value)?);
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Ok(link)
}

/// `IFLA_VLAN_ID` in a VLAN's `IFLA_INFO_DATA` (linux/if_link.h).
const IFLA_VLAN_ID: u16 = 1;

/// The attributes (type, value) of an attribute stream, bounds-checked by the crate's iterator.
fn attributes(bytes: &[u8]) -> impl Iterator<Item = Result<(u16, &[u8]), DecodeError>> {
    NlasIterator::new(bytes).map(|nla| {
        let nla = nla?;
        let (kind, len) = (nla.kind(), usize::from(nla.length()));
        Ok((kind, &nla.into_inner()[4..len]))
    })
}

fn u32_of(value: &[u8]) -> Result<u32, DecodeError> {
    value
        .try_into()
        .map(u32::from_ne_bytes)
        .map_err(|_| DecodeError::from("a 32-bit attribute of another size"))
}

fn u16_of(value: &[u8]) -> Result<u16, DecodeError> {
    value
        .try_into()
        .map(u16::from_ne_bytes)
        .map_err(|_| DecodeError::from("a 16-bit attribute of another size"))
}

/// A NUL-terminated string attribute.
fn c_string(value: &[u8]) -> Result<String, DecodeError> {
    let bytes = value.split(|&b| b == 0).next().unwrap_or_default();
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::from("a name that is not UTF-8"))
}

impl From<Message> for NetlinkPayload<Message> {
    fn from(m: Message) -> NetlinkPayload<Message> {
        NetlinkPayload::InnerMessage(m)
    }
}

/// An opened network namespace (the `CNI_NETNS` path).
///
/// The open file pins the namespace and names it by fd (for `setns` and `IFLA_NET_NS_FD`), so a
/// later unmount of the path cannot swap it under us.
#[derive(Debug)]
pub struct Netns {
    file: File,
    path: PathBuf,
}

/// Whether the network namespace at `path` (a sandbox's, as its runtime gave it) is provably
/// gone: its path no longer exists while the directory that held it does (the runtime's
/// `/run/netns`, mounted from the host). A `/proc/<pid>` path proves nothing from another PID
/// namespace, and a directory this process cannot see proves nothing either.
pub(crate) fn netns_gone(path: &str) -> bool {
    let p = Path::new(path);
    if !p.is_absolute() || p.starts_with("/proc") {
        return false;
    }
    let parent_there = p.parent().is_some_and(Path::is_dir);
    parent_there
        && matches!(std::fs::symlink_metadata(p), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

impl Netns {
    /// The plain `io::Error` is kept so that callers can tell a netns that is already gone
    /// (`NotFound`, fine for CNI DEL) from other failures. Refused here, before anything is
    /// created: a file that is not a namespace (`/etc/hostname`, a directory), a namespace of
    /// another kind (`/proc/self/ns/mnt`), and the network namespace this plugin runs in (the
    /// node's own, by whatever path), which a pod must never be given.
    pub fn open(path: &Path) -> io::Result<Netns> {
        let refuse = |why: String| Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        let file = File::open(path)?;
        let fs = nix::sys::statfs::fstatfs(&file)?;
        if fs.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
            return refuse("not a network namespace".into());
        }
        // SAFETY: NS_GET_NSTYPE takes no argument and only reads the fd's namespace.
        let kind = unsafe { libc::ioctl(file.as_raw_fd(), NS_GET_NSTYPE) };
        if kind != libc::CLONE_NEWNET {
            return refuse(format!(
                "a {} namespace, not a network namespace",
                ns_kind(kind)
            ));
        }
        let ours = std::fs::metadata("/proc/thread-self/ns/net")?;
        let theirs = file.metadata()?;
        if (ours.dev(), ours.ino()) == (theirs.dev(), theirs.ino()) {
            return refuse(
                "the network namespace this plugin runs in (the node's own): refusing to \
                 configure it"
                    .into(),
            );
        }
        Ok(Netns {
            file,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// `_IO(0xb7, 0x3)` from linux/nsfs.h (libc does not define it): the kind of a namespace fd,
/// as a `CLONE_NEW*` flag.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

fn ns_kind(kind: libc::c_int) -> &'static str {
    match kind {
        libc::CLONE_NEWNS => "mount",
        libc::CLONE_NEWUTS => "UTS",
        libc::CLONE_NEWIPC => "IPC",
        libc::CLONE_NEWUSER => "user",
        libc::CLONE_NEWPID => "PID",
        libc::CLONE_NEWCGROUP => "cgroup",
        _ => "non-network",
    }
}

/// Keeps this thread in another netns until `leave` or drop, so that an early return or a
/// panic never leaves the thread in the container's netns.
struct NetnsGuard {
    home: Option<File>,
}

impl NetnsGuard {
    fn enter(ns: &Netns) -> Result<NetnsGuard, Error> {
        // thread-self, not self: setns moves only this thread, and /proc/self/ns/net names the
        // main thread's netns.
        const HOME: &str = "/proc/thread-self/ns/net";
        let home = File::open(HOME).map_err(|e| Error::new(format!("open {HOME}"), e))?;
        setns(&ns.file, CloneFlags::CLONE_NEWNET)
            .map_err(|e| Error::new(format!("enter netns {}", ns.path.display()), e.into()))?;
        Ok(NetnsGuard { home: Some(home) })
    }

    /// Switch back and report failure, which drop can only log.
    fn leave(mut self) -> Result<(), Error> {
        self.home.take().map_or(Ok(()), |home| switch_back(&home))
    }
}

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            if let Err(e) = switch_back(&home) {
                log::error!("{e}");
            }
        }
    }
}

fn switch_back(home: &File) -> Result<(), Error> {
    setns(home, CloneFlags::CLONE_NEWNET)
        .map_err(|e| Error::new("switch back to the original netns", e.into()))
}

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
        Socket::new("host netns")
    }

    /// A socket in `ns`, created inside it; the thread switches straight back.
    pub fn open(ns: &Netns) -> Result<Socket, Error> {
        let guard = NetnsGuard::enter(ns)?;
        let socket = Socket::new(&format!("netns {}", ns.path.display()));
        guard.leave()?;
        socket
    }

    fn new(netns: &str) -> Result<Socket, Error> {
        let err = |e| Error::new(format!("open netlink socket in {netns}"), e);
        let mut socket = netlink_sys::Socket::new(NETLINK_ROUTE).map_err(err)?;
        socket.bind_auto().map_err(err)?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(err)?;
        // Extended acks carry the kernel's reason for an error ("Nexthop has invalid gateway");
        // without them (kernels before 4.12) errors still work, only less precise.
        if let Err(e) = socket.set_ext_ack(true) {
            log::debug!("netlink extended acks unavailable in {netns}: {e}");
        }
        // Lets the kernel filter a dump (the addresses of one link) by the request's header.
        if let Err(e) = socket.set_netlink_get_strict_chk(true) {
            log::debug!("netlink strict checking unavailable in {netns}: {e}");
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
        op: &dyn Fn() -> String,
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
                    .map_err(|e| Error::invalid(op(), e.to_string()))?;
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
    fn change(
        &mut self,
        op: &dyn Fn() -> String,
        message: Message,
        extra: u16,
    ) -> Result<(), Error> {
        self.request(op, message, NLM_F_ACK | extra).map(drop)
    }

    /// Every link of this netns.
    pub fn links(&mut self) -> Result<Vec<Link>, Error> {
        let op = || "list links".to_string();
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
        let op = || format!("get link {name}");
        match self.request(&op, Message::Link(libc::RTM_GETLINK, m), NLM_F_ACK) {
            Ok(replies) => Ok(replies.into_iter().find_map(|r| match r {
                Reply::Link(l) => Some(l),
                _ => None,
            })),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates a veth pair: the `host` end in this socket's netns, up; the `peer` end (down)
    /// created directly inside `ns` (its link message carries `IFLA_NET_NS_FD`, name, MAC and
    /// MTU), so the container side never exists under its name on the host, where it could
    /// clash with a host link.
    pub fn create_veth(&mut self, host: &VethEnd, peer: &VethEnd, ns: &Netns) -> Result<(), Error> {
        let op = || format!("create veth {}/{}", host.name, peer.name);
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
        let op = || {
            format!(
                "create VLAN {} (tag {}) on link #{}",
                vlan.name, vlan.tag, vlan.parent
            )
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
        let op = || format!("set the alias of {}", vlan.name);
        self.change(&op, Message::Link(libc::RTM_SETLINK, m), 0)
    }

    /// Creates a macvlan (VEPA: everything goes out to the lower device, nothing is bridged
    /// here) on link `lower` of this socket's netns, directly inside `ns` as `end` (down).
    pub fn create_macvlan(&mut self, end: &VethEnd, lower: u32, ns: &Netns) -> Result<(), Error> {
        let op = || format!("create macvlan {} on link #{lower}", end.name);
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
        let op = || format!("delete link {name}");
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
        let op = || format!("put link {name} in group {group}");
        self.change(&op, Message::Link(libc::RTM_SETLINK, m), 0)
    }

    /// Deletes every link of `group` in this netns; Ok when there is none.
    fn delete_group(&mut self, group: u32) -> Result<(), Error> {
        let mut m = LinkMessage::default();
        m.attributes.push(LinkAttribute::Group(group));
        let op = || format!("delete the links of group {group}");
        match self.change(&op, Message::Link(libc::RTM_DELLINK, m), 0) {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        }
    }

    /// Renames a link (down: the kernel refuses to rename one that is up).
    pub(crate) fn rename(&mut self, index: u32, name: &str) -> Result<(), Error> {
        let op = || format!("rename link #{index} to {name}");
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
        let op = || format!("set link #{index} up");
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
        let op = || format!("add address {addr} to link #{index}");
        self.change(
            &op,
            Message::Address(libc::RTM_NEWADDR, m),
            NLM_F_CREATE | NLM_F_EXCL,
        )
    }

    pub fn addrs(&mut self, index: u32) -> Result<Vec<IpNetwork>, Error> {
        let mut m = AddressMessage::default();
        m.header.index = index;
        let op = || format!("list addresses of link #{index}");
        let replies = self.request(&op, Message::Address(libc::RTM_GETADDR, m), NLM_F_DUMP)?;
        replies
            .iter()
            .filter_map(|r| match r {
                // Without strict checking the kernel sends every link's addresses.
                Reply::Address(a) if a.header.index == index => addr_from(a),
                _ => None,
            })
            .collect::<Result<_, _>>()
            .map_err(|e| Error::invalid(op(), e.to_string()))
    }

    /// Route with gateway, or on-link (scope link, no gateway) when gateway is None. Main
    /// table. Fails with EEXIST when the destination has a route already, on any interface.
    pub fn add_route(&mut self, route: &Route) -> Result<(), Error> {
        self.new_route("add", route, NLM_F_EXCL)
    }

    /// Like [`Socket::add_route`], but a route to the same destination on another interface
    /// is kept beside this one (`NLM_F_APPEND`, as the kernel adds connected routes); only the
    /// same route twice is EEXIST.
    pub(crate) fn append_route(&mut self, route: &Route) -> Result<(), Error> {
        self.new_route("append", route, NLM_F_APPEND)
    }

    fn new_route(&mut self, verb: &str, route: &Route, how: u16) -> Result<(), Error> {
        let (op, message) = route_message(verb, route);
        self.change(
            &|| op.clone(),
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
        let op = || format!("list IPv{} routes", if v6 { 6 } else { 4 });
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
/// two can be told apart.
fn check_name(op: &dyn Fn() -> String, name: &str) -> Result<(), Error> {
    if valid_ifname(name) {
        return Ok(());
    }
    Err(Error {
        op: op(),
        detail: Some(format!("invalid interface name {name:?}")),
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

/// The message for one veth end (or a macvlan: a name, a MAC, an MTU).
fn veth_end(end: &VethEnd) -> LinkMessage {
    let mut m = LinkMessage::default();
    m.attributes
        .push(LinkAttribute::IfName(end.name.to_string()));
    if end.mtu != 0 {
        m.attributes.push(LinkAttribute::Mtu(end.mtu));
    }
    if let Some(mac) = end.mac {
        m.attributes.push(LinkAttribute::Address(mac.to_vec()));
    }
    m
}

/// The message for a route, and the operation's name for errors.
fn route_message(verb: &str, route: &Route) -> (String, RouteMessage) {
    let via = route
        .gateway
        .map_or(String::new(), |gw| format!(" via {gw}"));
    let dev = route
        .oif
        .map_or(String::new(), |oif| format!(" dev #{oif}"));
    let op = format!("{verb} route {}{via}{dev}", route.dst);
    let mut m = RouteMessage::default();
    m.header.address_family = if route.dst.is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    m.header.destination_prefix_length = route.dst.prefix();
    m.header.table = RouteHeader::RT_TABLE_MAIN;
    m.header.protocol = RouteProtocol::Static;
    m.header.kind = RouteType::Unicast;
    m.header.scope = if route.gateway.is_some() {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    // The kernel rejects host bits in a destination; CNI configs carry routes as networks
    // (Go's ParseCIDR masks them), so mask the same way.
    if route.dst.prefix() > 0 {
        m.attributes.push(RouteAttribute::Destination(route_address(
            route.dst.network(),
        )));
    }
    if let Some(gw) = route.gateway {
        m.attributes
            .push(RouteAttribute::Gateway(route_address(gw)));
    }
    if let Some(oif) = route.oif {
        m.attributes.push(RouteAttribute::Oif(oif));
    }
    (op, m)
}

fn route_address(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(ip) => RouteAddress::Inet(ip),
        IpAddr::V6(ip) => RouteAddress::Inet6(ip),
    }
}

/// The kernel's `dev_valid_name()`. It refuses a bad name with the same bare EINVAL as a bad
/// MTU, so names are checked here to tell the two apart.
fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name != "."
        && name != ".."
        // '/' and ':' (sysfs paths, aliases) and the kernel's isspace().
        && !name.bytes().any(|b| matches!(b, b'/' | b':' | b' ' | b'\t'..=b'\r' | 0xa0))
}

fn addr_from(message: &AddressMessage) -> Option<Result<IpNetwork, ipnetwork::IpNetworkError>> {
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS differs from it only on
    // point-to-point links (the peer) and is the only one for IPv6.
    let mut address = None;
    for attribute in &message.attributes {
        match attribute {
            AddressAttribute::Local(ip) => address = Some(*ip),
            AddressAttribute::Address(ip) if address.is_none() => address = Some(*ip),
            _ => {}
        }
    }
    address.map(|ip| IpNetwork::new(ip, message.header.prefix_len))
}

fn route_from(message: &RouteMessage, v6: bool) -> Result<Route, String> {
    // The default route carries no RTA_DST.
    let mut dst = if v6 {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(Ipv4Addr::UNSPECIFIED)
    };
    let mut route = Route {
        dst: IpNetwork::from(dst),
        gateway: None,
        oif: None,
    };
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Destination(address) => dst = route_ip(address)?,
            RouteAttribute::Gateway(address) => route.gateway = Some(route_ip(address)?),
            // An IPv4 route via an IPv6 gateway (RFC 5549).
            RouteAttribute::Via(RouteVia::Inet6(ip)) => route.gateway = Some(IpAddr::V6(*ip)),
            RouteAttribute::Oif(index) => route.oif = Some(*index),
            _ => {}
        }
    }
    route.dst =
        IpNetwork::new(dst, message.header.destination_prefix_length).map_err(|e| e.to_string())?;
    Ok(route)
}

fn route_ip(address: &RouteAddress) -> Result<IpAddr, String> {
    match address {
        RouteAddress::Inet(ip) => Ok(IpAddr::V4(*ip)),
        RouteAddress::Inet6(ip) => Ok(IpAddr::V6(*ip)),
        other => Err(format!("unexpected route address {other:?}")),
    }
}

/// Every failure names the operation and the object, and keeps the errno (when there is one)
/// for callers.
#[derive(Debug)]
pub struct Error {
    op: String,
    /// The kernel's extended-ack message, or our reading of the errno.
    detail: Option<String>,
    source: io::Error,
}

impl Error {
    pub(crate) fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    pub(crate) fn is_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }

    /// No such link (ENODEV), route (ESRCH) or other object (ENOENT).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(
            self.errno(),
            Some(libc::ENODEV | libc::ESRCH | libc::ENOENT)
        )
    }

    /// A link's bare EINVAL, once its name is known to be good, is its MTU (veth, VLAN and
    /// macvlan check it without an extended ack).
    fn mtu_detail(mut self, mtu: u32, other: u32) -> Error {
        if self.errno() == Some(libc::EINVAL) && self.detail.is_none() {
            self.detail = Some(if mtu == other {
                format!("MTU {mtu} rejected")
            } else {
                format!("MTU {mtu}/{other} rejected")
            });
        }
        self
    }

    fn new(op: impl Into<String>, source: io::Error) -> Error {
        Error {
            op: op.into(),
            detail: None,
            source,
        }
    }

    /// A request we refused to send, or a reply we could not read.
    fn invalid(op: String, reason: String) -> Error {
        Error::new(op, io::Error::other(reason))
    }

    fn netlink(op: String, error: &ErrorMessage) -> Error {
        Error {
            op,
            detail: ext_ack_message(error),
            source: error.to_io(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.op)?;
        if let Some(detail) = &self.detail {
            write!(f, "{detail}: ")?;
        }
        write!(f, "{}", self.source)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The text of `NLMSGERR_ATTR_MSG`, which the kernel appends after the echoed request when
/// extended acks are on. The decoder keeps that part of the error message as raw bytes.
fn ext_ack_message(error: &ErrorMessage) -> Option<String> {
    // From linux/netlink.h; libc does not define it.
    const NLMSGERR_ATTR_MSG: u16 = 1;
    let echoed = &error.header;
    // The echoed request starts with its own nlmsghdr, whose first field is its length.
    let request_len = u32::from_ne_bytes(echoed.get(..4)?.try_into().ok()?);
    let attributes = echoed.get(usize::try_from(request_len).ok()?.next_multiple_of(4)..)?;
    NlasIterator::new(attributes)
        .map_while(Result::ok)
        .find(|nla| nla.kind() == NLMSGERR_ATTR_MSG)
        .map(|nla| {
            String::from_utf8_lossy(nla.value())
                .trim_end_matches('\0')
                .to_string()
        })
        .filter(|text| !text.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link message as the kernel would send it, encoded by the crate's own emitter.
    fn encoded(attributes: Vec<LinkAttribute>, up: bool) -> Vec<u8> {
        let mut m = LinkMessage::default();
        m.header.index = 7;
        if up {
            m.header.flags = LinkFlags::Up | LinkFlags::Broadcast;
        }
        m.attributes = attributes;
        let mut bytes = vec![0; m.buffer_len()];
        m.emit(&mut bytes);
        bytes
    }

    #[test]
    fn the_lean_link_parser_reads_what_the_crate_encodes() {
        let vlan = encoded(
            vec![
                LinkAttribute::Mtu(1450),
                LinkAttribute::IfName("vlan100".into()),
                LinkAttribute::Address(vec![2, 0, 0, 0, 0, 9]),
                LinkAttribute::Link(3),
                LinkAttribute::TxQueueLen(1000),
                LinkAttribute::LinkInfo(vec![
                    LinkInfo::Kind(InfoKind::Vlan),
                    LinkInfo::Data(InfoData::Vlan(vec![InfoVlan::Id(100)])),
                ]),
            ],
            true,
        );
        let want = Link {
            index: 7,
            mac: Some([2, 0, 0, 0, 0, 9]),
            mtu: 1450,
            name: "vlan100".into(),
            up: true,
            kind: Some("vlan".into()),
            lower: Some(3),
            lower_elsewhere: false,
            vlan: Some(100),
        };
        assert_eq!(parse_link(&vlan).unwrap(), want);
        // lo: no kind, a 6-byte all-zero address, down; a macvlan's data is not a VLAN tag.
        let lo = encoded(vec![LinkAttribute::IfName("lo".into())], false);
        let lo = parse_link(&lo).unwrap();
        assert_eq!(
            (lo.name.as_str(), lo.up, lo.kind, lo.vlan),
            ("lo", false, None, None)
        );
        let macvlan = encoded(
            vec![LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::MacVlan),
                LinkInfo::Data(InfoData::MacVlan(vec![InfoMacVlan::Mode(
                    MacVlanMode::Vepa,
                )])),
            ])],
            true,
        );
        let macvlan = parse_link(&macvlan).unwrap();
        assert_eq!(
            (macvlan.kind.as_deref(), macvlan.vlan),
            (Some("macvlan"), None)
        );
    }

    #[test]
    fn the_lean_link_parser_refuses_what_overruns_its_message() {
        let mut bytes = encoded(vec![LinkAttribute::IfName("eth0".into())], true);
        assert!(parse_link(&bytes[..10]).is_err(), "a cut header");
        let last = bytes.len();
        bytes[16] = 200; // the name attribute's length, past the end
        assert!(
            parse_link(&bytes[..last]).is_err(),
            "an attribute past the end"
        );
    }

    #[test]
    fn private_groups_are_high_and_within_what_ip_shows() {
        for _ in 0..100 {
            let g = private_group();
            assert!((0x4000_0000..=i32::MAX as u32).contains(&g), "{g:#x}");
        }
    }

    #[test]
    fn route_messages_mask_host_bits_and_scope_on_link_routes() {
        let (op, m) = route_message(
            "append",
            &Route {
                dst: "fd00::1/128".parse().unwrap(),
                gateway: None,
                oif: Some(4),
            },
        );
        assert_eq!(op, "append route fd00::1/128 dev #4");
        assert_eq!(m.header.scope, RouteScope::Link);
        let (_, m) = route_message(
            "add",
            &Route {
                dst: "10.1.2.3/24".parse().unwrap(),
                gateway: Some("10.1.2.1".parse().unwrap()),
                oif: None,
            },
        );
        assert!(
            m.attributes
                .contains(&RouteAttribute::Destination(RouteAddress::Inet(
                    "10.1.2.0".parse().unwrap()
                )))
        );
        assert_eq!(m.header.scope, RouteScope::Universe);
    }
}
