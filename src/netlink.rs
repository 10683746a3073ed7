//! Netlink operations of the plugin: veth pairs, links, addresses and routes,
//! in the host's netns and in a container's netns.
//!
//! The API is synchronous. One current-thread tokio runtime, owned by
//! [`Netlink`], drives every socket inside `block_on`. `setns` moves only the
//! calling thread, and only for the moment it takes to create a socket; the
//! only other threads (thick mode's parallel DEL) never enter a container's
//! netns, so nothing runs there by accident.

use std::fmt;
use std::fs::File;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use futures_util::{StreamExt, TryStreamExt};
use ipnetwork::IpNetwork;
use nix::sched::{CloneFlags, setns};
use rtnetlink::packet_core::{
    ErrorMessage, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST, NetlinkMessage,
    NetlinkPayload, NlasIterator,
};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkMessage,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteScope, RouteType, RouteVia,
};
use rtnetlink::sys::AsyncSocket;
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// An opened network namespace (the `CNI_NETNS` path).
///
/// The open file pins the namespace and names it by fd (for `setns` and
/// `IFLA_NET_NS_FD`), so a later unmount of the path cannot swap it under us.
#[derive(Debug)]
pub struct Netns {
    file: File,
    path: PathBuf,
}

impl Netns {
    /// The plain `io::Error` is kept so that callers can tell a netns that
    /// is already gone (`NotFound`, fine for CNI DEL) from other failures.
    /// A file that is not a namespace (`/etc/hostname`, a directory) is refused here, before
    /// anything is created, rather than at the first `setns`.
    pub fn open(path: &Path) -> io::Result<Netns> {
        let file = File::open(path)?;
        let fs = nix::sys::statfs::fstatfs(&file)?;
        if fs.filesystem_type() != nix::sys::statfs::NSFS_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a network namespace",
            ));
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

/// Owns the one current-thread runtime that all sockets share.
#[derive(Debug)]
pub struct Netlink {
    rt: Runtime,
}

impl Netlink {
    pub fn new() -> Result<Netlink, Error> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|e| Error::new("start netlink runtime", e))?;
        Ok(Netlink { rt })
    }

    /// Socket bound to the caller's (host) netns.
    pub fn host(&self) -> Result<Socket<'_>, Error> {
        self.connect("host netns")
    }

    /// Socket bound to `ns`: a netlink socket belongs to the netns it was
    /// created in, so create it inside `ns` and switch straight back; the
    /// socket keeps working on `ns` from the host side.
    pub fn open(&self, ns: &Netns) -> Result<Socket<'_>, Error> {
        let guard = NetnsGuard::enter(ns)?;
        let socket = self.connect(&format!("netns {}", ns.path.display()));
        guard.leave()?;
        socket
    }

    fn connect(&self, netns: &str) -> Result<Socket<'_>, Error> {
        // The socket registers with the reactor of the current runtime.
        let _context = self.rt.enter();
        let (mut connection, handle, _) = rtnetlink::new_connection()
            .map_err(|e| Error::new(format!("open netlink socket in {netns}"), e))?;
        // Extended acks carry the kernel's reason for an error ("Nexthop has
        // invalid gateway"); without them (kernels before 4.12) errors still
        // work, only less precise.
        if let Err(e) = connection.socket_mut().socket_mut().set_ext_ack(true) {
            log::debug!("netlink extended acks unavailable in {netns}: {e}");
        }
        let connection = self.rt.spawn(connection);
        Ok(Socket {
            rt: &self.rt,
            handle,
            connection,
        })
    }
}

/// Keeps this thread in another netns until `leave` or drop, so that an
/// early return or a panic never leaves the thread in the container's netns.
struct NetnsGuard {
    home: Option<File>,
}

