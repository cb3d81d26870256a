//! Stable sorting that is small in wasm: one merge sort of positions, shared by every element
//! type. The standard library's sorts (driftsort, ipnsort) are fast but weigh 4–5 KB of wasm per
//! element type and comparison, and the first-visit page sorted six kinds of lists (free
//! blocks, blocks at the peak, setting lists, fixes, GPUs, chart labels); the lists it sorts are
//! short (at most some thousands of blocks), where this is as quick.

use std::cmp::Ordering;

/// Sorts `v` by `key`, stably (equal keys keep their order).
pub fn sort_by_key<T, K: Ord>(v: &mut Vec<T>, key: impl Fn(&T) -> K) {
    let keys: Vec<K> = v.iter().map(key).collect();
    permute(v, &|a, b| keys[a] <= keys[b]);
}

/// Sorts `v` by `cmp`, stably.
pub fn sort_by<T>(v: &mut Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) {
    let items: &[T] = v;
    let order = positions(items.len(), &|a, b| {
        cmp(&items[a], &items[b]) != Ordering::Greater
    });
    apply(v, order);
}

/// Sorts `v` by its own order, stably.
pub fn sort<T: Ord>(v: &mut Vec<T>) {
    sort_by(v, T::cmp);
}

fn permute<T>(v: &mut Vec<T>, le: &dyn Fn(usize, usize) -> bool) {
    let order = positions(v.len(), le);
    apply(v, order);
}

/// The positions `0..n` in sorted order, where `le(a, b)` says the element at `a` may come
/// before the one at `b`: a bottom-up merge sort that takes from the left run on ties.
fn positions(n: usize, le: &dyn Fn(usize, usize) -> bool) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut buf = vec![0usize; n];
    let mut width = 1;
    while width < n {
        let mut start = 0;
        while start < n {
            let mid = (start + width).min(n);
            let end = (start + 2 * width).min(n);
            let (mut a, mut b) = (start, mid);
            for slot in &mut buf[start..end] {
                let left = b >= end || a < mid && le(idx[a], idx[b]);
                *slot = if left { idx[a] } else { idx[b] };
                if left {
                    a += 1;
                } else {
                    b += 1;
                }
            }
            start = end;
        }
        std::mem::swap(&mut idx, &mut buf);
        width *= 2;
    }
    idx
}

/// Reorders `v` so that position `i` holds the element that was at `order[i]`.
fn apply<T>(v: &mut Vec<T>, order: Vec<usize>) {
    let mut slots: Vec<Option<T>> = v.drain(..).map(Some).collect();
    v.extend(order.into_iter().filter_map(|i| slots[i].take()));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal to the standard library's stable sort, ties included, on pseudo-random lists of
    /// every length up to 300.
    #[test]
    fn equals_the_standard_stable_sort() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for n in 0..300usize {
            let v: Vec<(u8, usize)> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ((x % 7) as u8, i)
                })
                .collect();
            let mut want = v.clone();
            want.sort_by_key(|e| e.0);
            let mut got = v.clone();
            sort_by_key(&mut got, |e| e.0);
            assert_eq!(got, want, "n = {n}");
            let mut got = v.clone();
            sort_by(&mut got, |a, b| b.0.cmp(&a.0));
            let mut want = v.clone();
            want.sort_by_key(|e| std::cmp::Reverse(e.0));
            assert_eq!(got, want, "reversed, n = {n}");
            let mut got = v.clone();
            sort(&mut got);
            let mut want = v;
            want.sort();
            assert_eq!(got, want);
        }
    }
}
