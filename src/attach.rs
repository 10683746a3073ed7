//! The attachment pipeline: ADD, DEL and CHECK as one list of steps for both modes. Plugin
//! mode works on the one attachment a meta-plugin asked for, thick mode on every VMI of the
//! pod: the mode only decides the list ([`vmi::for_attachment`], [`vmi::for_pod`]).
//!
//! ADD follows the agent's order: the claims are recorded, the veths created, the ports
//! registered (`POST /vm`), and only then does the agent have an IP configuration to give.
//! Every effect that succeeds pushes its undo; a failure runs them in reverse ([`Undo`]).
//!
//! Registrations cannot be undone one VMI at a time, so the pod's registrations are kept equal
//! to its state files: whatever removes a file re-registers the files that stay ([`release`]).

use std::net::IpAddr;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use ipnetwork::IpNetwork;
use serde_json::Value;

use crate::agent::{Agent, Poll};
use crate::cni::{self, Env, Interface, Outcome};
use crate::config::{Mode, NetConf};
use crate::error::{Error, Result};
use crate::logging::Shown;
use crate::netlink::{Netns, Route, Socket, VethEnd};
use crate::pod::Pod;
use crate::state::{self, Lock, PodDir, Record, STATE_VERSION, StateDir};
use crate::vmi::{self, Attachment, IpConfig, Mac, Vmi, Wanted};

/// One CNI call's inputs, and what it acted on.
pub struct Call<'a> {
    pub env: &'a Env,
    pub conf: &'a NetConf,
    pub pod: Option<&'a Pod>,
    /// The VMIs the call acted on, for its log line.
    pub vmis: Vec<String>,
}

impl Call<'_> {
    /// Which of the sandbox's attachments a DEL or CHECK is about: the one on CNI_IFNAME in
    /// plugin mode, every one in thick mode.
    fn ifname(&self) -> Option<&str> {
        scope(self.conf.contrail.mode, &self.env.ifname)
    }

    /// The lock of this call's attachment (see [`StateDir::lock_attachment`]).
    fn lock(&self, state: &StateDir, vm_name: &str) -> Result<Lock> {
        let ifname = self.ifname().unwrap_or("");
        state
            .lock_attachment(vm_name, &self.env.container_id, ifname)
            .map_err(Error::io("locking the attachment in", state.path()))
    }

    fn covers(&self, r: &Record) -> bool {
        r.container_id == self.env.container_id && self.ifname().is_none_or(|i| r.ifname == i)
    }

    /// The state directory and the pod of this call's attachments: the pod from CNI_ARGS,
    /// else the one holding them (a DEL from a caller that sends no pod name). `None` when
    /// there is nothing to act on.
    fn locate(&self) -> Result<Option<(StateDir, String)>> {
        let dir = &self.conf.contrail.config_dir;
        let Some(state) = StateDir::existing(dir).map_err(Error::io("opening", dir))? else {
            return Ok(None);
        };
        let vm_name = match self.pod {
            Some(p) => p.vm_name(&self.conf.contrail.cluster_name),
            None => match state
                .find_pod(&self.env.container_id, self.ifname())
                .map_err(Error::io("searching", dir))?
            {
                Some(name) => name,
                None => return Ok(None),
            },
        };
        Ok(Some((state, vm_name)))
    }

    /// This call's records in the (locked) pod; older sandboxes' are left alone.
    fn records(&mut self, pod: &PodDir) -> Result<Vec<Record>> {
        let (records, _) = pod.records().map_err(Error::io("reading", pod.path()))?;
        let ours: Vec<Record> = records.into_iter().filter(|r| self.covers(r)).collect();
        for r in &ours {
            if !self.vmis.contains(&r.vmi_uuid) {
                self.vmis.push(r.vmi_uuid.clone());
            }
        }
        Ok(ours)
    }
}

/// Which attachments of a sandbox one call is about, by mode: the one on `ifname`, or all.
pub fn scope(mode: Mode, ifname: &str) -> Option<&str> {
    match mode {
        Mode::Plugin => Some(ifname),
        #[cfg(feature = "thick")]
        Mode::Thick => None,
    }
}

/// Takes the pod's state lock (see [`StateDir::lock_pod`]) and first finishes a resync that
/// an earlier call left pending (it was killed, or the agent did not answer it).
pub fn open_pod(agent: &Agent, state: &StateDir, vm_name: &str) -> Result<PodDir> {
    let pod = state.lock_pod(vm_name).map_err(Error::io(
        "locking pod state in",
        &state.path().join(vm_name),
    ))?;
    settle_pending(agent, pod)
}

