//! CHECK: each attachment of the call is as ADD left it (compared with its description, see
//! [`interface`]), the runtime's `prevResult` lists nothing it lacks, and the agent still has
//! its port under this node's host interface with an IP configuration.

use crate::agent::{Agent, Awaited, Class, Poll, Registration};
use crate::commands::call::{Acted, Call, Ours, open_netns};
use crate::error::{Error, Result};
use crate::kernel::interface::{self, Mismatch};
use crate::kernel::links::{Kinds, Links};
use crate::kernel::netlink::Socket;
use crate::state::Record;
use crate::state::ledger;
use crate::vmi::IpConfig;

pub fn check(call: &Call) -> Acted<()> {
    let (agent, kinds, ours) = match recorded(call) {
        Ok(found) => found,
        Err(e) => return Err(e).into(),
    };
    Acted::on(ours.vmis(), verify(call, &agent, kinds, &ours))
}

/// This call's attachments, from the pod's settled files; an error when none is recorded.
fn recorded(call: &Call) -> Result<(Agent, Kinds, Ours)> {
    let not_recorded = || Mismatch::NotRecorded {
        container_id: call.container_id.clone(),
        ifname: call.scope().interface().cloned(),
    };
    let Some((state, vm_name)) = call.locate()? else {
        return Err(not_recorded().into());
    };
    if !state
        .has_pod(&vm_name)
        .map_err(Error::io("reading", state.path()))?
    {
        return Err(not_recorded().into());
    }
    let agent = Agent::new(&call.conf.contrail, call.started);
    let kinds = Kinds::new(&call.conf.contrail);
    let (pod, files) = ledger::open(&agent, &kinds, &state, &vm_name)?;
    let ours = call.ours(files);
    ledger::close(pod)?;
    if ours.records.is_empty() && ours.reserved.is_empty() {
        return Err(not_recorded().into());
    }
    Ok((agent, kinds, ours))
}

/// Each attachment as ADD left it, and the agent's registration of it.
fn verify(call: &Call, agent: &Agent, kinds: Kinds, ours: &Ours) -> Result<()> {
    if let Some(r) = ours.reserved.first() {
        return Err(Mismatch::Failed {
            ifname: r.ifname.clone(),
            vmi: r.vmi_uuid.clone(),
        }
        .into());
    }
    let contrail = &call.conf.contrail;
    let netns = open_netns(&call.env.netns)?;
    let (mut links, mut ctr) = (Links::new(kinds, agent.deadline())?, Socket::open(&netns)?);
    for r in &ours.records {
        let ip = registered(agent, links.kinds().registration(r), r)?;
        let spec = interface::describe(r, &ip, contrail.mtu)?;
        links.verify(&mut ctr, &spec, r, call.conf.prev_result.as_ref())?;
    }
    Ok(())
}

/// The agent's IP configuration of the record's VMI, registered under its host interface
/// (unless the node registers nothing). A busy agent is asked again within the call's deadline;
/// a 404 is the answer.
fn registered(agent: &Agent, how: Registration, r: &Record) -> Result<IpConfig> {
    let ip = agent
        .poll(
            Awaited::IpConfig {
                vmi: r.vmi_uuid.clone(),
            },
            |agent, t| {
                agent
                    .ip_config(Class::Poll, &r.vm_uuid, &r.vmi_uuid, t)
                    .map(Poll::Ready)
            },
        )?
        .ok_or_else(|| Mismatch::NotRegistered {
            vmi: r.vmi_uuid.clone(),
            vm_name: r.vm_name.clone(),
            host_ifname: r.host_ifname.clone(),
        })?;
    // A port registered elsewhere is named after the VMI itself.
    if how.by_this_node() && ip.registered_as.as_deref() != Some(r.host_ifname.as_str()) {
        return Err(Mismatch::RegisteredAs {
            vmi: r.vmi_uuid.clone(),
            has: ip.registered_as,
            host_ifname: r.host_ifname.clone(),
        }
        .into());
    }
    Ok(ip)
}
