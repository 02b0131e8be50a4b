//! Example modules, as WebAssembly text (`wat/` beside this crate): the ones
//! the tests, `offrac ctl bench-swap` and `docs/control.md` use. No wasm
//! toolchain is needed: [`compile_wat`] turns text into a module.

/// Every input byte plus `param` (wrapping).
pub const ADD_WAT: &str = include_str!("../wat/add.wat");
/// Loops, traps, grows memory without bound, refuses or breaks the ABI,
/// chosen by `param` (see the file).
pub const BAD_WAT: &str = include_str!("../wat/bad.wat");

/// WebAssembly text to a binary module.
pub fn compile_wat(text: &str) -> Result<Vec<u8>, String> {
    wat::parse_str(text).map_err(|e| e.to_string())
}

/// A large module: the ABI of [`ADD_WAT`] (echo plus `param`) and `n`
/// extra functions of arithmetic, for measuring a large module's swap.
pub fn large_wat(n: usize) -> String {
    let mut s = String::from(
        "(module\n  (memory (export \"memory\") 1)\n  (global $acc (mut i64) (i64.const 0))\n",
    );
    for i in 0..n {
        s.push_str(&format!(
            "  (func $f{i} (export \"f{i}\") (param $x i64) (result i64)\n    \
             (local $y i64)\n    \
             (local.set $y (i64.mul (local.get $x) (i64.const {m})))\n    \
             (local.set $y (i64.xor (local.get $y) (i64.shr_u (local.get $y) (i64.const 13))))\n    \
             (local.set $y (i64.add (local.get $y) (i64.rotl (local.get $x) (i64.const {r}))))\n    \
             (global.set $acc (i64.add (global.get $acc) (local.get $y)))\n    \
             (i64.sub (local.get $y) (i64.const {i})))\n",
            m = 2 * i + 3,
            r = i % 61 + 1,
        ));
    }
    // alloc/run as in add.wat.
    let add = ADD_WAT
        .split_once("(memory (export \"memory\") 1)")
        .map(|(_, rest)| rest)
        .unwrap_or("");
    s.push_str(add.trim_end().trim_end_matches(')'));
    s.push_str("\n)\n");
    s
}