/// Finishes a resync that an earlier call on the (locked) pod left pending.
pub fn settle_pending(agent: &Agent, pod: PodDir) -> Result<PodDir> {
    let vm_name = pod.name().to_string();
    match pod.resync_pending() {
        Ok(Some(vm_uuid)) => {
            log::info!("pod {vm_name}: finishing an interrupted deregistration");
            settle(agent, &pod, &vm_uuid);
        }
        Ok(None) => {}
        Err(e) => log::warn!("pod {vm_name}: reading its resync marker: {e}"),
    }
    Ok(pod)
}

/// Ends a critical section on the pod: the directory goes when nothing is left in it.
pub fn close(pod: PodDir) -> Result<()> {
    let path = pod.path().to_path_buf();
    pod.close().map_err(Error::io("removing", &path))
}

fn open_netns(path: &str) -> Result<Netns> {
    Netns::open(Path::new(path))
        .map_err(|e| Error::env("CNI_NETNS", format!("cannot open {path}: {e}")))
}

/// Runtimes and meta-plugins may ask for an IP or MAC; Contrail allocates both, so a request
/// is logged and ignored (documented in the README), never silently honoured in part.
fn warn_about_requests(conf: &NetConf, env: &Env) {
    let sources = [
        ("runtimeConfig", conf.runtime_config.as_ref()),
        (
            "args.cni",
            conf.args
                .as_ref()
                .and_then(|a| a.get("cni"))
                .and_then(Value::as_object),
        ),
    ];
    for (section, value) in sources {
        for key in ["ips", "mac"] {
            if let Some(v) = value.and_then(|r| r.get(key)) {
                let v = v.to_string();
                log::warn!(
                    "ignoring {section}.{key} {}: Contrail allocates addresses and MACs",
                    Shown(&v)
                );
            }
        }
    }
    for kv in env
        .args
        .split(';')
        .filter(|kv| kv.starts_with("IP=") || kv.starts_with("MAC="))
    {
        log::warn!(
            "ignoring CNI_ARGS {}: Contrail allocates addresses and MACs",
            Shown(kv)
        );
    }
}

/// What every step of one ADD works with.
struct Add<'a> {
    env: &'a Env,
    conf: &'a NetConf,
    agent: Agent,
    netns: Netns,
    host: Socket,
    ctr: Socket,
    state: StateDir,
    vm_name: String,
}

/// What one ADD created, which a failure undoes.
#[derive(Default)]
struct Undo {
    /// Claims this call recorded, with the registrations that may have followed.
    claims: Vec<Record>,
    /// The records whose veths this call created.
    links: Vec<Record>,
    /// Whether the agent may have a registration of a claim: this call sent `POST /vm`, or took
    /// a claim over from an older sandbox that may have registered it. Otherwise the agent has
    /// nothing to forget and is not asked to.
    registered: bool,
}

impl Undo {
    /// Deletes the veths and releases the claims, keeping going after a failure, and returns
    /// `error` with every failure of the rollback. What another attachment took over meanwhile
    /// (a newer sandbox's ADD of the same VMI) is no longer this call's to undo.
    fn run(self, add: &mut Add, error: Error) -> Error {
        let mut also = Vec::new();
        let done = open_pod(&add.agent, &add.state, &add.vm_name).and_then(|mut pod| {
            let (held, _) = pod.records().map_err(Error::io("reading", pod.path()))?;
            let ours = |r: &&Record| {
                !held
                    .iter()
                    .any(|h| h.vmi_uuid == r.vmi_uuid && !h.is(&r.container_id, &r.ifname))
            };
            let links: Vec<&str> = self
                .links
                .iter()
                .filter(ours)
                .map(|r| r.host_ifname.as_str())
                .collect();
            let failed = add.host.delete_links(&links);
            also.extend(failed.into_iter().map(|(_, e)| Error::from(e)));
            let claims: Vec<Record> = self.claims.iter().filter(ours).cloned().collect();
            if self.registered {
                release(&add.agent, &mut pod, &claims)?;
            } else {
                for r in &claims {
                    pod.remove(&r.vmi_uuid)
                        .map_err(Error::io("removing state in", pod.path()))?;
                }
            }
            close(pod)
        });
        also.extend(done.err());
        for e in &also {
            log::warn!("rollback: {e}");
        }
        if also.is_empty() {
            error
        } else {
            Error::RolledBack {
                error: Box::new(error),
                also,
            }
        }
    }
}

