//! The function registry: one row per built-in function — its id, name,
//! payload layouts, parameter fields and the slot state it needs.
//!
//! Everything else derives from [`FUNCTIONS`]: the node's config validation,
//! the describe answer, the CLI's encoders, the payload generator and (through
//! `offrac functions --json`, committed as `python/offrac/functions.json`) the
//! Python client. `docs/accelerators.md` gives each function's exact
//! semantics; `docs/protocol.md` ("Payload layouts") the layouts.
//!
//! Adding a function: a variant here and its row in [`FUNCTIONS`], its kernel
//! in one new file of `offrac-accel` and its arm in `offrac_accel::builtin_with`
//! (the compiler points at every `match` that must learn it).

/// Built-in function ids (`docs/protocol.md`, "Functions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum FunctionId {
    Echo = 0,
    TopK = 1,
    Logit = 2,
    MinMax = 3,
    MatMul = 4,
    Spin = 5,
    MapId = 6,
    SparseTransform = 7,
    Bucketize = 8,
    SigridHash = 9,
    FirstX = 10,
    IdListTransform = 11,
    Cartesian = 12,
    NGram = 13,
    GetLocalHour = 14,
    Onehot = 15,
    BoxCox = 16,
    Cnn = 17,
    Gemv = 18,
}

/// One element of an array payload: always little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    I32,
    U32,
    F32,
    /// 2-byte pixels (the CNN's image channels); arrays only, never ragged.
    U16,
}

impl Elem {
    /// The numpy-style name used in docs, JSON and errors.
    pub fn name(self) -> &'static str {
        match self {
            Elem::I32 => "int32",
            Elem::U32 => "uint32",
            Elem::F32 => "float32",
            Elem::U16 => "uint16",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::U16 => 2,
            Elem::I32 | Elem::U32 | Elem::F32 => 4,
        }
    }
}

/// How a payload is laid out (`docs/protocol.md`, "Payload layouts").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Opaque bytes.
    Bytes,
    /// A flat array of elements (4 bytes each, 2 for `uint16`).
    Array(Elem),
    /// Rows of variable length: `u32 rows`, `u32 offsets[rows + 1]`, then one
    /// array of `offsets[rows]` elements per entry (parallel arrays: ids; or
    /// column indices and values for CSR).
    Ragged(&'static [Elem]),
}

impl Layout {
    /// Short text form used by `offrac functions` and the JSON export:
    /// `bytes`, `float32[]`, `ragged<uint32>`, `ragged<uint32,float32>`.
    pub fn describe(self) -> String {
        match self {
            Layout::Bytes => "bytes".into(),
            Layout::Array(e) => format!("{}[]", e.name()),
            Layout::Ragged(es) => format!(
                "ragged<{}>",
                es.iter().map(|e| e.name()).collect::<Vec<_>>().join(",")
            ),
        }
    }
}

/// How a parameter field's bits are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// Unsigned integer.
    Unsigned,
    /// Two's-complement signed integer of the field's width.
    Signed,
    /// IEEE-754 `float32` bits (a 32-bit field).
    Float,
}

/// One named field packed into the hop's 64-bit parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamField {
    pub name: &'static str,
    /// Lowest bit of the field in the u64.
    pub shift: u8,
    /// Width in bits (1..=64).
    pub bits: u8,
    pub kind: ParamKind,
    /// Clients (CLI, Python) insist on it; the wire cannot tell it from 0,
    /// and the node refuses 0 (`BAD_INPUT`).
    pub required: bool,
    pub doc: &'static str,
}

impl ParamField {
    const fn new(name: &'static str, doc: &'static str) -> ParamField {
        ParamField {
            name,
            shift: 0,
            bits: 64,
            kind: ParamKind::Unsigned,
            required: false,
            doc,
        }
    }
    const fn required(mut self) -> ParamField {
        self.required = true;
        self
    }
    const fn at(mut self, shift: u8, bits: u8, kind: ParamKind) -> ParamField {
        self.shift = shift;
        self.bits = bits;
        self.kind = kind;
        self
    }

