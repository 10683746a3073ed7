//! A netlink operation's failure: the operation with its object, the errno and the kernel's
//! extended ack.

use std::fmt;
use std::io;
use std::path::PathBuf;

use ipnetwork::IpNetwork;
use netlink_packet_core::{ErrorMessage, NlasIterator};

use super::Route;

/// Every failure names the operation and the object, and keeps the errno (when there is one)
/// for callers.
#[derive(Debug)]
pub struct Error {
    pub(super) op: Op,
    pub(super) detail: Option<Detail>,
    pub(super) source: io::Error,
}

/// A netlink operation of the plugin, with its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Opening a socket in the host's netns (`None`) or in the one at the path.
    OpenSocket {
        netns: Option<PathBuf>,
    },
    /// Opening this thread's own netns, to come back to it.
    OpenHome,
    EnterNetns {
        path: PathBuf,
    },
    SwitchBack,
    ListLinks,
    GetLink {
        name: String,
    },
    CreateVeth {
        host: String,
        peer: String,
    },
    CreateVlan {
        name: String,
        tag: u16,
        parent: u32,
    },
    SetAlias {
        name: String,
    },
    CreateMacvlan {
        name: String,
        lower: u32,
    },
    DeleteLink {
        name: String,
    },
    SetGroup {
        name: String,
        group: u32,
    },
    DeleteGroup {
        group: u32,
    },
    Rename {
        index: u32,
        name: String,
    },
    SetUp {
        index: u32,
    },
    AddAddr {
        addr: IpNetwork,
        index: u32,
    },
    ListAddrs {
        index: u32,
    },
    /// Adding a route (`append`: beside the routes to the same destination).
    NewRoute {
        append: bool,
        route: Route,
    },
    ListRoutes {
        v6: bool,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::OpenSocket { netns: None } => f.write_str("open netlink socket in host netns"),
            Op::OpenSocket { netns: Some(path) } => {
                write!(f, "open netlink socket in netns {}", path.display())
            }
            Op::OpenHome => write!(f, "open {HOME}"),
            Op::EnterNetns { path } => write!(f, "enter netns {}", path.display()),
            Op::SwitchBack => f.write_str("switch back to the original netns"),
            Op::ListLinks => f.write_str("list links"),
            Op::GetLink { name } => write!(f, "get link {name}"),
            Op::CreateVeth { host, peer } => write!(f, "create veth {host}/{peer}"),
            Op::CreateVlan { name, tag, parent } => {
                write!(f, "create VLAN {name} (tag {tag}) on link #{parent}")
            }
            Op::SetAlias { name } => write!(f, "set the alias of {name}"),
            Op::CreateMacvlan { name, lower } => {
                write!(f, "create macvlan {name} on link #{lower}")
            }
            Op::DeleteLink { name } => write!(f, "delete link {name}"),
            Op::SetGroup { name, group } => write!(f, "put link {name} in group {group}"),
            Op::DeleteGroup { group } => write!(f, "delete the links of group {group}"),
            Op::Rename { index, name } => write!(f, "rename link #{index} to {name}"),
            Op::SetUp { index } => write!(f, "set link #{index} up"),
            Op::AddAddr { addr, index } => write!(f, "add address {addr} to link #{index}"),
            Op::ListAddrs { index } => write!(f, "list addresses of link #{index}"),
            Op::NewRoute { append, route } => {
                let verb = if *append { "append" } else { "add" };
                write!(f, "{verb} route {}", route.dst)?;
                if let Some(gw) = route.gateway {
                    write!(f, " via {gw}")?;
                }
                if let Some(oif) = route.oif {
                    write!(f, " dev #{oif}")?;
                }
                Ok(())
            }
            Op::ListRoutes { v6 } => write!(f, "list IPv{} routes", if *v6 { 6 } else { 4 }),
        }
    }
}

/// The thread's own netns, as [`Op::OpenHome`] opens it: thread-self, not self, since setns
/// moves only this thread, and /proc/self/ns/net names the main thread's netns.
pub(super) const HOME: &str = "/proc/thread-self/ns/net";

/// What is known of a failure beyond its errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    /// The kernel's extended-ack message.
    Kernel(String),
    /// A bare EINVAL of a link whose name is good: its MTU (the two ends' when they differ).
    Mtu { mtu: u32, other: u32 },
    /// A name the kernel would refuse, refused before asking it.
    InvalidName { name: String },
}

impl fmt::Display for Detail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Detail::Kernel(text) => f.write_str(text),
            Detail::Mtu { mtu, other } if mtu == other => write!(f, "MTU {mtu} rejected"),
            Detail::Mtu { mtu, other } => write!(f, "MTU {mtu}/{other} rejected"),
            Detail::InvalidName { name } => write!(f, "invalid interface name {name:?}"),
        }
    }
}

impl Error {
    /// The operation that failed, with its object.
    pub fn op(&self) -> &Op {
        &self.op
    }

    /// What is known beyond the errno: the kernel's words, or the plugin's reading of a bare
    /// EINVAL.
    pub fn detail(&self) -> Option<&Detail> {
        self.detail.as_ref()
    }

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
    pub(super) fn mtu_detail(mut self, mtu: u32, other: u32) -> Error {
        if self.errno() == Some(libc::EINVAL) && self.detail.is_none() {
            self.detail = Some(Detail::Mtu { mtu, other });
        }
        self
    }

    pub(super) fn new(op: Op, source: io::Error) -> Error {
        Error {
            op,
            detail: None,
            source,
        }
    }

    /// A request we refused to send, or a reply we could not read.
    pub(super) fn invalid(
        op: Op,
        reason: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::new(op, io::Error::other(reason))
    }

    pub(super) fn netlink(op: Op, error: &ErrorMessage) -> Error {
        Error {
            op,
            detail: ext_ack_message(error).map(Detail::Kernel),
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
pub(super) fn ext_ack_message(error: &ErrorMessage) -> Option<String> {
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
