//! The operator's manual's tables that operators act on follow the code: which keys a network's
//! config may set (`docs/configuration.md`), and the trust table (`docs/security.md`), name every
//! key as `config::KEYS` scopes it.

use contrail_k8s_cni::config::{KEYS, KeySpec, Scope};

/// The manual's pages that hold the tables, one after the other.
fn readme() -> String {
    ["docs/configuration.md", "docs/security.md"]
        .map(|page| {
            let path = format!("{}/{page}", env!("CARGO_MANIFEST_DIR"));
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .join("\n")
}

/// The rows of the table that follows `heading`: cells without their backquotes.
fn table(text: &str, heading: &str) -> Vec<Vec<String>> {
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?} in docs/"));
    text[at..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().replace('`', ""))
                .collect()
        })
        .collect()
}

#[test]
fn the_configuration_table_says_who_sets_each_key() {
    let rows = table(&readme(), "## Configuration");
    let documented: Vec<(String, String)> =
        rows.iter().map(|r| (r[0].clone(), r[2].clone())).collect();
    let code: Vec<(String, String)> = KEYS
        .iter()
        .map(|k| (k.name.to_string(), k.scope.as_str().to_string()))
        .collect();
    assert_eq!(documented, code);
}

#[test]
fn the_trust_table_covers_every_key_and_input() {
    let rows = table(&readme(), "## Security");
    let inputs: String = rows.iter().map(|r| format!("{} ", r[0])).collect();
    for &KeySpec {
        name: key, scope, ..
    } in KEYS
    {
        assert!(inputs.contains(key), "{key} is not in the trust table");
        let row = rows.iter().find(|r| r[0].contains(key)).unwrap();
        let node_only = row[1] == "node only";
        assert_eq!(node_only, scope == Scope::Node, "{key}: {}", row[1]);
    }
    for input in [
        "CNI_IFNAME",
        "CNI_ARGS",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "TRACEPARENT",
        "node-wide file",
        "CONTRAIL_CNI_CONF_DIR",
        "agent's answers",
        "state directory",
        "log and metrics files",
    ] {
        assert!(inputs.contains(input), "{input} is not in the trust table");
    }
}

/// `--version` names the crate's version: the CHANGELOG has a dated section for it, under the
/// one for what is not released yet.
#[test]
fn the_changelog_has_a_dated_section_for_this_version() {
    let log =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/CHANGELOG.md")).unwrap();
    let headings: Vec<&str> = log.lines().filter(|l| l.starts_with("## [")).collect();
    assert_eq!(headings.first(), Some(&"## [Unreleased]"), "{headings:?}");
    let this = format!("## [{}] - ", env!("CARGO_PKG_VERSION"));
    let section = headings.get(1).copied().unwrap_or_default();
    assert!(section.starts_with(&this), "{section:?} is not {this:?}");
    let date = &section[this.len()..];
    assert!(
        date.len() == 10 && date.as_bytes()[4] == b'-' && date.as_bytes()[7] == b'-',
        "{date:?} is not a date"
    );
}