/// ADD: the attachments of the call (one, or every VMI of the pod), in the agent's order. On
/// failure, what this call created is undone.
pub fn add(call: &mut Call) -> Result<Outcome> {
    let (env, conf) = (call.env, call.conf);
    let pod = call.pod.ok_or_else(|| {
        Error::env(
            "CNI_ARGS",
            "K8S_POD_NAME is missing; ADD needs the pod's name",
        )
    })?;
    warn_about_requests(conf, env);
    let netns = open_netns(&env.netns)?;
    let dir = &conf.contrail.config_dir;
    let mut add = Add {
        env,
        conf,
        agent: Agent::new(&conf.contrail),
        host: Socket::host()?,
        ctr: Socket::open(&netns)?,
        netns,
        state: StateDir::open(dir).map_err(Error::io("opening", dir))?,
        vm_name: pod.vm_name(&conf.contrail.cluster_name),
    };
    let lock = call.lock(&add.state, &add.vm_name)?;
    if let Err(e) = lock.clear_stop() {
        log::warn!("clearing a stale request to stop: {e}");
    }
    // A DEL of this attachment (its runtime gave up on it) ends every wait of this ADD.
    let stop = lock
        .stop_probe()
        .map_err(Error::io("locking the attachment in", add.state.path()))?;
    add.agent = add.agent.stop_when(move || stop.requested());
    let result = add.agent.wait_for_pod(pod, &add.vm_name).and_then(|vmis| {
        let mut undo = Undo::default();
        add.steps(&vmis, &mut undo, &mut call.vmis).map_err(|e| {
            log::warn!("ADD failed, rolling back: {e}");
            undo.run(&mut add, e)
        })
    });
    if let Err(e) = lock.remove() {
        log::warn!("removing the attachment's lock: {e}");
    }
    result
}

impl Add<'_> {
    fn steps(&mut self, vmis: &[Vmi], undo: &mut Undo, noted: &mut Vec<String>) -> Result<Outcome> {
        let records = self.claim(vmis, undo)?;
        noted.extend(records.iter().map(|r| r.vmi_uuid.clone()));
        crate::crash::point("claimed");
        for r in &records {
            create_veth(
                &mut self.host,
                &self.state,
                self.conf.contrail.mtu,
                r,
                &self.netns,
            )?;
            undo.links.push(r.clone());
        }
        crate::crash::point("veth");
        undo.registered = true;
        for r in &records {
            self.agent.register(&port(r)?)?;
        }
        crate::crash::point("registered");
        let ips = self.wait_for_ips(&records)?;
        crate::crash::point("ip");
        let mut outcomes = Vec::with_capacity(records.len());
        for (r, ip) in records.iter().zip(&ips) {
            let plan = plan(self.conf, r, ip);
            outcomes.push(configure(&mut self.host, &mut self.ctr, &plan)?);
        }
        crate::crash::point("addressed");
        self.still_held(&records)?;
        // Thick mode's runtime knows only the first interface: the result describes it alone.
        outcomes
            .into_iter()
            .next()
            .ok_or_else(|| Error::NoVmi(format!("pod {} has no VMIs", self.vm_name)))
    }

    /// Chooses and records the claims under the pod's lock, so that concurrent ADDs of one pod
    /// never take the same VMI, and a crash after this point leaves records DEL acts on. A
    /// claim this sandbox holds already is an interrupted ADD's, whose interface is replaced
    /// and whose claim stays if this one fails; a new one needs its name free in the pod.
    fn claim(&mut self, vmis: &[Vmi], undo: &mut Undo) -> Result<Vec<Record>> {
        let mut pod = open_pod(&self.agent, &self.state, &self.vm_name)?;
        match self.record_claims(&mut pod, vmis) {
            Ok((records, fresh, took_over)) => {
                undo.claims = fresh;
                undo.registered = took_over;
                Ok(records)
            }
            Err(e) => {
                close(pod)?;
                Err(e)
            }
        }
    }

    /// The records of the chosen VMIs, written; the ones this call newly claimed; whether one of
    /// them was an older sandbox's.
    fn record_claims(
        &mut self,
        pod: &mut PodDir,
        vmis: &[Vmi],
    ) -> Result<(Vec<Record>, Vec<Record>, bool)> {
        let (held, unreadable) = pod.records().map_err(Error::io("reading", pod.path()))?;
        for u in &unreadable {
            log::warn!(
                "leaving unreadable state file {} alone: {}",
                u.path.display(),
                u.why
            );
        }
        let wanted = self.choose(vmis, &held, &unreadable)?;
        let cid = &self.env.container_id;
        let is_new = |w: &Wanted| {
            !held
                .iter()
                .any(|h| h.vmi_uuid == w.vmi.uuid && h.is(cid, &w.ifname))
        };
        let new_names: Vec<&str> = wanted
            .iter()
            .filter(|w| is_new(w))
            .map(|w| w.ifname.as_str())
            .collect();
        check_free(&mut self.ctr, &self.netns, &new_names)?;
        let (mut records, mut fresh, mut took_over) = (Vec::new(), Vec::new(), false);
        for w in &wanted {
            if let Some(old) = held
                .iter()
                .find(|h| h.vmi_uuid == w.vmi.uuid && h.container_id != *cid)
            {
                took_over = true;
                log::info!(
                    "VMI {} was held by older sandbox {} as {}: taking it over",
                    w.vmi.uuid,
                    old.container_id,
                    old.ifname
                );
            }
            let record = record(self.env, &self.vm_name, w);
            pod.write(&record)
                .map_err(Error::io("writing state in", pod.path()))?;
            if is_new(w) {
                fresh.push(record.clone());
            }
            records.push(record);
        }
        Ok((records, fresh, took_over))
    }

    /// The VMIs this call sets up, by mode.
    fn choose<'v>(
        &self,
        vmis: &'v [Vmi],
        held: &[Record],
        unreadable: &[state::Unreadable],
    ) -> Result<Vec<Wanted<'v>>> {
        match self.conf.contrail.mode {
            Mode::Plugin => {
                let network = &self.conf.network;
                let claims: Vec<_> = held
                    .iter()
                    .map(Record::claim)
                    .chain(unreadable.iter().map(|u| u.claim()))
                    .collect();
                let at = Attachment {
                    network,
                    container_id: &self.env.container_id,
                    ifname: &self.env.ifname,
                };
                let unresolved = |why: vmi::Unresolved| why.error(network, &self.vm_name);
                // Only a network attached more than once needs the agent's view to tell VMIs
                // apart. Asked under the lock, after open_pod settled the pod, so that it
                // matches the files.
                let vmi = vmi::resolve(at, vmis, &claims)
                    .map_err(unresolved)?
                    .take(|v| self.agent.is_registered(&v.vm_uuid, &v.uuid))
                    .ok_or_else(|| {
                        let count = vmis.iter().filter(|v| v.network == *network).count();
                        unresolved(vmi::Unresolved::AllTaken { count })
                    })?;
                let wanted = vmi::for_attachment(vmis, vmi, &self.env.ifname);
                log::debug!(
                    "{} resolved to VMI {} (index {})",
                    wanted.ifname,
                    wanted.vmi.uuid,
                    wanted.vmi.index
                );
                Ok(vec![wanted])
            }
            #[cfg(feature = "thick")]
            Mode::Thick => vmi::for_pod(vmis, &self.env.ifname),
        }
    }

    /// Waits for the IP configuration of every record.
    fn wait_for_ips(&self, records: &[Record]) -> Result<Vec<IpConfig>> {
        let uuids: Vec<&str> = records.iter().map(|r| r.vmi_uuid.as_str()).collect();
        let vm_uuid = records.first().map_or("", |r| r.vm_uuid.as_str());
        self.agent.wait_for_ips(vm_uuid, &uuids)
    }

    /// A newer sandbox of the pod that took a VMI over meanwhile rewrote its claim: then this
    /// ADD is undone rather than leave an interface no record knows.
    fn still_held(&self, records: &[Record]) -> Result<()> {
        let pod = open_pod(&self.agent, &self.state, &self.vm_name)?;
        let (held, _) = pod.records().map_err(Error::io("reading", pod.path()))?;
        match records.iter().find(|r| !held.contains(r)) {
            Some(gone) => Err(deleted_meanwhile(gone)),
            None => Ok(()),
        }
    }
}

