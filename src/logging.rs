//! Logs go to the configured log file and to stderr; stdout belongs to the CNI result.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use log::LevelFilter;

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

/// `2026-11-22T01:52:50.123Z`, without a date crate: days since the epoch to a civil date.
fn timestamp() -> String {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let secs = t.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's days_from_civil inverse.
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

/// The log file's size cap: past it, the file becomes `<name>.1` (replacing the previous one)
/// and a new one starts, so a node never fills its disk with CNI logs.
const MAX_LOG_BYTES: u64 = 10 << 20;

fn rotate(path: &Path) {
    if fs::metadata(path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        // Concurrent plugins may race here; one rename wins and the others find a small file.
        let _ = fs::rename(path, old);
    }
}

/// Sets up logging at `level` (RUST_LOG, when set, overrides it). A log file that cannot be
/// opened is reported on stderr and skipped: logging never fails a CNI call.
pub fn init(file: Option<&Path>, level: LevelFilter) {
    let file = file.and_then(|path| {
        rotate(path);
        let opened = path
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| OpenOptions::new().create(true).append(true).open(path));
        opened
            .map_err(|e| {
                eprintln!(
                    "contrail-k8s-cni: cannot open log file {}: {e}",
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
            writeln!(
                buf,
                "{} {:<5} contrail-k8s-cni[{pid}] {}",
                timestamp(),
                r.level(),
                r.args()
            )
        });
    let _ = builder.try_init();
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_log_past_its_cap_is_rotated_once() {
        let dir = std::env::temp_dir().join(format!("ck8s-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("cni.log");
        std::fs::write(&log, vec![b'x'; super::MAX_LOG_BYTES as usize + 1]).unwrap();
        super::rotate(&log);
        assert!(!log.exists());
        assert_eq!(
            std::fs::metadata(dir.join("cni.log.1")).unwrap().len(),
            super::MAX_LOG_BYTES + 1
        );
        std::fs::write(&log, b"small").unwrap();
        super::rotate(&log);
        assert!(log.exists(), "a small log stays");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn timestamp_has_iso_shape() {
        let t = super::timestamp();
        assert_eq!(t.len(), 24, "{t}");
        assert!(
            t.starts_with("20") && t.ends_with('Z') && t.as_bytes()[10] == b'T',
            "{t}"
        );
    }
}
