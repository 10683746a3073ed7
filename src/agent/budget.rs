//! The node's request budget to the vRouter agent: every call on the node together sends at
//! most `agent-requests-per-second` requests a second, however many are waiting.
//!
//! The agent serves every pod of the node, and each request it answers stalls its own config
//! work (its REST tasks and its DB table tasks exclude each other), so what matters is the
//! node's total rate, not one call's. The budget is a schedule shared through a small file in
//! `config-dir` (the node's), mapped by every call that talks to the agent:
//! - **Turns, not locks.** A request takes a turn: it books the next free slot of the node's
//!   schedule with one atomic compare-and-swap and sleeps until that slot. Nothing is held
//!   while it sleeps, so a call that is killed, stopped (SIGSTOP, a frozen cgroup) or slow
//!   anywhere blocks nobody: its slot passes unused.
//! - **Fair.** Polls book slots first come, first served: a waiting call polls again after
//!   every other waiting call had its turn (every N/R seconds with N waiting calls).
//! - **Registration and DEL before polls.** Requests that change the agent's registrations
//!   (`POST /vm`, `DELETE /vm`) have a lane of their own, up to half the budget: they go at
//!   once and push every booked poll back by one slot, so the node's total stays within the
//!   budget; past half the budget they queue in their lane, so polls never starve.
//! - **Bounded.** A turn beyond the call's deadline is never booked; the call fails with code
//!   11 instead ("try again later").
//! - **Free on a quiet node.** Up to [`BURST`] requests go at once; a call alone on the node
//!   never waits for a turn.
//!
//! The schedule is GCRA ("virtual scheduling", as traffic shapers and rate limiters use it) in
//! nanoseconds of CLOCK_MONOTONIC, which every process of the node shares and no clock step
//! moves. A new boot (the kernel's `boot_id` changed) starts the schedule over. The arithmetic
//! is [`Rate`] (pure); [`Budget`] is the file and the atomics around it.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

use crate::state::files;

/// The schedule's file in `config-dir`: a dot name, which the agent's reload and the pods'
/// names never use.
pub(crate) const FILE: &str = ".budget";
/// How many requests may go at once on a quiet node before the rate applies.
pub(crate) const BURST: u64 = 10;
/// The file's size: one page.
const SIZE: usize = 4096;
/// The first word of the file: what it is, and the layout's version.
const MAGIC: u64 = u64::from_le_bytes(*b"ctrlbgt1");
/// A booked slot is never further ahead than a call's longest wait; anything beyond is not a
/// schedule of this boot (or of this plugin) and is treated as empty.
const MAX_AHEAD: Duration = Duration::from_secs(301);
/// How long a waiting call sleeps at a time, so that a DEL's request to stop is seen soon.
const NAP: Duration = Duration::from_millis(50);

/// What a request is, for its turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// It changes the agent's registrations (`POST /vm`, `DELETE /vm`): it goes before polls.
    Urgent,
    /// Anything else: a poll, a look, a CHECK.
    Poll,
}

/// The budget's arithmetic, in nanoseconds: one slot every `interval`, up to [`BURST`] at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    interval: u64,
    tolerance: u64,
}

impl Rate {
    pub(crate) fn per_second(n: u32) -> Rate {
        let interval = 1_000_000_000 / u64::from(n.max(1));
        Rate {
            interval,
            tolerance: (BURST - 1) * interval,
        }
    }

    /// A poll's slot when the poll queue ends at `tat` (its "theoretical arrival time"): when it
    /// may go, and where the queue then ends.
    pub(crate) fn poll(self, tat: u64, now: u64) -> (u64, u64) {
        let at = now.max(tat.saturating_sub(self.tolerance));
        (at, now.max(tat) + self.interval)
    }

    /// An urgent request's slot in its lane, which ends at `lane`: when it may go, and where the
    /// lane then ends. While polls are waiting the lane runs at half the rate, so that urgent
    /// requests never take more than half the budget from them; otherwise at the whole rate.
    pub(crate) fn urgent(self, lane: u64, now: u64, polls_waiting: bool) -> (u64, u64) {
        let step = if polls_waiting {
            2 * self.interval
        } else {
            self.interval
        };
        let at = now.max(lane.saturating_sub(self.tolerance));
        (at, now.max(lane) + step)
    }

    /// Where the poll queue ends once an urgent request going at `at` took a slot from it.
    pub(crate) fn displaced(self, tat: u64, at: u64) -> u64 {
        tat.max(at) + self.interval
    }

    /// How far a poll booked now is pushed back by one urgent request.
    pub(crate) fn shift(self) -> u64 {
        self.interval
    }
}

/// Why a call got no turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoTurn {
    /// The next free slot lies beyond the call's deadline.
    Exhausted { ahead: Duration },
    /// The call was asked to stop while it waited.
    Stopped,
}

/// The shared schedule, as laid out in the file.
#[repr(C)]
struct Shared {
    magic: AtomicU64,
    /// A hash of the boot the schedule's times are from.
    boot: AtomicU64,
    /// Where the poll queue ends.
    tat: AtomicU64,
    /// How far urgent requests pushed booked polls back, in all (wrapping).
    shift: AtomicU64,
    /// Where the urgent lane ends.
    urgent: AtomicU64,
    /// The latest slot a poll booked: polls are waiting while it lies ahead.
    polls: AtomicU64,
}