fn deleted_meanwhile(r: &Record) -> Error {
    Error::Interface(format!("{} was deleted while it was being added", r.ifname))
}

/// DEL: the call's attachments (the one on CNI_IFNAME, or the sandbox's in thick mode).
/// Nothing recorded for them (a repeated DEL, a failed ADD already rolled back, an older
/// sandbox's late DEL) is success.
///
/// An ADD of the same attachment still running (its runtime gave up on it) is first told to
/// stop, by taking its claims away, then waited for: it may be killed before its rollback,
/// and what it built from those claims is then this DEL's to remove.
pub fn del(call: &mut Call) -> Result<()> {
    let Some((state, vm_name)) = call.locate()? else {
        return Ok(());
    };
    let (cid, ifname) = (&call.env.container_id, call.ifname().unwrap_or(""));
    let locking = || Error::io("locking the attachment in", state.path());
    let lock = match state
        .try_lock_attachment(&vm_name, cid, ifname)
        .map_err(locking())?
    {
        Some(lock) => lock,
        None => {
            log::info!("an ADD of this attachment is running: asking it to stop");
            state
                .stop_attachment(&vm_name, cid, ifname)
                .map_err(locking())?;
            call.lock(&state, &vm_name)?
        }
    };
    let dropped = drop_held(call, &state, &vm_name);
    let removed = lock.clear_stop().and_then(|()| lock.remove());
    if let Err(e) = removed {
        log::warn!("removing the attachment's lock: {e}");
    }
    dropped
}

/// DEL under the attachment's lock.
fn drop_held(call: &mut Call, state: &StateDir, vm_name: &str) -> Result<()> {
    if !state
        .has_pod(vm_name)
        .map_err(Error::io("reading", state.path()))?
    {
        return Ok(());
    }
    let agent = Agent::new(&call.conf.contrail);
    let mut pod = open_pod(&agent, state, vm_name)?;
    let records = call.records(&pod)?;
    let dropped = drop_attachments(&agent, &mut pod, &records);
    close(pod)?;
    dropped
}

