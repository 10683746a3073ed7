//! What the functions that change registrations and links ask for: proof that the ledger calls
//! them. Its field is private and its one value is the ledger's (`pub(super)`), so no other
//! module can make one. A file of its own, so that the agent and the links, which the ledger
//! calls, do not import the ledger.

pub(crate) struct Seal(());

pub(super) const SEAL: Seal = Seal(());
