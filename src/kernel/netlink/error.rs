//! A netlink operation's failure: the operation, the errno and the kernel's extended ack.

use std::fmt;
use std::io;

use netlink_packet_core::{ErrorMessage, NlasIterator};

/// Every failure names the operation and the object, and keeps the errno (when there is one)
/// for callers.
#[derive(Debug)]
pub struct Error {
    pub(super) op: String,
    /// The kernel's extended-ack message, or our reading of the errno.
    pub(super) detail: Option<String>,
    pub(super) source: io::Error,
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
    pub(super) fn mtu_detail(mut self, mtu: u32, other: u32) -> Error {
        if self.errno() == Some(libc::EINVAL) && self.detail.is_none() {
            self.detail = Some(if mtu == other {
                format!("MTU {mtu} rejected")
            } else {
                format!("MTU {mtu}/{other} rejected")
            });
        }
        self
    }

    pub(super) fn new(op: impl Into<String>, source: io::Error) -> Error {
        Error {
            op: op.into(),
            detail: None,
            source,
        }
    }

    /// A request we refused to send, or a reply we could not read.
    pub(super) fn invalid(op: String, reason: String) -> Error {
        Error::new(op, io::Error::other(reason))
    }

    pub(super) fn netlink(op: String, error: &ErrorMessage) -> Error {
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