impl NetnsGuard {
    fn enter(ns: &Netns) -> Result<NetnsGuard, Error> {
        // thread-self, not self: setns moves only this thread, and
        // /proc/self/ns/net names the main thread's netns.
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

/// A netlink connection bound to one netns.
pub struct Socket<'a> {
    rt: &'a Runtime,
    handle: Handle,
    connection: JoinHandle<()>,
}

impl Drop for Socket<'_> {
    fn drop(&mut self) {
        // The runtime outlives its sockets; without this the connection task
        // (and its fd) would wait for the next block_on to notice the end.
        self.connection.abort();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    pub mac: Option<[u8; 6]>,
    pub mtu: u32,
    /// Administratively up (`IFF_UP`), not carrier.
    pub up: bool,
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

impl Socket<'_> {
    /// None when there is no link of that name.
    pub fn link(&self, name: &str) -> Result<Option<Link>, Error> {
        let request = self.handle.link().get().match_name(name).execute();
        match self.run(format!("get link {name}"), request.try_collect::<Vec<_>>()) {
            Ok(messages) => Ok(messages.into_iter().next().map(link_from)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Create a veth pair: `host` end in this socket's netns, `peer` end
    /// created directly inside `ns` (its link message carries
    /// `IFLA_NET_NS_FD`, name, MAC and MTU), so the container side never
    /// exists under its name on the host, where it could clash with a host
    /// link. Neither end is set up here.
    pub fn create_veth(&self, host: &VethEnd, peer: &VethEnd, ns: &Netns) -> Result<(), Error> {
        let op = format!("create veth {}/{}", host.name, peer.name);
        for name in [host.name, peer.name] {
            if !valid_ifname(name) {
                return Err(Error {
                    op,
                    detail: Some(format!("invalid interface name {name:?}")),
                    source: io::Error::from_raw_os_error(libc::EINVAL),
                });
            }
        }
        let peer_message = veth_end(LinkUnspec::new_with_name(peer.name), peer)
            .setns_by_fd(ns.file.as_raw_fd())
            .build();
        let message = veth_end(
            LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth).name(host.name),
            host,
        )
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_message)))
        .build();
        self.run(op, self.handle.link().add(message).execute())
            .map_err(|mut e| {
                // veth checks the MTU of both ends with a bare EINVAL (no
                // extended ack); with the names checked above, that is the
                // MTU.
                if e.errno() == Some(libc::EINVAL) && e.detail.is_none() {
                    e.detail = Some(if host.mtu == peer.mtu {
                        format!("MTU {} rejected", host.mtu)
                    } else {
                        format!("MTU {}/{} rejected", host.mtu, peer.mtu)
                    });
                }
                e
            })
    }

