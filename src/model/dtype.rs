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

/// 4-bit quantization of the frozen decoder Linear layers (bitsandbytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Quant {
    /// NormalFloat-4.
    Nf4,
    /// Plain 4-bit float.
    Fp4,
}

names!(Quant {
    Nf4 => "nf4",
    Fp4 => "fp4",
});

impl Quant {}
