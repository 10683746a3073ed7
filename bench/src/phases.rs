//! The measurements: one attachment against ptp + static and the floor, the state directory on
//! other filesystems, thick mode, parallel pods, a full node, the readiness lag; one module per
//! section, and the checks they share.

pub(crate) mod checks;
pub(crate) mod disk;
pub(crate) mod node;
pub(crate) mod parallel;
pub(crate) mod readiness;
pub(crate) mod single;
pub(crate) mod thick;
