//! Rewrites the generated code files from onyx-core's tables.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for file in onyx_codegen::FILES {
        let path = root.join(file.path);
        std::fs::write(&path, (file.render)())?;
        println!("wrote {}", file.path);
    }
    Ok(())
}
