//! Crash injection for tests (feature `crash-points`): the process kills itself with SIGKILL at
//! the step named by `CONTRAIL_CNI_CRASH_AT`, as a node losing power or an OOM kill would. In a
//! normal build every point compiles to nothing. A name that is no [`Step`] fails the call at
//! its start, so that a test naming a step that does not exist (or no longer does) fails
//! instead of passing without a crash.

/// A step of ADD, or of a release (DEL, GC, the sweep), where a test may kill the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// A call holds the pod's lock, and has read or written nothing of the pod yet.
    Locked,
    /// A state file written under its temporary name, not yet renamed into place.
    Renaming,
    /// ADD: the attachment's claim recorded.
    Claimed,
    /// ADD: the veth (or the nested node's interface) made.
    Veth,
    /// ADD: the vhost-user socket's directory made in the pod's directory.
    VhostDir,
    /// ADD: the port registered with the agent.
    Registered,
    /// ADD: waiting for the IP configuration, after a first "not yet".
    Waiting,
    /// ADD: the IP configuration received.
    Ip,
    /// ADD: the addresses and routes set.
    Addressed,
    /// Release: the interfaces gone.
    Unlinked,
    /// Release: the released files renamed to their pending names.
    Marked,
    /// Release: the pod's ports dropped by the agent, the others not yet registered again.
    Deregistered,
}

impl Step {
    #[cfg(feature = "crash-points")]
    const ALL: [Step; 12] = [
        Step::Locked,
        Step::Renaming,
        Step::Claimed,
        Step::Veth,
        Step::VhostDir,
        Step::Registered,
        Step::Waiting,
        Step::Ip,
        Step::Addressed,
        Step::Unlinked,
        Step::Marked,
        Step::Deregistered,
    ];

    /// Its name in `CONTRAIL_CNI_CRASH_AT`.
    #[cfg(feature = "crash-points")]
    fn name(self) -> &'static str {
        match self {
            Step::Locked => "locked",
            Step::Renaming => "renaming",
            Step::Claimed => "claimed",
            Step::Veth => "veth",
            Step::VhostDir => "vhost-dir",
            Step::Registered => "registered",
            Step::Waiting => "waiting",
            Step::Ip => "ip",
            Step::Addressed => "addressed",
            Step::Unlinked => "unlinked",
            Step::Marked => "marked",
            Step::Deregistered => "deregistered",
        }
    }
}

/// The environment variable naming the step to die at.
#[cfg(feature = "crash-points")]
const ENV: &str = "CONTRAIL_CNI_CRASH_AT";

/// Dies at `step` if the test asked for it.
#[cfg(feature = "crash-points")]
pub(crate) fn point(step: Step) {
    if std::env::var(ENV).is_ok_and(|s| s == step.name()) {
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub(crate) fn point(_step: Step) {}

/// The call's start: a step to die at that is no [`Step`] is the test's mistake.
#[cfg(feature = "crash-points")]
pub(crate) fn armed() -> crate::Result<()> {
    match std::env::var(ENV) {
        Ok(s) if !Step::ALL.iter().any(|step| step.name() == s) => Err(crate::Error::config(
            ENV,
            format!(
                "{s:?} is no crash point; the steps: {}",
                Step::ALL.map(Step::name).join(", ")
            ),
        )),
        _ => Ok(()),
    }
}
