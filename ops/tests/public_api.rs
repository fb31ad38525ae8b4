//! The crate's public surface is the list in docs/ops.md ("The public surface"), no more and no
//! less: the test reads the crate's sources (from `src/lib.rs`, through every module), collects
//! every item a user can name (public items of public modules, `pub use` re-exports, exported
//! macros) and compares them with the list. A new `pub` item reachable from outside fails here
//! until it is listed (or made crate-private).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use syn::{Attribute, Item, UseTree, Visibility};

const BEGIN: &str = "<!-- public-api:begin -->";
const END: &str = "<!-- public-api:end -->";

/// Whether `attrs` hold `#[cfg(test)]` (such items are not part of the built crate).
fn test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
    })
}

fn has_attr(attrs: &[Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.path().is_ident(name))
}

fn is_pub(vis: &Visibility) -> bool {
    matches!(vis, Visibility::Public(_))
}

/// The names a `pub use` tree exports (its last segments, or their renames).
fn use_names(tree: &UseTree, out: &mut Vec<String>) {
    match tree {
        UseTree::Path(p) => use_names(&p.tree, out),
        UseTree::Name(n) => out.push(n.ident.to_string()),
        UseTree::Rename(r) => out.push(r.rename.to_string()),
        UseTree::Group(g) => g.items.iter().for_each(|t| use_names(t, out)),
        UseTree::Glob(_) => panic!("a glob re-export hides what is public: name the items"),
    }
}

/// Walks the module in `file` (whose child modules live in `dir`) at `path`; `public`: whether
/// the module is reachable from outside the crate.
fn walk(file: &Path, dir: &Path, path: &str, public: bool, found: &mut BTreeSet<String>) {
    let src = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let parsed = syn::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    walk_items(&parsed.items, dir, path, public, found);
}

fn walk_items(items: &[Item], dir: &Path, path: &str, public: bool, found: &mut BTreeSet<String>) {
    let add = |found: &mut BTreeSet<String>, name: String, kind: &str| {
        found.insert(format!("{path}::{name} ({kind})"));
    };
    for item in items {
        let (vis, name, kind) = match item {
            Item::Fn(i) if !test_only(&i.attrs) => (&i.vis, i.sig.ident.to_string(), "fn"),
            Item::Struct(i) if !test_only(&i.attrs) => (&i.vis, i.ident.to_string(), "struct"),
            Item::Enum(i) if !test_only(&i.attrs) => (&i.vis, i.ident.to_string(), "enum"),
            Item::Const(i) if !test_only(&i.attrs) => (&i.vis, i.ident.to_string(), "const"),
            Item::Static(i) if !test_only(&i.attrs) => (&i.vis, i.ident.to_string(), "static"),
            Item::Trait(i) if !test_only(&i.attrs) => (&i.vis, i.ident.to_string(), "trait"),
            Item::Type(i) if !test_only(&i.attrs) => (&i.vis, i.ident.to_string(), "type"),
            Item::Union(i) if !test_only(&i.attrs) => (&i.vis, i.ident.to_string(), "union"),
            Item::Macro(m) if has_attr(&m.attrs, "macro_export") => {
                if let Some(ident) = &m.ident {
                    found.insert(format!("tileops_ops::{ident} (macro)"));
                }
                continue;
            }
            Item::Use(u) if !test_only(&u.attrs) => {
                if public && is_pub(&u.vis) {
                    let mut names = Vec::new();
                    use_names(&u.tree, &mut names);
                    for n in names {
                        add(found, n, "re-export");
                    }
                }
                continue;
            }
            Item::Mod(m) if !test_only(&m.attrs) => {
                let name = m.ident.to_string();
                let child_public = public && is_pub(&m.vis);
                if child_public {
                    add(found, name.clone(), "mod");
                }
                let child_path = format!("{path}::{name}");
                match &m.content {
                    Some((_, inner)) => {
                        walk_items(inner, &dir.join(&name), &child_path, child_public, found)
                    }
                    None => {
                        let flat = dir.join(format!("{name}.rs"));
                        let (file, child_dir) = if flat.exists() {
                            (flat, dir.join(&name))
                        } else {
                            (dir.join(&name).join("mod.rs"), dir.join(&name))
                        };
                        walk(&file, &child_dir, &child_path, child_public, found);
                    }
                }
                continue;
            }
            _ => continue,
        };
        if public && is_pub(vis) {
            add(found, name, kind);
        }
    }
}

/// The items the sources make public.
fn public_items() -> BTreeSet<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = BTreeSet::new();
    walk(&root.join("lib.rs"), &root, "tileops_ops", true, &mut found);
    found
}

/// The paths of `items` (without their kinds).
fn paths(items: &BTreeSet<String>) -> BTreeSet<String> {
    items
        .iter()
        .map(|i| i.split_once(' ').map_or(i.as_str(), |(p, _)| p).to_string())
        .collect()
}

/// The items docs/ops.md lists: the first backticked text of each `- ` line between the markers.
fn listed_items() -> BTreeSet<String> {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/ops.md");
    let text = std::fs::read_to_string(&doc).expect("docs/ops.md is readable");
    let start = text
        .find(BEGIN)
        .expect("docs/ops.md has the public-api begin marker");
    let end = text
        .find(END)
        .expect("docs/ops.md has the public-api end marker");
    text[start + BEGIN.len()..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(item, _)| item.to_string())
        .collect()
}

#[test]
fn the_public_items_are_the_ones_docs_ops_md_lists() {
    let public = paths(&public_items());
    let listed = listed_items();
    let unlisted: Vec<_> = public.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&public).collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "public but not listed in docs/ops.md (list it, or make it pub(crate)):\n{}\n\
         listed in docs/ops.md but not public:\n{}",
        unlisted
            .iter()
            .map(|s| format!("- {s}"))
            .collect::<Vec<_>>()
            .join("\n"),
        stale
            .iter()
            .map(|s| format!("- {s}"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn the_walk_sees_items_of_public_modules_and_re_exports_only() {
    let public = public_items();
    // A re-export at the root, a public module's own item, a registry re-export.
    for item in [
        "tileops_ops::paged_gather (re-export)",
        "tileops_ops::limits::MAX_ELEMENTS (const)",
        "tileops_ops::registry::OPS (const)",
        "tileops_ops::registry (mod)",
    ] {
        assert!(public.contains(item), "{item} missing from {public:#?}");
    }
    // Crate-private: the runner, a kernel module's host code, a call struct.
    assert!(!public
        .iter()
        .any(|p| p.contains("Runner") || p.contains("::kernel") || p.contains("SparseCall")));
}