    /// This field's bits, shifted into place, for a value given as text
    /// (`"16"`, `"-3"`, `"0.5"`); `None` when it does not fit the field.
    pub fn pack_text(&self, text: &str) -> Option<u64> {
        let raw = match self.kind {
            ParamKind::Float => u64::from(text.parse::<f32>().ok()?.to_bits()),
            ParamKind::Unsigned => {
                let v: u64 = text.parse().ok()?;
                (self.bits == 64 || v >> self.bits == 0).then_some(v)?
            }
            ParamKind::Signed => {
                let v: i64 = text.parse().ok()?;
                let half = 1i128 << (self.bits - 1);
                (-half..half).contains(&i128::from(v)).then_some(())?;
                (v as u64) & self.mask()
            }
        };
        Some(raw << self.shift)
    }

    /// Field mask before shifting.
    fn mask(&self) -> u64 {
        if self.bits == 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }

    /// The field's raw bits out of a packed parameter.
    pub fn raw(&self, param: u64) -> u64 {
        (param >> self.shift) & self.mask()
    }

    /// The field as a signed value (sign-extended from its width).
    pub fn signed(&self, param: u64) -> i64 {
        let r = self.raw(param);
        let unused = 64 - u32::from(self.bits);
        ((r << unused) as i64) >> unused
    }
}

/// State a slot of the function holds, configured per node in
/// `[functions.NAME]` (`docs/operations.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    None,
    /// MapId's key → index dictionary.
    Dictionary,
    /// Bucketize's border sets.
    Borders,
}

/// Seed 001, Table I: whether a request is one row or a whole tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    /// Each row independently: a request can be one row, a single fragment.
    PerRow,
    /// Depends on the whole tensor (a mini-batch that may need reassembly).
    PerTensor,
    /// Not a preprocessing operator.
    Other,
}

/// One row of the registry.
#[derive(Debug, Clone, Copy)]
pub struct FunctionSpec {
    pub id: FunctionId,
    pub name: &'static str,
    pub summary: &'static str,
    pub input: Layout,
    pub output: Layout,
    pub params: &'static [ParamField],
    pub state: SlotState,
    pub granularity: Granularity,
}

use Elem::{F32, I32, U16, U32};
use Granularity::{Other, PerRow, PerTensor};
use ParamKind::{Float, Signed, Unsigned};

const IDS: Layout = Layout::Ragged(&[U32]);

