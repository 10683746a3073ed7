//! The vRouter agent's port-IPC REST API at the node's address: a thin client around `vmi`'s
//! parsers, and polling within one bounded total wait that a DEL of the attachment can end.

pub(crate) mod budget;
pub(crate) mod http;
pub(crate) mod wait;

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

pub(crate) use crate::agent::budget::Class;
use crate::agent::budget::{Budget, NoTurn};
use crate::cni::pod::Pod;
use crate::config::Contrail;
use crate::crash::{self, Step};
use crate::error::{AgentFault, Error, LastPoll, Result};
use crate::ids::{VmName, VmUuid, VmiUuid};
use crate::state::ledger::seal::Seal;
use crate::vmi::{self, IpConfig, Malformed, Vmi};

pub use http::{Failure, HttpViolation, Method, Request, TransportError};
pub use wait::{Awaited, Pending};

/// The request `method path`, as errors name it.
fn request(method: Method, path: &str) -> Request {
    Request {
        method,
        path: path.to_string(),
    }
}

/// The first polls come 5 and 15 ms after the first one, so that an agent ready within
/// milliseconds is seen within milliseconds; then one every [`POLL_PERIOD`], so that one that
/// takes seconds is seen within 21 ms of becoming ready (10.5 ms on average). Periods count from
/// one poll's start to the next, so a slow answer does not stretch them, and they never get
/// shorter whatever poll-timeout says: with the two early polls, a call that waits a second
/// makes under 50 requests a second, since the agent is one process serving every pod of the
/// node.
const EARLY_POLL_PAUSES: [Duration; 2] = [Duration::from_millis(5), Duration::from_millis(10)];
pub const POLL_PERIOD: Duration = Duration::from_millis(21);
/// The shortest time worth giving one request near the end of the wait.
const MIN_ATTEMPT: Duration = Duration::from_millis(50);
/// Answers are a few hundred bytes; anything this large is not the agent.
const MAX_BODY: usize = 1 << 20;

/// Time this process spent in [`Agent::poll`]: one CNI call per process, so it is the call's.
static WAITED_NS: AtomicU64 = AtomicU64::new(0);
/// Requests this process sent to the agent, and the time it waited for their turns in the
/// node's budget.
static SENT: AtomicU64 = AtomicU64::new(0);
static TURNS_NS: AtomicU64 = AtomicU64::new(0);

/// How long this call has waited for the agent: its requests and the pauses between polls.
pub fn waited() -> Duration {
    Duration::from_nanos(WAITED_NS.load(Ordering::Relaxed))
}

/// How many requests this call sent to the agent, and how long it waited for their turns in
/// the node's request budget.
pub fn sent() -> (u64, Duration) {
    (
        SENT.load(Ordering::Relaxed),
        Duration::from_nanos(TURNS_NS.load(Ordering::Relaxed)),
    )
}

fn add_ns(counter: &AtomicU64, d: Duration) {
    counter.fetch_add(
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
}

pub struct Agent {
    /// One per call: the connection it keeps alive serves the call's requests in turn.
    http: http::Client,
    poll_timeout: Duration,
    /// When the client was made, at the start of the invocation.
    start: Instant,
    /// The end of the invocation's whole wait for the agent (poll-timeout x poll-retries after
    /// `start`), shared by all its waits, so that a slow pod, a slow IP and a slow registration
    /// do not add up to three times what the config allows (and outlast the runtime's timeout).
    deadline: Instant,
    /// Asked between polls: true when the wait must end (a DEL of the attachment came).
    stop: Option<Box<dyn Fn() -> bool>>,
    /// The node's request budget, shared with every other call on the node.
    budget: Budget,
    rate: u32,
}

/// How the agent comes to hold an attachment's port, and how it lets go of it: each kind of
/// attachment has one (`kernel::links::Kind::registration`), and the ledger keeps the agent's
/// registrations in line with the state files by it, never by the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Registration {
    /// `POST /vm` with the record. The agent drops a pod's ports only all together
    /// (`DELETE /vm/<vm-uuid>`): the ones that stay are registered again.
    ByVm,
    /// `POST /port` (the Nova route, docs/vhost-user.md), dropped alone (`DELETE
    /// /port/<vmi>`); a `/vm` resync neither drops nor registers it again.
    ByPort,
    /// Not by this node: the hypervisor's agent makes a nested VMI's port from its config alone
    /// (a registration would turn it into a tap on the hypervisor, which does not exist), and
    /// names it after the VMI.
    Elsewhere,
}

