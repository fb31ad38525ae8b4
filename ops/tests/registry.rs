//! The op registry: every op's description builds its default launches, its parameters read
//! back what is set, and docs/ops.md shows the shape table the registry renders.

use tileops_ops::registry::{find_op, shape_table, BuildError, OPS};

const BEGIN: &str = "<!-- shape-table:begin (rendered by tileops_ops::registry::shape_table) -->\n";
const END: &str = "<!-- shape-table:end -->";

#[test]
fn docs_ops_md_shows_the_shape_table_of_the_registry() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ops.md");
    let doc = std::fs::read_to_string(path).expect("docs/ops.md is readable");
    let start = doc
        .find(BEGIN)
        .expect("docs/ops.md has the shape-table begin marker")
        + BEGIN.len();
    let len = doc[start..]
        .find(END)
        .expect("docs/ops.md has the shape-table end marker");
    let table = shape_table(OPS);
    assert_eq!(
        &doc[start..start + len],
        table,
        "docs/ops.md's shape table has drifted from the registry; paste this between the \
         markers:\n{table}"
    );
}

#[test]
fn every_registered_op_builds_its_default_launches() {
    for op in OPS {
        let launches = op
            .launches(&[])
            .unwrap_or_else(|e| panic!("{}: {e}", op.name));
        assert!(!launches.is_empty(), "{} launches a kernel", op.name);
        assert!(launches.iter().all(|l| l.block_dim >= 1), "{}", op.name);
    }
    let names: std::collections::BTreeSet<_> = OPS.iter().map(|o| o.name).collect();
    assert_eq!(names.len(), OPS.len(), "op names are unique");
}

#[test]
fn every_default_given_back_builds_the_same_launches() {
    for op in OPS {
        let values: Vec<(String, String)> = op
            .params
            .iter()
            .map(|p| {
                let d = op
                    .default_of(p.name)
                    .unwrap_or_else(|| panic!("{} --{} has a default", op.name, p.flag()));
                (p.flag(), d)
            })
            .collect();
        let names = |v: Vec<tileops_ops::registry::Launch>| {
            v.into_iter()
                .map(|l| (l.kernel.name, l.block_dim, l.scalars))
                .collect::<Vec<_>>()
        };
        let given = names(op.launches(&values).expect("defaults are valid"));
        let default = names(op.launches(&[]).expect("defaults are valid"));
        assert_eq!(given, default, "{}", op.name);
    }
}

#[test]
fn a_set_parameter_changes_the_launch() {
    let op = find_op("paged-gather").expect("registered");
    let l = op
        .launches(&[("n".into(), "2".into()), ("size".into(), "40".into())])
        .expect("valid");
    assert_eq!(l[0].kernel.name, "paged_gather_bf16_40");
    assert_eq!(l[0].scalar("n"), Some(2));
}

#[test]
fn bad_names_and_values_are_errors() {
    let op = find_op("sparse-paged-attention").expect("registered");
    assert!(matches!(
        op.launches(&[("q".into(), "1".into())]),
        Err(BuildError::Unknown { .. })
    ));
    assert!(matches!(
        op.launches(&[("sink".into(), "maybe".into())]),
        Err(BuildError::Value { param: "sink", .. })
    ));
    assert!(matches!(
        op.launches(&[("batch".into(), "-1".into())]),
        Err(BuildError::Value { param: "batch", .. })
    ));
    assert!(matches!(
        op.launches(&[("v-dim".into(), "600".into())]),
        Err(BuildError::Op(_))
    ));
    assert!(find_op("no-such-op").is_none());
}
