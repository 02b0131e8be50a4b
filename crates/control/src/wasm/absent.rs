//! A build without wasmtime: the library opens, and refuses every module
//! with a clear error, so a node built this way still serves its built-ins.

use super::{WasmError, WasmLimits};

fn missing() -> String {
    "this build has no WebAssembly runtime (offrac-control feature `wasm`)".into()
}

/// Stands in for wasmtime's engine.
#[derive(Clone, Debug, Default)]
pub struct Engine;

/// Never made in this build.
#[derive(Clone, Debug)]
pub struct Module(());

pub fn engine() -> Engine {
    Engine
}

pub fn compile(_engine: &Engine, _bytes: &[u8]) -> Result<Module, String> {
    Err(missing())
}

pub fn check(_engine: &Engine, _module: &Module, _limits: WasmLimits) -> Result<(), WasmError> {
    Err(WasmError::Abi(missing()))
}

/// Never made in this build.
#[derive(Debug)]
pub struct WasmFunction(());

impl WasmFunction {
    pub fn new(
        _engine: &Engine,
        _module: &Module,
        _limits: WasmLimits,
    ) -> Result<WasmFunction, WasmError> {
        Err(WasmError::Abi(missing()))
    }

    pub fn run(&mut self, _param: u64, _input: &[u8], _out: &mut Vec<u8>) -> Result<(), WasmError> {
        Err(WasmError::Abi(missing()))
    }
}
