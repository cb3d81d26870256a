//! Floating-point and quantized storage types, and how many bytes each element takes.

use serde::{Deserialize, Serialize};

use super::names::names;

/// Storage type of a tensor as PyTorch sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE single precision, 4 bytes.
    Fp32,
    /// bfloat16, 2 bytes.
    Bf16,
    /// IEEE half precision, 2 bytes.
    Fp16,
}

names!(Dtype {
    Fp32 => "fp32" | "float32" | "float" | "f32" | "torch.float32",
    Bf16 => "bf16" | "bfloat16" | "torch.bfloat16",
    Fp16 => "fp16" | "float16" | "half" | "f16" | "torch.float16",
});

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u128 {
        match self {
            Dtype::Fp32 => 4,
            Dtype::Bf16 | Dtype::Fp16 => 2,
        }
    }

    /// PyTorch's type promotion between two floating types (the wider wins; bf16+fp16 -> fp32).
    pub fn promote(self, other: Dtype) -> Dtype {
        if self == other {
            self
        } else {
            Dtype::Fp32
        }
    }
}

/// Quantization of the frozen decoder Linear layers (bitsandbytes): 4-bit (QLoRA,
/// `load_in_4bit`) or LLM.int8 (`load_in_8bit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quant {
    /// NormalFloat-4.
    Nf4,
    /// Plain 4-bit float.
    Fp4,
    /// LLM.int8: int8 weights with one fp32 scale per output row (`Linear8bitLt`).
    Int8,
}

names!(Quant {
    Nf4 => "nf4",
    Fp4 => "fp4",
    Int8 => "int8" | "8bit" | "llm_int8",
});

impl Quant {
    /// Whether the weights are bitsandbytes' packed 4-bit `Params4bit`.
    pub fn is_4bit(self) -> bool {
        matches!(self, Quant::Nf4 | Quant::Fp4)
    }

    /// Bits per weight value.
    pub fn bits(self) -> u32 {
        if self.is_4bit() {
            4
        } else {
            8
        }
    }
}