/// Deletes the records' veths (by host name: it works when the netns is gone) and releases
/// the records whose veth is gone. A veth that cannot be deleted keeps its record, for the
/// next DEL; the first such failure is returned, every one logged.
pub fn drop_attachments(agent: &Agent, pod: &mut PodDir, records: &[Record]) -> Result<()> {
    if records.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = records.iter().map(|r| r.host_ifname.as_str()).collect();
    let failed = Socket::host()?.delete_links(&names);
    crate::crash::point("unlinked");
    let gone: Vec<Record> = records
        .iter()
        .filter(|r| !failed.iter().any(|(name, _)| *name == r.host_ifname))
        .cloned()
        .collect();
    release(agent, pod, &gone)?;
    for (name, e) in &failed {
        log::warn!("could not delete {name}: {e}");
    }
    match failed.into_iter().next() {
        Some((_, e)) => Err(e.into()),
        None => Ok(()),
    }
}

/// CHECK: each attachment of the call is as ADD left it, and the agent still has it.
pub fn check(call: &mut Call) -> Result<()> {
    let missing = |call: &Call| {
        let on = call
            .ifname()
            .map(|i| format!(" interface {i}"))
            .unwrap_or_default();
        Error::Check(format!(
            "no attachment is recorded for container {}{on}",
            call.env.container_id
        ))
    };
    let (state, vm_name) = call.locate()?.ok_or_else(|| missing(call))?;
    if !state
        .has_pod(&vm_name)
        .map_err(Error::io("reading", state.path()))?
    {
        return Err(missing(call));
    }
    let agent = Agent::new(&call.conf.contrail);
    let records = {
        let pod = open_pod(&agent, &state, &vm_name)?;
        let records = call.records(&pod)?;
        close(pod)?;
        records
    };
    if records.is_empty() {
        return Err(missing(call));
    }
    let netns = open_netns(&call.env.netns)?;
    let (mut host, mut ctr) = (Socket::host()?, Socket::open(&netns)?);
    records
        .iter()
        .try_for_each(|r| verify(&agent, call.conf, &mut host, &mut ctr, r))
}

/// The state record of one attachment: the agent's POST /vm body plus ours.
fn record(env: &Env, vm_name: &str, w: &Wanted) -> Record {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let vmi = w.vmi;
    Record {
        time: format!("{}.{:03}", t.as_secs(), t.subsec_millis()),
        container_id: env.container_id.clone(),
        vm_uuid: vmi.vm_uuid.clone(),
        vm_name: vm_name.to_string(),
        host_ifname: vmi::host_ifname(&vmi.uuid),
        ifname: w.ifname.clone(),
        netns: env.netns.clone(),
        vn_uuid: vmi.vn_uuid.clone(),
        vmi_uuid: vmi.uuid.clone(),
        state_version: STATE_VERSION.to_string(),
        network: vmi.network.clone(),
        mac: vmi.mac.to_string(),
        default_gw: w.default_gw,
    }
}

/// The registration body of a record.
fn port(record: &Record) -> Result<Value> {
    serde_json::to_value(record).map_err(|e| Error::Internal(e.to_string()))
}

/// Removes records from the (locked) pod directory and brings the agent in line: the marker
/// first, so that a registration is never left without a file that explains it, then the
/// files, then [`settle`]. The agent part is best effort: when it fails, the marker stays and
/// the next call for the pod, or GC, finishes it.
pub fn release(agent: &Agent, pod: &mut PodDir, gone: &[Record]) -> Result<()> {
    let Some(first) = gone.first() else {
        return Ok(());
    };
    pod.mark_resync(&first.vm_uuid)
        .map_err(Error::io("writing state in", pod.path()))?;
    crate::crash::point("marked");
    for r in gone {
        pod.remove(&r.vmi_uuid)
            .map_err(Error::io("removing state in", pod.path()))?;
    }
    crate::crash::point("forgotten");
    settle(agent, pod, &first.vm_uuid);
    Ok(())
}

/// Makes the agent's registrations for the pod exactly its files' (see [`Agent::resync`]) and
/// clears the marker; on failure the marker stays.
fn settle(agent: &Agent, pod: &PodDir, vm_uuid: &str) {
    let done = pod
        .ports()
        .map_err(Error::io("reading", pod.path()))
        .and_then(|ports| agent.resync(vm_uuid, &ports))
        .and_then(|()| {
            pod.clear_resync()
                .map_err(Error::io("removing the resync marker in", pod.path()))
        });
    if let Err(e) = done {
        log::warn!(
            "pod {} left registered with the agent beyond its attachments; the next call for \
             the pod or GC retries: {e}",
            pod.path().display()
        );
    }
}

