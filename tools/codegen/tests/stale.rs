//! The committed generated files must match what the tables give now.

use std::path::Path;

#[test]
fn the_committed_code_files_match_the_tables() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for file in onyx_codegen::FILES {
        let committed = std::fs::read_to_string(root.join(file.path))
            .unwrap_or_else(|e| panic!("{}: {e}", file.path));
        assert!(
            committed == (file.render)(),
            "{} is stale: run `cargo run -p onyx-codegen` and commit the result",
            file.path
        );
    }
}

#[test]
fn names_are_written_in_screaming_snake_case() {
    assert_eq!(onyx_codegen::screaming("HardSigmoid"), "HARD_SIGMOID");
    assert_eq!(onyx_codegen::screaming("PRelu"), "PRELU");
    assert_eq!(onyx_codegen::screaming("IsNan"), "IS_NAN");
}