impl Registration {
    /// Whether this node registers the port, so that the agent knows it by the name it was
    /// registered with and a release must drop it.
    pub(crate) fn by_this_node(self) -> bool {
        self != Registration::Elsewhere
    }
}

/// One poll's outcome: the answer, or why it is not there yet.
pub enum Poll<T> {
    Ready(T),
    NotYet(Pending),
}

impl Agent {
    /// A client for a call that started at `start`: its every wait ends by `start` +
    /// poll-timeout x poll-retries.
    pub fn new(conf: &Contrail, start: Instant) -> Agent {
        let addr = std::net::SocketAddr::new(conf.vrouter_ip, conf.vrouter_port);
        let connect = conf.poll_timeout.min(Duration::from_secs(1));
        let http = http::Client::new(addr, connect, MAX_BODY);
        Agent {
            http,
            poll_timeout: conf.poll_timeout,
            start,
            deadline: start + conf.poll_budget(),
            stop: None,
            budget: Budget::new(&conf.config_dir, conf.agent_rate),
            rate: conf.agent_rate,
        }
    }

    /// When the call's every wait ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// When the call started.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// The error for pod `vm_name`'s VMIs that this node cannot take as the agent sent them.
    pub(crate) fn refused_pod(&self, vm_name: &VmName, why: Malformed) -> Error {
        self.refused(Method::Get, &format!("/vm-cfg/{vm_name}"), why)
    }

    /// Every wait of this client ends, between two polls, once `stop` says so.
    pub fn stop_when(mut self, stop: impl Fn() -> bool + 'static) -> Agent {
        self.stop = Some(Box::new(stop));
        self
    }

    /// An error of the request `method path`.
    fn fault(&self, method: Method, path: &str, fault: AgentFault) -> Error {
        Error::Agent {
            agent: self.http.base().to_string(),
            request: request(method, path),
            fault,
        }
    }

    /// Waits for the turn of a request of `class` in the node's budget (see
    /// [`crate::agent::budget`]). The time left for the request itself after the wait: within
    /// the call's deadline, as the request's own timeout allows.
    fn turn(
        &self,
        class: Class,
        method: Method,
        path: &str,
        timeout: Duration,
    ) -> Result<Duration> {
        let stop = || self.stop.as_ref().is_some_and(|stop| stop());
        let request = || request(method, path);
        match self.budget.turn(class, self.deadline, &stop) {
            Ok(waited) => {
                SENT.fetch_add(1, Ordering::Relaxed);
                add_ns(&TURNS_NS, waited);
                let left = self.deadline.saturating_duration_since(Instant::now());
                Ok(timeout.min(left).max(self.poll_timeout.min(MIN_ATTEMPT)))
            }
            Err(NoTurn::Stopped) => Err(Error::Abandoned {
                what: Awaited::Turn(request()),
            }),
            Err(NoTurn::Exhausted { ahead }) => Err(Error::NoTurn {
                request: request(),
                rate: self.rate,
                ahead,
                waited: self.start.elapsed(),
            }),
        }
    }