/// Fails with code 102, before anything is created, when one of `ifnames` exists in the pod:
/// another attachment owns that name.
fn check_free(ctr: &mut Socket, netns: &Netns, ifnames: &[&str]) -> Result<()> {
    for name in ifnames {
        if ctr.link(name)?.is_some() {
            return Err(Error::Interface(format!(
                "interface {name} already exists in {}; another attachment owns that name",
                netns.path().display()
            )));
        }
    }
    Ok(())
}

/// Everything needed to build one interface: plain data, decided before any effect.
#[derive(Debug, Clone)]
struct Plan<'a> {
    host_ifname: &'a str,
    ifname: &'a str,
    netns_path: &'a str,
    mac: Mac,
    mtu: u32,
    ip: &'a IpConfig,
    /// Whether this interface carries the pod's default route.
    default_route: bool,
}

fn plan<'a>(conf: &NetConf, record: &'a Record, ip: &'a IpConfig) -> Plan<'a> {
    Plan {
        host_ifname: &record.host_ifname,
        ifname: &record.ifname,
        netns_path: &record.netns,
        // Files the agent wrote for another plugin carry no MAC: the agent's is the truth.
        mac: Mac::parse(&record.mac).unwrap_or(ip.mac),
        mtu: conf.contrail.mtu,
        ip,
        default_route: record.default_gw,
    }
}

/// An IPv6 network must carry at least 1280 bytes; say so before creating anything rather
/// than fail later with a bare EINVAL.
fn check_mtu(plan: &Plan) -> Result<()> {
    if plan.ip.v6.is_some() && plan.mtu < 1280 {
        return Err(Error::config(
            "contrail.mtu",
            format!(
                "{} is below 1280, the IPv6 minimum, and interface {} gets an IPv6 address",
                plan.mtu, plan.ifname
            ),
        ));
    }
    Ok(())
}

