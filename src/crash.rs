//! Crash injection for tests (feature `crash-points`): the process kills itself with SIGKILL at
//! the step named by `CONTRAIL_CNI_CRASH_AT`, as a node losing power or an OOM kill would. In a
//! normal build every point compiles to nothing.

/// The environment variable naming the step to die at.
#[cfg(feature = "crash-points")]
pub const ENV: &str = "CONTRAIL_CNI_CRASH_AT";

#[cfg(feature = "crash-points")]
pub fn point(step: &str) {
    if std::env::var(ENV).is_ok_and(|s| s == step) {
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

#[cfg(not(feature = "crash-points"))]
#[inline(always)]
pub fn point(_step: &str) {}
