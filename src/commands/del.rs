//! DEL: the call's attachments (the one on CNI_IFNAME, or the sandbox's in thick mode), their
//! interfaces, files and registrations, and their reservations. Nothing recorded for them (a
//! repeated DEL, an older sandbox's late DEL, a netns already gone) is success.

use crate::agent::Agent;
use crate::commands::call::{Acted, Call};
use crate::error::{Error, Result};
use crate::ids::{IfName, VmName};
use crate::kernel::links::{Kinds, Links};
use crate::state::ledger;
use crate::state::{Lock, PodDir, PodFiles, StateDir};

/// DEL. An ADD of the same attachment still running (its runtime gave up on it) is first asked
/// to stop, then waited for: it may be killed before its rollback, and what it built is then
/// this DEL's to remove.
pub fn del(call: &Call) -> Acted<()> {
    let (state, vm_name, lock) = match locked(call) {
        Ok(Some(found)) => found,
        other => return other.map(drop).into(),
    };
    let removed = remove(call, &state, &vm_name);
    // The request to stop is answered; the lock's file goes when `lock` is dropped.
    if let Err(e) = lock.clear_stop() {
        log::warn!("withdrawing the request to stop: {e}");
    }
    removed
}

/// The state directory, the pod and the attachment's lock; `None` when nothing is recorded.
fn locked(call: &Call) -> Result<Option<(StateDir, VmName, Lock)>> {
    let Some((state, vm_name)) = call.locate()? else {
        return Ok(None);
    };
    let lock = lock_stopping_an_add(call, &state, &vm_name)?;
    Ok(Some((state, vm_name, lock)))
}

/// The attachment's lock; when an ADD holds it, that ADD is asked to stop first.
fn lock_stopping_an_add(call: &Call, state: &StateDir, vm_name: &VmName) -> Result<Lock> {
    let (cid, ifname) = (call.container_id, call.ifname().map_or("", IfName::as_str));
    let locking = || Error::io("locking the attachment in", state.path());
    match state
        .try_lock_attachment(vm_name, cid, ifname)
        .map_err(locking())?
    {
        Some(lock) => Ok(lock),
        None => {
            log::info!("an ADD of this attachment is running: asking it to stop");
            state
                .stop_attachment(vm_name, cid, ifname)
                .map_err(locking())?;
            call.lock(state, vm_name)
        }
    }
}

/// DEL under the attachment's lock.
fn remove(call: &Call, state: &StateDir, vm_name: &VmName) -> Acted<()> {
    let contrail = &call.conf.contrail;
    let agent = Agent::new(contrail, call.started);
    let kinds = Kinds::new(contrail);
    let (mut pod, files) = match opened(&agent, &kinds, state, vm_name) {
        Ok(Some(opened)) => opened,
        other => return other.map(drop).into(),
    };
    let ours = call.ours(files);
    let result = Links::new(kinds).and_then(|mut links| {
        let removed = ledger::remove(&agent, &mut links, &mut pod, &ours.records, &ours.reserved);
        ledger::close(pod)?;
        removed
    });
    Acted::on(ours.vmis(), result)
}

/// The pod's directory, locked and settled; `None` when the pod has none.
fn opened(
    agent: &Agent,
    kinds: &Kinds,
    state: &StateDir,
    vm_name: &VmName,
) -> Result<Option<(PodDir, PodFiles)>> {
    if !state
        .has_pod(vm_name)
        .map_err(Error::io("reading", state.path()))?
    {
        // Nothing to delete; a lock file a killed call left goes (best effort: the DEL succeeds).
        if let Err(e) = state.drop_stale_pod_lock(vm_name) {
            log::warn!("pod {vm_name}: removing its stale lock: {e}");
        }
        return Ok(None);
    }
    ledger::open(agent, kinds, state, vm_name).map(Some)
}