/// The file, mapped.
struct Mapping {
    shared: NonNull<Shared>,
}

// SAFETY: the mapping is only ever accessed through atomics.
unsafe impl Send for Mapping {}

impl Mapping {
    fn open(dir: &Path) -> std::io::Result<Mapping> {
        let dir = files::open_dir(dir)?;
        let file = files::open_regular(&dir, FILE, OFlag::O_RDWR | OFlag::O_CREAT, 0o600)?;
        let len = file.metadata()?.len();
        if len != SIZE as u64 {
            if len != 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{len} bytes, not {SIZE}"),
                ));
            }
            // Blocks allocated now: writing to a hole of a mapped file on a full disk would
            // kill the process (SIGBUS). On a full disk the empty file goes again.
            if let Err(e) = nix::fcntl::posix_fallocate(file.as_fd(), 0, SIZE as i64) {
                if file.metadata()?.len() == 0 {
                    files::unlink(&dir, FILE)?;
                }
                return Err(files::io(e));
            }
        }
        Self::map(&file)
    }

    fn map(file: &File) -> std::io::Result<Mapping> {
        let len = std::num::NonZeroUsize::new(SIZE).expect("a page");
        // SAFETY: a shared mapping of a regular file of SIZE bytes (checked or allocated above);
        // it is only read and written through atomics, and unmapped on drop.
        let ptr = unsafe {
            mmap(
                None,
                len,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                file,
                0,
            )
        }
        .map_err(files::io)?;
        Ok(Mapping { shared: ptr.cast() })
    }

    fn shared(&self) -> &Shared {
        // SAFETY: the mapping lives as long as self; Shared is atomics only, page-aligned.
        unsafe { self.shared.as_ref() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in Mapping::map with this length; nothing refers to it after drop.
        let _ = unsafe { munmap(self.shared.cast(), SIZE) };
    }
}

/// The node's budget as one call uses it: mapped at its first request.
pub(crate) struct Budget {
    dir: std::path::PathBuf,
    rate: Rate,
    mapping: std::cell::OnceCell<Option<Mapping>>,
}

/// Now on CLOCK_MONOTONIC, in nanoseconds.
fn now_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// The kernel's id of this boot, hashed (FNV-1a); 0 when it cannot be read.
fn boot() -> u64 {
    let id = files::boot_id();
    if id.is_empty() {
        return 0;
    }
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Budget {
    pub(crate) fn new(config_dir: &Path, per_second: u32) -> Budget {
        Budget {
            dir: config_dir.to_path_buf(),
            rate: Rate::per_second(per_second),
            mapping: std::cell::OnceCell::new(),
        }
    }

    /// The shared schedule, opened (and started over on a new boot) at the first request.
    fn shared(&self) -> Option<&Shared> {
        self.mapping
            .get_or_init(|| match self.open() {
                Ok(m) => Some(m),
                Err(e) => {
                    log::warn!(
                        "the node's agent request budget {} cannot be used ({e}): this call \
                         paces only itself",
                        self.dir.join(FILE).display()
                    );
                    None
                }
            })
            .as_ref()
            .map(Mapping::shared)
    }

    fn open(&self) -> std::io::Result<Mapping> {
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .recursive(true)
            .create(&self.dir)?;
        let mapping = Mapping::open(&self.dir)?;
        let s = mapping.shared();
        let boot = boot();
        if s.magic.load(Ordering::Acquire) != MAGIC || s.boot.load(Ordering::Acquire) != boot {
            // Another boot's times (or a new file): the queue is empty. Concurrent first calls
            // of a boot may each clear it; the slots they booked meanwhile are a few at most.
            for field in [&s.tat, &s.shift, &s.urgent, &s.polls] {
                field.store(0, Ordering::Release);
            }
            s.boot.store(boot, Ordering::Release);
            s.magic.store(MAGIC, Ordering::Release);
        }
        Ok(mapping)
    }

    /// Waits for this call's turn to send a request of `class`, at most until `deadline`,
    /// napping so that `stop` is asked at least every [`NAP`]. The time waited, or why there is
    /// no turn. Without the shared file (it cannot be used), every request goes at once: the
    /// caller's own pacing is all there is.
    pub(crate) fn turn(
        &self,
        class: Class,
        deadline: Instant,
        stop: &dyn Fn() -> bool,
    ) -> Result<Duration, NoTurn> {
        let Some(s) = self.shared() else {
            return Ok(Duration::ZERO);
        };
        let started = Instant::now();
        let now = now_ns();
        let limit = now.saturating_add(
            u64::try_from(deadline.saturating_duration_since(started).as_nanos())
                .unwrap_or(u64::MAX),
        );
        let sane = |t: u64| {
            if t > now.saturating_add(MAX_AHEAD.as_nanos() as u64) {
                0
            } else {
                t
            }
        };
        let mut at = 0;
        let exhausted = |at: u64| NoTurn::Exhausted {
            ahead: Duration::from_nanos(at.saturating_sub(now)),
        };
        match class {
            Class::Poll => {
                let booked = s
                    .tat
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                        let (slot, end) = self.rate.poll(sane(tat), now);
                        at = slot;
                        (slot <= limit).then_some(end)
                    });
                if booked.is_err() {
                    return Err(exhausted(at));
                }
                s.polls.fetch_max(at, Ordering::AcqRel);
                // The slot in the polls' own time: urgent requests booked from now on push it
                // back (see `shift`).
                let own = at.wrapping_sub(s.shift.load(Ordering::Acquire));
                loop {
                    let at = own.wrapping_add(s.shift.load(Ordering::Acquire));
                    let now = now_ns();
                    if now >= at {
                        break;
                    }
                    if at > limit {
                        return Err(exhausted(at));
                    }
                    nap(Duration::from_nanos(at - now), stop)?;
                }
            }
            Class::Urgent => {
                let polls_waiting = sane(s.polls.load(Ordering::Acquire)) > now;
                let booked = s
                    .urgent
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |lane| {
                        let (slot, end) = self.rate.urgent(sane(lane), now, polls_waiting);
                        at = slot;
                        (slot <= limit).then_some(end)
                    });
                if booked.is_err() {
                    return Err(exhausted(at));
                }
                // First the shift, then the queue's end: a poll that books after the new end
                // sees the shift too, and is not pushed back twice.
                s.shift.fetch_add(self.rate.shift(), Ordering::AcqRel);
                let _ = s
                    .tat
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                        Some(self.rate.displaced(sane(tat), at))
                    });
                loop {
                    let now = now_ns();
                    if now >= at {
                        break;
                    }
                    nap(Duration::from_nanos(at - now), stop)?;
                }
            }
        }
        Ok(started.elapsed())
    }
}

