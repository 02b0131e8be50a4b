//! The wasmtime runtime behind [`super::WasmFunction`].

use super::{WasmError, WasmLimits};
pub use wasmtime::{Engine, Module};
use wasmtime::{Instance, Memory, Store, StoreLimits, StoreLimitsBuilder, Trap, TypedFunc};

/// The store's data: its resource limits.
struct State {
    limits: StoreLimits,
}

struct Live {
    store: Store<State>,
    memory: Memory,
    alloc: TypedFunc<i32, i32>,
    run: TypedFunc<(i32, i32, i64), i64>,
}

/// One slot's instance of a module.
pub struct WasmFunction {
    engine: Engine,
    module: Module,
    limits: WasmLimits,
    /// `None` after a trap: re-instantiated before the next call.
    live: Option<Live>,
}

impl std::fmt::Debug for WasmFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmFunction")
            .field("limits", &self.limits)
            .field("live", &self.live.is_some())
            .finish()
    }
}

/// The engine every module of a node is compiled for: Cranelift, fuel metering.
pub fn engine() -> Engine {
    let mut c = wasmtime::Config::new();
    c.consume_fuel(true);
    // A deep recursion traps (stack overflow) rather than taking the thread down.
    c.max_wasm_stack(1 << 20);
    // Engine::new fails only for contradictory settings, which these are not.
    Engine::new(&c).expect("a valid wasmtime configuration")
}

/// Compile (and validate) `bytes` for `engine`.
pub fn compile(engine: &Engine, bytes: &[u8]) -> Result<Module, String> {
    Module::new(engine, bytes).map_err(|e| describe(&e))
}

fn describe(e: &wasmtime::Error) -> String {
    format!("{e:#}")
}

fn classify(e: wasmtime::Error, fuel: u64) -> WasmError {
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => WasmError::OutOfFuel(fuel),
        Some(_) => WasmError::Trapped(describe(&e)),
        None => WasmError::Trapped(describe(&e)),
    }
}

fn instantiate(engine: &Engine, module: &Module, limits: WasmLimits) -> Result<Live, WasmError> {
    let state = State {
        limits: StoreLimitsBuilder::new()
            .memory_size(limits.max_memory)
            .memories(1)
            .tables(4)
            .table_elements(1 << 16)
            .instances(1)
            .build(),
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    // The start function and data initialisers run under the same budget.
    store
        .set_fuel(limits.fuel)
        .map_err(|e| WasmError::Abi(describe(&e)))?;
    let instance = Instance::new(&mut store, module, &[]).map_err(|e| classify(e, limits.fuel))?;
    let memory = instance
        .get_memory(&mut store, "memory")
        .ok_or_else(|| WasmError::Abi("no exported memory named `memory`".into()))?;
    let alloc = instance
        .get_typed_func::<i32, i32>(&mut store, "alloc")
        .map_err(|e| WasmError::Abi(format!("export `alloc(i32) -> i32`: {}", describe(&e))))?;
    let run = instance
        .get_typed_func::<(i32, i32, i64), i64>(&mut store, "run")
        .map_err(|e| {
            WasmError::Abi(format!(
                "export `run(i32, i32, i64) -> i64`: {}",
                describe(&e)
            ))
        })?;
    Ok(Live {
        store,
        memory,
        alloc,
        run,
    })
}

/// Check that `module` follows the ABI and instantiates within `limits`.
pub fn check(engine: &Engine, module: &Module, limits: WasmLimits) -> Result<(), WasmError> {
    if let Some(i) = module.imports().next() {
        return Err(WasmError::Abi(format!(
            "imports `{}::{}`; modules may import nothing",
            i.module(),
            i.name()
        )));
    }
    instantiate(engine, module, limits).map(drop)
}

impl WasmFunction {
    /// A warm instance of `module` (instantiated now: a module that cannot
    /// be is an error here, before any slot runs it).
    pub fn new(
        engine: &Engine,
        module: &Module,
        limits: WasmLimits,
    ) -> Result<WasmFunction, WasmError> {
        let live = instantiate(engine, module, limits)?;
        Ok(WasmFunction {
            engine: engine.clone(),
            module: module.clone(),
            limits,
            live: Some(live),
        })
    }

    /// Run on one complete request; `out` receives the output.
    pub fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), WasmError> {
        let live = match self.live.take() {
            Some(l) => l,
            None => instantiate(&self.engine, &self.module, self.limits)?,
        };
        let mut live = live;
        let r = Self::call(&mut live, self.limits.fuel, param, input, out);
        // A trapped or stopped instance may be half way through anything:
        // drop it. A refusal or a clean run keeps it warm.
        if matches!(r, Ok(()) | Err(WasmError::Refused(_))) {
            self.live = Some(live);
        }
        r
    }

    fn call(
        live: &mut Live,
        fuel: u64,
        param: u64,
        input: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), WasmError> {
        let Live {
            store,
            memory,
            alloc,
            run,
        } = live;
        store
            .set_fuel(fuel)
            .map_err(|e| WasmError::Abi(describe(&e)))?;
        let len = i32::try_from(input.len())
            .map_err(|_| WasmError::Abi("input larger than 2 GiB".into()))?;
        let ptr = alloc
            .call(&mut *store, len)
            .map_err(|e| classify(e, fuel))?;
        memory
            .write(&mut *store, ptr as u32 as usize, input)
            .map_err(|_| {
                WasmError::Abi(format!("alloc({len}) returned {ptr}, out of memory bounds"))
            })?;
        let r = run
            .call(&mut *store, (ptr, len, param as i64))
            .map_err(|e| classify(e, fuel))?;
        if r < 0 {
            return Err(WasmError::Refused(r.unsigned_abs()));
        }
        let (optr, olen) = ((r as u64 >> 32) as usize, (r as u64 & 0xFFFF_FFFF) as usize);
        let data = memory.data(&*store);
        let output = optr
            .checked_add(olen)
            .and_then(|end| data.get(optr..end))
            .ok_or_else(|| {
                WasmError::Abi(format!(
                    "output {optr}+{olen} is outside the memory of {} bytes",
                    data.len()
                ))
            })?;
        out.extend_from_slice(output);
        Ok(())
    }
}
