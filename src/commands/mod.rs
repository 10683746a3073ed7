//! The CNI commands, each a flat pipeline over the layers below: [`add`], [`del`], [`check`],
//! and GC, STATUS and the sweep ([`node`]); [`call`] is what every one of them starts from.

pub(crate) mod add;
pub(crate) mod call;
pub(crate) mod check;
pub(crate) mod del;
pub(crate) mod node;
