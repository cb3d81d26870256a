//! The text table printed by `torch.cuda.memory_summary()`.
//!
//! Each data row looks like
//! `| Allocated memory      |   1051 MiB |  15659 MiB | 459377 MiB | 458326 MiB |`
//! and may be followed by `from large pool` / `from small pool` sub-rows.
//! PyTorch prints sizes rounded *down* to the unit shown, so a shown value `v`
//! in unit `u` means `v*u <= bytes < (v+1)*u` (see [`Amount::bytes_range`]).

use serde::Serialize;

/// Which allocator pool a row describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Pool {
    /// Both pools.
    All,
    /// Blocks over 1 MiB.
    Large,
    /// Blocks up to 1 MiB.
    Small,
}

/// The unit an [`Amount`] was printed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Unit {
    /// A plain count (allocations, segments).
    Count,
    /// Bytes.
    B,
    /// 2^10 bytes.
    KiB,
    /// 2^20 bytes.
    MiB,
    /// 2^30 bytes.
    GiB,
    /// 2^40 bytes.
    TiB,
    /// 2^50 bytes.
    PiB,
}

impl Unit {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "B" => Self::B,
            "KiB" => Self::KiB,
            "MiB" => Self::MiB,
            "GiB" => Self::GiB,
            "TiB" => Self::TiB,
            "PiB" => Self::PiB,
            _ => return None,
        })
    }

    /// Bytes per unit (`None` for counts).
    pub fn bytes(self) -> Option<u64> {
        let shift = match self {
            Self::Count => return None,
            Self::B => 0,
            Self::KiB => 10,
            Self::MiB => 20,
            Self::GiB => 30,
            Self::TiB => 40,
            Self::PiB => 50,
        };
        Some(1 << shift)
    }
}

/// One cell of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Amount {
    /// The number shown.
    pub value: u64,
    /// Its unit.
    pub unit: Unit,
}

impl Amount {
    /// The byte range `[low, high)` the shown size stands for (`None` for counts).
    pub fn bytes_range(&self) -> Option<(u64, u64)> {
        let unit = self.unit.bytes()?;
        let low = self.value.saturating_mul(unit);
        Some((low, low.saturating_add(unit)))
    }

    fn parse(cell: &str) -> Option<Self> {
        let mut words = cell.split_whitespace();
        let value = words.next()?.parse().ok()?;
        let unit = match words.next() {
            None => Unit::Count,
            Some(u) => Unit::parse(u)?,
        };
        words.next().is_none().then_some(Self { value, unit })
    }
}

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SummaryRow {
    /// Metric name as printed, e.g. `"Allocated memory"`.
    pub metric: String,
    /// The pool of this row.
    pub pool: Pool,
    /// "Cur Usage".
    pub current: Amount,
    /// "Peak Usage".
    pub peak: Amount,
    /// "Tot Alloc".
    pub allocated: Amount,
    /// "Tot Freed".
    pub freed: Amount,
}

/// A parsed `memory_summary()` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Device ID from the title.
    pub device: Option<u64>,
    /// "CUDA OOMs".
    pub num_ooms: Option<u64>,
    /// "cudaMalloc retries".
    pub num_alloc_retries: Option<u64>,
    /// Data rows in table order.
    pub rows: Vec<SummaryRow>,
}

impl Summary {
    /// The row for `metric` (as printed) and `pool`.
    pub fn row(&self, metric: &str, pool: Pool) -> Option<&SummaryRow> {
        self.rows
            .iter()
            .find(|r| r.pool == pool && r.metric.eq_ignore_ascii_case(metric))
    }

    /// Peak of "Allocated memory", all pools.
    pub fn peak_allocated(&self) -> Option<Amount> {
        self.row("Allocated memory", Pool::All).map(|r| r.peak)
    }

    /// Peak of "GPU reserved memory", all pools.
    pub fn peak_reserved(&self) -> Option<Amount> {
        self.row("GPU reserved memory", Pool::All).map(|r| r.peak)
    }

    /// Peak of "Requested memory", all pools.
    pub fn peak_requested(&self) -> Option<Amount> {
        self.row("Requested memory", Pool::All).map(|r| r.peak)
    }
}

/// Whether `text` looks like a `memory_summary()` table.
pub(crate) fn looks_like_summary(text: &str) -> bool {
    text.contains("memory summary") || (text.contains("Cur Usage") && text.contains("Peak Usage"))
}

/// Parses the table; lines that are not table rows are skipped.
pub(crate) fn parse_summary(text: &str) -> Result<Summary, String> {
    let mut summary = Summary::default();
    let mut metric = String::new();
    for line in text.lines() {
        let Some(inner) = line
            .trim()
            .strip_prefix('|')
            .and_then(|l| l.strip_suffix('|'))
        else {
            continue;
        };
        let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
        match cells.as_slice() {
            [title] => summary.device = summary.device.or_else(|| device_id(title)),
            [left, right] => header_counters(&mut summary, &[left, right]),
            [name, cur, peak, alloc, freed] => {
                let pool = match *name {
                    "from large pool" => Pool::Large,
                    "from small pool" => Pool::Small,
                    _ => {
                        metric = (*name).to_string();
                        Pool::All
                    }
                };
                let amounts = [cur, peak, alloc, freed].map(|c| Amount::parse(c));
                if let [Some(current), Some(peak), Some(allocated), Some(freed)] = amounts {
                    summary.rows.push(SummaryRow {
                        metric: metric.clone(),
                        pool,
                        current,
                        peak,
                        allocated,
                        freed,
                    });
                }
            }
            _ => {}
        }
    }
    if summary.rows.is_empty() {
        return Err("memory_summary() text without any table rows".into());
    }
    Ok(summary)
}

fn device_id(title: &str) -> Option<u64> {
    let rest = title.split("device ID").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

/// Reads the `CUDA OOMs: N | cudaMalloc retries: N` line.
fn header_counters(summary: &mut Summary, cells: &[&str]) {
    for cell in cells {
        let Some((name, value)) = cell.split_once(':') else {
            continue;
        };
        let value = value.trim().parse().ok();
        match name.trim() {
            "CUDA OOMs" => summary.num_ooms = value,
            "cudaMalloc retries" => summary.num_alloc_retries = value,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts() {
        let a = Amount::parse("15659 MiB").unwrap();
        assert_eq!(a.bytes_range(), Some((15659 << 20, 15660 << 20)));
        assert_eq!(Amount::parse("0 B").unwrap().bytes_range(), Some((0, 1)));
        assert_eq!(Amount::parse("1638").unwrap().unit, Unit::Count);
        assert_eq!(Amount::parse("12 XiB"), None);
        assert_eq!(Amount::parse(""), None);
    }
}
