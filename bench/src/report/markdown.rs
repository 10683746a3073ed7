//! BENCHMARKS.md's generated section, in order, and its place in the file.

use crate::context::Opts;
use crate::error::R;
use crate::report::load::load_section;
use crate::report::machine::machine;
use crate::report::results::Report;
use crate::report::sections::{
    node_section, one_attachment, parallel_pods, readiness_lag, rss_and_sizes, state_directory,
    thick_mode,
};
use crate::report::targets::targets;

use std::fmt::Write as _;
use std::fs::{self};
use std::path::Path;

const BEGIN: &str = "<!-- scripts/bench: generated section, rewritten on every run -->";
const END: &str = "<!-- scripts/bench: end of generated section -->";

pub(crate) fn markdown(opts: &Opts, r: &Report) -> String {
    let mut m = String::new();
    let _ = writeln!(m, "{BEGIN}\n");
    let _ = writeln!(m, "## Machine and versions\n");
    let _ = writeln!(m, "| | |\n|---|---|");
    for (k, v) in machine(opts, &r.load_start) {
        let _ = writeln!(m, "| {k} | {v} |");
    }
    targets(&mut m, r);
    one_attachment(&mut m, r);
    rss_and_sizes(&mut m, r);
    state_directory(&mut m, r);
    thick_mode(&mut m, r);
    parallel_pods(&mut m, r);
    node_section(&mut m, r);
    readiness_lag(&mut m, r);
    load_section(&mut m, &r.load);

    let svg = opts.svg.strip_prefix(&opts.repo).unwrap_or(&opts.svg);
    let _ = writeln!(m, "\n## Plot\n\n![latency]({})\n", svg.display());
    let _ = writeln!(m, "{END}");
    m
}

pub(crate) const SKELETON_HEAD: &str = "# Benchmarks\n\n\
Run `scripts/bench` as root. It builds the release binary, the simulator and the benchmark \
(`bench/`) into `target/bench` and the thick build into `target/bench-thick`, runs the \
benchmark and rewrites the generated section below and `benchmarks/latency.svg`; the text \
outside the generated section is kept. `scripts/bench --quick` is a smoke run that writes \
nothing; `scripts/bench --compare OTHER_BIN` measures ADD, DEL and peak RSS of this build \
against another, interleaved, for trying a change.\n\n";

pub(crate) const SKELETON_TAIL: &str =
    "\n## Findings\n\n(Hand-written analysis; kept across runs.)\n";

/// Replaces the generated section of the file, keeping the text around it.
pub(crate) fn write_markdown(path: &Path, section: &str) -> R<()> {
    let old = fs::read_to_string(path).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!(
                "{}{}{}",
                &old[..b],
                section.trim_end(),
                &old[e + END.len()..]
            )
        }
        _ => format!("{SKELETON_HEAD}{section}{SKELETON_TAIL}"),
    };
    fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))
}
