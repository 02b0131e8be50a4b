;; A module that misbehaves on purpose, chosen by `param`:
;; 1 loops forever, 2 traps (unreachable), 3 grows memory without bound,
;; 4 refuses its input (code 7), 5 returns an output outside its memory;
;; anything else echoes its input.
(module
  (memory (export "memory") 1)
  (func (export "alloc") (param $len i32) (result i32)
    (if (i32.gt_u (i32.add (i32.const 1024) (local.get $len)) (i32.shl (memory.size) (i32.const 16)))
      (then (drop (memory.grow (i32.add (i32.shr_u (local.get $len) (i32.const 16)) (i32.const 1))))))
    (i32.const 1024))
  (func (export "run") (param $ptr i32) (param $len i32) (param $param i64) (result i64)
    (if (i64.eq (local.get $param) (i64.const 1))
      (then (loop $forever (br $forever))))
    (if (i64.eq (local.get $param) (i64.const 2))
      (then unreachable))
    (if (i64.eq (local.get $param) (i64.const 3))
      (then
        (loop $more
          (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
        unreachable))
    (if (i64.eq (local.get $param) (i64.const 4))
      (then (return (i64.const -7))))
    (if (i64.eq (local.get $param) (i64.const 5))
      (then (return (i64.const 0x7fffffff00000010))))
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len))))
)
