;; The example module of docs/control.md: every input byte plus `param`
;; (wrapping), in the same order. Follows the offrac ABI: exports `memory`,
;; `alloc(len) -> ptr` and `run(ptr, len, param) -> (out_ptr << 32 | out_len)`.
(module
  (memory (export "memory") 1)
  ;; The input goes at 1024, the output right after it: grow to fit both.
  (func (export "alloc") (param $len i32) (result i32)
    (local $need i32)
    (local.set $need (i32.add (i32.const 1024) (i32.shl (local.get $len) (i32.const 1))))
    (if (i32.gt_u (local.get $need) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq
              (memory.grow (i32.sub (i32.add (i32.shr_u (local.get $need) (i32.const 16)) (i32.const 1)) (memory.size)))
              (i32.const -1))
          (then unreachable))))
    (i32.const 1024))
  (func (export "run") (param $ptr i32) (param $len i32) (param $param i64) (result i64)
    (local $i i32) (local $out i32) (local $k i32)
    (local.set $out (i32.add (local.get $ptr) (local.get $len)))
    (local.set $k (i32.wrap_i64 (local.get $param)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (i32.store8
          (i32.add (local.get $out) (local.get $i))
          (i32.add (i32.load8_u (i32.add (local.get $ptr) (local.get $i))) (local.get $k)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $out)) (i64.const 32))
      (i64.extend_i32_u (local.get $len))))
)
