//! Embeds the web inspector's built bundle (`ui/dist`, committed) in the binaries: a table of
//! its files, each `include_bytes!`d, so that `cargo run` needs no Node.js.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let dist = manifest.join("../ui/dist");
    println!("cargo:rerun-if-changed={}", dist.display());
    let mut files = vec![];
    walk(&dist, &mut files);
    files.sort();
    if files.is_empty() {
        println!(
            "cargo:warning=ui/dist is empty: the web inspector will answer 404 (npm --prefix ui run build)"
        );
    }
    let mut table =
        String::from("/// The files of `ui/dist`: path (without the leading `/`) and bytes.\n");
    table.push_str("pub static ASSETS: &[(&str, &[u8])] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let rel = f.strip_prefix(&dist).expect("under dist");
        let name = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let abs = f.canonicalize().expect("bundle file");
        let _ = writeln!(
            table,
            "    ({name:?}, include_bytes!({:?})),",
            abs.display().to_string()
        );
    }
    table.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("ui_assets.rs");
    std::fs::write(out, table).expect("write the asset table");
}
