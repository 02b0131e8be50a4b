//! The library and the WebAssembly runner against the example modules:
//! storage by digest across a restart, validation on upload, and every way a
//! module can misbehave answered with its own error while the instance keeps
//! serving.

use offrac_control::examples::{compile_wat, large_wat, ADD_WAT, BAD_WAT};
use offrac_control::{digest_of, Library, LibraryConfig, LibraryError, WasmError, WasmLimits};

fn lib_in(dir: Option<std::path::PathBuf>) -> Library {
    Library::open(LibraryConfig {
        dir,
        max_module_bytes: 1 << 20,
        limits: WasmLimits {
            fuel: 50_000_000,
            max_memory: 4 << 20,
        },
    })
    .unwrap()
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("offrac-control-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn add_module_runs_and_survives_a_restart() {
    let dir = tmpdir("restart");
    let bytes = compile_wat(ADD_WAT).unwrap();
    let d = {
        let mut lib = lib_in(Some(dir.clone()));
        let d = lib.upload(&bytes).unwrap();
        assert_eq!(d, digest_of(&bytes));
        // Uploading again is a no-op.
        assert_eq!(lib.upload(&bytes).unwrap(), d);
        d
    };
    let lib = lib_in(Some(dir.clone()));
    assert!(lib.contains(&d));
    let mut f = lib.instantiate(&d).unwrap();
    let mut out = Vec::new();
    f.run(2, &[1, 2, 255], &mut out).unwrap();
    assert_eq!(out, [3, 4, 1]);
    // A large input makes the module grow its memory.
    let big = vec![7u8; 300_000];
    out.clear();
    f.run(1, &big, &mut out).unwrap();
    assert!(out.len() == big.len() && out.iter().all(|&b| b == 8));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn invalid_oversized_and_importing_modules_are_refused() {
    let mut lib = lib_in(None);
    assert!(matches!(
        lib.upload(b"\0asm\x01\0\0\0garbage"),
        Err(LibraryError::Invalid(_))
    ));
    assert!(matches!(
        lib.upload(b"not wasm at all"),
        Err(LibraryError::Invalid(_))
    ));
    assert!(matches!(
        lib.upload(&vec![0u8; (1 << 20) + 1]),
        Err(LibraryError::TooLarge { .. })
    ));
    let imports =
        compile_wat(r#"(module (import "env" "f" (func)) (memory (export "memory") 1))"#).unwrap();
    assert!(matches!(
        lib.upload(&imports),
        Err(LibraryError::Abi(WasmError::Abi(_)))
    ));
    let no_run = compile_wat(r#"(module (memory (export "memory") 1) (func (export "alloc") (param i32) (result i32) i32.const 0))"#).unwrap();
    assert!(matches!(
        lib.upload(&no_run),
        Err(LibraryError::Abi(WasmError::Abi(_)))
    ));
    // Declares more memory than a store may have.
    let huge = compile_wat(r#"(module (memory (export "memory") 1000))"#).unwrap();
    assert!(lib.upload(&huge).is_err());
    assert_eq!(lib.list().count(), 0);
    assert!(matches!(
        lib.instantiate(&[0; 32]),
        Err(LibraryError::Missing(_))
    ));
}

#[test]
fn a_misbehaving_call_gets_its_error_and_the_next_call_is_served() {
    let mut lib = lib_in(None);
    let d = lib.upload(&compile_wat(BAD_WAT).unwrap()).unwrap();
    let mut f = lib.instantiate(&d).unwrap();
    let mut out = Vec::new();
    type Is = fn(&WasmError) -> bool;
    let cases: [(u64, Is); 5] = [
        (1, |e| matches!(e, WasmError::OutOfFuel(50_000_000))),
        (2, |e| matches!(e, WasmError::Trapped(_))),
        (3, |e| matches!(e, WasmError::Trapped(_))),
        (4, |e| matches!(e, WasmError::Refused(7))),
        (5, |e| matches!(e, WasmError::Abi(_))),
    ];
    for (param, is) in cases {
        out.clear();
        let t = std::time::Instant::now();
        let e = f.run(param, b"hello", &mut out).unwrap_err();
        assert!(is(&e), "param {param}: {e}");
        // The loop is stopped by its fuel, quickly.
        assert!(
            t.elapsed().as_secs() < 5,
            "param {param} took {:?}",
            t.elapsed()
        );
        out.clear();
        f.run(0, b"still here", &mut out).unwrap();
        assert_eq!(out, b"still here");
    }
}

#[test]
fn large_module_compiles_and_runs() {
    let bytes = compile_wat(&large_wat(500)).unwrap();
    assert!(bytes.len() > 20_000, "{}", bytes.len());
    let mut lib = lib_in(None);
    let d = lib.upload(&bytes).unwrap();
    let mut f = lib.instantiate(&d).unwrap();
    let mut out = Vec::new();
    f.run(1, &[1, 2, 3], &mut out).unwrap();
    assert_eq!(out, [2, 3, 4]);
}
