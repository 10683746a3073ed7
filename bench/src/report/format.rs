//! How the tables write numbers and verdicts.

use crate::stats::Interval;

pub(crate) fn f1(x: f64) -> String {
    format!("{x:.1}")
}

pub(crate) fn f2(x: f64) -> String {
    format!("{x:.2}")
}

/// The verdict of a row that counts (failures, requests, bytes): no noise to speak of.
pub(crate) fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "**missed**" }
}

/// The verdict of a row whose paired differences must have a median of at most `bound`: met or
/// missed only when the whole interval is on one side, within noise otherwise (the same build
/// could land on either side from one run to the next).
pub(crate) fn verdict_at_most(i: Option<&Interval>, bound: f64) -> &'static str {
    match i {
        Some(i) if i.high <= bound => "met",
        Some(i) if i.low > bound => "**missed**",
        Some(_) => "within noise",
        None => "too few samples",
    }
}

/// A median with its interval, in `unit`: "+1.20 ms (95% interval +0.80 to +1.60, 200 pairs)".
pub(crate) fn interval(i: Option<&Interval>, unit: &str, pairs: &str) -> String {
    match i {
        Some(i) => format!(
            "{:+.2} {unit} ({:.0}% interval {:+.2} to {:+.2}, {} {pairs})",
            i.median,
            (i.coverage * 100.0).floor(),
            i.low,
            i.high,
            i.n
        ),
        None => format!("too few {pairs} for an interval"),
    }
}
