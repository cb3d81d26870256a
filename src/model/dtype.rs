//! Floating-point and quantized storage types, and how many bytes each element takes.

use serde::{Deserialize, Serialize};

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

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u128 {
        match self {
            Dtype::Fp32 => 4,
            Dtype::Bf16 | Dtype::Fp16 => 2,
        }
    }

    /// Parses the names used by configs and the CLI (`fp32`, `float32`, `bf16`, `bfloat16`, ...).
    pub fn parse(s: &str) -> Option<Dtype> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fp32" | "float32" | "float" | "f32" => Some(Dtype::Fp32),
            "bf16" | "bfloat16" => Some(Dtype::Bf16),
            "fp16" | "float16" | "half" | "f16" => Some(Dtype::Fp16),
            _ => None,
        }
    }

    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Fp32 => "fp32",
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
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

impl Quant {
    /// Parses `nf4` / `fp4`.
    pub fn parse(s: &str) -> Option<Quant> {
        match s.trim().to_ascii_lowercase().as_str() {
            "nf4" => Some(Quant::Nf4),
            "fp4" => Some(Quant::Fp4),
            _ => None,
        }
    }
    /// Short lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Quant::Nf4 => "nf4",
            Quant::Fp4 => "fp4",
        }
    }
}
