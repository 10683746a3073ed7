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
//! - **Polls where the answers are.** While polls queue beyond the burst, a call whose IP
//!   configuration it has waited for less than 0.9x the shortest such wait of the node's
//!   last 10 to 20 seconds does not book a poll yet (it could hardly find an answer): the
//!   calls that have waited longer share the queue, and poll more often. Once the queue is
//!   back within the burst, or the call has waited that long, it books like any other: no call
//!   starves, and one alone on the node is never held back.
//! - **What starts a call's clock goes before polls.** The requests that change the agent's
//!   registrations (`POST`, `DELETE`) and an ADD's requests before its registration (its first
//!   look at the pod's VMIs, its looks at whether a VMI is registered) have a lane of their
//!   own: they go at once and push every booked poll back by one slot, so the node's total
//!   stays within the budget. Registrations go first of all (they push the lane's other
//!   requests back the same way): in a reboot's first wave, the pods whose first look was
//!   answered register before the next pods' first looks go. While polls wait, the lane may take the whole budget for a
//!   second's worth of requests (a reboot's first wave), then half of it, so polls never
//!   starve. An ADD's IP delay starts at its registration: a request before it that queued
//!   behind the polls would add the queue's length to the pod's wait.
//! - **Bounded.** A turn beyond the call's deadline is never booked; the call fails with code
//!   11 instead ("try again later").
//! - **Free on a quiet node.** Up to [`BURST`] requests go at once; a call alone on the node
//!   never waits for a turn.
//! - **Held on a starved CPU.** Every request, its turn come, is admitted by one more
//!   schedule of the node's sends (GCRA, the rate with both lanes' bursts): a request whose
//!   slot passed while its call was not scheduled waits there for the next free instant instead
//!   of going with every other late one at once, so that no second ever holds more than the
//!   rate and the bursts. The lane ahead keeps its place there too: late polls are admitted
//!   within one burst, its requests within both, so that a crowd of polls a starved CPU made
//!   late does not queue before a registration or a DEL (they would wait among them, for as
//!   long as the crowd lasts: polls come at the whole rate, and the crowd never drains).
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
/// How long the lane ahead of polls may take the whole budget while polls wait (a reboot's
/// first wave of ADDs registers at once), before it gets half.
pub(crate) const AHEAD_ALLOWANCE: Duration = Duration::from_secs(1);
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
    /// It changes the agent's registrations, or comes before an ADD's registration: it goes
    /// before polls.
    Ahead,
    /// A registration (`POST /vm`, `POST /port`): it starts an ADD's wait for its IP
    /// configuration, so it goes before the other requests ahead of polls too.
    Registration,
    /// A poll for the IP configuration of a VMI registered at `since` (its wait's start).
    Ip { since: Instant },
    /// Anything else: a wait's polls, a CHECK's or STATUS's look.
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

    /// A request's slot in the lane ahead of polls, which ends at `lane`, when its account of
    /// the budget it took from waiting polls ends at `share`: when it may go, where the lane
    /// then ends, and where the account then ends. The lane runs at the whole rate; while polls
    /// are waiting, each of its requests counts two slots in the account, which may run at most
    /// [`AHEAD_ALLOWANCE`] ahead: after a second of the whole budget the lane gets half of it,
    /// and polls the other half. Without polls waiting the account is left as it is.
    pub(crate) fn ahead(
        self,
        lane: u64,
        share: u64,
        now: u64,
        polls_waiting: bool,
    ) -> (u64, u64, u64) {
        let mut at = now.max(lane.saturating_sub(self.tolerance));
        let mut share_end = share;
        if polls_waiting {
            let allowance = AHEAD_ALLOWANCE.as_nanos() as u64;
            at = at.max(share.saturating_sub(allowance));
            share_end = now.max(share) + 2 * self.interval;
        }
        (at, now.max(lane).max(at) + self.interval, share_end)
    }

    /// Where the poll queue ends once a request ahead of it going at `at` took a slot from it.
    pub(crate) fn displaced(self, tat: u64, at: u64) -> u64 {
        tat.max(at) + self.interval
    }

    /// How far a poll booked now is pushed back by one request ahead of it.
    pub(crate) fn shift(self) -> u64 {
        self.interval
    }

    /// A request's admission, its turn come, when the node's sends are scheduled up to `sent`:
    /// the instant it may go (now, unless the requests admitted before it went faster than the
    /// rate with both lanes' bursts allow, or a poll, with its own lane's burst) and where the
    /// schedule then ends. On time, a request is admitted at once: its lane already spaced it.
    pub(crate) fn admit(self, sent: u64, now: u64, ahead_of_polls: bool) -> (u64, u64) {
        let bursts = if ahead_of_polls {
            self.tolerance * 2 + self.interval
        } else {
            self.tolerance
        };
        let at = now.max(sent.saturating_sub(bursts));
        (at, at.max(sent) + self.interval)
    }

    /// Whether polls are queuing: the poll queue ends beyond the burst.
    pub(crate) fn backlogged(self, tat: u64, now: u64) -> bool {
        tat > now.saturating_add(self.tolerance)
    }
}

