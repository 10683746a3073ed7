//! Logs go to the node's log file and to stderr; stdout belongs to the CNI result.
//!
//! The log is the node's record of every call, so nothing a tenant controls may forge or hide a
//! line: every record is one line (control characters escaped) of bounded length, and strings a
//! tenant chose are shown through [`Shown`] ([`crate::text`]). The log file is opened as the state files are: never
//! through a symbolic link, never blocking, a regular file only; rotation renames only that file.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use log::LevelFilter;
use nix::fcntl::OFlag;

use crate::state::files;

use crate::text::escape_into;

/// The log file's size cap: past it, the file becomes `<name>.1` (replacing the previous one)
/// and a new one starts, so a node never fills its disk with CNI logs.
const MAX_LOG_BYTES: u64 = 10 << 20;
/// The longest record: a call's line with a long error fits; a flood does not.
const MAX_RECORD: usize = 8 * 1024;
/// Writes every line to the log file (when it could be opened) and to stderr.
struct Tee(Option<File>);

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(f) = &mut self.0 {
            // A full disk must not fail the CNI call: drop the line from the file.
            let _ = f.write_all(buf);
        }
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `2026-11-22T01:52:50.123Z` for a time since the epoch, without a date crate.
fn timestamp(t: std::time::Duration) -> String {
    let secs = t.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        t.subsec_millis()
    )
}

/// An ADD the log shows refused with a given code, which no later success or DEL of the same
/// attachment (container, interface) followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub at: String,
    pub container: String,
    pub ifname: String,
    pub network: String,
    pub pod: String,
    pub why: String,
}

/// How much of the log's end [`refusals`] reads.
const RECENT_BYTES: u64 = 1 << 20;

/// The ADDs that the last MiB of the log at `path` shows refused with `code` within `within` of
/// now, and that no later success or DEL of the same attachment followed: `inspect`'s view of
/// what left no state (a refusal makes nothing). The lines are this module's own (a call's one
/// line, [`crate::Line`]); a line it cannot read is skipped.
pub(crate) fn refusals(path: &Path, code: u32, within: std::time::Duration) -> Vec<Refusal> {
    use std::io::{Read, Seek, SeekFrom};
    // Opened as it is for writing: never through a link, never blocking, a regular file only.
    let opened = match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) => {
            files::open_dir(dir).and_then(|dir| files::open_regular(&dir, name, OFlag::O_RDONLY, 0))
        }
        _ => return Vec::new(),
    };
    let Ok(mut f) = opened else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(RECENT_BYTES)));
    let mut bytes = Vec::new();
    let _ = f.take(RECENT_BYTES).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // Timestamps of one format sort as they happened.
    let since = timestamp(now.saturating_sub(within));
    let refused = format!(" (code {code}): ");
    let mut out: Vec<Refusal> = Vec::new();
    for line in text.lines() {
        let Some((at, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some((_, call)) = rest.split_once("] ") else {
            continue;
        };
        let field = |key: &str, next: &str| -> Option<String> {
            let from = call.find(&format!(" {key}="))? + key.len() + 2;
            let to = from + call[from..].find(&format!(" {next}="))?;
            Some(call[from..to].to_string())
        };
        let (Some(container), Some(ifname), Some(network), Some(pod)) = (
            field("container", "ifname"),
            field("ifname", "network"),
            field("network", "pod"),
            field("pod", "vmi"),
        ) else {
            continue;
        };
        let command = call.split(' ').next().unwrap_or("");
        out.retain(|r| !(r.container == container && r.ifname == ifname));
        if command != "ADD" || at < since.as_str() {
            continue;
        }
        if let Some((_, why)) = call.split_once(&refused) {
            out.push(Refusal {
                at: at.to_string(),
                container,
                ifname,
                network,
                pod,
                why: why.to_string(),
            });
        }
    }
    out
}

/// Opens the log file for appending: created (0640, its directory too) when missing; refused
/// when it is a symlink, a FIFO, a device or a directory. Past the cap it is rotated first.
#[allow(
    clippy::disallowed_methods,
    reason = "rotates the node's log file, which the node's config names, in its own directory"
)]
fn open(path: &Path) -> io::Result<File> {
    let (dir, name) = match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) => (dir, name),
        _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "no file name")),
    };
    std::fs::create_dir_all(dir)?;
    let dir = files::open_dir(dir)?;
    let append = || {
        files::open_regular(
            &dir,
            name,
            OFlag::O_WRONLY | OFlag::O_APPEND | OFlag::O_CREAT,
            0o640,
        )
    };
    let file = append()?;
    let meta = file.metadata()?;
    // Only this plugin's own log goes: a regular file of this user's, past the cap. Concurrent
    // calls may race here; one rename wins and the others then find a small file.
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.len() > MAX_LOG_BYTES && meta.uid() == euid {
        let old = format!("{name}.1");
        let replaceable = match files::stat_at(&dir, &old)? {
            None => true,
            Some(st) => files::is_kind(&st, nix::sys::stat::SFlag::S_IFREG),
        };
        let same = files::stat_at(&dir, name)?
            .is_some_and(|st| st.st_ino == meta.ino() && st.st_dev == meta.dev());
        if replaceable && same {
            nix::fcntl::renameat(&dir, name, &dir, old.as_str()).map_err(files::io)?;
            return append();
        }
    }
    Ok(file)
}

