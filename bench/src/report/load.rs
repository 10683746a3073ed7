//! Section 9 of the generated section, the node under load: its targets, the policies side by
//! side, the quiet node; alone for `--storm-only`.

use crate::context::NODE_ATTACHMENTS;
use crate::report::format::{f1, interval, verdict, verdict_at_most};
use crate::stats::{Stats, median_interval, paired, stats};
use crate::storm::{Load, QUIET_IP_DELAY_MS, Role, STORM_IP_DELAY_MS, Storm};

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Section 9 alone, its targets and its tables (`--storm-only`).
pub(crate) fn load_only(load: &Load) -> String {
    let mut m = String::from("| target | measured | |\n|---|---|---|\n");
    load_targets(&mut m, load);
    load_section(&mut m, load);
    m
}

/// The burst each lane of the node's budget may send at once, beyond the rate (the plugin's
/// `budget::BURST`).
const BURST: u64 = 10;
/// The default `agent-requests-per-second`.
const RATE: u64 = 200;

/// Section 9's targets: the storm and the quiet node under this build's policy, against the
/// build before the budget's (a poll every 21 ms) and the legacy model's.
pub(crate) fn load_targets(m: &mut String, load: &Load) {
    let (storms, quiets) = (&load.storms, &load.quiets);
    let find = |role| storms.iter().find(|s| s.role == role);
    let (Some(ours), Some(_), Some(legacy)) = (
        find(Role::This),
        find(Role::FixedPeriod),
        find(Role::Legacy),
    ) else {
        return;
    };
    let bound = RATE + 2 * BURST;
    let _ = writeln!(
        m,
        "| the storm (section 9: {} pods x {} attachments at once, IP configurations {}-{} s \
         after registration, the agent's DB exclusion modelled): an ADD returns at most 300 ms \
         (median) beyond its IP delay | median {} ms ({} before its registration, {} after) | \
         {} |",
        ours.pods,
        NODE_ATTACHMENTS.len(),
        STORM_IP_DELAY_MS.0 / 1000,
        STORM_IP_DELAY_MS.1 / 1000,
        f1(ours.beyond.median),
        f1(ours.before_reg.median),
        f1(ours.after_reg.median),
        verdict(ours.beyond.median <= 300.0)
    );
    let (ours_whole, fixed_whole): (Vec<f64>, Vec<f64>) = load.pairs.iter().copied().unzip();
    let paired = median_interval(&paired(&ours_whole, &fixed_whole, 1.05));
    let _ = writeln!(
        m,
        "| the storm: the last pod whole at most 1.05x as late as with a poll every 21 ms per \
         call, storm for storm ({} interleaved pairs) | {} s vs {} s (medians); per pair, this \
         build's minus 1.05x the other's: {} | {} |",
        load.pairs.len(),
        f1(stats(&ours_whole).median),
        f1(stats(&fixed_whole).median),
        interval(paired.as_ref(), "s", "pairs"),
        verdict_at_most(paired.as_ref(), 0.0)
    );
    for s in storms
        .iter()
        .filter(|s| matches!(s.role, Role::This | Role::ThisBusy))
    {
        let _ = writeln!(
            m,
            "| the storm{}: at most {bound} requests in any one second (sliding) at the default \
             budget, R + a burst of each lane | {} | {} |",
            if s.role == Role::ThisBusy {
                ", every core kept busy"
            } else {
                ""
            },
            s.sliding_peak,
            verdict(s.sliding_peak <= bound)
        );
    }
    let _ = writeln!(
        m,
        "| the storm: the DB queue delay the requests caused to the agent's config work, p99 \
         at most 100 ms | p99 {} ms (median {} ms) | {} |",
        f1(ours.by_requests.p99),
        f1(ours.by_requests.median),
        verdict(ours.by_requests.p99 <= 100.0)
    );
    let broken: Vec<&Storm> = storms
        .iter()
        .filter(|s| matches!(s.role, Role::This | Role::ThisBusy))
        .collect();
    let failures: usize = broken.iter().map(|s| s.failures.len()).sum();
    let problems: usize = broken.iter().map(|s| s.problems.len()).sum();
    let _ = writeln!(
        m,
        "| the storm, idle and busy: every ADD and DEL succeeds, each interface its own VMI's \
         MAC, nothing left | {failures} failures, {problems} problems | {} |",
        verdict(failures + problems == 0)
    );
    let _ = writeln!(
        m,
        "| the storm: every pod whole no later than under the legacy model | {} s vs {} s | {} |",
        f1(ours.whole_s),
        f1(legacy.whole_s),
        verdict(ours.whole_s <= legacy.whole_s)
    );
    if let Some(quiet) = quiets.iter().find(|q| q.role == Role::This) {
        let _ = writeln!(
            m,
            "| the quiet node (one pod, its IP configuration {QUIET_IP_DELAY_MS} ms after \
             registration): the ADD returns at most 25 ms (median) after the IP configuration \
             exists | median {} ms (worst {} ms, {} samples) | {} |",
            f1(quiet.lag.median),
            f1(quiet.lag.max),
            quiet.lag.n,
            verdict(quiet.lag.median <= 25.0)
        );
    }
}

