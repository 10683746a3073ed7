//! The runtime's trace context (`TRACEPARENT`) in the plugin's log lines.

use contrail_testkit::*;

use crate::version::Version;
use crate::*;

on_both!(a_traceparent_reaches_the_calls_log_lines);

/// A trace context in the runtime's environment (OpenTelemetry's `TRACEPARENT`; libcni hands
/// its environment on to plugins) reaches the plugin, whose ADD and DEL lines carry its trace
/// id.
fn a_traceparent_reaches_the_calls_log_lines(v: Version) {
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let traceparent = format!("00-{trace}-b7ad6b7169203331-01");
    let pod = running_pod(v, &[("TRACEPARENT", &traceparent)]);
    pod.end();
    let Running { cd, fx, id, .. } = &pod;
    for command in ["ADD", "DEL"] {
        let calls = cd.calls_of(command, id);
        assert_eq!(calls[0][2], traceparent, "what containerd passed");
        let line = assert_call_logged(&fx.node, command, id, &fx.pod);
        assert!(line.contains(&format!(" trace={trace}")), "{line}");
    }
}

/// A `TRACEPARENT` that is not a valid W3C traceparent is shown escaped and cut short, never
/// as a trace id; it cannot forge or flood a line, and the call goes on as without it.
#[test]
fn an_invalid_traceparent_is_shown_escaped_and_cut_short() {
    let fx = Fixture::new(vec![VmiSpec::new("default", 1)]);
    let id = "0af7651916cd43dd8448eb211c80319c";
    let forged = "2026-01-01T00:00:00.000Z INFO  contrail-k8s-cni[1] ADD forged: ok";
    let flood = "0".repeat(10_000);
    let cases: [(String, String); 6] = [
        (
            format!("00-{id}-b7ad6b7169203331-01"),
            format!(" trace={id}"),
        ),
        (
            format!("00-{}-b7ad6b7169203331-01", id.to_uppercase()),
            format!(
                " trace=invalid(00-{}-b7ad6b7169203331-01)",
                id.to_uppercase()
            ),
        ),
        (
            format!("00-{}-b7ad6b7169203331-01", "0".repeat(32)),
            " trace=invalid(00-000".into(),
        ),
        (
            format!("00-{id}\n{forged}"),
            format!(" trace=invalid(00-{id}\\n{forged})"),
        ),
        (
            format!("\u{1b}[2J00-{id}-b7ad6b7169203331-01"),
            " trace=invalid(\\u{1b}[2J00-".into(),
        ),
        (
            flood.clone(),
            format!(
                " trace=invalid({}...({} more bytes))",
                &flood[..128],
                10_000 - 128
            ),
        ),
    ];
    for (traceparent, shown) in &cases {
        let conf = fx.conf("contrail-k8s-cni");
        for command in ["ADD", "DEL"] {
            fx.node
                .cni(command)
                .container(&fx.cid)
                .netns(&fx.ns.path())
                .ifname(IFNAME)
                .args(&fx.args())
                .env("TRACEPARENT", traceparent)
                .run(&conf)
                .assert_ok();
            let log = fx.node.log();
            let line = log
                .lines()
                .rfind(|l| l.contains(&format!("{command} container={}", fx.cid)))
                .unwrap_or_else(|| panic!("no {command} line:\n{log}"));
            assert!(line.contains(": ok in"), "{line}");
            assert!(
                line.contains(shown.as_str()),
                "{traceparent:?}: want {shown:?} in {line}"
            );
            assert!(line.len() < 1024, "a bounded line: {} bytes", line.len());
        }
    }
    let log = fx.node.log();
    assert!(
        !log.lines().any(|l| l.starts_with("2026-01-01")),
        "a forged line:\n{log}"
    );
    fx.assert_nothing_left();
}
