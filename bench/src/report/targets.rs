//! The generated section's targets: each measured against its bound, met or missed.

use crate::context::NODE_ATTACHMENTS;
use crate::report::format::{f1, f2, verdict};
use crate::report::load::load_targets;
use crate::report::results::{Report, poll_half};
use crate::stats::stats;

use std::fmt::Write as _;

/// A count that should not vary: "3", or "3 (2-4 over the runs)" when it did.
fn count(v: &[f64]) -> String {
    let s = stats(v);
    if s.min == s.max {
        format!("{}", s.median)
    } else {
        format!("{} ({}-{} over the runs)", s.median, s.min, s.max)
    }
}

/// The targets table (section 9's rows included), and the agent requests of one call.
pub(crate) fn targets(m: &mut String, r: &Report) {
    let s = &r.single;
    let (ours_add, ptp_add) = (stats(&s.ours.add), stats(&s.ptp.add));
    let (ours_del, raw_del) = (stats(&s.ours.del), stats(&s.raw.del));
    let rss_of = |label: &str| s.rss.iter().find(|(l, _)| *l == label).map(|(_, r)| r);
    let peak = |labels: [&str; 2]| {
        labels
            .iter()
            .filter_map(|l| rss_of(l))
            .fold(0.0f64, |a, r| a.max(r.peak()))
    };
    let rss_ours = peak(["contrail-k8s-cni ADD", "contrail-k8s-cni DEL"]);
    let rss_ptp = peak(["ptp + static ADD", "ptp + static DEL"]);
    let rate = r.waiting_rate();
    let lag = &r.ready.lag;

    let _ = writeln!(m, "\n## Targets\n");
    let _ = writeln!(
        m,
        "ADD and DEL from one interleaved loop (sections 1-2), the state directory on ext4 on a \
         loop device as on a node; peak RSS from section 3, the readiness lag from section 8.\n"
    );
    let _ = writeln!(m, "| target | measured | |\n|---|---|---|");
    let _ = writeln!(
        m,
        "| ADD median at most 0.5x ptp + static's (a guard: a tenth of a millisecond per call \
         is worth nothing next to the node's agent) | {} ms vs {} ms: {}x | {} |",
        f2(ours_add.median),
        f2(ptp_add.median),
        f2(ours_add.median / ptp_add.median),
        verdict(ours_add.median <= 0.5 * ptp_add.median)
    );
    let _ = writeln!(
        m,
        "| DEL median at most 1.05x the raw netlink floor's | {} ms vs {} ms: {}x | {} |",
        f2(ours_del.median),
        f2(raw_del.median),
        f2(ours_del.median / raw_del.median),
        verdict(ours_del.median <= 1.05 * raw_del.median)
    );
    let _ = writeln!(
        m,
        "| peak RSS at most 0.5x ptp's | {rss_ours} KiB vs {rss_ptp} KiB: {}x | {} |",
        f2(rss_ours / rss_ptp),
        verdict(rss_ours <= 0.5 * rss_ptp)
    );
    let (ready_floor, noise) = (r.ready_floor(), r.ready_noise());
    let _ = writeln!(
        m,
        "| readiness lag median at its floor ({} ms, half the poll period, + the rest of the \
         ADD, median {} ms; within the sampling error of {} samples, {} ms), a waiting call \
         making at most 50 requests a second to the agent | median {} ms vs {} ms (worst {} \
         ms); {} requests per waiting second | {} |",
        f2(poll_half()),
        f2(r.ready.rest.median),
        lag.n,
        f2(noise),
        f2(lag.median),
        f2(ready_floor),
        f1(lag.max),
        f1(rate),
        verdict(lag.median <= ready_floor + noise && rate <= 50.0)
    );
    let p = &r.parallel;
    let _ = writeln!(
        m,
        "| {} pods ADDed in parallel without failure | {} ADD and {} DEL failures | {} |",
        p.pods,
        p.add_failures.len(),
        p.del_failures.len(),
        verdict(p.add_failures.is_empty() && p.del_failures.is_empty())
    );
    if let Some(full) = r.node.last() {
        let failures: usize = r
            .node
            .iter()
            .map(|n| n.add.failures.len() + n.del.failures.len())
            .sum();
        let problems: usize = r.node.iter().map(|n| n.problems.len()).sum();
        let _ = writeln!(
            m,
            "| a full node (up to {} pods x {} attachments, section 7): no failure, each \
             interface its own VMI's MAC, nothing left | {failures} failures, {problems} \
             problems found by the checks | {} |",
            full.pods,
            NODE_ATTACHMENTS.len(),
            verdict(failures == 0 && problems == 0)
        );
    }
    load_targets(m, &r.storms, &r.quiets);
    let _ = writeln!(
        m,
        "\nAgent requests with the agent answering at once (counted by the simulator): {} per \
         ADD, {} per DEL.",
        count(&s.requests_add),
        count(&s.requests_del)
    );
}
