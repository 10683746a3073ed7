//! Interface names: `check_ifname` accepts exactly what Linux and libcni accept (and a log line
//! can hold), and `host_ifname` makes short, deterministic, collision-free tap names.

use std::collections::{BTreeMap, BTreeSet};

use proptest::collection::vec;
use proptest::prelude::*;

use contrail_k8s_cni::cni::check_ifname;
use contrail_k8s_cni::kernel::names;
use contrail_testkit::uuid_of;

use crate::config;
use crate::strategies::{ifname_value, tricky_string, uuid};

// ---------------------------------------------------------------------------------------------
// cni::check_ifname

/// What Linux's `dev_valid_name` and libcni's `ValidateInterfaceName` both accept: 1 to 15
/// bytes, not `.`/`..`, no `/`, `:` or NUL; libcni refuses every Unicode space
/// (`unicode.IsSpace`, the White_Space property), the kernel every byte its `isspace` knows
/// (`\t\n\v\f\r`, space and 0xa0, Latin-1's no-break space).
fn linux_and_libcni_accept(s: &str) -> bool {
    let kernel = !s.is_empty()
        && s.len() < 16
        && s != "."
        && s != ".."
        && !s
            .bytes()
            .any(|c| matches!(c, b'/' | b':' | 0 | b'\t'..=b'\r' | b' ' | 0xa0));
    let libcni = !s.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
    kernel && libcni
}

/// What a name shown in the node's log may hold besides: no control characters.
fn loggable(s: &str) -> bool {
    !s.chars().any(char::is_control)
}

proptest! {
    #![proptest_config(config(512))]

    /// check_ifname accepts only what the kernel and libcni accept (and no control
    /// characters), so that a bad CNI_IFNAME is refused up front with code 4, not by netlink
    /// half-way through ADD with code 102.
    #[test]
    fn check_ifname_accepts_only_what_linux_and_libcni_accept(s in ifname_value()) {
        if check_ifname(&s).is_ok() {
            prop_assert!(linux_and_libcni_accept(&s) && loggable(&s), "{:?} accepted", s);
        }
    }

    /// ...and refuses nothing they accept that is fit for a log line.
    #[test]
    fn check_ifname_refuses_nothing_linux_and_libcni_accept(s in ifname_value()) {
        if linux_and_libcni_accept(&s) && loggable(&s) {
            prop_assert!(check_ifname(&s).is_ok(), "{:?} refused", s);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// vmi::host_ifname

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn host_ifname_is_a_short_deterministic_tap_name(s in prop_oneof![uuid(), tricky_string()]) {
        let h = names::host_ifname(&s);
        prop_assert_eq!(h.len(), 15);
        prop_assert!(check_ifname(&h).is_ok());
        prop_assert!(linux_and_libcni_accept(&h));
        prop_assert!(h.starts_with("tap"));
        prop_assert!(h[3..].bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)), "{}", h);
        prop_assert_eq!(names::host_ifname(&s.clone()), h);
    }
}

proptest! {
    #![proptest_config(config(16))]

    /// No two of a few thousand uuids share a host name, random or kube-manager-like siblings.
    #[test]
    fn host_ifname_has_no_collisions(random in vec(any::<u128>(), 3000), base in any::<u64>()) {
        let random: BTreeSet<String> = random.into_iter().map(uuid_of).collect();
        let siblings = (0..3000u128).map(|i| uuid_of((u128::from(base) << 64) | (0x0025_9000_0000 + i)));
        let uuids: BTreeSet<String> = random.into_iter().chain(siblings).collect();
        let mut names = BTreeMap::new();
        for u in &uuids {
            if let Some(other) = names.insert(names::host_ifname(u), u) {
                return Err(TestCaseError::fail(format!("{u} and {other} share {}", names::host_ifname(u))));
            }
        }
    }
}
