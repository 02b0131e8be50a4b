//! The function library: WebAssembly modules stored content-addressed by
//! SHA-256 in a state directory (`<dir>/modules/<hex digest>.wasm`),
//! validated and compiled once on upload, recompiled from the directory at
//! start-up.

use crate::wasm::{self, Engine, Module, WasmError, WasmFunction, WasmLimits};
use crate::wire::Digest;
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a module is not in the library.
#[derive(Debug, thiserror::Error)]
pub enum LibraryError {
    #[error("module of {size} bytes exceeds the maximum of {max}")]
    TooLarge { size: usize, max: usize },
    #[error("not a valid WebAssembly module: {0}")]
    Invalid(String),
    #[error(transparent)]
    Abi(#[from] WasmError),
    #[error("no module with digest {0}")]
    Missing(String),
    #[error("the library's state directory: {0}")]
    Io(#[from] std::io::Error),
}

/// The library's settings.
#[derive(Debug, Clone)]
pub struct LibraryConfig {
    /// Where modules are kept (`None`: in memory only, lost at exit).
    pub dir: Option<PathBuf>,
    pub max_module_bytes: usize,
    pub limits: WasmLimits,
}

impl Default for LibraryConfig {
    fn default() -> LibraryConfig {
        LibraryConfig {
            dir: None,
            max_module_bytes: 16 << 20,
            limits: WasmLimits::default(),
        }
    }
}

/// One stored module.
#[derive(Clone)]
pub struct Entry {
    pub module: Module,
    pub size: usize,
}

pub struct Library {
    compiler: Compiler,
    modules: BTreeMap<Digest, Entry>,
}

/// The expensive half of an upload — check, compile, store — with no access
/// to the library's table, so a node can run it off its I/O thread
/// ([`Library::compiler`], then [`Library::admit`] the result).
#[derive(Clone)]
pub struct Compiler {
    cfg: LibraryConfig,
    engine: Engine,
}

/// A module checked, compiled and stored by a [`Compiler`], not yet in the
/// library's table.
pub struct Prepared {
    pub digest: Digest,
    entry: Entry,
    bytes: Vec<u8>,
}

impl Prepared {
    /// The module's bytes (for a copy kept elsewhere, e.g. a cluster store).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The digest's text form (lower-case hex).
pub fn hex_digest(d: &Digest) -> String {
    hex::encode(d)
}

/// SHA-256 of `bytes`.
pub fn digest_of(bytes: &[u8]) -> Digest {
    Sha256::digest(bytes).into()
}

impl Library {
    /// Open the library, compiling every module found in its directory (a
    /// file that no longer compiles, or whose name is not its digest, is
    /// skipped with a warning: the library never serves what it cannot check).
    pub fn open(cfg: LibraryConfig) -> Result<Library, LibraryError> {
        let mut lib = Library {
            compiler: Compiler {
                engine: wasm::engine(),
                cfg,
            },
            modules: BTreeMap::new(),
        };
        if let Some(dir) = lib.compiler.modules_dir() {
            std::fs::create_dir_all(&dir)?;
            let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
                .collect();
            paths.sort();
            for p in paths {
                let bytes = std::fs::read(&p)?;
                let d = digest_of(&bytes);
                if p.file_stem().and_then(|s| s.to_str()) != Some(hex_digest(&d).as_str()) {
                    tracing::warn!(path = %p.display(), "module file is not named by its digest; skipped");
                    continue;
                }
                match lib.compiler.compile(&bytes) {
                    Ok(module) => {
                        lib.modules.insert(
                            d,
                            Entry {
                                module,
                                size: bytes.len(),
                            },
                        );
                    }
                    Err(e) => {
                        tracing::warn!(path = %p.display(), error = %e, "stored module skipped")
                    }
                }
            }
        }
        Ok(lib)
    }

    pub fn config(&self) -> &LibraryConfig {
        &self.compiler.cfg
    }

    /// A handle that checks, compiles and stores uploads on any thread.
    pub fn compiler(&self) -> Compiler {
        self.compiler.clone()
    }

    /// Put a module prepared by [`Library::compiler`] in the table; its
    /// digest. Admitting one that is already there is a no-op.
    pub fn admit(&mut self, prepared: Prepared) -> Digest {
        self.modules
            .entry(prepared.digest)
            .or_insert(prepared.entry);
        prepared.digest
    }

    /// Validate, compile and store `bytes`, on the caller's thread; its
    /// digest. Uploading a module that is already there is a no-op.
    pub fn upload(&mut self, bytes: &[u8]) -> Result<Digest, LibraryError> {
        let d = digest_of(bytes);
        if self.modules.contains_key(&d) {
            return Ok(d);
        }
        let prepared = self.compiler.prepare(bytes)?;
        Ok(self.admit(prepared))
    }

    /// Remove a module (the caller checks that no slot runs it).
    pub fn unload(&mut self, d: &Digest) -> Result<(), LibraryError> {
        self.modules
            .remove(d)
            .ok_or_else(|| LibraryError::Missing(hex_digest(d)))?;
        if let Some(dir) = self.compiler.modules_dir() {
            let path = dir.join(format!("{}.wasm", hex_digest(d)));
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        Ok(())
    }

    pub fn contains(&self, d: &Digest) -> bool {
        self.modules.contains_key(d)
    }

    /// A warm instance of module `d`, for a slot.
    pub fn instantiate(&self, d: &Digest) -> Result<WasmFunction, LibraryError> {
        let e = self
            .modules
            .get(d)
            .ok_or_else(|| LibraryError::Missing(hex_digest(d)))?;
        Ok(WasmFunction::new(
            &self.compiler.engine,
            &e.module,
            self.compiler.cfg.limits,
        )?)
    }

    /// (digest, size) of every module, by digest.
    pub fn list(&self) -> impl Iterator<Item = (&Digest, usize)> {
        self.modules.iter().map(|(d, e)| (d, e.size))
    }

    pub fn dir(&self) -> Option<&Path> {
        self.compiler.cfg.dir.as_deref()
    }
}

impl Compiler {
    fn modules_dir(&self) -> Option<PathBuf> {
        self.cfg.dir.as_ref().map(|d| d.join("modules"))
    }

    fn compile(&self, bytes: &[u8]) -> Result<Module, LibraryError> {
        if bytes.len() > self.cfg.max_module_bytes {
            return Err(LibraryError::TooLarge {
                size: bytes.len(),
                max: self.cfg.max_module_bytes,
            });
        }
        let module = wasm::compile(&self.engine, bytes).map_err(LibraryError::Invalid)?;
        wasm::check(&self.engine, &module, self.cfg.limits)?;
        Ok(module)
    }

    /// Check, compile and store `bytes` (the slow part of an upload: a large
    /// module takes about a second), ready for [`Library::admit`].
    pub fn prepare(&self, bytes: &[u8]) -> Result<Prepared, LibraryError> {
        let digest = digest_of(bytes);
        let module = self.compile(bytes)?;
        if let Some(dir) = self.modules_dir() {
            // Written under a temporary name, then renamed: a crash leaves no
            // half module under a digest's name.
            let path = dir.join(format!("{}.wasm", hex_digest(&digest)));
            let tmp = dir.join(format!("{}.tmp", hex_digest(&digest)));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path)?;
        }
        Ok(Prepared {
            digest,
            entry: Entry {
                module,
                size: bytes.len(),
            },
            bytes: bytes.to_vec(),
        })
    }
}
