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
}

impl FunctionId {
    pub const ALL: [FunctionId; 6] = [
        FunctionId::Echo,
        FunctionId::TopK,
        FunctionId::Logit,
        FunctionId::MinMax,
        FunctionId::MatMul,
        FunctionId::Spin,
    ];

    pub fn from_id(id: u8) -> Option<FunctionId> {
        FunctionId::ALL.get(id as usize).copied()
    }

    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn name(self) -> &'static str {
        match self {
            FunctionId::Echo => "echo",
            FunctionId::TopK => "topk",
            FunctionId::Logit => "logit",
            FunctionId::MinMax => "minmax",
            FunctionId::MatMul => "matmul",
            FunctionId::Spin => "spin",
        }
    }

    pub fn from_name(name: &str) -> Option<FunctionId> {
        FunctionId::ALL.into_iter().find(|f| f.name() == name)
    }
}
