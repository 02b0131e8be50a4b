//! With the `model` feature: Verilate rtl/offrac_request_path.v (Verilator 5)
//! into C++ and compile it, the Verilator runtime and csrc/shim.cpp into one
//! static library. Without the feature: nothing (no Verilator needed).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The modules of the top, in rtl/.
const SOURCES: &[&str] = &[
    "offrac_request_path",
    "offrac_dispatcher",
    "offrac_req_header_parse",
    "offrac_pool_admit",
    "offrac_resp_header_build",
    "offrac_accel_echo",
    "offrac_accel_topk",
    "offrac_accel_mapid",
    "offrac_mapid_probe",
    "offrac_accel_minmax",
    "offrac_minmax_elem",
    "offrac_accel_sparse",
    "offrac_sparse_packer",
    "offrac_accel_bucketize",
    "offrac_result_buffer",
    "offrac_axis_reg",
    "offrac_chain_router",
    "offrac_slot_stage",
    "offrac_selector",
    "offrac_slot_queue",
];

/// The instance the node serves with (docs/rtl.md, "The Verilated datapath"):
/// the same numbers the crate checks a node's configuration against.
#[allow(dead_code)]
mod params {
    include!("src/params.rs");
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/shim.cpp");
    println!("cargo:rerun-if-changed=src/params.rs");
    if std::env::var_os("CARGO_FEATURE_MODEL").is_none() {
        return;
    }
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let rtl = manifest.join("../../rtl");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let obj = out.join("vobj");
    // Verilator does not delete the files of an earlier run that this one does not write (a
    // module's memory gone, its `__DepSet_*` split differently); the glob of *.cpp below would
    // compile them against the new headers and fail.
    if obj.exists() {
        std::fs::remove_dir_all(&obj).expect("remove verilator's earlier output");
    }
    let verilator = std::env::var("VERILATOR").unwrap_or_else(|_| "verilator".into());
    let mut cmd = Command::new(&verilator);
    cmd.args([
        "--cc",
        "-O3",
        "--top-module",
        "offrac_request_path",
        "-Wno-fatal",
        // the RTL's parameter checks ($error at elaboration) stay errors
        "-Werror-USERERROR",
        "-Wno-lint",
    ])
    .args(["-Wno-style", "--prefix", "Vrp", "-Mdir"])
    .arg(&obj)
    .args(params::verilator_parameters());
    for s in SOURCES {
        let f = rtl.join(format!("{s}.v"));
        println!("cargo:rerun-if-changed={}", f.display());
        cmd.arg(f);
    }
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("cannot run `{verilator}` ({e}): the `rtl` feature needs Verilator 5 (apt install verilator)")
    });
    assert!(
        status.success(),
        "verilator failed on rtl/offrac_request_path.v"
    );

    let root = verilator_root(&verilator);
    let include = root.join("include");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .opt_level(2)
        .warnings(false)
        .flag_if_supported("-faligned-new")
        .flag_if_supported("-fcf-protection=none")
        .define("VM_TRACE", "0")
        .include(&obj)
        .include(&include)
        .include(include.join("vltstd"))
        .file(manifest.join("csrc/shim.cpp"))
        .file(include.join("verilated.cpp"))
        .file(include.join("verilated_threads.cpp"));
    let mut cpps: Vec<PathBuf> = std::fs::read_dir(&obj)
        .expect("verilator's output directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cpp"))
        .collect();
    cpps.sort();
    for p in cpps {
        build.file(p);
    }
    build.compile("offrac_rtl_model");
    println!("cargo:rustc-link-lib=pthread");
}

/// Where Verilator keeps its runtime sources (`verilator --getenv VERILATOR_ROOT`).
fn verilator_root(verilator: &str) -> PathBuf {
    if let Ok(r) = std::env::var("VERILATOR_ROOT") {
        return PathBuf::from(r);
    }
    let out = Command::new(verilator)
        .args(["--getenv", "VERILATOR_ROOT"])
        .output()
        .expect("verilator --getenv VERILATOR_ROOT");
    let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let p = Path::new(&root);
    assert!(
        p.join("include/verilated.cpp").is_file(),
        "no include/verilated.cpp under VERILATOR_ROOT {root}"
    );
    p.to_path_buf()
}