/// The registry, in id order (`FUNCTIONS[i].id as usize == i`).
pub static FUNCTIONS: [FunctionSpec; 19] = [
    FunctionSpec {
        id: FunctionId::Echo,
        name: "echo",
        summary: "returns its input unchanged",
        input: Layout::Bytes,
        output: Layout::Bytes,
        params: &[],
        state: SlotState::None,
        granularity: Other,
    },
    FunctionSpec {
        id: FunctionId::TopK,
        name: "topk",
        summary: "the K largest values, descending",
        input: Layout::Array(I32),
        output: Layout::Array(I32),
        params: &[ParamField::new("k", "how many of the largest values (>= 1)").required()],
        state: SlotState::None,
        granularity: Other,
    },
    FunctionSpec {
        id: FunctionId::Logit,
        name: "logit",
        summary: "ln(x / (1 - x)) element-wise",
        input: Layout::Array(F32),
        output: Layout::Array(F32),
        params: &[],
        state: SlotState::None,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::MinMax,
        name: "minmax",
        summary: "min-max normalisation (x - min) / (max - min) over the tensor",
        input: Layout::Array(F32),
        output: Layout::Array(F32),
        params: &[],
        state: SlotState::None,
        granularity: PerTensor,
    },
    FunctionSpec {
        id: FunctionId::MatMul,
        name: "matmul",
        summary: "product of two n x n matrices",
        input: Layout::Array(F32),
        output: Layout::Array(F32),
        params: &[ParamField::new(
            "n",
            "matrix side (0: inferred from the payload)",
        )],
        state: SlotState::None,
        granularity: Other,
    },
    FunctionSpec {
        id: FunctionId::Spin,
        name: "spin",
        summary: "busy-waits for a given time, then echoes",
        input: Layout::Bytes,
        output: Layout::Bytes,
        params: &[ParamField::new("us", "microseconds to spin")],
        state: SlotState::None,
        granularity: Other,
    },
    FunctionSpec {
        id: FunctionId::MapId,
        name: "mapid",
        summary: "32-bit hashed ids to contiguous ids through the slot's dictionary",
        input: Layout::Array(U32),
        output: Layout::Array(U32),
        params: &[],
        state: SlotState::Dictionary,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::SparseTransform,
        name: "sparsetransform",
        summary: "dense float32 rows to CSR (column indices and values of the non-zeros)",
        input: Layout::Array(F32),
        output: Layout::Ragged(&[U32, F32]),
        params: &[ParamField::new(
            "cols",
            "row width in elements (0: the whole payload is one row)",
        )],
        state: SlotState::None,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::Bucketize,
        name: "bucketize",
        summary: "bucket index of each value among the slot's sorted borders",
        input: Layout::Array(F32),
        output: Layout::Array(U32),
        params: &[ParamField::new(
            "set",
            "which configured border set (default 0)",
        )],
        state: SlotState::Borders,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::SigridHash,
        name: "sigridhash",
        summary: "TorchArrow sigrid_hash of each id into [0, max_value)",
        input: Layout::Array(U32),
        output: Layout::Array(U32),
        params: &[
            ParamField::new("max_value", "range of the hashed ids, 1..=2^31")
                .at(0, 32, Unsigned)
                .required(),
            ParamField::new("salt", "hash salt (a signed 32-bit value)").at(32, 32, Signed),
        ],
        state: SlotState::None,
        granularity: PerTensor,
    },
    FunctionSpec {
        id: FunctionId::FirstX,
        name: "firstx",
        summary: "each id list truncated to its first X ids",
        input: IDS,
        output: IDS,
        params: &[ParamField::new("x", "ids kept per list").required()],
        state: SlotState::None,
        granularity: PerTensor,
    },
    FunctionSpec {
        id: FunctionId::IdListTransform,
        name: "idlisttransform",
        summary: "intersection of each pair of id lists (rows 2i and 2i+1)",
        input: IDS,
        output: IDS,
        params: &[],
        state: SlotState::None,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::Cartesian,
        name: "cartesian",
        summary: "crossed ids of each pair of id lists (rows 2i and 2i+1)",
        input: IDS,
        output: IDS,
        params: &[],
        state: SlotState::None,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::NGram,
        name: "ngram",
        summary: "hashed n-grams of consecutive ids in each list",
        input: IDS,
        output: IDS,
        params: &[ParamField::new("n", "n-gram length, 1..=16").required()],
        state: SlotState::None,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::GetLocalHour,
        name: "getlocalhour",
        summary: "local hour of day (0-23) of unix timestamps in seconds",
        input: Layout::Array(U32),
        output: Layout::Array(U32),
        params: &[ParamField::new(
            "utc_offset_s",
            "offset from UTC in seconds, |offset| <= 64800",
        )
        .at(0, 32, Signed)],
        state: SlotState::None,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::Onehot,
        name: "onehot",
        summary: "one row of C float32 per id: 1.0 at the id, 0.0 elsewhere",
        input: Layout::Array(U32),
        output: Layout::Array(F32),
        params: &[ParamField::new("classes", "C, the number of classes, 1..=65536").required()],
        state: SlotState::None,
        granularity: PerRow,
    },
    FunctionSpec {
        id: FunctionId::BoxCox,
        name: "boxcox",
        summary: "Box-Cox transform (x^lambda - 1) / lambda, or ln x for lambda = 0",
        input: Layout::Array(F32),
        output: Layout::Array(F32),
        params: &[ParamField::new("lmbda", "lambda (float32; 0: ln x)").at(0, 32, Float)],
        state: SlotState::None,
        granularity: PerTensor,
    },
    FunctionSpec {
        id: FunctionId::Cnn,
        name: "cnn",
        summary: "digit class scores of one 64x64 RGB48 image (uint16 HWC) by the trained CNN of models/cnn",
        input: Layout::Array(U16),
        output: Layout::Array(F32),
        params: &[],
        state: SlotState::None,
        granularity: Other,
    },
    FunctionSpec {
        id: FunctionId::Gemv,
        name: "gemv",
        summary: "matrix-vector product A x of an m x n float32 matrix A (row-major) followed by the n-vector x",
        input: Layout::Array(F32),
        output: Layout::Array(F32),
        params: &[ParamField::new("cols", "n, the matrix's columns and the vector's length (>= 1)").required()],
        state: SlotState::None,
        granularity: Other,
    },
];

