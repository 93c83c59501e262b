//! docs/ARCHITECTURE.md's crate table says what each crate depends on: this checks it against
//! every `crates/*/Cargo.toml`, so a crate added, removed or depending on another one fails
//! here until the table says so. Also checks that the workspace crates' dependencies have no
//! cycle (cargo refuses a cycle among `[dependencies]`, not one through dev-dependencies).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Workspace crate -> the workspace crates its `[dependencies]` (or, with `dev`, its
/// `[dev-dependencies]`) name, by short name (`luigi-txn` -> `txn`; the binary is `luigi`).
fn manifests(dev: bool) -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&root).expect("crates dir") {
        let dir = entry.expect("crate dir").path();
        let manifest = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
        let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let name = doc["package"]["name"].as_str().expect("package name").to_string();
        let section = if dev { "dev-dependencies" } else { "dependencies" };
        let deps = doc
            .get(section)
            .and_then(|d| d.as_table())
            .map(|t| t.keys().filter(|k| k.starts_with("luigi") && **k != name).map(|k| short(k)).collect())
            .unwrap_or_default();
        out.insert(short(&name), deps);
    }
    out
}

fn short(name: &str) -> String {
    name.strip_prefix("luigi-").unwrap_or(name).to_string()
}

/// The table's rows: crate -> its "depends on" cell.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("docs/ARCHITECTURE.md");
    let start = text.find("| crate | holds | depends on |").expect("the crate table's header");
    let mut out = BTreeMap::new();
    for line in text[start..].lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = short(cells[1].trim_matches('`'));
        let deps = match cells[3] {
            "none" => BTreeSet::new(),
            list => list.split(',').map(|d| d.trim().to_string()).collect(),
        };
        out.insert(name, deps);
    }
    out
}

#[test]
fn the_crate_table_matches_the_manifests() {
    let actual = manifests(false);
    let table = documented();
    assert_eq!(
        table.keys().collect::<Vec<_>>(),
        actual.keys().collect::<Vec<_>>(),
        "docs/ARCHITECTURE.md's crate table names other crates than crates/*/Cargo.toml"
    );
    for (name, deps) in &actual {
        assert_eq!(&table[name], deps, "luigi-{name}'s [dependencies] differ from docs/ARCHITECTURE.md's table");
    }
}

#[test]
fn no_cycle_even_through_dev_dependencies() {
    let normal = manifests(false);
    let dev = manifests(true);
    let mut edges = normal.clone();
    for (name, deps) in dev {
        edges.entry(name).or_default().extend(deps);
    }
    // Depth-first search for a back edge.
    fn visit(n: &str, edges: &BTreeMap<String, BTreeSet<String>>, path: &mut Vec<String>, done: &mut BTreeSet<String>) {
        if done.contains(n) {
            return;
        }
        assert!(!path.iter().any(|p| p == n), "dependency cycle: {} -> {n}", path.join(" -> "));
        path.push(n.to_string());
        for d in edges.get(n).into_iter().flatten() {
            visit(d, edges, path, done);
        }
        path.pop();
        done.insert(n.to_string());
    }
    let mut done = BTreeSet::new();
    for n in edges.keys() {
        visit(n, &edges, &mut Vec::new(), &mut done);
    }
}

/// Every `.rs` file under `crates/` with its line count.
fn sources() -> Vec<(std::path::PathBuf, usize, String)> {
    fn walk(dir: &Path, out: &mut Vec<(std::path::PathBuf, usize, String)>) {
        for entry in std::fs::read_dir(dir).expect("readable dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("readable source");
                out.push((path, text.lines().count(), text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."), &mut out);
    out
}

/// CONTRIBUTING.md's sizes: no source file over 800 lines, and one over 600 says why in its
/// module doc (a `//! Size:` paragraph).
#[test]
fn source_files_are_sized_by_concept() {
    let mut too_long = Vec::new();
    let mut unexplained = Vec::new();
    for (path, lines, text) in sources() {
        let module_doc: Vec<&str> = text.lines().take_while(|l| l.starts_with("//!")).collect();
        if lines > 800 {
            too_long.push(format!("{} ({lines} lines)", path.display()));
        } else if lines > 600 && !module_doc.iter().any(|l| l.starts_with("//! Size:")) {
            unexplained.push(format!("{} ({lines} lines)", path.display()));
        }
    }
    assert!(too_long.is_empty(), "source files over 800 lines: split them by concept: {too_long:?}");
    assert!(unexplained.is_empty(), "source files over 600 lines without a `//! Size:` note: {unexplained:?}");
}