    /// Ok(false) when the link is already gone. Deleting either end of a
    /// veth removes both.
    pub fn delete_link(&self, name: &str) -> Result<bool, Error> {
        let message = LinkUnspec::new_with_name(name).build();
        let request = self.handle.link().del_with_message(message).execute();
        match self.run(format!("delete link {name}"), request) {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    pub fn set_up(&self, index: u32) -> Result<(), Error> {
        let message = LinkUnspec::new_with_index(index).up().build();
        self.run(
            format!("set link #{index} up"),
            self.handle.link().change(message).execute(),
        )
    }

    /// Add an address; IPv6 with `IFA_F_NODAD` so it is usable at once: DAD
    /// would keep it tentative (not usable as a source) for a second or more,
    /// and the IPAM already made it unique.
    pub fn add_addr(&self, index: u32, addr: IpNetwork) -> Result<(), Error> {
        let mut request = self.handle.address().add(index, addr.ip(), addr.prefix());
        if addr.is_ipv6() {
            request.message_mut().header.flags |= AddressHeaderFlags::Nodad;
        }
        self.run(
            format!("add address {addr} to link #{index}"),
            request.execute(),
        )
    }

    pub fn addrs(&self, index: u32) -> Result<Vec<IpNetwork>, Error> {
        let op = format!("list addresses of link #{index}");
        let request = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute();
        let messages: Vec<AddressMessage> = self.run(op.clone(), request.try_collect())?;
        messages
            .iter()
            .filter_map(addr_from)
            .collect::<Result<_, _>>()
            .map_err(|e| Error::invalid(op, e.to_string()))
    }

    /// Route with gateway, or on-link (scope link, no gateway) when gateway
    /// is None. Main table. Fails with EEXIST when the destination has a
    /// route already, on any interface.
    pub fn add_route(&self, route: &Route) -> Result<(), Error> {
        let (op, message) = route_message("add", route)?;
        self.run(op, self.handle.route().add(message).execute())
    }

    /// Like [`Socket::add_route`], but a route to the same destination on
    /// another interface is kept beside this one (`NLM_F_APPEND`, as the
    /// kernel adds connected routes); only the same route twice is EEXIST.
    pub fn append_route(&self, route: &Route) -> Result<(), Error> {
        let (op, message) = route_message("append", route)?;
        let mut request = NetlinkMessage::from(RouteNetlinkMessage::NewRoute(message));
        request.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_APPEND;
        let mut handle = self.handle.clone();
        let acked = async move {
            let mut replies = handle.request(request)?;
            while let Some(reply) = replies.next().await {
                if let NetlinkPayload::Error(e) = reply.payload {
                    return Err(rtnetlink::Error::NetlinkError(e));
                }
            }
            Ok(())
        };
        self.run(op, acked)
    }

    /// Main-table unicast routes of one family (v4 when `v6` is false) in
    /// this netns; blackhole/unreachable routes are left out, as they would
    /// read like on-link routes here.
    pub fn routes(&self, v6: bool) -> Result<Vec<Route>, Error> {
        let (op, filter) = if v6 {
            (
                "list IPv6 routes",
                RouteMessageBuilder::<Ipv6Addr>::new().build(),
            )
        } else {
            (
                "list IPv4 routes",
                RouteMessageBuilder::<Ipv4Addr>::new().build(),
            )
        };
        let request = self.handle.route().get(filter).execute();
        let messages: Vec<RouteMessage> = self.run(op.to_string(), request.try_collect())?;
        messages
            .iter()
            // A dump without strict checking returns every table.
            .filter(|m| {
                m.header.table == RouteHeader::RT_TABLE_MAIN && m.header.kind == RouteType::Unicast
            })
            .map(|m| route_from(m, v6).map_err(|e| Error::invalid(op.to_string(), e)))
            .collect()
    }

    fn run<T>(
        &self,
        op: String,
        request: impl Future<Output = Result<T, rtnetlink::Error>>,
    ) -> Result<T, Error> {
        self.rt.block_on(request).map_err(|e| Error::netlink(op, e))
    }
}

/// The message for a route, and the operation's name for errors.
fn route_message(verb: &str, route: &Route) -> Result<(String, RouteMessage), Error> {
    let via = route
        .gateway
        .map_or(String::new(), |gw| format!(" via {gw}"));
    let dev = route
        .oif
        .map_or(String::new(), |oif| format!(" dev #{oif}"));
    let op = format!("{verb} route {}{via}{dev}", route.dst);
    // The kernel rejects host bits in a destination; CNI configs carry
    // routes as networks (Go's ParseCIDR masks them), so mask the same way.
    let mut builder = RouteMessageBuilder::<IpAddr>::new()
        .destination_prefix(route.dst.network(), route.dst.prefix())
        .map_err(|e| Error::invalid(op.clone(), e.to_string()))?;
    if let Some(oif) = route.oif {
        builder = builder.output_interface(oif);
    }
    builder = match route.gateway {
        Some(gateway) => builder
            .gateway(gateway)
            .map_err(|e| Error::invalid(op.clone(), e.to_string()))?,
        None => builder.scope(RouteScope::Link),
    };
    Ok((op, builder.build()))
}

fn veth_end<T>(builder: LinkMessageBuilder<T>, end: &VethEnd) -> LinkMessageBuilder<T> {
    let builder = if end.mtu == 0 {
        builder
    } else {
        builder.mtu(end.mtu)
    };
    match end.mac {
        Some(mac) => builder.address(mac.to_vec()),
        None => builder,
    }
}

/// The kernel's `dev_valid_name()`. It refuses a bad name with the same bare
/// EINVAL as a bad MTU, so names are checked here to tell the two apart.
fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() < libc::IFNAMSIZ
        && name != "."
        && name != ".."
        // '/' and ':' (sysfs paths, aliases) and the kernel's isspace().
        && !name.bytes().any(|b| matches!(b, b'/' | b':' | b' ' | b'\t'..=b'\r' | 0xa0))
}

fn link_from(message: LinkMessage) -> Link {
    let mut link = Link {
        index: message.header.index,
        name: String::new(),
        mac: None,
        mtu: 0,
        up: message.header.flags.contains(LinkFlags::Up),
    };
    for attribute in message.attributes {
        match attribute {
            LinkAttribute::IfName(name) => link.name = name,
            // Non-Ethernet links (lo, tunnels) have other address lengths.
            LinkAttribute::Address(mac) => link.mac = mac.try_into().ok(),
            LinkAttribute::Mtu(mtu) => link.mtu = mtu,
            _ => {}
        }
    }
    link
}

fn addr_from(message: &AddressMessage) -> Option<Result<IpNetwork, ipnetwork::IpNetworkError>> {
    // IFA_LOCAL is the interface's own address; IFA_ADDRESS differs from it
    // only on point-to-point links (the peer) and is the only one for IPv6.
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

/// Every failure names the operation and the object, and keeps the errno
/// (when there is one) for callers.
#[derive(Debug)]
pub struct Error {
    op: String,
    /// The kernel's extended-ack message, or our reading of the errno.
    detail: Option<String>,
    source: io::Error,
}

impl Error {
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }

    /// No such link (ENODEV), route (ESRCH) or other object (ENOENT).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.errno(),
            Some(libc::ENODEV | libc::ESRCH | libc::ENOENT)
        )
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

    fn netlink(op: String, error: rtnetlink::Error) -> Error {
        match error {
            rtnetlink::Error::NetlinkError(message) => Error {
                op,
                detail: ext_ack_message(&message),
                source: message.to_io(),
            },
            other => Error::new(op, io::Error::other(other.to_string())),
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

/// The text of `NLMSGERR_ATTR_MSG`, which the kernel appends after the echoed
/// request when extended acks are on. rtnetlink keeps that part of the error
/// message as raw bytes.
fn ext_ack_message(error: &ErrorMessage) -> Option<String> {
    // From linux/netlink.h; libc does not define it.
    const NLMSGERR_ATTR_MSG: u16 = 1;
    let echoed = &error.header;
    // The echoed request starts with its own nlmsghdr, whose first field is
    // its length.
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
