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

/// The dtype bitsandbytes stores a packed 4-bit weight in (`bnb_4bit_quant_storage`): uint8,
/// its default, or a float dtype, which lets FSDP flatten the 4-bit weights with a layer's
/// other parameters and shard them (`quantize_4bit`'s `out.view(quant_storage)`, two 4-bit values
/// per byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantStorage {
    /// bytes, bitsandbytes' default.
    Uint8,
    /// bfloat16.
    Bf16,
    /// IEEE half precision.
    Fp16,
    /// IEEE single precision.
    Fp32,
}

names!(QuantStorage {
    Uint8 => "uint8" | "torch.uint8",
    Bf16 => "bf16" | "bfloat16" | "torch.bfloat16",
    Fp16 => "fp16" | "float16" | "half" | "torch.float16",
    Fp32 => "fp32" | "float32" | "float" | "torch.float32",
});

impl QuantStorage {
    /// Bytes per stored element.
    pub fn bytes(self) -> u64 {
        match self {
            QuantStorage::Uint8 => 1,
            QuantStorage::Bf16 | QuantStorage::Fp16 => 2,
            QuantStorage::Fp32 => 4,
        }
    }

    /// The float dtype it is, if it is one.
    pub fn dtype(self) -> Option<Dtype> {
        match self {
            QuantStorage::Uint8 => None,
            QuantStorage::Bf16 => Some(Dtype::Bf16),
            QuantStorage::Fp16 => Some(Dtype::Fp16),
            QuantStorage::Fp32 => Some(Dtype::Fp32),
        }
    }

    /// Elements of the packed storage of a weight of `n` values (`quantize_4bit`:
    /// `(n + 1) // (2 × bytes)` rows of one element).
    pub fn packed_elements(self, n: u64) -> u64 {
        n.saturating_add(1) / (2 * self.bytes())
    }
}
