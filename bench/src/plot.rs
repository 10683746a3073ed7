//! benchmarks/latency.svg: small multiples of the run's distributions, drawn by hand.

use crate::context::THICK_SIZES;
use crate::phases::{node::NodeRound, single::Variant, thick::Thick};
use crate::report::results::{Report, marginals};
use crate::stats::stats;

use std::fmt::Write as _;

pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) color: &'static str,
    pub(crate) points: Vec<(f64, f64)>,
    pub(crate) line: bool,
    pub(crate) dash: bool,
}

pub(crate) struct Panel {
    pub(crate) title: String,
    pub(crate) xlabel: String,
    pub(crate) ylabel: String,
    pub(crate) log2x: bool,
    /// Where the x axis has ticks; none: round numbers.
    pub(crate) xticks: Vec<f64>,
    pub(crate) x: (f64, f64),
    pub(crate) y: (f64, f64),
    pub(crate) series: Vec<Series>,
    pub(crate) hline: Option<(f64, String)>,
}

pub(crate) fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut v = Vec::new();
    while t <= hi + 1e-9 {
        v.push(t);
        t += step;
    }
    v
}

/// A tick label without floating-point noise: 0.6, 2.5, 1000.
pub(crate) fn tick(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub(crate) fn panel_svg(p: &Panel, ox: f64, oy: f64, w: f64, h: f64) -> String {
    // The legend goes under the x axis label, one line per series.
    let legend = 15.0 * p.series.len() as f64;
    let (l, r, t, b) = (58.0, 12.0, 30.0, 44.0 + legend);
    let (pw, ph) = (w - l - r, h - t - b);
    let fx = |x: f64| {
        let (a, z, x) = if p.log2x {
            (p.x.0.log2(), p.x.1.log2(), x.log2())
        } else {
            (p.x.0, p.x.1, x)
        };
        ox + l + (x - a) / (z - a) * pw
    };
    let fy = |y: f64| oy + t + ph - (y - p.y.0) / (p.y.1 - p.y.0) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        ox + l,
        oy + 18.0,
        esc(&p.title)
    );
    let _ = writeln!(
        s,
        r##"<rect x="{:.1}" y="{:.1}" width="{pw:.1}" height="{ph:.1}" fill="none" stroke="#444"/>"##,
        ox + l,
        oy + t
    );
    let xt: Vec<f64> = if p.xticks.is_empty() {
        nice_ticks(p.x.0, p.x.1)
    } else {
        p.xticks.clone()
    };
    for x in xt {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#ddd"/><text x="{0:.1}" y="{3:.1}" font-size="11" text-anchor="middle">{4}</text>"##,
            fx(x),
            oy + t,
            oy + t + ph,
            oy + t + ph + 14.0,
            tick(x)
        );
    }
    for y in nice_ticks(p.y.0, p.y.1) {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{2:.1}" y2="{1:.1}" stroke="#ddd"/><text x="{3:.1}" y="{4:.1}" font-size="11" text-anchor="end">{5}</text>"##,
            ox + l,
            fy(y),
            ox + l + pw,
            ox + l - 4.0,
            fy(y) + 4.0,
            tick(y)
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"#,
        ox + l + pw / 2.0,
        oy + t + ph + 34.0,
        esc(&p.xlabel)
    );
    let _ = writeln!(
        s,
        r#"<text x="{0:.1}" y="{1:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 {0:.1} {1:.1})">{2}</text>"#,
        ox + 14.0,
        oy + t + ph / 2.0,
        esc(&p.ylabel)
    );
    if let Some((y, label)) = &p.hline {
        let _ = writeln!(
            s,
            r##"<line x1="{x1:.1}" y1="{yy:.1}" x2="{x2:.1}" y2="{yy:.1}" stroke="#c00" stroke-dasharray="6 4"/><text x="{tx:.1}" y="{ty:.1}" font-size="11" fill="#c00" text-anchor="end">{label}</text>"##,
            x1 = ox + l,
            yy = fy(*y),
            x2 = ox + l + pw,
            tx = ox + l + pw - 4.0,
            ty = fy(*y) - 4.0,
            label = esc(label)
        );
    }
    for (k, se) in p.series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = se
            .points
            .iter()
            .map(|&(x, y)| (x.clamp(p.x.0, p.x.1), y.clamp(p.y.0, p.y.1)))
            .collect();
        if se.line {
            let d: Vec<String> = pts
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", fx(x), fy(y)))
                .collect();
            let dash = if se.dash {
                r#" stroke-dasharray="5 3""#
            } else {
                ""
            };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                d.join(" "),
                se.color
            );
        }
        if !se.line || pts.len() <= 8 {
            for &(x, y) in &pts {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}" fill-opacity="0.7"/>"#,
                    fx(x),
                    fy(y),
                    se.color
                );
            }
        }
        let ly = oy + t + ph + 54.0 + 15.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{:.1}" y="{:.1}" width="12" height="4" fill="{}"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"#,
            ox + l + 8.0,
            ly - 5.0,
            se.color,
            ox + l + 24.0,
            ly,
            esc(&se.name)
        );
    }
    s
}

pub(crate) fn cdf(v: &[f64]) -> Vec<(f64, f64)> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    s.iter()
        .enumerate()
        .map(|(i, &x)| (x, (i + 1) as f64 / n))
        .collect()
}