/// Sleeps for `d`, at most [`NAP`] at a time, unless `stop` says to stop.
fn nap(d: Duration, stop: &dyn Fn() -> bool) -> Result<(), NoTurn> {
    if stop() {
        return Err(NoTurn::Stopped);
    }
    std::thread::sleep(d.min(NAP));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Books `n` polls at `now` one after the other on an empty schedule: when each may go.
    fn polls(rate: Rate, now: u64, n: usize) -> Vec<u64> {
        let mut tat = 0;
        (0..n)
            .map(|_| {
                let (at, end) = rate.poll(tat, now);
                tat = end;
                at
            })
            .collect()
    }

    #[test]
    fn a_quiet_node_sends_a_burst_at_once_then_one_slot_apart() {
        let rate = Rate::per_second(200);
        let now = 1_000 * MS;
        let at = polls(rate, now, 13);
        assert!(at[..BURST as usize].iter().all(|&t| t == now), "{at:?}");
        assert_eq!(at[10] - now, 5 * MS);
        assert_eq!(at[12] - at[11], 5 * MS);
    }

    #[test]
    fn a_second_holds_at_most_the_rate_and_the_burst() {
        for per_second in [10, 200, 1000] {
            let rate = Rate::per_second(per_second);
            let now = 5_000 * MS;
            let at = polls(rate, now, 3 * per_second as usize);
            let in_first_second = at.iter().filter(|&&t| t < now + 1_000 * MS).count() as u64;
            assert_eq!(in_first_second, u64::from(per_second) + BURST - 1);
        }
    }

    #[test]
    fn an_idle_schedule_forgets_its_past() {
        let rate = Rate::per_second(100);
        let (at, end) = rate.poll(10 * MS, 2_000 * MS);
        assert_eq!(at, 2_000 * MS);
        assert_eq!(end, 2_010 * MS);
    }

    #[test]
    fn urgent_requests_go_before_booked_polls_and_take_a_slot_from_them() {
        let rate = Rate::per_second(200);
        let now = 1_000 * MS;
        // 100 polls booked: the queue ends 0.45 s ahead.
        let mut tat = 0;
        for _ in 0..100 {
            tat = rate.poll(tat, now).1;
        }
        let (at, lane) = rate.urgent(0, now, true);
        assert_eq!(at, now, "an urgent request does not queue behind polls");
        assert_eq!(rate.displaced(tat, at), tat + rate.shift());
        // While polls wait, its lane holds half the budget: after a burst, one every two slots.
        let mut lane = lane;
        let mut last = at;
        for _ in 0..BURST {
            (last, lane) = rate.urgent(lane, now, true);
        }
        // (A burst of five: its tolerance is nine slots of the whole rate, two per request.)
        assert_eq!(last - now, 11 * 5 * MS);
    }

    #[test]
    fn without_polls_waiting_urgent_requests_have_the_whole_rate() {
        let rate = Rate::per_second(200);
        let now = 1_000 * MS;
        let mut lane = 0;
        let at: Vec<u64> = (0..12)
            .map(|_| {
                let (at, end) = rate.urgent(lane, now, false);
                lane = end;
                at
            })
            .collect();
        assert_eq!(at[9], now);
        assert_eq!((at[10] - now, at[11] - now), (5 * MS, 10 * MS));
    }
}
