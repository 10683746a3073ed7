//! The ledger: the one owner of the rule "the agent's registrations for a pod are exactly its
//! attachments' state files, and the links they describe exist", and of its crash safety. It is
//! the only code that writes, renames or removes a state file (`PodDir`'s writers are private
//! to `state`), registers a port with the agent or drops one, and creates or deletes an
//! attachment's link: the agent's registering and dropping requests ([`Agent::register`],
//! `register_port`, `deregister_port`, [`Agent::resync`]), [`Links::create`] and
//! [`Links::remove`] take a [`Seal`], which only this module can make.
//! Everything else gets read-only views (`PodFiles`, the agent's GETs, `Links`' observers).
//! An ADD's steps are a typed sequence: [`write`] yields a [`Recorded`] claim, [`create_link`]
//! takes one and yields a [`Linked`] attachment, [`register`] takes those; a release's too: only
//! an `Unlinked` record (its link removed, or never made) is released. ADD's claims, links and
//! registrations, DEL, the rollback of a failed ADD, GC, the sweep and the resync of an
//! interrupted call all go through here.
//!
//! The agent cannot deregister one VMI: `DELETE /vm/<vm-uuid>` drops every port of the pod,
//! and the ones that stay are registered again from their files. So a release goes:
//! 1. the interfaces (by host-side name: it works when the netns is gone); a record whose
//!    interface cannot be deleted stays, for the next DEL;
//! 2. each released file is renamed to its pending name (`.<vmi>.release`, or `.reserve` for a
//!    failed ADD, whose attachment keeps its VMI): the file no longer explains a registration,
//!    and says that one may be left. A rename needs no new space: this works on a full disk;
//! 3. the pod's ports are dropped and the remaining attachments registered again;
//! 4. the pending files are settled: a release goes, a reservation becomes `.reserved`.
//!
//! A kill or an agent that does not answer between 2 and 4 leaves the pending files, and the
//! next call for the pod, GC or the sweep does 3 and 4 ([`open`]).
//!
//! How the agent holds a record's port is its kind's [`Registration`] (the ledger never asks
//! which kind a record is): by VM, as above; by port (`POST /port`, docs/vhost-user.md), which
//! the agent can drop alone, so step 3 is `DELETE /port/<vmi>` for it and the `/vm` resync
//! neither drops nor registers it again; or elsewhere (a nested node's, the hypervisor's). A
//! record the agent never heard of (an ADD that failed before registering, or one whose port
//! is registered elsewhere) skips 2 to 4.

use std::collections::BTreeSet;

use crate::agent::{Agent, Registration};
use crate::crash::{self, Step};
use crate::error::{Error, Result};
use crate::ids::{VmName, VmUuid};
use crate::kernel::links::{Kinds, Links, Unremoved};
use crate::kernel::netlink::{Netns, Socket};
use crate::state::{Pending, PodDir, PodFiles, Record, StateDir, Then};

pub(crate) mod seal;

use seal::SEAL;

/// An ADD's claim, recorded: only [`write`] makes one, and only a recorded claim gets a link
/// ([`create_link`]). Read-only: the record is what its file says.
pub(crate) struct Recorded(Record);

impl std::ops::Deref for Recorded {
    type Target = Record;
    fn deref(&self) -> &Record {
        &self.0
    }
}

/// A recorded claim whose interface exists: only [`create_link`] makes one, and only a linked
/// attachment is registered ([`register`]). So an ADD's order, record, then link, then
/// registration, is the types': a crash leaves a record a DEL acts on, never a link or a
/// registration no record explains.
pub(crate) struct Linked(Record);

impl std::ops::Deref for Linked {
    type Target = Record;
    fn deref(&self) -> &Record {
        &self.0
    }
}

/// Records an ADD's claim (under the pod's lock, so that concurrent ADDs of one pod never take
/// the same VMI).
pub(crate) fn write(pod: &mut PodDir, record: Record) -> Result<Recorded> {
    pod.write(&record)
        .map_err(Error::io("writing state in", pod.path()))?;
    Ok(Recorded(record))
}

/// Makes a claimed attachment's interface (see [`Links::create`]).
pub(crate) fn create_link(
    links: &mut Links,
    state: &StateDir,
    claim: &Recorded,
    mtu: u32,
    netns: &Netns,
    ctr: &mut Socket,
) -> Result<Linked> {
    links.create(&SEAL, state, claim, mtu, netns, ctr)?;
    Ok(Linked(claim.0.clone()))
}

