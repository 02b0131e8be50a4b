//! The node's shell side of the control plane (`docs/control.md`): the
//! function library, the authentication of control envelopes, and the
//! swappable function each slot's worker runs. The decisions of a swap are
//! the driver's [`offrac_control::SwapController`]; this module carries out
//! its `Install` step and answers the operations that touch no slot
//! (upload, list, unload).

use offrac_accel::{AccelError, Accelerator, FunctionState};
use offrac_control::{
    digest_of, hex_digest, Authenticator, Compiler, Digest, Envelope, Library, LibraryConfig,
    LibraryError, Op, Prepared, Target, WasmError, WasmFunction, WasmLimits,
};
use offrac_core::Job;
use offrac_proto::{FunctionId, Status, TENANT_NODE};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

/// `[control]` of the node's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSettings {
    /// Where the library and the slot assignment are kept across restarts
    /// (`None`: in memory only).
    pub state_dir: Option<PathBuf>,
    /// Tenant id → HMAC-SHA256 key. No key: every control request is refused.
    pub keys: HashMap<u16, Vec<u8>>,
    /// The cluster's node key: links between nodes say an authenticated
    /// hello with it, and forwarded hops keep their origin tenant
    /// (`docs/control.md`, "Tenants across nodes"). `None`: links are anonymous.
    pub node_key: Option<Vec<u8>>,
    /// How far a control request's timestamp may be from the node's clock.
    pub window_ms: u64,
    /// How long a swap waits for the slot's running request.
    pub drain_timeout_ms: u64,
    pub max_module_bytes: usize,
    /// Fuel per call of a WebAssembly function.
    pub fuel: u64,
    /// Largest linear memory of a WebAssembly function.
    pub max_memory_bytes: usize,
    /// Tenants' DRR weights and quotas, and whether anonymous data
    /// connections are served (`docs/control.md`, "Tenants").
    pub tenancy: offrac_core::Tenancy,
    /// `[[control.templates]]`: name → the built-in of each slot.
    pub templates: Vec<(String, Vec<u8>)>,
}

impl Default for ControlSettings {
    fn default() -> ControlSettings {
        let lib = LibraryConfig::default();
        ControlSettings {
            state_dir: None,
            keys: HashMap::new(),
            node_key: None,
            window_ms: 30_000,
            drain_timeout_ms: 1_000,
            max_module_bytes: lib.max_module_bytes,
            fuel: lib.limits.fuel,
            max_memory_bytes: lib.limits.max_memory,
            tenancy: offrac_core::Tenancy::default(),
            templates: Vec::new(),
        }
    }
}

/// What a slot runs now.
enum Current {
    Native(Box<dyn Accelerator>),
    Wasm(WasmFunction),
}

/// The accelerator a slot's worker holds: it runs whatever function the
/// control plane installed last. Installs happen only while the slot is
/// paused and idle, so the lock is never contended on the hot path.
pub struct SwapCell {
    /// The built-in the slot was configured with: names the worker thread.
    initial: FunctionId,
    current: Arc<Mutex<Current>>,
}

fn lock(m: &Mutex<Current>) -> MutexGuard<'_, Current> {
    // A native function that panicked (caught by the executor) poisons the
    // lock; the function itself is still usable, as before the swap cell.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Accelerator for SwapCell {
    fn function(&self) -> FunctionId {
        self.initial
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        match &mut *lock(&self.current) {
            Current::Native(a) => a.run(param, input, out),
            Current::Wasm(w) => w.run(param, input, out).map_err(|e| match e {
                WasmError::Trapped(_) | WasmError::Abi(_) => AccelError::Trapped(e.to_string()),
                WasmError::OutOfFuel(_) => AccelError::FuelExhausted(e.to_string()),
                WasmError::Refused(_) => AccelError::BadInput(e.to_string()),
            }),
        }
    }

    /// A native function reads the parts itself (gemv a kept matrix in
    /// place); a module gets them joined.
    fn run_parts(
        &mut self,
        param: u64,
        head: &[u8],
        tail: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), AccelError> {
        if let Current::Native(a) = &mut *lock(&self.current) {
            return a.run_parts(param, head, tail, out);
        }
        offrac_accel::run_joined(self, param, head, tail, out)
    }
}