    /// One request, in its turn of `class`; `Ok(None)` on 404. Transport failures, answers that
    /// break HTTP and other statuses are errors naming the agent and the request; only the
    /// status code counts (the agent's status lines all read "OK" and its error bodies carry
    /// nothing a client needs).
    fn request(
        &self,
        class: Class,
        method: Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Option<Vec<u8>>> {
        // Paths are built from validated identifiers only; one that is no URL path would put
        // its bytes into the request line: never sent, never retried.
        if !http::is_path(path) {
            log::error!("refusing to send {method} {path:?} to the agent: not a URL path");
            return Err(Error::Internal);
        }
        let body = body.map(|b| serde_json::to_vec(b).unwrap_or_default());
        let timeout = self.turn(class, method, path, timeout)?;
        let answer = self
            .http
            .send(method, path, body.as_deref(), timeout)
            .map_err(|failure| self.fault(method, path, failure.into()))?;
        match answer.status {
            200 => Ok(Some(answer.body)),
            404 => Ok(None),
            status => Err(self.fault(method, path, AgentFault::Status(status))),
        }
    }

    /// Polls `attempt` until it is ready, 5 ms, 10 ms, then 21 ms apart, for at most
    /// poll-timeout x poll-retries in all. Only transient errors are retried: garbage does not
    /// get better by asking again.
    pub fn poll<T>(
        &self,
        what: Awaited,
        attempt: impl FnMut(&Agent, Duration) -> Result<Poll<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = self.poll_until_deadline(what, attempt);
        add_ns(&WAITED_NS, started.elapsed());
        result
    }

    fn poll_until_deadline<T>(
        &self,
        what: Awaited,
        mut attempt: impl FnMut(&Agent, Duration) -> Result<Poll<T>>,
    ) -> Result<T> {
        let deadline = self.deadline;
        let mut last;
        let mut polled = 0;
        loop {
            let attempt_started = Instant::now();
            // Even a wait that starts at the deadline makes one attempt worth making.
            let left = deadline.saturating_duration_since(attempt_started);
            match attempt(
                self,
                left.min(self.poll_timeout)
                    .max(self.poll_timeout.min(MIN_ATTEMPT)),
            ) {
                Ok(Poll::Ready(t)) => return Ok(t),
                Ok(Poll::NotYet(why)) => last = LastPoll::NotYet(why),
                Err(e) if e.is_transient() => last = LastPoll::Failed(Box::new(e)),
                Err(e) => return Err(e),
            }
            if self.stop.as_ref().is_some_and(|stop| stop()) {
                return Err(Error::Abandoned { what });
            }
            let pause = EARLY_POLL_PAUSES
                .get(polled)
                .copied()
                .unwrap_or(POLL_PERIOD)
                .saturating_sub(attempt_started.elapsed());
            polled += 1;
            // Give up rather than start an attempt too short to get an answer: its timeout
            // would replace the informative error of the attempts before it.
            let left = deadline.saturating_duration_since(Instant::now());
            if left < pause + self.poll_timeout.min(MIN_ATTEMPT) {
                return Err(Error::TimedOut {
                    waited: self.start.elapsed(),
                    what,
                    last,
                });
            }
            thread::sleep(pause);
        }
    }

    /// `GET /vm-cfg/<vm-name>` until the pod has all N of its VMIs, the first look ahead of
    /// polls (it starts the ADD), the next ones polls. An answer that is not the pod's (a VMI
    /// annotated for another pod, VMIs of several VMs) is refused at once.
    pub fn wait_for_pod(&self, pod: &Pod, vm_name: &VmName) -> Result<Vec<Vmi>> {
        let path = format!("/vm-cfg/{vm_name}");
        let mut class = Class::Ahead;
        self.poll(
            Awaited::PodInterfaces {
                vm_name: vm_name.clone(),
            },
            |agent, timeout| {
                let answer = agent.pod_config(class, vm_name, timeout)?;
                class = Class::Poll;
                let Some(vmis) = answer else {
                    return Ok(Poll::NotYet(Pending::PodUnknown {
                        vm_name: vm_name.clone(),
                    }));
                };
                let refused =
                    |why| agent.fault(Method::Get, &path, AgentFault::Refused(Box::new(why)));
                vmi::check_owner(&vmis, &pod.namespace, &pod.name).map_err(refused)?;
                if vmi::complete(&vmis).map_err(refused)? {
                    for v in &vmis {
                        if let Some((key, value)) = &v.ignored {
                            log::warn!(
                                "VMI {}: ignoring its {key} annotation {}: neither true/yes/1 \
                                 nor false/no/0",
                                v.uuid,
                                crate::text::Shown(value)
                            );
                        }
                    }
                    return Ok(Poll::Ready(vmis));
                }
                let n = vmis.first().map_or(0, |v| v.count);
                Ok(Poll::NotYet(Pending::SomeKnown {
                    vm_name: vm_name.clone(),
                    known: vmis.len(),
                    of: n,
                }))
            },
        )
    }

    /// `GET /vm-cfg/<vm-name>` once, in a turn of `class`: the VMIs the agent knows for the
    /// pod, `None` for none.
    pub(crate) fn pod_config(
        &self,
        class: Class,
        vm_name: &VmName,
        timeout: Duration,
    ) -> Result<Option<Vec<Vmi>>> {
        let path = format!("/vm-cfg/{vm_name}");
        self.request(class, Method::Get, &path, None, timeout)?
            .map(|body| vmi::parse_cfg(&body).map_err(|e| self.refused(Method::Get, &path, e)))
            .transpose()
    }

    /// `GET /vm/<vm-uuid>/<vmi-uuid>` once, in a turn of `class`: `Ok(None)` while the agent
    /// has no IP config (the VMI is not registered, or its network has no IPAM).
    pub(crate) fn ip_config(
        &self,
        class: Class,
        vm_uuid: &VmUuid,
        vmi_uuid: &VmiUuid,
        timeout: Duration,
    ) -> Result<Option<IpConfig>> {
        let path = format!("/vm/{vm_uuid}/{vmi_uuid}");
        self.request(class, Method::Get, &path, None, timeout)?
            .map(|body| {
                vmi::parse_ip(&body, vm_uuid.as_str(), vmi_uuid.as_str())
                    .map_err(|e| self.refused(Method::Get, &path, e))
            })
            .transpose()
    }

    /// An answer the parsers refused, with the agent and the request it answered, so that an
    /// operator knows where to look.
    fn refused(&self, method: Method, path: &str, e: Malformed) -> Error {
        self.fault(method, path, AgentFault::Refused(Box::new(e)))
    }

    /// Polls until the agent has the IP configuration of every VMI in `vmis` (of pod `vm_uuid`),
    /// which must be registered already (just now): the agent has none before. One request a
    /// poll, for the first VMI not ready yet; the ones after it are asked for at once when it
    /// is, so that a failure names the VMI that never got ready. How long the first took is
    /// the node's to know (it paces the node's polls: [`budget`]).
    pub fn wait_for_ips(&self, vm_uuid: &VmUuid, vmis: &[&VmiUuid]) -> Result<Vec<IpConfig>> {
        let what = match vmis {
            [one] => Awaited::Ip {
                vmi: VmiUuid::clone(one),
            },
            _ => Awaited::Ips {
                count: vmis.len(),
                vm_uuid: vm_uuid.clone(),
            },
        };
        let mut ready = Vec::with_capacity(vmis.len());
        let since = Instant::now();
        self.poll(what, |agent, timeout| {
            while let Some(vmi) = vmis.get(ready.len()) {
                let Some(ip) = agent.ip_config(Class::Ip { since }, vm_uuid, vmi, timeout)? else {
                    crash::point(Step::Waiting);
                    return Ok(Poll::NotYet(Pending::NoIp {
                        vm_uuid: vm_uuid.clone(),
                        vmi: VmiUuid::clone(vmi),
                    }));
                };
                if ready.is_empty() {
                    agent.budget.answered(since.elapsed());
                }
                ready.push(ip);
            }
            Ok(Poll::Ready(std::mem::take(&mut ready)))
        })
    }

    /// Whether the agent reports a host interface for a VMI whose port this node registers as
    /// `how` says (one it never registers, never). One quick look, no waiting, ahead of polls
    /// (it comes before the ADD's registration): used only to tell repeated attachments of one
    /// network apart. Within the invocation's deadline: a VMI the agent does not answer for in
    /// time counts as unregistered.
    pub(crate) fn is_registered(
        &self,
        how: Registration,
        vm_uuid: &VmUuid,
        vmi_uuid: &VmiUuid,
    ) -> bool {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let t = left.min(self.poll_timeout);
        how.by_this_node()
            && !t.is_zero()
            && matches!(self.ip_config(Class::Ahead, vm_uuid, vmi_uuid, t), Ok(Some(ip)) if ip.registered_as.is_some())
    }

    /// `POST /vm`: registers a port (a state record, the agent's POST body), retried within the
    /// call's deadline. Registering a VMI again updates its registration.
    pub(crate) fn register(&self, _: &Seal, port: &Value) -> Result<()> {
        let field = |k: &str| port.get(k).and_then(Value::as_str).unwrap_or("?");
        self.poll(
            Awaited::Port {
                ifname: field("host-ifname").to_string(),
                vmi: field("vmi-uuid").to_string(),
            },
            |agent, t| {
                Ok(
                    match agent.request(Class::Registration, Method::Post, "/vm", Some(port), t)? {
                        Some(_) => Poll::Ready(()),
                        None => Poll::NotYet(Pending::NotAccepted),
                    },
                )
            },
        )
    }

    /// `POST /port` (the Nova route; docs/vhost-user.md): registers a port whose transport the
    /// agent fixes by its own mode, a PMD (vhost-user) port on a DPDK vRouter. `body` is
    /// [`crate::state::Record::port_body`]. Retried within the call's deadline; registering a
    /// VMI again updates its registration.
    pub(crate) fn register_port(&self, _: &Seal, body: &Value) -> Result<()> {
        let field = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or("?");
        self.poll(
            Awaited::Port {
                ifname: field("system-name").to_string(),
                vmi: field("id").to_string(),
            },
            |agent, t| {
                Ok(
                    match agent.request(
                        Class::Registration,
                        Method::Post,
                        "/port",
                        Some(body),
                        t,
                    )? {
                        Some(_) => Poll::Ready(()),
                        None => Poll::NotYet(Pending::NotAccepted),
                    },
                )
            },
        )
    }

    /// `DELETE /port/<vmi>`: drops one `POST /port` port (`DELETE /vm/<vm-uuid>` does not touch
    /// these). A 404 is done: the agent does not have it. Retried within the call's deadline.
    pub(crate) fn deregister_port(&self, _: &Seal, vmi_uuid: &VmiUuid) -> Result<()> {
        let path = format!("/port/{vmi_uuid}");
        self.poll(
            Awaited::PortDropped {
                vmi: vmi_uuid.clone(),
            },
            |agent, t| {
                agent.request(Class::Ahead, Method::Delete, &path, None, t)?;
                Ok(Poll::Ready(()))
            },
        )?;
        crash::point(Step::Deregistered);
        Ok(())
    }

    /// Makes the agent's registrations for pod `vm_uuid` exactly its ports among `ports`. The
    /// agent has no per-VMI delete: `DELETE /vm/<vm-uuid>` drops every port of the pod, then the
    /// ones that stay are registered again; a port of another VM is never sent. Both retried
    /// within the call's deadline.
    pub(crate) fn resync(&self, seal: &Seal, vm_uuid: &VmUuid, ports: &[Value]) -> Result<()> {
        let path = format!("/vm/{vm_uuid}");
        self.poll(
            Awaited::PortsDropped {
                vm_uuid: vm_uuid.clone(),
            },
            |agent, t| {
                agent.request(Class::Ahead, Method::Delete, &path, None, t)?;
                Ok(Poll::Ready(()))
            },
        )?;
        crash::point(Step::Deregistered);
        ports
            .iter()
            .filter(|p| p.get("vm-uuid").and_then(Value::as_str) == Some(vm_uuid.as_str()))
            .try_for_each(|p| self.register(seal, p))
    }

    /// STATUS: whether the agent answers at all (any HTTP status will do; 404 is what an
    /// unknown VM name gets). Code 50 when it does not.
    pub fn reachable(&self) -> Result<()> {
        let path = "/vm-cfg/contrail-k8s-cni-status";
        let t = self.turn(
            Class::Poll,
            Method::Get,
            path,
            self.poll_timeout.min(Duration::from_secs(2)),
        )?;
        match self.http.send(Method::Get, path, None, t) {
            Ok(_) => Ok(()),
            Err(why) => Err(Error::Unavailable {
                agent: self.http.base().to_string(),
                why,
            }),
        }
    }
}