/// Registers linked attachments, each as its kind's [`Registration`] says.
pub(crate) fn register(agent: &Agent, kinds: &Kinds, linked: &[Linked]) -> Result<()> {
    linked.iter().try_for_each(|r| match kinds.registration(r) {
        Registration::ByVm => agent.register(&SEAL, &r.port()),
        Registration::ByPort => agent.register_port(&SEAL, &r.port_body()),
        Registration::Elsewhere => Ok(()),
    })
}

/// A record whose attachment has no link left: its interface was removed, or never made. Only
/// such a record's file is released ([`release`]): one whose link could not be removed stays a
/// record, for the next DEL, and never becomes a release or a reservation that no DEL would
/// take the link of. Only [`delete_links`] and [`undo`] make one.
struct Unlinked(Record);

/// Takes the pod's lock, finishes what an earlier call left pending (it was killed, or the
/// agent did not answer it), and reads what the pod's directory then holds.
pub(crate) fn open(
    agent: &Agent,
    kinds: &Kinds,
    state: &StateDir,
    vm_name: &VmName,
) -> Result<(PodDir, PodFiles)> {
    let pod = state
        .lock_pod(vm_name, agent.deadline())
        .map_err(Error::locking(
            "locking pod state in",
            &state.path().join(vm_name),
            agent.started(),
        ))?;
    crash::point(Step::Locked);
    let files = settle(agent, kinds, &pod).map_err(Error::io("reading", pod.path()))?;
    Ok((pod, files))
}

/// [`open`] unless a call holds the pod's lock now: GC and the sweep skip a pod a call is
/// working on rather than wait for it.
pub(crate) fn try_open(
    agent: &Agent,
    kinds: &Kinds,
    state: &StateDir,
    vm_name: &VmName,
) -> Result<Option<(PodDir, PodFiles)>> {
    let pod = state.try_lock_pod(vm_name).map_err(Error::io(
        "locking pod state in",
        &state.path().join(vm_name),
    ))?;
    let Some(pod) = pod else {
        return Ok(None);
    };
    let files = settle(agent, kinds, &pod).map_err(Error::io("reading", pod.path()))?;
    Ok(Some((pod, files)))
}

/// Ends a critical section on the pod: its directory goes when nothing is left in it.
#[allow(
    clippy::disallowed_methods,
    reason = "state::ledger::close is the one closer of a pod's directory"
)]
pub(crate) fn close(pod: PodDir) -> Result<()> {
    let path = pod.path().to_path_buf();
    pod.close().map_err(Error::io("removing", &path))
}

/// Whether the agent may have registrations of records being released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Registered {
    /// They were registered, or may have been (`POST /vm` was sent, or an older sandbox's
    /// claim was taken over).
    Maybe,
    /// Never: nothing to ask the agent.
    No,
}

/// Removes a call's attachments (their interfaces, files and registrations) and its
/// reservations, with whatever interface a reservation may still have: a failed ADD's has none,
/// but the attachments of a sandbox whose netns went are made reservations by the first release
/// in their pod ([`finish_pending`]), while the kernel, which tears a removed netns down on the
/// machine's one workqueue, may not be done with their host links yet. A record or reservation
/// whose interface cannot be deleted keeps its file, for the next DEL; the first such failure
/// is returned, every one logged.
pub(crate) fn remove(
    agent: &Agent,
    links: &mut Links,
    pod: &mut PodDir,
    records: &[Record],
    reserved: &[Record],
) -> Result<()> {
    let (gone, mut failed) = delete_links(links, records);
    let (unlinked, unremoved) = delete_links(links, reserved);
    failed.extend(unremoved);
    let reserved: Vec<&Record> = unlinked.iter().map(|u| &u.0).collect();
    crash::point(Step::Unlinked);
    release(
        agent,
        links.kinds(),
        pod,
        &gone,
        Then::Gone,
        Registered::Maybe,
    )?;
    for r in &reserved {
        pod.drop_reservation(&r.vmi_uuid)
            .map_err(Error::io("removing state in", pod.path()))?;
    }
    if !reserved.is_empty() {
        // A reservation still pending became a pending release.
        log_unsettled(pod, settle(agent, links.kinds(), pod));
    }
    match failed.into_iter().next() {
        Some(u) => Err(u.error),
        None => Ok(()),
    }
}

