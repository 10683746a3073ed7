//! The names of the files in a pod's directory, as a type: one place writes them and reads
//! them back, so that what a release renames a record to is what the next call reads as pending.

use std::fmt;

use crate::ids::VmiUuid;
use crate::state::files::is_temp;

/// What a released record becomes once the agent no longer has its registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Nothing: the file goes (`.release`).
    Gone,
    /// The attachment's reservation (`.reserve`, then `.reserved`).
    Reserved,
}

/// A file of a pod's directory, by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileName {
    /// `<vmi>`: an attachment's record, which the agent reloads at its start.
    Record(VmiUuid),
    /// `.<vmi>.release` or `.<vmi>.reserve`: a released record whose deregistration is pending.
    /// Dotted names are hidden from the agent's reload, which takes names starting with a uuid.
    Pending(VmiUuid, Then),
    /// `.<vmi>.reserved`: a failed ADD's reservation of its VMI.
    Reserved(VmiUuid),
    /// `.resync`: version 0.1.0's marker of a deregistration to finish.
    LegacyResync,
    /// A temporary file of an atomic write.
    Temp,
    /// Anything else: not this plugin's.
    Other,
}

const RELEASE: &str = "release";
const RESERVE: &str = "reserve";
const RESERVED: &str = "reserved";
const LEGACY_RESYNC: &str = ".resync";

impl FileName {
    pub(crate) fn parse(name: &str) -> FileName {
        if is_temp(name) {
            return FileName::Temp;
        }
        if name == LEGACY_RESYNC {
            return FileName::LegacyResync;
        }
        if let Ok(vmi) = VmiUuid::parse(name) {
            return FileName::Record(vmi);
        }
        let Some((vmi, suffix)) = name.strip_prefix('.').and_then(|n| n.split_once('.')) else {
            return FileName::Other;
        };
        let Ok(vmi) = VmiUuid::parse(vmi) else {
            return FileName::Other;
        };
        match suffix {
            RELEASE => FileName::Pending(vmi, Then::Gone),
            RESERVE => FileName::Pending(vmi, Then::Reserved),
            RESERVED => FileName::Reserved(vmi),
            _ => FileName::Other,
        }
    }
}

impl fmt::Display for FileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileName::Record(vmi) => write!(f, "{vmi}"),
            FileName::Pending(vmi, Then::Gone) => write!(f, ".{vmi}.{RELEASE}"),
            FileName::Pending(vmi, Then::Reserved) => write!(f, ".{vmi}.{RESERVE}"),
            FileName::Reserved(vmi) => write!(f, ".{vmi}.{RESERVED}"),
            FileName::LegacyResync => f.write_str(LEGACY_RESYNC),
            // Neither is ever written under a name of this type.
            FileName::Temp | FileName::Other => Err(fmt::Error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "b86ac068-cf0e-11e8-b196-002590aaa964";

    #[test]
    fn every_name_written_reads_back_as_itself() {
        let vmi = VmiUuid::parse(A).unwrap();
        for name in [
            FileName::Record(vmi.clone()),
            FileName::Pending(vmi.clone(), Then::Gone),
            FileName::Pending(vmi.clone(), Then::Reserved),
            FileName::Reserved(vmi),
            FileName::LegacyResync,
        ] {
            assert_eq!(FileName::parse(&name.to_string()), name);
        }
        assert_eq!(
            FileName::parse(&format!(".{A}.release")).to_string(),
            format!(".{A}.release")
        );
    }

    #[test]
    fn names_of_no_vmi_or_of_an_unknown_suffix_are_others() {
        for name in [
            "x",
            ".x.release",
            &format!(".{A}.later"),
            &format!("{A}.release"),
            &A.to_uppercase(),
            &format!(".{}.reserved", A.to_uppercase()),
        ] {
            assert_eq!(FileName::parse(name), FileName::Other, "{name}");
        }
        assert_eq!(FileName::parse(&format!(".{A}.tmp")), FileName::Temp);
    }
}
