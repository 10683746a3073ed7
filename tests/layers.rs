//! ARCHITECTURE.md's layer table is true of the code: every `use crate::` line of `src/` imports
//! from its own layer or one above it in the table, or one of the plain data types the list
//! under the table names; and every type in that list is still imported across layers, so that
//! the list says no more than the code does.

use std::collections::BTreeSet;
use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The table's rows, top to bottom: each layer's modules as paths in `src/` (`kernel/`,
/// `error.rs`), the ones a row names outside parentheses.
fn layers(doc: &str) -> Vec<(String, Vec<String>)> {
    let at = doc.find("| layer | modules |").expect("the layer table");
    doc[at..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
            let mut depth = 0;
            let outside: String = cells[1]
                .chars()
                .filter(|&c| {
                    depth += i32::from(c == '(') - i32::from(c == ')');
                    depth == 0 && c != ')'
                })
                .collect();
            let modules = outside
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            (cells[0].trim().to_string(), modules)
        })
        .collect()
}

/// The plain data types the list under the table names, as `crate::` paths without the prefix.
fn exceptions(doc: &str) -> Vec<String> {
    let at = doc
        .find("The plain data types that a module takes from a layer below")
        .expect("the list of data types under the layer table");
    let list: String = doc[at..]
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("- ") || l.starts_with("  "))
        .collect::<Vec<_>>()
        .join(" ");
    list.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.contains("::"))
        .map(str::to_string)
        .collect()
}

/// A path in `src/` (`kernel/links.rs`) or a module path (`kernel::links::Links`): the layer of
/// the longest module of the table it is in.
fn layer_of(path: &str, layers: &[(String, Vec<String>)]) -> Option<usize> {
    let path = path.replace("::", "/");
    layers
        .iter()
        .enumerate()
        .flat_map(|(i, (_, modules))| modules.iter().map(move |m| (i, m)))
        .filter(|(_, m)| {
            let m = m.trim_end_matches(".rs").trim_end_matches('/');
            path == m || path.starts_with(&format!("{m}/")) || path == format!("{m}.rs")
        })
        .max_by_key(|(_, m)| m.len())
        .map(|(i, _)| i)
}

/// `a::b::{self, C, d::{E}}` as full paths: `a::b`, `a::b::C`, `a::b::d::E`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').expect("a closing brace")];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|p| match p {
            "self" => vec![prefix.to_string()],
            _ => expand(p)
                .into_iter()
                .map(|e| format!("{prefix}::{e}"))
                .collect(),
        })
        .collect()
}

/// Every `use crate::` of a source file outside its tests, as full paths.
fn imports(text: &str) -> Vec<String> {
    let code = text.split("mod tests {").next().unwrap_or(text);
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use crate::") {
        let line_start = rest[..at].rfind('\n').map_or(0, |i| i + 1);
        let lead = rest[line_start..at].trim();
        let end = at + rest[at..].find(';').expect("a use ends");
        if lead.is_empty() || lead.starts_with("pub") {
            let tree = rest[at + "use crate::".len()..end]
                .split_whitespace()
                .collect::<String>();
            out.extend(expand(&tree.replace(',', ", ")));
        }
        rest = &rest[end..];
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

#[test]
fn every_import_of_src_follows_the_layer_table() {
    let doc = std::fs::read_to_string(format!("{ROOT}/ARCHITECTURE.md")).unwrap();
    let layers = layers(&doc);
    assert_eq!(layers.len(), 7, "{layers:?}");
    let allowed = exceptions(&doc);
    let src = Path::new(ROOT).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let (mut wrong, mut used) = (Vec::new(), BTreeSet::new());
    let (mut seen, mut checked) = (0, 0);
    for file in &files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let own = layer_of(&rel, &layers).unwrap_or_else(|| panic!("{rel} is in no layer"));
        for path in imports(&std::fs::read_to_string(file).unwrap()) {
            seen += 1;
            let target = layer_of(&path, &layers)
                .unwrap_or_else(|| panic!("{rel}: crate::{path} is in no layer"));
            if target <= own {
                continue;
            }
            checked += 1;
            match allowed
                .iter()
                .filter(|a| path == **a || path.starts_with(&format!("{a}::")))
                .max_by_key(|a| a.len())
            {
                Some(a) => {
                    used.insert(a.clone());
                }
                None => wrong.push(format!(
                    "{rel} ({}) imports crate::{path} ({})",
                    layers[own].0, layers[target].0
                )),
            }
        }
    }
    // (A parser that read nothing would pass: src/ has hundreds of imports, a few across.)
    assert!(
        seen > 200 && checked > 5,
        "{seen} imports read, {checked} across layers"
    );
    assert!(
        wrong.is_empty(),
        "imports from a layer below:\n{}",
        wrong.join("\n")
    );
    let unused: Vec<&String> = allowed.iter().filter(|a| !used.contains(*a)).collect();
    assert!(
        unused.is_empty(),
        "ARCHITECTURE.md lists data types no module takes from a layer below: {unused:?}"
    );
}

#[test]
fn a_use_tree_expands_to_its_paths() {
    assert_eq!(
        expand("kernel::netlink::{self, Route, x::{A, B}}"),
        [
            "kernel::netlink",
            "kernel::netlink::Route",
            "kernel::netlink::x::A",
            "kernel::netlink::x::B"
        ]
    );
    assert_eq!(expand("ids::VmUuid"), ["ids::VmUuid"]);
}