/// Undoes a failed ADD: puts back the records it rewrote (`restore`: attachments that were
/// there before the call, registered), deletes the interfaces it created (`made`) and releases
/// its new `claims` that have no link left, which stay the attachments' (reservations) so that
/// no sibling takes their VMIs; a claim whose link could not be deleted stays a record, for the
/// DEL that follows a failed ADD. Keeps going after a failure and returns every one.
pub(crate) fn undo(
    agent: &Agent,
    links: &mut Links,
    pod: &mut PodDir,
    restore: &[Record],
    made: &[Record],
    claims: &[Record],
    registered: Registered,
) -> Vec<Error> {
    let mut failed: Vec<Error> = restore
        .iter()
        .filter_map(|old| {
            pod.write(old)
                .map_err(Error::io("restoring state in", pod.path()))
                .err()
        })
        .collect();
    let (unlinked, unremoved) = delete_links(links, made);
    failed.extend(unremoved.into_iter().map(|u| u.error));
    // A claim whose link this call never made has none to remove.
    let never_linked = claims
        .iter()
        .filter(|c| !made.iter().any(|m| m.vmi_uuid == c.vmi_uuid))
        .map(|c| Unlinked(c.clone()));
    let claims: Vec<Unlinked> = unlinked
        .into_iter()
        .filter(|u| claims.iter().any(|c| c.vmi_uuid == u.0.vmi_uuid))
        .chain(never_linked)
        .collect();
    failed.extend(
        release(
            agent,
            links.kinds(),
            pod,
            &claims,
            Then::Reserved,
            registered,
        )
        .err(),
    );
    failed
}

/// Deletes records' host links outside a release: the ones a failed ADD made when the pod's
/// state cannot be locked or read (they go all the same; their records stay, for the next DEL),
/// or the attachments a newer sandbox of the pod took over (their records were just rewritten
/// as its claims): each kind's [`Links::remove`], so that a takeover releases the same pieces
/// as DEL, GC and the sweep. Returns every failure.
pub(crate) fn unlink(links: &mut Links, records: &[Record]) -> Vec<Error> {
    let (_, failed) = delete_links(links, records);
    failed.into_iter().map(|u| u.error).collect()
}

/// Removes the records' interfaces: the records that have none left, and the ones that could
/// not be removed, with why.
fn delete_links(links: &mut Links, records: &[Record]) -> (Vec<Unlinked>, Vec<Unremoved>) {
    let failed = links.remove(&SEAL, records);
    for u in &failed {
        log::warn!("could not delete {}: {}", u.link, u.error);
    }
    let gone = records
        .iter()
        .filter(|r| !failed.iter().any(|u| u.vmi == r.vmi_uuid))
        .map(|r| Unlinked(r.clone()))
        .collect();
    (gone, failed)
}

/// Steps 2 to 4 for `gone`, whose interfaces are gone: renamed to pending, the agent brought in
/// line, settled. The agent part is best effort: when it fails, the pending files stay for the
/// next call.
fn release(
    agent: &Agent,
    kinds: &Kinds,
    pod: &mut PodDir,
    gone: &[Unlinked],
    then: Then,
    registered: Registered,
) -> Result<()> {
    let failed = |e| Error::io("releasing state in", pod.path())(e);
    // A record that explains no registration of this node's has nothing to bring in line.
    let (held, unheld): (Vec<&Unlinked>, Vec<&Unlinked>) = gone
        .iter()
        .partition(|r| registered == Registered::Maybe && kinds.registration(&r.0).by_this_node());
    for r in unheld {
        match then {
            Then::Reserved => pod.reserve(&r.0.vmi_uuid),
            Then::Gone => pod.remove(&r.0.vmi_uuid),
        }
        .map_err(failed)?;
    }
    if held.is_empty() {
        return Ok(());
    }
    for r in held {
        pod.mark_released(&r.0.vmi_uuid, then).map_err(failed)?;
    }
    crash::point(Step::Marked);
    log_unsettled(pod, settle(agent, kinds, pod));
    Ok(())
}