/// The node's shortest waits for an IP configuration (from the registration to the poll that
/// found it) in two windows of [`Waits::WINDOW`], the current one and the one before, packed
/// in one word so that one compare-and-swap updates them: the window's number (24 bits) and
/// the two shortest waits in ms (20 bits each, [`Waits::NONE`] for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Waits(u64);

impl Waits {
    const WINDOW: u64 = 10_000_000_000;
    const NONE: u64 = (1 << 20) - 1;
    /// A call waits at most this long before it books its first poll.
    const MOST: u64 = 10_000;

    fn window(now: u64) -> u64 {
        (now / Self::WINDOW + 1) & ((1 << 24) - 1)
    }

    fn parts(self) -> (u64, u64, u64) {
        (
            self.0 >> 40,
            (self.0 >> 20) & Self::NONE,
            self.0 & Self::NONE,
        )
    }

    fn of(window: u64, current: u64, before: u64) -> Waits {
        Waits(window << 40 | current.min(Self::NONE) << 20 | before.min(Self::NONE))
    }

    /// The shortest wait of the current and the last window at `now`, ms.
    fn shortest(self, now: u64) -> Option<u64> {
        let (window, current, before) = self.parts();
        let shortest = match Self::window(now).wrapping_sub(window) & ((1 << 24) - 1) {
            0 => current.min(before),
            1 => current,
            _ => Self::NONE,
        };
        (shortest != Self::NONE).then_some(shortest)
    }

    /// With a wait of `ms` that ended at `now`.
    pub(crate) fn with(self, ms: u64, now: u64) -> Waits {
        let (window, current, _) = self.parts();
        let this = Self::window(now);
        match this.wrapping_sub(window) & ((1 << 24) - 1) {
            0 => Self::of(this, current.min(ms), self.parts().2),
            1 => Self::of(this, ms, current),
            _ => Self::of(this, ms, Self::NONE),
        }
    }