/// Section 9: the node under load, the policies side by side.
pub(crate) fn load_section(m: &mut String, load: &Load) {
    let (storms, quiets) = (&load.storms, &load.quiets);
    let Some(first) = storms.first() else {
        return;
    };
    let _ = writeln!(m, "\n## 9. The node under load: polling policies\n");
    let _ = writeln!(
        m,
        "The simulator models the agent's DB exclusion (`--exclusion`): every request holds \
         the agent's DB for 0.25 ms, every VMI's config work (after its controller delay) 2 \
         ms, first come, first served; a VMI's IP configuration exists once its work is done. \
         The storm: {} pods x {} attachments ADDed at once (each pod's in Multus's order), \
         every IP configuration {}-{} s after its registration (uniform, fixed seed), then \
         every pod's DELs (in reverse); a fresh simulator and state directory per policy. \
         \"Every core kept busy\": the same storm beside one stress-ng CPU hog per core. The \
         legacy model sends the legacy Go CNI's requests (`GET /vm-cfg`, `POST /vm`, then \
         `GET /vm/<vm>/<vmi>` at once and every 3 s; its DEL one `DELETE /vm/<vm>`) and makes \
         no interfaces. The busiest second is counted in whole seconds of the simulator's \
         clock, and sliding (any second, from each request's arrival, the DELs' too); the mean \
         from the first second with requests to the last.\n",
        first.pods,
        NODE_ATTACHMENTS.len(),
        STORM_IP_DELAY_MS.0 / 1000,
        STORM_IP_DELAY_MS.1 / 1000,
    );
    let _ = write!(m, "| |");
    for s in storms {
        let _ = write!(m, " {} |", s.role.name());
    }
    let _ = write!(m, "\n|---|");
    for _ in storms {
        let _ = write!(m, "---|");
    }
    let _ = writeln!(m);
    let row = |m: &mut String, name: &str, cell: &dyn Fn(&Storm) -> String| {
        let _ = write!(m, "| {name} |");
        for s in storms {
            let _ = write!(m, " {} |", cell(s));
        }
        let _ = writeln!(m);
    };
    let spread = |st: &Stats| format!("{}, {}, {}", f1(st.median), f1(st.p95), f1(st.max));
    row(m, "ADD requests in all", &|s| s.requests.to_string());
    row(m, "per second: busiest, busiest sliding, mean", &|s| {
        format!("{}, {}, {}", s.peak, s.sliding_peak, f1(s.mean))
    });
    row(
        m,
        "share of the agent's time its DB was held by requests",
        &|s| format!("{}%", f1(100.0 * s.db_share)),
    );
    row(
        m,
        "DB queue delay the requests caused to each VMI's config work, ms: median, p99",
        &|s| format!("{}, {}", f1(s.by_requests.median), f1(s.by_requests.p99)),
    );
    row(
        m,
        "the same, all queueing (requests and other work), ms: median, p99",
        &|s| format!("{}, {}", f1(s.queued.median), f1(s.queued.p99)),
    );
    row(
        m,
        "ADD time beyond its IP delay, ms: median, p95, worst",
        &|s| spread(&s.beyond),
    );
    row(
        m,
        "of which before its registration, ms: median, p95, worst",
        &|s| spread(&s.before_reg),
    );
    row(
        m,
        "and after it (the IP delay taken off), ms: median, p95, worst",
        &|s| spread(&s.after_reg),
    );
    row(m, "time until every pod is whole, s", &|s| f1(s.whole_s));
    row(m, "DEL requests in all", &|s| s.del_requests.to_string());
    row(m, "failures, problems found", &|s| {
        format!("{}, {}", s.failures.len(), s.problems.len())
    });
    let _ = writeln!(m, "\nRequests by kind (ADDs, then DELs):\n");
    for s in storms {
        let kinds = |k: &BTreeMap<String, u64>| {
            k.iter()
                .map(|(kind, n)| format!("{kind}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            m,
            "- {}: {}; DEL: {}",
            s.role.name(),
            kinds(&s.by_kind),
            kinds(&s.del_by_kind)
        );
    }
    for f in storms
        .iter()
        .flat_map(|s| s.failures.iter().chain(&s.problems))
        .take(3)
    {
        let _ = writeln!(m, "\nFound: `{}`", f.replace('`', "'"));
    }
    let _ = writeln!(
        m,
        "\nThe quiet node: one pod, its IP configuration {QUIET_IP_DELAY_MS} ms after its \
         registration (plus its 2 ms of DB work); lag = the ADD's return (the model: the poll \
         that saw it) minus the moment the IP configuration exists.\n"
    );
    let _ = writeln!(
        m,
        "| | lag median, ms | p95, ms | worst, ms | requests per ADD |\n|---|---|---|---|---|"
    );
    for q in quiets {
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} |",
            q.role.name(),
            f1(q.lag.median),
            f1(q.lag.p95),
            f1(q.lag.max),
            f1(q.requests)
        );
    }
}