/// For a [`settle`] whose files the caller does not need: the next call reads them again.
fn log_unsettled(pod: &PodDir, settled: std::io::Result<PodFiles>) {
    if let Err(e) = settled {
        log::warn!("pod {}: reading its state: {e}", pod.name());
    }
}

/// Steps 3 and 4 for whatever is pending in the pod: for each VM with a pending file, its ports
/// are dropped and its attachments registered again, then its pending files settled. A failure
/// is logged and leaves them pending. Returns what the pod's directory then holds.
fn settle(agent: &Agent, kinds: &Kinds, pod: &PodDir) -> std::io::Result<PodFiles> {
    let files = pod.files()?;
    if files.pending.is_empty() && files.legacy_resync.is_none() {
        return Ok(files);
    }
    finish_pending(agent, kinds, pod, files);
    pod.files()
}

fn finish_pending(agent: &Agent, kinds: &Kinds, pod: &PodDir, files: PodFiles) {
    let by_vm = |r: &Record| kinds.registration(r) == Registration::ByVm;
    // Only ports registered by VM are dropped by VM and registered again; one registered by
    // port is dropped alone (below), one registered elsewhere not at all.
    let legacy = files
        .legacy_resync
        .clone()
        .filter(|_| kinds.legacy_registration() == Registration::ByVm);
    let vms: BTreeSet<VmUuid> = files
        .pending
        .iter()
        .filter_map(|p| p.record.as_ref())
        .filter(|r| by_vm(r))
        .map(|r| r.vm_uuid.clone())
        .chain(legacy)
        .collect();
    // The attachments of a sandbox that is provably gone are not registered again: their
    // interfaces went with its network namespace, and its DELs (or GC, the sweep) will come.
    // They become reservations, pending with the rest, so that those DELs ask the agent
    // nothing: a pod whose namespace is gone costs one request to tear down, not N(N+1)/2.
    let mut pending = files.pending;
    let mut live = Vec::new();
    let boot = crate::state::files::boot_id();
    for r in files.records {
        // Only a port the resync registers again costs it anything; the others stay live (a
        // vhost-user attachment's link and directory outlive the netns: its DEL, GC or the
        // sweep removes them).
        if !by_vm(&r) || !crate::state::sandbox_gone(&r, &boot) {
            live.push(r);
            continue;
        }
        match pod.mark_released(&r.vmi_uuid, Then::Reserved) {
            Ok(()) => pending.push(Pending {
                vmi_uuid: r.vmi_uuid.clone(),
                then: Then::Reserved,
                record: Some(r),
            }),
            Err(e) => {
                log::warn!("pod {}: reserving VMI {}: {e}", pod.name(), r.vmi_uuid);
                live.push(r);
            }
        }
    }
    for r in pending.iter().filter_map(|p| p.record.as_ref()) {
        if kinds.registration(r) != Registration::ByPort {
            continue;
        }
        if let Err(e) = agent.deregister_port(&SEAL, &r.vmi_uuid) {
            log::warn!(
                "pod {}: VMI {} left registered with the agent (POST /port); the next call for \
                 the pod, GC or the sweep retries: {e}",
                pod.name(),
                r.vmi_uuid
            );
            return;
        }
    }
    let mut ports: Vec<serde_json::Value> =
        live.iter().filter(|r| by_vm(r)).map(Record::port).collect();
    // A future version's file that is still a port stays registered.
    ports.extend(files.unreadable.into_iter().filter_map(|u| u.port));
    for vm in &vms {
        log::info!(
            "pod {}: bringing the agent's ports of {vm} in line with its files",
            pod.name()
        );
        if let Err(e) = agent.resync(&SEAL, vm, &ports) {
            log::warn!(
                "pod {} left registered with the agent beyond its attachments; the next call \
                 for the pod, GC or the sweep retries: {e}",
                pod.name()
            );
            return;
        }
    }
    for p in &pending {
        if p.record.is_none() {
            log::warn!(
                "pod {}: pending file of VMI {} cannot be read (a power loss?): dropping it",
                pod.name(),
                p.vmi_uuid
            );
        }
        if let Err(e) = pod.settled(p) {
            log::warn!("pod {}: settling VMI {}: {e}", pod.name(), p.vmi_uuid);
        }
    }
    if files.legacy_resync.is_some() {
        if let Err(e) = pod.clear_legacy_resync() {
            log::warn!("pod {}: removing the resync marker: {e}", pod.name());
        }
    }
}
