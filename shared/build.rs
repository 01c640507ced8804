//! Embeds every file of `../schemas/` so that each binary carries its contracts.
use std::{env, fs, path::Path};

fn main() {
    // Read when it runs, not when it was compiled: one build script may serve two checkouts
    // that share a target directory.
    let manifest = env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("../schemas");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<_> = fs::read_dir(&dir)
        .expect("schemas/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    names.sort();
    let mut out = String::from("/// (file stem, contents) of every schema.\npub static SCHEMA_FILES: &[(&str, &str)] = &[\n");
    for p in names {
        println!("cargo:rerun-if-changed={}", p.display());
        let stem = p
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 file name");
        let abs = fs::canonicalize(&p).expect("canonical path");
        out.push_str(&format!(
            "    ({stem:?}, include_str!({:?})),\n",
            abs.display().to_string()
        ));
    }
    out.push_str("];\n");
    fs::write(
        Path::new(&env::var("OUT_DIR").expect("OUT_DIR")).join("schema_files.rs"),
        out,
    )
    .expect("write");
}