impl FunctionId {
    pub const ALL: [FunctionId; 19] = {
        let mut all = [FunctionId::Echo; 19];
        let mut i = 0;
        while i < FUNCTIONS.len() {
            all[i] = FUNCTIONS[i].id;
            i += 1;
        }
        all
    };

    pub fn from_id(id: u8) -> Option<FunctionId> {
        FUNCTIONS.get(id as usize).map(|s| s.id)
    }

    pub fn id(self) -> u8 {
        self as u8
    }

    /// This function's registry row.
    pub fn spec(self) -> &'static FunctionSpec {
        &FUNCTIONS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    pub fn from_name(name: &str) -> Option<FunctionId> {
        FUNCTIONS.iter().find(|s| s.name == name).map(|s| s.id)
    }

    /// The queue depth a slot of this function gets unless its `[[slots]]`
    /// table sets `queue_depth`: the CNN's large slot keeps a short queue
    /// (`docs/operations.md`, "A large slot"); the others are bounded by
    /// bytes only.
    pub fn default_queue_depth(self) -> Option<usize> {
        match self {
            FunctionId::Cnn => Some(4),
            _ => None,
        }
    }

    /// Every registered name, comma-separated (for error messages).
    pub fn known_names() -> String {
        FUNCTIONS
            .iter()
            .map(|s| s.name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_in_id_order_with_unique_names() {
        for (i, s) in FUNCTIONS.iter().enumerate() {
            assert_eq!(s.id as usize, i, "{}", s.name);
            assert_eq!(FunctionId::from_name(s.name), Some(s.id));
            assert_eq!(FunctionId::ALL[i], s.id);
        }
        assert_eq!(FunctionId::from_id(FUNCTIONS.len() as u8), None);
    }

    #[test]
    fn param_fields_fit_and_do_not_overlap() {
        for s in &FUNCTIONS {
            let mut used = 0u128;
            for f in s.params {
                assert!(f.bits >= 1 && u32::from(f.shift) + u32::from(f.bits) <= 64);
                let m = (((1u128 << f.bits) - 1) << f.shift) as u64;
                assert_eq!(used as u64 & m, 0, "{}: {} overlaps", s.name, f.name);
                used |= u128::from(m);
                if f.kind == ParamKind::Float {
                    assert_eq!(f.bits, 32);
                }
            }
        }
    }

    #[test]
    fn fields_pack_and_unpack() {
        let s = FunctionId::SigridHash.spec();
        let (max, salt) = (&s.params[0], &s.params[1]);
        let p = max.pack_text("100").unwrap() | salt.pack_text("-7").unwrap();
        assert_eq!(max.raw(p), 100);
        assert_eq!(salt.signed(p), -7);
        assert_eq!(max.pack_text("4294967296"), None);
        assert_eq!(salt.pack_text("2147483648"), None);
        assert_eq!(
            salt.pack_text("-2147483648").map(|b| salt.signed(b)),
            Some(i32::MIN as i64)
        );
        let l = &FunctionId::BoxCox.spec().params[0];
        assert_eq!(
            f32::from_bits(l.raw(l.pack_text("0.5").unwrap()) as u32),
            0.5
        );
        let k = &FunctionId::TopK.spec().params[0];
        assert_eq!(k.pack_text(&u64::MAX.to_string()), Some(u64::MAX));
        assert_eq!(k.pack_text("-1"), None);
    }

    #[test]
    fn ragged_layouts_hold_4_byte_elements_only() {
        // Ragged offsets count 4-byte words (docs/protocol.md, "Payload layouts").
        for s in &FUNCTIONS {
            for l in [s.input, s.output] {
                if let Layout::Ragged(es) = l {
                    assert!(es.iter().all(|e| e.size() == 4), "{}", s.name);
                }
            }
        }
    }

    #[test]
    fn layouts_describe_themselves() {
        assert_eq!(
            FunctionId::SparseTransform.spec().output.describe(),
            "ragged<uint32,float32>"
        );
        assert_eq!(FunctionId::TopK.spec().input.describe(), "int32[]");
        assert_eq!(FunctionId::Echo.spec().input.describe(), "bytes");
    }
}