    /// How long a call waits for an IP configuration before it polls while polls queue, ns:
    /// 0.9x the shortest wait lately (at most [`Waits::MOST`]), none without one.
    pub(crate) fn ripening(self, now: u64) -> u64 {
        self.shortest(now)
            .map_or(0, |ms| ms.min(Self::MOST) * 900_000)
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
    /// How far requests ahead of polls pushed booked polls back, in all (wrapping).
    shift: AtomicU64,
    /// Where the lane ahead of polls ends.
    ahead: AtomicU64,
    /// The latest slot a poll booked: polls are waiting while it lies ahead.
    polls: AtomicU64,
    /// Where the schedule of admitted requests ends (a field that earlier versions, which
    /// share the file during a rollout, leave at zero: an empty schedule).
    sent: AtomicU64,
    /// How far registrations pushed the requests booked in the lane ahead of polls back, in
    /// all (wrapping).
    ahead_shift: AtomicU64,
    /// The end of the lane ahead's account of the budget it took from waiting polls (see
    /// [`Rate::ahead`]).
    share: AtomicU64,
    /// The shortest waits for an IP configuration lately, a [`Waits`] word (zero, as earlier
    /// versions leave it, is a window long gone: none).
    waits: AtomicU64,
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
            for field in [
                &s.tat, &s.shift, &s.ahead, &s.polls, &s.sent, &s.share, &s.waits,
            ] {
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
        match class {
            Class::Ip { since } => self.ripen(s, since, limit, &sane, stop)?,
            Class::Ahead | Class::Registration | Class::Poll => {}
        }
        match class {
            Class::Poll | Class::Ip { .. } => {
                let at = book(&s.tat, limit, |tat| self.rate.poll(sane(tat), now))
                    .map_err(|at| exhausted(at, now))?;
                s.polls.fetch_max(at, Ordering::AcqRel);
                // The slot in the polls' own time: requests ahead booked from now on push it
                // back (see `shift`).
                let own = at.wrapping_sub(s.shift.load(Ordering::Acquire));
                wait_for(
                    || own.wrapping_add(s.shift.load(Ordering::Acquire)),
                    limit,
                    stop,
                )?;
            }
            Class::Ahead | Class::Registration => {
                let first = class == Class::Registration;
                let polls_waiting = sane(s.polls.load(Ordering::Acquire)) > now;
                let mut share = 0;
                let at = book(&s.ahead, limit, |lane| {
                    let taken = sane(s.share.load(Ordering::Acquire));
                    // A registration books as if the lane were empty, and the lane's end moves
                    // back by its slot.
                    let queue = if first { 0 } else { sane(lane) };
                    let (slot, end, taken) = self.rate.ahead(queue, taken, now, polls_waiting);
                    share = taken;
                    if first {
                        (slot, self.rate.displaced(sane(lane), slot))
                    } else {
                        (slot, end)
                    }
                })
                .map_err(|at| exhausted(at, now))?;
                // (Concurrent requests may count from the same account: a slot or two more for
                // the lane, which the admission below still holds to the node's bound.)
                s.share.fetch_max(share, Ordering::AcqRel);
                if first {
                    s.ahead_shift.fetch_add(self.rate.shift(), Ordering::AcqRel);
                }
                // First the shift, then the queue's end: a poll that books after the new end
                // sees the shift too, and is not pushed back twice.
                s.shift.fetch_add(self.rate.shift(), Ordering::AcqRel);
                let _ = s
                    .tat
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
                        Some(self.rate.displaced(sane(tat), at))
                    });
                // The slot in the lane's own time: registrations booked from now on push it
                // back (a registration's own slot stays).
                let own = at.wrapping_sub(s.ahead_shift.load(Ordering::Acquire));
                let slot = || {
                    if first {
                        at
                    } else {
                        own.wrapping_add(s.ahead_shift.load(Ordering::Acquire))
                    }
                };
                wait_for(slot, limit, stop)?;
            }
        }
        let ahead_of_polls = matches!(class, Class::Ahead | Class::Registration);
        self.admit(s, ahead_of_polls, limit, &sane, stop)?;
        Ok(started.elapsed())
    }

    /// Holds back a poll for the IP configuration of a VMI registered at `since` while polls
    /// queue, until it has waited as long as the node's calls lately had to (see [`Waits`]),
    /// at most until `limit`.
    fn ripen(
        &self,
        s: &Shared,
        since: Instant,
        limit: u64,
        sane: &dyn Fn(u64) -> u64,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), NoTurn> {
        let waited = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let ripe = now_ns()
            .saturating_sub(waited)
            .saturating_add(Waits(s.waits.load(Ordering::Acquire)).ripening(now_ns()));
        loop {
            let now = now_ns();
            if now >= ripe.min(limit)
                || !self
                    .rate
                    .backlogged(sane(s.tat.load(Ordering::Acquire)), now)
            {
                return Ok(());
            }
            nap(Duration::from_nanos(ripe.min(limit) - now), stop)?;
        }
    }

    /// Tells the node's calls how long this one waited for an IP configuration: from its
    /// registration to the poll that found it.
    pub(crate) fn answered(&self, waited: Duration) {
        let Some(s) = self.shared() else { return };
        let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        let now = now_ns();
        let _ = s
            .waits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(Waits(w).with(ms, now).0)
            });
    }

    /// Waits for the request's admission in the schedule of the node's sends (see
    /// [`Rate::admit`]), at most until `limit`.
    fn admit(
        &self,
        s: &Shared,
        ahead_of_polls: bool,
        limit: u64,
        sane: &dyn Fn(u64) -> u64,
        stop: &dyn Fn() -> bool,
    ) -> Result<(), NoTurn> {
        loop {
            let now = now_ns();
            match book(&s.sent, now, |sent| {
                self.rate.admit(sane(sent), now, ahead_of_polls)
            }) {
                Ok(_) => return Ok(()),
                Err(at) => wait_for(|| at, limit, stop)?,
            }
        }
    }
}

