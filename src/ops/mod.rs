//! What operators run and read: the command line ([`cli`]), [`install`] (and the DaemonSet's
//! watch and sweep), [`inspect`], the [`metrics`] file and the node's log ([`logging`]).

pub mod cli;
pub mod inspect;
pub mod install;
pub(crate) mod logging;
pub(crate) mod metrics;