/// The routes a plan installs in the container: an on-link host route to each gateway outside
/// its address's prefix (an IPv6 /128 always), then the default routes if this interface
/// carries them.
fn routes(plan: &Plan) -> (Vec<cni::Route>, Vec<cni::Route>) {
    let gateways: Vec<(IpNetwork, IpAddr)> = [
        plan.ip
            .v4
            .map(IpNetwork::V4)
            .zip(plan.ip.v4_gateway.map(IpAddr::V4)),
        plan.ip
            .v6
            .map(IpNetwork::V6)
            .zip(plan.ip.v6_gateway.map(IpAddr::V6)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let on_link = gateways
        .iter()
        .filter(|(net, gw)| !net.contains(*gw))
        .map(|(_, gw)| cni::Route {
            dst: IpNetwork::from(*gw),
            gw: None,
        })
        .collect();
    let default = if plan.default_route {
        gateways
            .iter()
            .map(|(_, gw)| {
                let dst = if gw.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
                cni::Route {
                    dst: dst.parse().expect("literal prefix"),
                    gw: Some(*gw),
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    (on_link, default)
}

/// Creates the VMI's veth: the host end by its derived name, the container end directly in the
/// pod's netns with the VMI's MAC; the host end up.
fn create_veth(
    host: &mut Socket,
    state: &StateDir,
    mtu: u32,
    record: &Record,
    netns: &Netns,
) -> Result<()> {
    let mac = Mac::parse(&record.mac).ok_or_else(|| {
        Error::Internal(format!(
            "state record of VMI {} has no MAC",
            record.vmi_uuid
        ))
    })?;
    let host_end = VethEnd {
        name: &record.host_ifname,
        mac: None,
        mtu,
    };
    let peer = VethEnd {
        name: &record.ifname,
        mac: Some(mac.0),
        mtu,
    };
    match host.create_veth(&host_end, &peer, netns) {
        // The host name is derived from the VMI this pod now holds: a veth of that name that no
        // other pod's state names is a leftover of an earlier sandbox or of a crashed ADD
        // whose DEL never came. Replace it; anything else is left alone.
        Err(e) if e.is_exists() => {
            let name = &record.host_ifname;
            let holder = state
                .other_holder(name, &record.vm_name)
                .map_err(Error::io("reading", state.path()))?;
            if let Some(other) = holder {
                return Err(Error::Interface(format!(
                    "host interface {name} is an attachment of pod {other}: not replacing it"
                )));
            }
            if host
                .link(name)?
                .is_some_and(|l| l.kind.as_deref() != Some("veth"))
            {
                return Err(Error::Interface(format!(
                    "host interface {name} exists and is not a veth: not replacing it"
                )));
            }
            log::info!("replacing leftover host interface {name}");
            host.delete_link(name)?;
            host.create_veth(&host_end, &peer, netns)
        }
        other => other,
    }?;
    Ok(())
}

fn vanished(name: &str) -> Error {
    Error::Interface(format!("interface {name} vanished right after creation"))
}

/// Configures a created, registered interface with the agent's IP configuration: container
/// end up, addresses, routes; the outcome for the result.
fn configure(host: &mut Socket, ctr: &mut Socket, plan: &Plan) -> Result<Outcome> {
    check_mtu(plan)?;
    let link = ctr
        .link(plan.ifname)?
        .ok_or_else(|| vanished(plan.ifname))?;
    ctr.set_up(link.index)?;
    let addresses = plan.ip.addresses();
    for addr in &addresses {
        ctr.add_addr(link.index, *addr)?;
    }
    let (on_link, mut default) = routes(plan);
    // A network attached twice has one gateway for both interfaces: each gets its own host
    // route to it, appended next to the other's rather than refused as a duplicate.
    for r in &on_link {
        ctr.append_route(&Route {
            dst: r.dst,
            gateway: None,
            oif: Some(link.index),
        })?;
    }
    // Another plugin's interface (the cluster network under CNI-Genie, say) may already carry
    // the pod's default route: it stays theirs, and ours is left out of the result.
    let mut taken = Vec::new();
    for r in &default {
        if let Some(oif) = other_default(ctr, r.dst, link.index)? {
            log::info!(
                "{}: the pod's {} default route is on interface #{oif} already: leaving it",
                plan.ifname,
                r.dst
            );
            taken.push(r.dst);
        }
    }
    default.retain(|r| !taken.contains(&r.dst));
    for r in &default {
        ctr.add_route(&Route {
            dst: r.dst,
            gateway: r.gw,
            oif: Some(link.index),
        })?;
    }
    let host_link = host
        .link(plan.host_ifname)?
        .ok_or_else(|| vanished(plan.host_ifname))?;
    let ips = addresses
        .iter()
        .map(|a| cni::IpConfig {
            address: *a,
            gateway: match a {
                IpNetwork::V4(_) => plan.ip.v4_gateway.map(IpAddr::V4),
                IpNetwork::V6(_) => plan.ip.v6_gateway.map(IpAddr::V6),
            },
            interface: 1,
        })
        .collect();
    Ok(Outcome {
        interfaces: vec![
            Interface {
                name: plan.host_ifname.to_string(),
                mac: host_link
                    .mac
                    .map(|m| Mac(m).to_string())
                    .unwrap_or_default(),
                mtu: plan.mtu,
                sandbox: None,
            },
            Interface {
                name: plan.ifname.to_string(),
                mac: plan.mac.to_string(),
                mtu: plan.mtu,
                sandbox: Some(plan.netns_path.to_string()),
            },
        ],
        ips,
        routes: default,
        nameservers: plan.ip.nameservers(),
    })
}

/// The interface index of a default route of `dst`'s family on another interface than ours.
fn other_default(ctr: &mut Socket, dst: IpNetwork, ours: u32) -> Result<Option<u32>> {
    let routes = ctr.routes(dst.is_ipv6())?;
    Ok(routes
        .iter()
        .filter(|r| r.dst == dst)
        .filter_map(|r| r.oif)
        .find(|oif| *oif != ours))
}

/// CHECK of one attachment: the agent still has the port under our host name with its IP
/// configuration, and the interfaces are as ADD left them.
fn verify(
    agent: &Agent,
    conf: &NetConf,
    host: &mut Socket,
    ctr: &mut Socket,
    record: &Record,
) -> Result<()> {
    // A busy agent is asked again within the call's deadline; a 404 is the answer.
    let ip = agent
        .poll(
            &format!("the IP configuration of VMI {}", record.vmi_uuid),
            |agent, t| {
                agent
                    .ip_config(&record.vm_uuid, &record.vmi_uuid, t)
                    .map(Poll::Ready)
            },
        )?
        .ok_or_else(|| {
            Error::Check(format!(
                "the agent has no IP configuration for VMI {} of pod {}, which this node \
                 registered as {}: the agent lost the port or its network has no IPAM",
                record.vmi_uuid, record.vm_name, record.host_ifname
            ))
        })?;
    if ip.registered_as.as_deref() != Some(record.host_ifname.as_str()) {
        return Err(Error::Check(format!(
            "the agent has VMI {} registered as {:?}, not {}",
            record.vmi_uuid,
            ip.registered_as.as_deref().unwrap_or("nothing"),
            record.host_ifname
        )));
    }
    check_interfaces(host, ctr, &plan(conf, record, &ip))
}

/// Verifies that the container still has what [`configure`] made.
fn check_interfaces(host: &mut Socket, ctr: &mut Socket, plan: &Plan) -> Result<()> {
    let fail = |what: String| Error::Check(what);
    let link = ctr.link(plan.ifname)?.ok_or_else(|| {
        fail(format!(
            "interface {} is missing from {}",
            plan.ifname, plan.netns_path
        ))
    })?;
    if link.mac != Some(plan.mac.0) {
        let has = link.mac.map(|m| Mac(m).to_string()).unwrap_or_default();
        return Err(fail(format!(
            "interface {} has MAC {has}, the agent says {}",
            plan.ifname, plan.mac
        )));
    }
    if !link.up {
        return Err(fail(format!("interface {} is down", plan.ifname)));
    }
    let have = ctr.addrs(link.index)?;
    for want in plan.ip.addresses() {
        if !have.contains(&want) {
            return Err(fail(format!(
                "interface {} lacks address {want}",
                plan.ifname
            )));
        }
    }
    let (on_link, default) = routes(plan);
    for want in &on_link {
        let found = ctr
            .routes(want.dst.is_ipv6())?
            .iter()
            .any(|r| r.dst == want.dst && r.gateway.is_none() && r.oif == Some(link.index));
        if !found {
            return Err(fail(format!(
                "the route to gateway {} on {} is missing",
                want.dst.ip(),
                plan.ifname
            )));
        }
    }
    for want in default {
        let routes = ctr.routes(want.dst.is_ipv6())?;
        let ours = routes
            .iter()
            .any(|r| r.dst == want.dst && r.gateway == want.gw && r.oif == Some(link.index));
        if !ours && other_default(ctr, want.dst, link.index)?.is_none() {
            return Err(fail(format!(
                "the default route via {} on {} is missing",
                want.gw.map(|g| g.to_string()).unwrap_or_default(),
                plan.ifname
            )));
        }
    }
    if host.link(plan.host_ifname)?.is_none() {
        return Err(fail(format!(
            "host interface {} is missing",
            plan.host_ifname
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(v4: Option<&str>, v4gw: Option<&str>, v6: Option<&str>, v6gw: Option<&str>) -> IpConfig {
        IpConfig {
            v4: v4.map(|s| s.parse().unwrap()),
            v4_gateway: v4gw.map(|s| s.parse().unwrap()),
            v4_dns: None,
            v6: v6.map(|s| s.parse().unwrap()),
            v6_gateway: v6gw.map(|s| s.parse().unwrap()),
            v6_dns: None,
            mac: Mac([2, 0, 0, 0, 0, 1]),
            registered_as: None,
        }
    }

    fn plan<'a>(ip: &'a IpConfig, default_route: bool, mtu: u32) -> Plan<'a> {
        Plan {
            host_ifname: "tap000000000000",
            ifname: "net1",
            netns_path: "/run/netns/x",
            mac: Mac([2, 0, 0, 0, 0, 1]),
            mtu,
            ip,
            default_route,
        }
    }

    #[test]
    fn secondary_network_gets_no_default_route() {
        let ip = ip(Some("10.1.0.3/24"), Some("10.1.0.1"), None, None);
        let (on_link, default) = routes(&plan(&ip, false, 1500));
        assert!(on_link.is_empty());
        assert!(default.is_empty());
    }

    #[test]
    fn default_gw_interface_gets_both_families() {
        let ip = ip(
            Some("10.1.0.3/24"),
            Some("10.1.0.1"),
            Some("fd00::3/128"),
            Some("fd00::1"),
        );
        let (on_link, default) = routes(&plan(&ip, true, 1500));
        // A /128 never contains its gateway: reach it on-link.
        assert_eq!(
            on_link,
            vec![cni::Route {
                dst: "fd00::1/128".parse().unwrap(),
                gw: None
            }]
        );
        assert_eq!(default.len(), 2);
        assert_eq!(default[0].dst.to_string(), "0.0.0.0/0");
        assert_eq!(default[1].dst.to_string(), "::/0");
        assert_eq!(default[1].gw, Some("fd00::1".parse().unwrap()));
    }

    #[test]
    fn v6_with_prefix_and_v4_host_route() {
        let ip = ip(
            Some("10.1.0.3/32"),
            Some("10.1.0.1"),
            Some("fd00::3/64"),
            Some("fd00::1"),
        );
        let (on_link, _) = routes(&plan(&ip, false, 1500));
        assert_eq!(
            on_link,
            vec![cni::Route {
                dst: "10.1.0.1/32".parse().unwrap(),
                gw: None
            }]
        );
    }

    #[test]
    fn v6_needs_1280() {
        let v6 = ip(None, None, Some("fd00::3/64"), None);
        assert_eq!(
            check_mtu(&plan(&v6, false, 1279)).unwrap_err().code(),
            crate::error::code::INVALID_CONFIG
        );
        assert!(check_mtu(&plan(&v6, false, 1280)).is_ok());
        let v4 = ip(Some("10.1.0.3/24"), None, None, None);
        assert!(check_mtu(&plan(&v4, false, 576)).is_ok());
    }
}