/// Books a slot in the queue whose end `end` holds: `next` gives the slot and the queue's new
/// end from its end. The slot, booked if it is no later than `latest`, else not (`Err`).
fn book(end: &AtomicU64, latest: u64, mut next: impl FnMut(u64) -> (u64, u64)) -> Result<u64, u64> {
    let mut at = 0;
    end.fetch_update(Ordering::AcqRel, Ordering::Acquire, |e| {
        let (slot, end) = next(e);
        at = slot;
        (slot <= latest).then_some(end)
    })
    .map(|_| at)
    .map_err(|_| at)
}

/// No turn: the slot at `at` lies past the call's budget; it was `now`.
fn exhausted(at: u64, now: u64) -> NoTurn {
    NoTurn::Exhausted {
        ahead: Duration::from_nanos(at.saturating_sub(now)),
    }
}

/// Naps until the slot `at()` (which requests booked meanwhile may push back), unless it lies
/// past `limit`.
fn wait_for(at: impl Fn() -> u64, limit: u64, stop: &dyn Fn() -> bool) -> Result<(), NoTurn> {
    loop {
        let (at, now) = (at(), now_ns());
        if now >= at {
            return Ok(());
        }
        if at > limit {
            return Err(exhausted(at, now));
        }
        nap(Duration::from_nanos(at - now), stop)?;
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

    /// Books `n` requests ahead at `now` one after the other, the lane and its account empty:
    /// when each may go.
    fn aheads(rate: Rate, now: u64, n: usize, polls_waiting: bool) -> Vec<u64> {
        let (mut lane, mut share) = (0, 0);
        (0..n)
            .map(|_| {
                let at;
                (at, lane, share) = rate.ahead(lane, share, now, polls_waiting);
                at
            })
            .collect()
    }

    #[test]
    fn requests_ahead_go_before_booked_polls_and_take_a_slot_from_them() {
        let rate = Rate::per_second(200);
        let now = 1_000 * MS;
        // 100 polls booked: the queue ends 0.45 s ahead.
        let mut tat = 0;
        for _ in 0..100 {
            tat = rate.poll(tat, now).1;
        }
        let at = aheads(rate, now, 1, true)[0];
        assert_eq!(at, now, "a request ahead does not queue behind polls");
        assert_eq!(rate.displaced(tat, at), tat + rate.shift());
    }

    #[test]
    fn a_registration_goes_before_the_lanes_other_requests_and_takes_a_slot_from_them() {
        let rate = Rate::per_second(200);
        let now = 1_000 * MS;
        // 50 first looks booked in the lane: it ends 0.2 s ahead.
        let (mut lane, mut share) = (0, 0);
        for _ in 0..50 {
            (_, lane, share) = rate.ahead(lane, share, now, false);
        }
        // A registration books as if the lane were empty, and pushes its end by one slot.
        let (at, _, _) = rate.ahead(0, share, now, false);
        assert_eq!(at, now);
        assert_eq!(rate.displaced(lane, at), lane + rate.shift());
        // While polls wait it still counts in the lane's share of the budget: past a second of
        // the whole rate, registrations too go at half.
        let (at, _, _) = rate.ahead(0, now + 3 * AHEAD_ALLOWANCE.as_nanos() as u64, now, true);
        assert_eq!(at, now + 2 * AHEAD_ALLOWANCE.as_nanos() as u64);
    }

    #[test]
    fn while_polls_wait_the_lane_ahead_has_the_whole_rate_for_a_second_then_half() {
        let rate = Rate::per_second(200);
        let now = 1_000 * MS;
        let at = aheads(rate, now, 400, true);
        // A burst, then one a slot apart, for a second's worth of the whole rate...
        assert_eq!(at[9], now);
        assert_eq!(at[100] - now, 91 * 5 * MS);
        let full: Vec<u64> = at.windows(2).map(|w| w[1] - w[0]).take(190).collect();
        assert!(full[10..].iter().all(|&d| d == 5 * MS), "{full:?}");
        // ...then one every two: half the budget, the polls' half left to them.
        assert!(
            at[300..].windows(2).all(|w| w[1] - w[0] == 10 * MS),
            "{at:?}"
        );
        // Without polls waiting, the whole rate for as long as it has requests.
        let alone = aheads(rate, now, 400, false);
        assert_eq!(alone[399] - now, 390 * 5 * MS);
    }

    #[test]
    fn late_requests_are_admitted_no_faster_than_the_rate_and_both_bursts() {
        let rate = Rate::per_second(200);
        let now = 1_000 * MS;
        // 300 requests whose slots passed while their calls were not scheduled, all awake at
        // once, every tenth a request ahead of polls: the bursts go at once, the rest one slot
        // apart, each at the first free instant.
        let mut sent = 0;
        let mut admit = |ahead_of_polls| {
            let (at, end) = rate.admit(sent, now, ahead_of_polls);
            sent = end;
            at
        };
        let at: Vec<u64> = (0..300).map(|i| admit(i % 10 == 9)).collect();
        let in_a_second = at.iter().filter(|&&t| t < now + 1_000 * MS).count() as u64;
        assert!(in_a_second < 200 + 2 * BURST, "{in_a_second}");
        // Polls alone: their lane's burst at once, then one slot apart.
        let mut sent = 0;
        let polls: Vec<u64> = (0..300)
            .map(|_| {
                let (at, end) = rate.admit(sent, now, false);
                sent = end;
                at
            })
            .collect();
        assert!(
            polls[..BURST as usize].iter().all(|&t| t == now),
            "{polls:?}"
        );
        assert_eq!(polls[BURST as usize] - now, 5 * MS);
        // On time, a request is admitted at once.
        assert_eq!(rate.admit(now - 10 * MS, now, false).0, now);
    }

    #[test]
    fn late_polls_do_not_admit_before_a_request_ahead_of_them() {
        let rate = Rate::per_second(200);
        let now = 1_000 * MS;
        // A crowd of late polls holds the schedule at its edge: the next poll waits a slot...
        let mut sent = 0;
        for _ in 0..BURST {
            sent = rate.admit(sent, now, false).1;
        }
        assert_eq!(rate.admit(sent, now, false).0, now + 5 * MS);
        // ...requests ahead of it go at once, a burst of them, and push it back by theirs.
        for _ in 0..BURST {
            let (at, end) = rate.admit(sent, now, true);
            assert_eq!(at, now);
            sent = end;
        }
        assert_eq!(rate.admit(sent, now, false).0, now + (BURST + 1) * 5 * MS);
        assert_eq!(rate.admit(sent, now, true).0, now + 5 * MS);
    }

    #[test]
    fn a_poll_waits_for_most_of_the_shortest_wait_of_the_last_ten_to_twenty_seconds() {
        let second = 1_000 * MS;
        let now = 1_000 * second;
        assert_eq!(Waits(0).ripening(now), 0, "none known: no wait");
        let w = Waits(0).with(2_000, now).with(2_500, now + second);
        assert_eq!(w.ripening(now + second), 1_800 * MS);
        // The next window still knows it; a shorter wait there counts at once.
        let w = w.with(1_500, now + 10 * second);
        assert_eq!(w.ripening(now + 10 * second), 1_350 * MS);
        let w = w.with(3_000, now + 20 * second);
        assert_eq!(w.ripening(now + 20 * second), 1_350 * MS);
        // Two windows on, what was learned is gone: polls go as they come.
        assert_eq!(w.ripening(now + 40 * second), 0);
        // However long the waits, a call polls within ten seconds.
        assert_eq!(Waits(0).with(60_000, now).ripening(now), 9_000 * MS);
    }
}
