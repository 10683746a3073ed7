//! `metrics-file`: a Prometheus text-format file for node-exporter's textfile collector. The
//! plugin lives for milliseconds, so every call adds itself to the file: read, update, write a
//! temp file and rename it, under a lock beside the file. A file this module cannot read (from
//! another version, or torn by hand) starts the counts over; metrics never fail a call.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg, OFlag};

use crate::state::files::{self, Sync};

/// Upper bounds of the histograms' buckets, in seconds: a call takes milliseconds when the
/// agent is ready and up to `poll-timeout` x `poll-retries` when it is not.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

const CALLS: &str = "contrail_cni_calls_total";
const DURATION: &str = "contrail_cni_call_duration_seconds";
const AGENT_WAIT: &str = "contrail_cni_agent_wait_seconds";
const REQUESTS: &str = "contrail_cni_agent_requests_total";
const TURN_WAIT: &str = "contrail_cni_budget_wait_seconds";
const LAST_FAILURE: &str = "contrail_cni_last_failure_timestamp_seconds";

/// One finished call.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub command: &'a str,
    /// The CNI error code, 0 for success.
    pub code: u32,
    pub took: Duration,
    /// Time spent on requests to the agent and the pauses between them.
    pub agent_wait: Duration,
    /// Requests sent to the agent.
    pub requests: u64,
    /// Time spent waiting for their turns in the node's request budget (part of `agent_wait`).
    pub budget_wait: Duration,
}

#[derive(Debug, Default, Clone, PartialEq)]
struct Histogram {
    /// Non-cumulative counts per bucket of [`BUCKETS`], then the `+Inf` bucket.
    counts: [u64; BUCKETS.len() + 1],
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(BUCKETS.len());
        self.counts[i] += 1;
        self.sum += s;
    }

    fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The file's content as data.
#[derive(Debug, Default, PartialEq)]
struct Metrics {
    calls: BTreeMap<(String, u32), u64>,
    duration: BTreeMap<String, Histogram>,
    agent_wait: BTreeMap<String, Histogram>,
    requests: BTreeMap<String, u64>,
    budget_wait: BTreeMap<String, Histogram>,
    last_failure: Option<f64>,
}

impl Metrics {
    fn add(&mut self, call: &Call, now: f64) {
        *self
            .calls
            .entry((call.command.to_string(), call.code))
            .or_default() += 1;
        let cmd = call.command.to_string();
        self.duration
            .entry(cmd.clone())
            .or_default()
            .observe(call.took);
        self.agent_wait
            .entry(cmd.clone())
            .or_default()
            .observe(call.agent_wait);
        *self.requests.entry(cmd.clone()).or_default() += call.requests;
        self.budget_wait
            .entry(cmd)
            .or_default()
            .observe(call.budget_wait);
        if call.code != 0 {
            self.last_failure = Some(now);
        }
    }

    fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP {CALLS} CNI calls by command and result (the CNI error code, 0 for success).\n\
             # TYPE {CALLS} counter"
        );
        for ((command, code), n) in &self.calls {
            let _ = writeln!(out, "{CALLS}{{command=\"{command}\",code=\"{code}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP {REQUESTS} Requests CNI calls sent to the vRouter agent, by command.\n\
             # TYPE {REQUESTS} counter"
        );
        for (command, n) in &self.requests {
            let _ = writeln!(out, "{REQUESTS}{{command=\"{command}\"}} {n}");
        }
        let histograms = [
            (
                DURATION,
                "Duration of CNI calls by command.",
                &self.duration,
            ),
            (
                AGENT_WAIT,
                "Time CNI calls spent on the vRouter agent (requests and the pauses between polls).",
                &self.agent_wait,
            ),
            (
                TURN_WAIT,
                "Time CNI calls waited for turns in the node's request budget to the agent.",
                &self.budget_wait,
            ),
        ];
        for (name, help, by_command) in histograms {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
            for (command, h) in by_command {
                let mut cumulative = 0;
                for (i, n) in h.counts.iter().enumerate() {
                    cumulative += n;
                    let le = BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
                    let _ = writeln!(
                        out,
                        "{name}_bucket{{command=\"{command}\",le=\"{le}\"}} {cumulative}"
                    );
                }
                let _ = writeln!(out, "{name}_sum{{command=\"{command}\"}} {}", h.sum);
                let _ = writeln!(out, "{name}_count{{command=\"{command}\"}} {}", h.count());
            }
        }
        if let Some(t) = self.last_failure {
            let _ = writeln!(
                out,
                "# HELP {LAST_FAILURE} When a CNI call last failed (Unix time).\n\
                 # TYPE {LAST_FAILURE} gauge\n{LAST_FAILURE} {t:.3}"
            );
        }
        out
    }

    /// Reads what [`Metrics::render`] wrote; `None` for anything else.
    fn parse(text: &str) -> Option<Metrics> {
        let mut m = Metrics::default();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, labels(rest.strip_suffix('}')?)?),
                None => (series, Vec::new()),
            };
            let label = |key: &str| labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
            if name == CALLS {
                let key = (label("command")?.to_string(), label("code")?.parse().ok()?);
                m.calls.insert(key, value.parse().ok()?);
            } else if name == REQUESTS {
                m.requests
                    .insert(label("command")?.to_string(), value.parse().ok()?);
            } else if name == LAST_FAILURE {
                m.last_failure = Some(value.parse().ok()?);
            } else {
                let (family, part) = name.rsplit_once('_')?;
                let by_command = match family {
                    DURATION => &mut m.duration,
                    AGENT_WAIT => &mut m.agent_wait,
                    TURN_WAIT => &mut m.budget_wait,
                    _ => return None,
                };
                let h = by_command.entry(label("command")?.to_string()).or_default();
                match part {
                    "bucket" => {
                        let le = label("le")?;
                        let i = match le {
                            "+Inf" => BUCKETS.len(),
                            le => BUCKETS.iter().position(|b| b.to_string() == le)?,
                        };
                        // Stored cumulative: the bucket's own count is the difference.
                        let cumulative: u64 = value.parse().ok()?;
                        let below: u64 = h.counts[..i].iter().sum();
                        h.counts[i] = cumulative.checked_sub(below)?;
                    }
                    "sum" => h.sum = value.parse().ok()?,
                    "count" => {}
                    _ => return None,
                }
            }
        }
        Some(m)
    }
}