/// A line through `points`.
fn line(name: &str, color: &'static str, points: Vec<(f64, f64)>, dash: bool) -> Series {
    Series {
        name: name.into(),
        color,
        points,
        line: true,
        dash,
    }
}

/// The distribution of one command's times: contrail-k8s-cni, ptp + static, the raw floor.
fn distribution(command: &str, r: &Report, pick: fn(&Variant) -> &Vec<f64>) -> Panel {
    let s = &r.single;
    let xmax = stats(pick(&s.ptp)).p95.max(stats(pick(&s.ours)).p95) * 1.3;
    Panel {
        title: format!("One attachment, {command}: distribution"),
        xlabel: "ms (spawn to exit; raw: in-process)".into(),
        ylabel: "fraction of runs".into(),
        log2x: false,
        xticks: Vec::new(),
        x: (0.0, xmax.max(1.0)),
        y: (0.0, 1.0),
        series: vec![
            line("contrail-k8s-cni", "#1f77b4", cdf(pick(&s.ours)), false),
            line("ptp + static", "#ff7f0e", cdf(pick(&s.ptp)), false),
            line("raw rtnetlink (floor)", "#7f7f7f", cdf(pick(&s.raw)), false),
        ],
        hline: None,
    }
}

fn thick_panel(r: &Report) -> Panel {
    let per_if = |f: fn(&Thick) -> f64| -> Vec<(f64, f64)> {
        r.thick
            .iter()
            .map(|t| (t.n as f64, f(t) / t.n as f64))
            .collect()
    };
    let add_pi = per_if(|t| t.add.median);
    let del_pi = per_if(|t| t.del.median);
    let marg: Vec<(f64, f64)> = marginals(&r.thick, |t| t.add.median)
        .iter()
        .map(|&(_, b, v)| (b as f64, v))
        .collect();
    let ymax = add_pi
        .iter()
        .chain(&del_pi)
        .chain(&marg)
        .fold(0.0f64, |a, p| a.max(p.1))
        * 1.15;
    Panel {
        title: "Thick mode: time per interface".into(),
        xlabel: "interfaces in the pod (log scale)".into(),
        ylabel: "ms per interface (median)".into(),
        log2x: true,
        xticks: THICK_SIZES.iter().map(|&n| n as f64).collect(),
        x: (1.0, 64.0),
        y: (0.0, ymax.max(1.0)),
        series: vec![
            line("ADD / interfaces", "#1f77b4", add_pi, false),
            line("DEL / interfaces", "#2ca02c", del_pi, false),
            line("ADD: cost of one more interface", "#9467bd", marg, true),
        ],
        hline: None,
    }
}

fn node_panel(r: &Report) -> Panel {
    let per_pod = |f: fn(&NodeRound) -> f64| -> Vec<(f64, f64)> {
        r.node
            .iter()
            .map(|n| (n.pods as f64, f(n) / n.pods as f64))
            .collect()
    };
    let add = per_pod(|n| n.add.total);
    let del = per_pod(|n| n.del.total);
    let ymax = add.iter().chain(&del).fold(0.0f64, |a, p| a.max(p.1)) * 1.15;
    let sizes: Vec<f64> = r.node.iter().map(|n| n.pods as f64).collect();
    let xmax = sizes.last().copied().unwrap_or(2.0).max(2.0);
    Panel {
        title: "A full node: time per pod".into(),
        xlabel: "pods, 4 attachments each (log scale)".into(),
        ylabel: "ms per pod (all done after / pods)".into(),
        log2x: true,
        xticks: sizes,
        x: (1.0, xmax),
        y: (0.0, ymax.max(1.0)),
        series: vec![
            line("ADD", "#1f77b4", add, false),
            line("DEL", "#2ca02c", del, false),
        ],
        hline: None,
    }
}

fn readiness_panel(r: &Report) -> Panel {
    let lag_max = r.ready.samples.iter().fold(0.0f64, |a, p| a.max(p.1)) * 1.15;
    Panel {
        title: "Readiness lag (default polling)".into(),
        xlabel: "VMI ready, ms after ADD started".into(),
        ylabel: "ADD returned, ms after ready".into(),
        log2x: false,
        xticks: Vec::new(),
        x: (0.0, 2000.0),
        y: (0.0, lag_max.max(12.0)),
        series: vec![Series {
            name: "one ADD".into(),
            color: "#d62728",
            points: r.ready.samples.clone(),
            line: false,
            dash: false,
        }],
        hline: Some((10.0, "target: median at most 10 ms".into())),
    }
}

/// Two rows of panels: ADD, DEL and the readiness lag; thick mode and the full node.
pub(crate) fn svg(r: &Report) -> String {
    let rows = [
        vec![
            distribution("ADD", r, |v| &v.add),
            distribution("DEL", r, |v| &v.del),
            readiness_panel(r),
        ],
        vec![thick_panel(r), node_panel(r)],
    ];
    let (w, h) = (420.0, 370.0);
    let mut out = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" font-family="sans-serif">"#,
        3.0 * w,
        2.0 * h,
        3.0 * w,
        2.0 * h
    );
    out.push_str(r#"<rect width="100%" height="100%" fill="white"/>"#);
    out.push('\n');
    for (j, row) in rows.iter().enumerate() {
        for (i, p) in row.iter().enumerate() {
            out.push_str(&panel_svg(p, i as f64 * w, j as f64 * h, w, h));
        }
    }
    out.push_str("</svg>\n");
    out
}
