//! Validated identifiers. Each is parsed once where it enters (the CNI environment, the
//! agent's answers, a state file) and is a valid one from then on: an identifier becomes a
//! request path to the agent, an interface name, a file or lock name, so its rule is checked
//! in its type, not at each use. Pure: no I/O.
//!
//! Why one is refused names its rule, never its bytes (which may hold anything, a line break
//! and a header).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, de};

/// A string that broke an identifier's rule: which rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid {
    /// What the identifier is ("a uuid", "an interface name", ...).
    pub what: &'static str,
    /// How the string broke its rule, as the end of a sentence ("is not a lowercase uuid").
    pub rule: &'static str,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rule)
    }
}

impl std::error::Error for Invalid {}

/// UUIDs become URL path segments and file names: only the agent's lowercase dashed form.
pub fn check_uuid(s: &str) -> Result<(), &'static str> {
    let ok = s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        });
    if ok {
        Ok(())
    } else {
        Err("is not a lowercase uuid")
    }
}

/// The one rule for Linux interface names: libcni's, plus no control characters (a name is
/// shown in logs and by `ip`). The kernel's `dev_valid_name()` takes every name this takes.
pub fn check_ifname(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 15 {
        Err("must be 1 to 15 bytes long")
    } else if s == "." || s == ".." {
        Err("may not be . or ..")
    // Unicode whitespace, as libcni checks it (`is_ascii_whitespace` would let \v through).
    } else if s
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace() || c == '\0')
        // The kernel's isspace() also takes byte 0xa0 (Latin-1's no-break space), the last
        // byte of some UTF-8 letters (à, Š): its dev_valid_name refuses those names.
        || s.as_bytes().contains(&0xa0)
    {
        Err("may not contain '/', ':', NUL or whitespace")
    } else if s.chars().any(char::is_control) {
        Err("may not contain control characters")
    } else {
        Ok(())
    }
}

/// The rule libcni applies to container ids and network names; it also keeps a value safe as
/// one path component (no `/`, never `.` or `..`).
pub fn check_name(s: &str) -> Result<(), &'static str> {
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 253
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err("does not match [a-zA-Z0-9][a-zA-Z0-9_.-]* (at most 253 bytes)")
    }
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident, $what:literal, $check:path) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The identifier, when `s` keeps its rule.
            pub fn parse(s: impl Into<String>) -> Result<$name, Invalid> {
                let s = s.into();
                match $check(&s) {
                    Ok(()) => Ok($name(s)),
                    Err(rule) => Err(Invalid { what: $what, rule }),
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<std::path::Path> for $name {
            fn as_ref(&self) -> &std::path::Path {
                self.0.as_ref()
            }
        }

        /// Its rule leaves nothing to escape: shown as it is.
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let s = String::deserialize(d)?;
                $name::parse(s).map_err(|e| de::Error::custom(e.rule))
            }
        }
    };
}

identifier!(
    /// A VM's (a pod's) uuid, as kube-manager made it.
    VmUuid,
    "a VM uuid",
    check_uuid
);
identifier!(
    /// A pod's Kubernetes UID (`K8S_POD_UID`): names its vhost-user directory.
    PodUid,
    "a pod UID",
    check_uuid
);
identifier!(
    /// A VMI's uuid.
    VmiUuid,
    "a VMI uuid",
    check_uuid
);
identifier!(
    /// A virtual network's uuid.
    VnUuid,
    "a VN uuid",
    check_uuid
);
identifier!(
    /// A Linux interface name (CNI_IFNAME, a host-side name the plugin derived).
    IfName,
    "an interface name",
    check_ifname
);
identifier!(
    /// A sandbox's container id (CNI_CONTAINERID).
    ContainerId,
    "a container id",
    check_name
);
identifier!(
    /// The agent's VM name of a pod, `<cluster-name>__<namespace>__<pod>`: a directory name
    /// in the state directory.
    VmName,
    "a VM name",
    check_name
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_keep_their_rules() {
        assert!(VmiUuid::parse("b86ac068-cf0e-11e8-b196-002590000001").is_ok());
        for bad in [
            "B86AC068-CF0E-11E8-B196-002590000001",
            "b86ac068-cf0e-11e8-b196-00259000000",
            "b86ac068-cf0e-11e8-b196-002590000001\r\nX: 1",
            "../../x",
        ] {
            assert_eq!(
                VmiUuid::parse(bad).unwrap_err().rule,
                "is not a lowercase uuid"
            );
        }
        assert!(IfName::parse("net1").is_ok());
        for bad in ["", "a-name-far-too-long", "eth0/x", "a b", "a\u{1b}b", ".."] {
            assert!(IfName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ContainerId::parse("c1").is_ok());
        for bad in ["../etc", "c1\nX", ".x", ""] {
            assert!(ContainerId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_refused_identifier_in_json_names_its_rule_not_its_bytes() {
        let e = serde_json::from_str::<VmUuid>("\"x\\r\\nX-Injected: 1\"").unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("is not a lowercase uuid") && !e.contains("Injected"),
            "{e}"
        );
        let ok: VmUuid = serde_json::from_str("\"40936d96-cf0e-11e8-9892-002590aaa964\"").unwrap();
        assert_eq!(ok.as_str(), "40936d96-cf0e-11e8-9892-002590aaa964");
    }
}