/// Sets up logging at `level` (RUST_LOG, when set, overrides it). A log file that cannot be
/// opened is reported on stderr and skipped: logging never fails a CNI call.
pub fn init(file: Option<&Path>, level: LevelFilter) {
    let file = file.and_then(|path| {
        open(path)
            .map_err(|e| {
                eprintln!(
                    "contrail-k8s-cni: cannot open log file {}: {e}; logging to stderr only",
                    path.display()
                )
            })
            .ok()
    });
    let pid = std::process::id();
    let mut builder = env_logger::Builder::new();
    builder.filter_level(level);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        builder.parse_filters(&spec);
    }
    builder
        .target(env_logger::Target::Pipe(Box::new(Tee(file))))
        .format(move |buf, r| {
            let mut line = String::new();
            let _ = escape_into(&mut line, &r.args().to_string(), MAX_RECORD);
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            writeln!(
                buf,
                "{} {:<5} contrail-k8s-cni[{pid}] {line}",
                timestamp(now),
                r.level(),
            )
        });
    let _ = builder.try_init();
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests make and remove their own scratch files"
)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tempdir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ck8s-log-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_log_past_its_cap_is_rotated_once() {
        let dir = tempdir("rotate");
        let log = dir.join("cni.log");
        std::fs::write(&log, vec![b'x'; MAX_LOG_BYTES as usize + 1]).unwrap();
        let f = open(&log).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 0, "a fresh file");
        assert_eq!(
            std::fs::metadata(dir.join("cni.log.1")).unwrap().len(),
            MAX_LOG_BYTES + 1
        );
        std::fs::write(&log, b"small").unwrap();
        drop(open(&log).unwrap());
        assert_eq!(std::fs::read(&log).unwrap(), b"small", "a small log stays");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_log_that_is_a_symlink_fifo_or_directory_is_refused_and_never_rotated() {
        let dir = tempdir("odd");
        let target = dir.join("precious");
        std::fs::write(&target, vec![b'x'; MAX_LOG_BYTES as usize + 1]).unwrap();
        std::os::unix::fs::symlink(&target, dir.join("link.log")).unwrap();
        nix::unistd::mkfifo(
            &dir.join("fifo.log"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::create_dir(dir.join("dir.log")).unwrap();
        for (name, what) in [
            ("link.log", "a symbolic link"),
            ("fifo.log", "a FIFO"),
            ("dir.log", "a directory"),
        ] {
            let err = open(&dir.join(name)).unwrap_err();
            assert!(err.to_string().starts_with(what), "{name}: {err}");
        }
        assert_eq!(std::fs::metadata(&target).unwrap().len(), MAX_LOG_BYTES + 1);
        assert!(!dir.join("link.log.1").exists() && !dir.join("precious.1").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refusals_are_the_recent_ones_nothing_followed() {
        let dir = tempdir("refusals");
        let log = dir.join("cni.log");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let at = |ago: u64| timestamp(now - std::time::Duration::from_secs(ago));
        let call = |when: String, cmd: &str, cid: &str, ifname: &str, result: &str| {
            format!(
                "{when} ERROR contrail-k8s-cni[7] {cmd} container={cid} ifname={ifname} \
                 network=net-a pod=default/web-0 vmi=-: {result}\n"
            )
        };
        let refused = "failed in 2.0 ms (code 101): pod k8s__default__web-0 has no VMI. Likely x";
        let lines = [
            // Too old.
            call(at(7200), "ADD", "c0", "net1", refused),
            // Refused, then its DEL: gone.
            call(at(60), "ADD", "c1", "net1", refused),
            call(at(59), "DEL", "c1", "net1", "ok in 1.0 ms"),
            // Refused, then retried with success: gone.
            call(at(50), "ADD", "c2", "net1", refused),
            call(at(49), "ADD", "c2", "net1", "ok in 9.0 ms"),
            // Refused with another code: not this one's.
            call(
                at(40),
                "ADD",
                "c3",
                "net1",
                "failed in 9.0 ms (code 11): gave up",
            ),
            // Refused, twice: the latest.
            call(at(30), "ADD", "c4", "net2", refused),
            call(at(20), "ADD", "c4", "net2", refused),
            "a line that is no call's\n".to_string(),
        ];
        std::fs::write(&log, lines.concat()).unwrap();
        let found = refusals(&log, 101, std::time::Duration::from_secs(3600));
        assert_eq!(
            found,
            [Refusal {
                at: at(20),
                container: "c4".into(),
                ifname: "net2".into(),
                network: "net-a".into(),
                pod: "default/web-0".into(),
                why: "pod k8s__default__web-0 has no VMI. Likely x".into(),
            }]
        );
        assert_eq!(
            refusals(&dir.join("none"), 101, std::time::Duration::from_secs(1)),
            []
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn timestamps_of_known_instants() {
        for (secs, millis, want) in [
            (0, 0, "1970-01-01T00:00:00.000Z"),
            (951_782_400, 5, "2000-02-29T00:00:00.005Z"),
            (1_709_251_199, 999, "2024-02-29T23:59:59.999Z"),
            (1_795_392_000, 123, "2026-11-23T00:00:00.123Z"),
            (4_102_444_800, 0, "2100-01-01T00:00:00.000Z"),
        ] {
            let t = Duration::from_secs(secs) + Duration::from_millis(millis);
            assert_eq!(timestamp(t), want, "{secs}");
        }
    }
}