/// How the shell answers a control request.
pub enum Handled {
    /// Answer now: status, `detail`, payload.
    Answer(Status, u64, Vec<u8>),
    /// An authenticated swap asked by `tenant`: for the driver's controller.
    Swap {
        slot: usize,
        target: Target,
        tenant: u16,
    },
    /// An authenticated forced unload of a module `tenant` alone holds and a
    /// slot runs: for the driver ([`crate::driver::Driver::handle_unload`]).
    Unload { digest: Digest, tenant: u16 },
    /// An authenticated replicate: for the driver
    /// ([`crate::driver::Driver::handle_replicate`]).
    Replicate {
        target: Target,
        n: usize,
        tenant: u16,
    },
    /// An authenticated shrink: for the driver
    /// ([`crate::driver::Driver::handle_shrink`]).
    Shrink {
        function: u8,
        keep: usize,
        tenant: u16,
    },
    /// An authenticated resize to a template: for the driver
    /// ([`crate::driver::Driver::handle_resize`]).
    Resize { name: String, tenant: u16 },
    /// An authenticated hello: the connection is `tenant`'s from now on.
    Hello { tenant: u16 },
    /// An authenticated hello of another node: the connection is a node link.
    PeerHello,
    /// An upload to check and compile off the I/O thread
    /// ([`Upload::prepare`]), then [`ControlPlane::finish_upload`].
    Compile(Upload),
}

/// Uploads being compiled at once, at most (queued behind one compile
/// thread): bounds the memory they hold to this many modules.
pub const MAX_COMPILING: usize = 4;

/// An authenticated upload of a module the library does not have yet.
pub struct Upload {
    pub tenant: u16,
    bytes: Vec<u8>,
    compiler: Compiler,
}

impl Upload {
    /// The slow part (about a second for a large module): check, compile,
    /// store. Runs on any thread.
    pub fn prepare(&self) -> Result<Prepared, LibraryError> {
        self.compiler.prepare(&self.bytes)
    }

    pub fn size(&self) -> usize {
        self.bytes.len()
    }
}

pub struct ControlPlane {
    library: Library,
    auth: Authenticator,
    cells: Vec<Arc<Mutex<Current>>>,
    state: FunctionState,
    state_dir: Option<PathBuf>,
    /// The tenants that uploaded each module: only they see and swap it.
    /// Kept in `<state_dir>/owners.json` (a module it does not name is
    /// nobody's until a tenant uploads it again).
    uploaders: HashMap<Digest, std::collections::BTreeSet<u16>>,
    /// Uploads handed out by [`Handled::Compile`] and not yet finished.
    compiling: usize,
    /// The library's home in the cluster store, if one is configured.
    store: Option<StoreLink>,
    /// The cluster's node key, for the hellos on this node's links.
    node_key: Option<Vec<u8>>,
    link_nonce: u64,
}

/// The control plane's side of the cluster store (`docs/control.md`, "The
/// library in the cluster store"): what the store holds, and where writes go.
struct StoreLink {
    device: u8,
    /// This node's slot assignment as the store had it at start.
    slots: Option<String>,
    /// The modules the store holds (as far as this node knows).
    held: std::collections::HashSet<Digest>,
    /// The background writer and watcher (set once the node runs).
    sync: Option<offrac_cluster::library::LibrarySync>,
}

/// A change to the library seen in the cluster store, for
/// [`ControlPlane::handle_store_event`].
pub enum StoreEvent {
    /// A module another node uploaded, compiled (off the I/O thread).
    Module(Result<Prepared, LibraryError>),
    /// The owners of module `hex` are now `tenants`.
    Owners { hex: String, tenants: Vec<u16> },
    /// Module `hex` was unloaded.
    Removed { hex: String },
}

fn digest_from_hex(h: &str) -> Option<Digest> {
    hex::decode(h).ok()?.try_into().ok()
}

