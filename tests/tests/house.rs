//! The house as `docs/design.md` draws it: the crate graph there is the
//! graph `cargo metadata` reports, it has no cycles, and the operator's
//! image (`--no-default-features`) links no development tooling.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn cargo(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running cargo");
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Workspace crate -> the workspace crates it depends on (normal
/// dependencies, optional ones included).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let meta: serde_json::Value = serde_json::from_str(&cargo(&[
        "metadata",
        "--no-deps",
        "--format-version",
        "1",
        "--offline",
    ]))
    .unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let ours: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|d| ours.contains(d))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// The table of `docs/design.md`: crate -> what its "depends on" column
/// names (short names, `—` for none).
fn drawn() -> BTreeMap<String, BTreeSet<String>> {
    let text = std::fs::read_to_string(repo().join("docs/design.md")).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("The crates"))
        .expect("docs/design.md has a section \"The crates\"");
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`').to_string();
            let deps = cells[4]
                .split([',', ';'])
                // The first word names the crate; the rest says when.
                .filter_map(|d| d.split_whitespace().next())
                .filter(|d| *d != "—")
                .map(String::from)
                .collect();
            (name, deps)
        })
        .collect()
}

/// `shardgate-k8s` -> `k8s`, as the table writes the crates it depends on.
fn short(name: &str) -> String {
    match name {
        "kube-emulator" => "emulator".into(),
        n => n.trim_start_matches("shardgate-").into(),
    }
}

#[test]
fn the_drawn_crate_graph_is_the_real_one_and_has_no_cycles() {
    let real = graph();
    let drawn = drawn();
    assert_eq!(
        real.keys().collect::<Vec<_>>(),
        drawn.keys().collect::<Vec<_>>(),
        "docs/design.md lists every crate once"
    );
    for (name, deps) in &real {
        // The binary and the tests are described in words ("all of the
        // above"); every other row names its dependencies exactly.
        if matches!(name.as_str(), "shardgate" | "shardgate-tests") {
            continue;
        }
        let deps: BTreeSet<String> = deps.iter().map(|d| short(d)).collect();
        assert_eq!(
            &deps, &drawn[name],
            "{name}'s dependencies in docs/design.md"
        );
    }
    // No cycles: every crate can be placed after all it depends on.
    let mut placed: BTreeSet<&String> = BTreeSet::new();
    while placed.len() < real.len() {
        let next: Vec<&String> = real
            .iter()
            .filter(|(n, deps)| !placed.contains(n) && deps.iter().all(|d| placed.contains(d)))
            .map(|(n, _)| n)
            .collect();
        assert!(
            !next.is_empty(),
            "a cycle among {:?}",
            real.keys()
                .filter(|n| !placed.contains(n))
                .collect::<Vec<_>>()
        );
        placed.extend(next);
    }
}

#[test]
fn the_operator_image_links_no_development_tooling() {
    let tree = cargo(&[
        "tree",
        "-p",
        "shardgate",
        "--no-default-features",
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "--offline",
        "--locked",
    ]);
    let linked: BTreeSet<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for tooling in [
        "kube-emulator",
        "shardgate-sandbox",
        "shardgate-guest",
        "shardgate-tests",
    ] {
        assert!(
            !linked.contains(tooling),
            "{tooling} is linked into the image build"
        );
    }
    for needed in ["shardgate-operator", "shardgate-webhook", "shardgate-wasm"] {
        assert!(
            linked.contains(needed),
            "{needed} is missing: the check reads the wrong tree"
        );
    }
    // The default build (the README's `shardgate sandbox`) does have it.
    let default = cargo(&[
        "tree",
        "-p",
        "shardgate",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--offline",
        "--locked",
    ]);
    assert!(default.lines().any(|l| l.starts_with("shardgate-sandbox ")));
}