/// `key="value",...` (values without escapes: commands, codes and bounds need none).
fn labels(text: &str) -> Option<Vec<(&str, &str)>> {
    text.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k, v.strip_prefix('"')?.strip_suffix('"')?))
        })
        .collect()
}

/// The file is a few kilobytes (a counter per command and code, two histograms per command);
/// anything much larger is not this plugin's.
const MAX_FILE: u64 = 1 << 20;

/// How long a call waits for another call's update of the metrics file: a writer that is
/// stopped (SIGSTOP, a frozen cgroup) must not hold every call of the node at its end.
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// The metrics file's lock, waited for `wait` at most; past it the call's metrics are skipped
/// (metrics never fail or hold a call).
fn lock_within(file: std::fs::File, wait: Duration) -> io::Result<Flock<std::fs::File>> {
    let deadline = std::time::Instant::now() + wait;
    let mut file = file;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(held) => return Ok(held),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) if std::time::Instant::now() < deadline => {
                file = f;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("another call has held its lock for over {wait:?}: skipped"),
                ));
            }
            Err((_, e)) => return Err(io::Error::from(e)),
        }
    }
}

/// Adds `call` to the metrics file at `path`. The file, its lock and its temp file are opened
/// as state files are (see [`crate::state::files`]): a symlink, FIFO or device there is refused.
#[allow(
    clippy::disallowed_methods,
    reason = "the node's metrics file, which the node's config names"
)]
pub fn record(path: &Path, call: &Call) -> io::Result<()> {
    let (dir, name) = match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) => (files::open_dir(dir)?, name),
        _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "no file name")),
    };
    let lock = files::open_regular(
        &dir,
        &format!(".{name}.lock"),
        OFlag::O_WRONLY | OFlag::O_CREAT,
        0o644,
    )?;
    let _held = lock_within(lock, LOCK_WAIT)?;
    let mut metrics = match files::read_bounded(&dir, name, MAX_FILE) {
        Ok(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(Metrics::parse)
            .unwrap_or_else(|| {
                log::warn!(
                    "{}: not this plugin's metrics: starting over",
                    path.display()
                );
                Metrics::default()
            }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Metrics::default(),
        Err(e) => return Err(e),
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    metrics.add(call, now);
    // The collector may read it at any moment: whole or not at all. Metrics need no fsync.
    files::write_atomic(&dir, name, metrics.render().as_bytes(), 0o644, Sync::No)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(command: &str, code: u32, ms: u64) -> Call<'_> {
        Call {
            command,
            code,
            took: Duration::from_millis(ms),
            agent_wait: Duration::from_millis(ms / 2),
            requests: 3,
            budget_wait: Duration::from_millis(ms / 4),
        }
    }

    #[test]
    fn what_is_rendered_parses_back_to_the_same() {
        let mut m = Metrics::default();
        for (i, c) in [
            call("ADD", 0, 3),
            call("ADD", 0, 40_000),
            call("ADD", 11, 60_000),
            call("DEL", 0, 20),
            call("CHECK", 103, 1),
        ]
        .iter()
        .enumerate()
        {
            m.add(c, 1_700_000_000.0 + i as f64);
        }
        let text = m.render();
        assert_eq!(Metrics::parse(&text), Some(m), "{text}");
    }

    #[test]
    fn counts_and_buckets_add_up() {
        let mut m = Metrics::default();
        m.add(&call("ADD", 0, 3), 1.0);
        m.add(&call("ADD", 0, 3), 2.0);
        m.add(&call("ADD", 7, 200), 3.0);
        let text = m.render();
        assert!(text.contains("contrail_cni_calls_total{command=\"ADD\",code=\"0\"} 2\n"));
        assert!(text.contains("contrail_cni_calls_total{command=\"ADD\",code=\"7\"} 1\n"));
        assert!(text.contains(
            "contrail_cni_call_duration_seconds_bucket{command=\"ADD\",le=\"0.005\"} 2\n"
        ));
        assert!(text.contains(
            "contrail_cni_call_duration_seconds_bucket{command=\"ADD\",le=\"+Inf\"} 3\n"
        ));
        assert!(text.contains("contrail_cni_call_duration_seconds_count{command=\"ADD\"} 3\n"));
        assert!(text.contains("contrail_cni_last_failure_timestamp_seconds 3.000\n"));
        assert!(text.contains("contrail_cni_agent_requests_total{command=\"ADD\"} 9\n"));
        assert!(
            text.contains(
                "contrail_cni_budget_wait_seconds_bucket{command=\"ADD\",le=\"0.001\"} 2\n"
            )
        );
    }

    #[test]
    fn a_file_that_is_not_ours_is_refused() {
        for text in [
            "foo 1",
            "contrail_cni_calls_total{command=\"ADD\"} 1",
            "contrail_cni_calls_total 1",
            "contrail_cni_call_duration_seconds_bucket{command=\"ADD\",le=\"7\"} 1",
            "contrail_cni_calls_total{command=\"ADD\",code=\"0\"} x",
        ] {
            assert_eq!(Metrics::parse(text), None, "{text}");
        }
    }
}