#[derive(serde::Serialize, serde::Deserialize)]
struct SavedSlot {
    function: u8,
    /// The module's digest (hex) for a WebAssembly function.
    digest: Option<String>,
    /// The tenant whose module it is (only its connections see it).
    #[serde(default)]
    tenant: Option<u16>,
}

/// Write `dir/name` so that a crash leaves either the old file or the new
/// one: a temporary file, flushed to disk, then renamed over it.
fn write_atomically(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))
}

fn err_json(msg: &str) -> Vec<u8> {
    msg.as_bytes().to_vec()
}

impl ControlPlane {
    /// Open the library (recompiling what its directory holds).
    pub fn open(s: &ControlSettings, state: FunctionState) -> Result<ControlPlane, LibraryError> {
        let library = Library::open(LibraryConfig {
            dir: s.state_dir.clone(),
            max_module_bytes: s.max_module_bytes,
            limits: WasmLimits {
                fuel: s.fuel,
                max_memory: s.max_memory_bytes,
            },
        })?;
        Ok(ControlPlane {
            library,
            auth: Authenticator::new(
                s.keys
                    .clone()
                    .into_iter()
                    .chain(s.node_key.clone().map(|k| (TENANT_NODE, k)))
                    .collect(),
                s.window_ms,
            ),
            node_key: s.node_key.clone(),
            link_nonce: 0,
            cells: Vec::new(),
            state,
            state_dir: s.state_dir.clone(),
            uploaders: s
                .state_dir
                .as_ref()
                .and_then(|d| std::fs::read_to_string(d.join("owners.json")).ok())
                .and_then(|t| {
                    serde_json::from_str::<HashMap<String, std::collections::BTreeSet<u16>>>(&t)
                        .ok()
                })
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(h, t)| Some((hex::decode(h).ok()?.try_into().ok()?, t)))
                .collect(),
            compiling: 0,
            store: None,
        })
    }

    /// The hello this node says on a link to another node at wall-clock
    /// `now_ms` (`None`: no node key, links are anonymous). Its nonce is
    /// unique across the cluster's nodes and restarts: the device id, then
    /// the clock in microseconds plus a counter.
    pub fn link_hello(&mut self, now_ms: u64, device: u8) -> Option<Vec<u8>> {
        let key = self.node_key.as_ref()?;
        self.link_nonce += 1;
        let nonce = ((device as u64) << 56)
            | (now_ms.wrapping_mul(1000).wrapping_add(self.link_nonce) & ((1 << 56) - 1));
        Some(offrac_control::wire::encode(
            TENANT_NODE,
            now_ms,
            nonce,
            &Op::Hello,
            key,
        ))
    }

    /// The hex digests of the library's modules.
    pub fn module_hexes(&self) -> Vec<String> {
        self.library.list().map(|(d, _)| hex_digest(d)).collect()
    }

    /// A handle that checks and compiles modules on any thread.
    pub fn compiler(&self) -> Compiler {
        self.library.compiler()
    }

    /// Take in what the cluster store holds for this node (at start, before
    /// the slot assignment is restored): its modules (compiled here), their
    /// owners (joined with the state directory's), and the node's slot
    /// assignment, which takes the place of `slots.json`'s.
    pub fn absorb(&mut self, snap: offrac_cluster::library::LibrarySnapshot, device: u8) {
        let mut held = std::collections::HashSet::new();
        for bytes in snap.modules {
            match self.library.upload(&bytes) {
                Ok(d) => {
                    held.insert(d);
                }
                Err(e) => tracing::warn!(error = %e, "module of the cluster store skipped"),
            }
        }
        for (h, tenants) in snap.owners {
            if let Some(d) = digest_from_hex(&h) {
                self.uploaders.entry(d).or_default().extend(tenants);
            }
        }
        self.save_uploaders();
        self.store = Some(StoreLink {
            device,
            slots: snap.slots,
            held,
            sync: None,
        });
    }

    /// Write through `sync` from now on; first, what this node has that the
    /// store lacks (modules of its state directory, and every owner list).
    pub fn attach_store(&mut self, sync: offrac_cluster::library::LibrarySync) {
        use offrac_cluster::library::LibraryWrite;
        let Some(link) = &mut self.store else {
            return;
        };
        let dir = self.library.dir().map(|d| d.join("modules"));
        for (d, _) in self.library.list() {
            if link.held.contains(d) {
                continue;
            }
            let hex = hex_digest(d);
            let Some(bytes) = dir
                .as_ref()
                .and_then(|dir| std::fs::read(dir.join(format!("{hex}.wasm"))).ok())
            else {
                continue;
            };
            sync.write(LibraryWrite::Module { hex, bytes });
            link.held.insert(*d);
        }
        for (d, t) in &self.uploaders {
            sync.write(LibraryWrite::Owners {
                hex: hex_digest(d),
                tenants: t.iter().copied().collect(),
            });
        }
        link.sync = Some(sync);
    }

    fn store_write(&self, w: offrac_cluster::library::LibraryWrite) {
        if let Some(sync) = self.store.as_ref().and_then(|l| l.sync.as_ref()) {
            sync.write(w);
        }
    }

    /// Put module `d` in the store if it may not be there yet.
    fn store_module(&mut self, d: Digest, bytes: &[u8]) {
        let new = self.store.as_mut().is_some_and(|l| l.held.insert(d));
        if new {
            self.store_write(offrac_cluster::library::LibraryWrite::Module {
                hex: hex_digest(&d),
                bytes: bytes.to_vec(),
            });
        }
    }

    fn store_owners(&self, d: &Digest) {
        let tenants = self
            .uploaders
            .get(d)
            .map(|t| t.iter().copied().collect())
            .unwrap_or_default();
        self.store_write(offrac_cluster::library::LibraryWrite::Owners {
            hex: hex_digest(d),
            tenants,
        });
    }

    /// A change another node made to the library in the cluster store.
    /// `in_use`: whether a slot of this node runs a module (an unloaded
    /// module a slot runs stays until it is swapped out).
    pub fn handle_store_event(&mut self, ev: StoreEvent, in_use: impl Fn(&Digest) -> bool) {
        match ev {
            StoreEvent::Module(Ok(p)) => {
                let d = self.library.admit(p);
                if let Some(link) = &mut self.store {
                    link.held.insert(d);
                }
            }
            StoreEvent::Module(Err(e)) => {
                tracing::warn!(error = %e, "module of the cluster store skipped")
            }
            StoreEvent::Owners { hex, tenants } => {
                let Some(d) = digest_from_hex(&hex) else {
                    return;
                };
                if tenants.is_empty() {
                    self.uploaders.remove(&d);
                } else {
                    self.uploaders.insert(d, tenants.into_iter().collect());
                }
                self.save_uploaders();
            }
            StoreEvent::Removed { hex } => {
                let Some(d) = digest_from_hex(&hex) else {
                    return;
                };
                if let Some(link) = &mut self.store {
                    link.held.remove(&d);
                }
                if in_use(&d) {
                    tracing::warn!(
                        digest = hex,
                        "module unloaded elsewhere is run here; kept until swapped out"
                    );
                    return;
                }
                if self.library.contains(&d) {
                    if let Err(e) = self.library.unload(&d) {
                        tracing::warn!(digest = hex, error = %e, "cannot drop an unloaded module");
                    }
                }
                self.uploaders.remove(&d);
                self.save_uploaders();
            }
        }
    }

    /// The saved slot assignment's text: the cluster store's if it had one
    /// for this node, else `<state_dir>/slots.json`'s.
    fn saved_slots_text(&self) -> Option<String> {
        if let Some(t) = self.store.as_ref().and_then(|l| l.slots.clone()) {
            return Some(t);
        }
        std::fs::read_to_string(self.state_dir.as_ref()?.join("slots.json")).ok()
    }

    /// Keep who uploaded which module for a restart.
    fn save_uploaders(&self) {
        let Some(dir) = &self.state_dir else {
            return;
        };
        let by_hex: HashMap<String, &std::collections::BTreeSet<u16>> = self
            .uploaders
            .iter()
            .map(|(d, t)| (hex_digest(d), t))
            .collect();
        let text = serde_json::to_string_pretty(&by_hex).unwrap_or_default();
        if let Err(e) = write_atomically(dir, "owners.json", text.as_bytes()) {
            tracing::error!(error = %e, "cannot save the module owners");
        }
    }

    /// The owners of the function ids that `targets` (the assignment the
    /// node starts with, [`ControlPlane::saved_targets`] or the configured
    /// one) serve with modules: the tenant `slots.json` recorded for the
    /// slot, or, in a file written before slots recorded it, the module's
    /// uploader if it has exactly one. A module slot with neither is served
    /// to every connection, as before tenants, until swapped.
    pub fn saved_owners(&self, targets: &[Target]) -> Vec<(u8, u16)> {
        let saved: Vec<SavedSlot> = self
            .saved_slots_text()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let mut owners = Vec::new();
        for (i, t) in targets.iter().enumerate() {
            let Target::Wasm { function, digest } = t else {
                continue;
            };
            let recorded = saved
                .get(i)
                .filter(|s| s.function == *function)
                .and_then(|s| s.tenant);
            let sole = self
                .uploaders
                .get(digest)
                .filter(|t| t.len() == 1)
                .and_then(|t| t.first().copied());
            match recorded.or(sole) {
                Some(o) => owners.push((*function, o)),
                None => tracing::warn!(
                    function,
                    digest = hex_digest(digest),
                    "restored module slot has no known owner; served to every connection"
                ),
            }
        }
        owners
    }

    /// The slot assignment saved by the last swap, if any and if it still
    /// fits: `slots` entries, every module still in the library.
    pub fn saved_targets(&self, slots: usize) -> Option<Vec<Target>> {
        let text = self.saved_slots_text()?;
        let saved: Vec<SavedSlot> = match serde_json::from_str(&text) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "saved slot assignment ignored");
                return None;
            }
        };
        if saved.len() != slots {
            tracing::warn!(
                saved = saved.len(),
                slots,
                "saved slot assignment has another slot count; ignored"
            );
            return None;
        }
        let mut out = Vec::new();
        for s in saved {
            let t = match s.digest {
                None if FunctionId::from_id(s.function).is_some() => Target::Builtin(s.function),
                Some(h) => {
                    let d: Digest = hex::decode(&h).ok()?.try_into().ok()?;
                    if !self.library.contains(&d) {
                        tracing::warn!(
                            digest = h,
                            "saved slot's module is not in the library; assignment ignored"
                        );
                        return None;
                    }
                    Target::Wasm {
                        function: s.function,
                        digest: d,
                    }
                }
                None => return None,
            };
            out.push(t);
        }
        Some(out)
    }

    /// Save the slot assignment (after a swap) so a restart keeps it.
    pub fn save_targets(&self, targets: &[Target], owner_of: impl Fn(u8) -> Option<u16>) {
        if self.state_dir.is_none() && self.store.is_none() {
            return;
        }
        let saved: Vec<SavedSlot> = targets
            .iter()
            .map(|t| match t {
                Target::Builtin(f) => SavedSlot {
                    function: *f,
                    digest: None,
                    tenant: None,
                },
                Target::Wasm { function, digest } => SavedSlot {
                    function: *function,
                    digest: Some(hex_digest(digest)),
                    tenant: owner_of(*function),
                },
            })
            .collect();
        let text = serde_json::to_string_pretty(&saved).unwrap_or_default();
        if let Some(link) = &self.store {
            self.store_write(offrac_cluster::library::LibraryWrite::Slots {
                device: link.device,
                json: text.clone(),
            });
        }
        let Some(dir) = &self.state_dir else {
            return;
        };
        if let Err(e) = write_atomically(dir, "slots.json", text.as_bytes()) {
            tracing::error!(error = %e, "cannot save the slot assignment");
        }
    }

    fn instance(&self, target: Target) -> Result<Current, String> {
        match target {
            Target::Builtin(f) => {
                let f =
                    FunctionId::from_id(f).ok_or_else(|| format!("no built-in function {f}"))?;
                Ok(Current::Native(offrac_accel::builtin_with(f, &self.state)))
            }
            Target::Wasm { digest, .. } => self
                .library
                .instantiate(&digest)
                .map(Current::Wasm)
                .map_err(|e| e.to_string()),
        }
    }

    /// The worker's accelerator for a new slot running `target` (configured
    /// as `initial`).
    pub fn new_cell(&mut self, initial: FunctionId, target: Target) -> Result<SwapCell, String> {
        let current = Arc::new(Mutex::new(self.instance(target)?));
        self.cells.push(current.clone());
        Ok(SwapCell { initial, current })
    }

    /// The `Install` step of a swap: validate the target (a module's digest
    /// must be in the library), instantiate it warm, and make it the slot's
    /// function. On failure the slot keeps its function.
    pub fn install(&mut self, slot: usize, target: Target) -> Result<(), String> {
        let cell = self
            .cells
            .get(slot)
            .ok_or_else(|| format!("no slot {slot}"))?
            .clone();
        let new = self.instance(target)?;
        *lock(&cell) = new;
        Ok(())
    }

    /// The answer to an upload that was [`Handled::Compile`]: `prepared`
    /// is what [`Upload::prepare`] gave.
    pub fn finish_upload(
        &mut self,
        tenant: u16,
        size: usize,
        prepared: Result<Prepared, LibraryError>,
    ) -> (Status, u64, Vec<u8>) {
        self.compiling = self.compiling.saturating_sub(1);
        match prepared {
            Ok(p) => {
                let d = p.digest;
                self.store_module(d, p.bytes());
                self.library.admit(p);
                self.claim(tenant, d, size)
            }
            Err(e @ LibraryError::TooLarge { .. }) => (
                Status::TooLarge,
                self.library.config().max_module_bytes as u64,
                err_json(&e.to_string()),
            ),
            Err(e @ LibraryError::Io(_)) => (Status::Internal, 0, err_json(&e.to_string())),
            Err(e) => (Status::BadInput, 0, err_json(&e.to_string())),
        }
    }

    /// Module `d` (of `size` bytes) is in the library: `tenant` may use it.
    fn claim(&mut self, tenant: u16, d: Digest, size: usize) -> (Status, u64, Vec<u8>) {
        self.uploaders.entry(d).or_default().insert(tenant);
        self.save_uploaders();
        self.store_owners(&d);
        let body = serde_json::json!({ "digest": hex_digest(&d), "size": size });
        (Status::Ok, 0, body.to_string().into_bytes())
    }

    /// A complete control request, at wall-clock `now_ms`. `slots`: what each
    /// slot serves (and whether it is being swapped); `in_use`: whether a
    /// slot runs (or is being swapped to) a module.
    /// `owner_of`: the tenant owning a function id (a module it swapped in).
    pub fn handle(
        &mut self,
        now_ms: u64,
        job: &Job,
        slots: &[(Target, bool)],
        in_use: impl Fn(&Digest) -> bool,
        owner_of: impl Fn(u8) -> Option<u16>,
    ) -> Handled {
        let payload = job.payload.bytes();
        let env = match Envelope::decode(&payload) {
            Ok(e) => e,
            Err(e) => return Handled::Answer(Status::Malformed, 0, err_json(&e.to_string())),
        };
        if let Err(e) = self.auth.verify(now_ms, &env, &payload) {
            tracing::warn!(tenant = env.tenant, error = %e, "control request refused");
            return Handled::Answer(Status::Unauthorized, 0, err_json(&e.to_string()));
        }
        tracing::info!(tenant = env.tenant, op = env.op.name(), "control request");
        let tenant = env.tenant;
        if tenant == TENANT_NODE {
            return match env.op {
                Op::Hello => Handled::PeerHello,
                _ => {
                    let msg = "the node key only says hello on links between nodes";
                    Handled::Answer(Status::Unauthorized, 0, err_json(msg))
                }
            };
        }
        let owns = |cp: &ControlPlane, d: &Digest| {
            cp.uploaders.get(d).is_some_and(|t| t.contains(&tenant))
        };
        match env.op {
            Op::Hello => Handled::Hello { tenant },
            Op::Upload(bytes) => {
                let max = self.library.config().max_module_bytes;
                let d = digest_of(&bytes);
                if self.library.contains(&d) {
                    // Nothing to compile: this tenant's claim, answered at once.
                    self.store_module(d, &bytes);
                    let (status, detail, body) = self.claim(tenant, d, bytes.len());
                    Handled::Answer(status, detail, body)
                } else if bytes.len() > max {
                    let e = LibraryError::TooLarge {
                        size: bytes.len(),
                        max,
                    };
                    Handled::Answer(Status::TooLarge, max as u64, err_json(&e.to_string()))
                } else if self.compiling >= MAX_COMPILING {
                    let msg = format!("the node is compiling {MAX_COMPILING} uploads; retry");
                    Handled::Answer(Status::Busy, MAX_COMPILING as u64, err_json(&msg))
                } else {
                    self.compiling += 1;
                    Handled::Compile(Upload {
                        tenant,
                        bytes,
                        compiler: self.library.compiler(),
                    })
                }
            }
            Op::Swap { slot, target } => {
                let current = slots.get(slot as usize).map(|(t, _)| t.function());
                if let Some(refusal) = self.target_refusal(tenant, target, current, &owner_of) {
                    return refusal;
                }
                Handled::Swap {
                    slot: slot as usize,
                    target,
                    tenant,
                }
            }
            Op::Replicate { n, target } => {
                if let Some(refusal) = self.target_refusal(tenant, target, None, &owner_of) {
                    return refusal;
                }
                Handled::Replicate {
                    target,
                    n: n as usize,
                    tenant,
                }
            }
            Op::List => {
                let modules: Vec<serde_json::Value> = self
                    .library
                    .list()
                    .filter(|(d, _)| owns(self, d))
                    .map(|(d, size)| serde_json::json!({ "digest": hex_digest(d), "size": size }))
                    .collect();
                let slots: Vec<serde_json::Value> = slots
                    .iter()
                    .enumerate()
                    .map(|(i, (t, swapping))| match t {
                        Target::Wasm { function, .. } if owner_of(*function) != Some(tenant) => {
                            serde_json::json!({ "slot": i, "kind": "another tenant's", "swapping": swapping })
                        }
                        _ => target_json(i, t, *swapping),
                    })
                    .collect();
                let body = serde_json::json!({ "modules": modules, "slots": slots });
                Handled::Answer(Status::Ok, 0, body.to_string().into_bytes())
            }
            Op::Resize(name) => Handled::Resize { name, tenant },
            Op::Shrink { keep, function } => {
                if owner_of(function).is_some_and(|o| o != tenant) {
                    let msg = "the function id belongs to another tenant";
                    return Handled::Answer(Status::BadInput, 0, err_json(msg));
                }
                Handled::Shrink {
                    function,
                    keep: keep as usize,
                    tenant,
                }
            }
            Op::Unload { digest: d, force } => {
                if !owns(self, &d) {
                    let msg = format!("no module with digest {} in the library", hex_digest(&d));
                    return Handled::Answer(Status::UnknownFunction, 0, err_json(&msg));
                }
                // Shared by other uploaders: only this tenant's claim goes.
                if let Some(t) = self.uploaders.get_mut(&d).filter(|t| t.len() > 1) {
                    t.remove(&tenant);
                    self.save_uploaders();
                    self.store_owners(&d);
                    return Handled::Answer(Status::Ok, 0, Vec::new());
                }
                if in_use(&d) {
                    if force {
                        return Handled::Unload { digest: d, tenant };
                    }
                    let msg = format!(
                        "module {} is run by a slot; swap it out first (or unload with force)",
                        hex_digest(&d)
                    );
                    return Handled::Answer(Status::BadInput, 0, err_json(&msg));
                }
                let (status, detail, body) = self.remove(&d);
                Handled::Answer(status, detail, body)
            }
        }
    }

    /// Why `tenant` may not make a slot (now serving function `current`, if
    /// one is named) run `target`: another tenant's function id or slot
    /// (`BAD_INPUT`), a module not in the library or not its own
    /// (`UNKNOWN_FUNCTION`).
    fn target_refusal(
        &self,
        tenant: u16,
        target: Target,
        current: Option<u8>,
        owner_of: &impl Fn(u8) -> Option<u16>,
    ) -> Option<Handled> {
        // Another tenant's function id, or a slot running another
        // tenant's module, is not this tenant's to change.
        let foreign = |f: u8| owner_of(f).is_some_and(|o| o != tenant);
        if foreign(target.function()) || current.is_some_and(foreign) {
            let msg = "the function id or the slot's module belongs to another tenant";
            return Some(Handled::Answer(Status::BadInput, 0, err_json(msg)));
        }
        if let Target::Wasm { digest, .. } = target {
            // Another tenant's module is answered as a missing one.
            let owns = self
                .uploaders
                .get(&digest)
                .is_some_and(|t| t.contains(&tenant));
            if !self.library.contains(&digest) || !owns {
                let msg = format!(
                    "no module with digest {} in the library",
                    hex_digest(&digest)
                );
                return Some(Handled::Answer(
                    Status::UnknownFunction,
                    target.function() as u64,
                    err_json(&msg),
                ));
            }
        }
        None
    }

    /// Remove module `d` from the library and the state directory.
    fn remove(&mut self, d: &Digest) -> (Status, u64, Vec<u8>) {
        match self.library.unload(d) {
            Ok(()) => {
                self.uploaders.remove(d);
                self.save_uploaders();
                if let Some(link) = &mut self.store {
                    link.held.remove(d);
                }
                self.store_write(offrac_cluster::library::LibraryWrite::Remove {
                    hex: hex_digest(d),
                });
                (Status::Ok, 0, Vec::new())
            }
            Err(e @ LibraryError::Missing(_)) => {
                (Status::UnknownFunction, 0, err_json(&e.to_string()))
            }
            Err(e) => (Status::Internal, 0, err_json(&e.to_string())),
        }
    }

    /// The end of a forced unload ([`Handled::Unload`]): its slots are
    /// swapped out (`swapped`: the swap reports), the module goes. Checked
    /// again: if another tenant claimed it meanwhile only `tenant`'s claim
    /// goes; if a slot runs it again, `BUSY` (the driver refuses swaps to a
    /// module being unloaded, so this does not happen).
    pub fn finish_unload(
        &mut self,
        d: &Digest,
        tenant: u16,
        swapped: serde_json::Value,
        in_use: bool,
    ) -> (Status, u64, Vec<u8>) {
        let claims = self.uploaders.get(d).map(|t| t.len()).unwrap_or(0);
        let ok_body = || {
            let body = serde_json::json!({ "digest": hex_digest(d), "swapped_out": swapped });
            body.to_string().into_bytes()
        };
        if claims > 1 {
            if let Some(t) = self.uploaders.get_mut(d) {
                t.remove(&tenant);
            }
            self.save_uploaders();
            self.store_owners(d);
            return (Status::Ok, 0, ok_body());
        }
        if in_use {
            let msg = "a slot runs the module again; retry the unload";
            return (Status::Busy, 0, err_json(msg));
        }
        match self.remove(d) {
            (Status::Ok, detail, _) => (Status::Ok, detail, ok_body()),
            other => other,
        }
    }
}

/// One slot in a list answer.
pub fn target_json(slot: usize, t: &Target, swapping: bool) -> serde_json::Value {
    match t {
        Target::Builtin(f) => serde_json::json!({
            "slot": slot,
            "function": f,
            "kind": "builtin",
            "name": FunctionId::from_id(*f).map(|f| f.name()),
            "swapping": swapping,
        }),
        Target::Wasm { function, digest } => serde_json::json!({
            "slot": slot,
            "function": function,
            "kind": "wasm",
            "digest": hex_digest(digest),
            "swapping": swapping,
        }),
    }
}
