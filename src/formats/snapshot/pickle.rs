//! A minimal, bounded pickle virtual machine.
//!
//! It understands only the opcodes that `pickle.dump` (protocols 2–5) emits for
//! plain dicts, lists, tuples, strings, bytes, numbers, booleans and `None`, which
//! is everything a `torch.cuda.memory._dump_snapshot()` file contains. Any opcode
//! that could construct objects or call code (`GLOBAL`, `REDUCE`, …) is rejected.
//!
//! Values live in a flat arena ([`Arena`]) and refer to each other by index, so
//! memo sharing (and even cycles) costs nothing and nothing here recurses.

use super::Limits;

/// Index of a [`Node`] in the [`Arena`].
pub(crate) type NodeId = u32;

/// One unpickled value. Strings and bytes point into the input buffer.
#[derive(Debug)]
pub(crate) enum Node {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that does not fit in an `i64`.
    BigInt,
    Float(f64),
    Str(Span),
    Bytes,
    /// Index into [`Arena::seqs`] (lists and tuples share it).
    List(u32),
    Tuple(u32),
    /// Index into [`Arena::dicts`].
    Dict(u32),
}

// Containers keep their items in side tables so that a node is 16 bytes: a 100 MB snapshot
// holds about 12 million values.
const _: () = assert!(std::mem::size_of::<Node>() == 16);

/// A byte range of the input.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

/// The result of unpickling: every value plus the root.
pub(crate) struct Arena<'a> {
    data: &'a [u8],
    nodes: Vec<Node>,
    /// Items of lists and tuples.
    seqs: Pool<NodeId>,
    /// Entries of dicts.
    dicts: Pool<(NodeId, NodeId)>,
    /// Container items over all nodes.
    items: usize,
    /// The value returned by `STOP`.
    pub(crate) root: NodeId,
}

impl<'a> Arena<'a> {
    /// The node `id` (`None` for an out-of-range id, which cannot happen for ids
    /// taken from the arena itself).
    pub(crate) fn node(&self, id: NodeId) -> &Node {
        self.nodes.get(id as usize).unwrap_or(&Node::None)
    }

    /// The raw bytes of a string node.
    pub(crate) fn str(&self, id: NodeId) -> Option<&'a [u8]> {
        match self.node(id) {
            Node::Str(span) => {
                let start = span.start as usize;
                self.data.get(start..start + span.len as usize)
            }
            _ => None,
        }
    }

    /// The items of a list or tuple node.
    pub(crate) fn seq(&self, id: NodeId) -> Option<&[NodeId]> {
        match self.node(id) {
            Node::List(i) | Node::Tuple(i) => Some(self.seqs.get(*i)),
            _ => None,
        }
    }

    /// The entries of a dict node.
    pub(crate) fn dict(&self, id: NodeId) -> Option<&[(NodeId, NodeId)]> {
        match self.node(id) {
            Node::Dict(i) => Some(self.dicts.get(*i)),
            _ => None,
        }
    }

    /// Number of values created while unpickling.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Values plus container items: the work a visit of every value takes.
    pub(crate) fn weight(&self) -> u64 {
        (self.nodes.len() as u64).saturating_add(self.items as u64)
    }
}

/// The items of every container of one kind, in one buffer.
///
/// A container's items stay contiguous, so they read back as a slice. Items added to the
/// container built last are appended in place; a container that grows after others were built
/// (a long list filled in batches of 1,000 between its nested values) moves to the end with
/// twice the room, so moving costs amortised O(1) per item. One allocation serves millions of
/// small dicts (a 100 MB snapshot holds about 3 million).
pub(crate) struct Pool<T> {
    items: Vec<T>,
    slots: Vec<Slot>,
}

#[derive(Clone, Copy)]
struct Slot {
    start: u32,
    len: u32,
    cap: u32,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            slots: Vec::new(),
        }
    }
}

impl<T: Copy + Default> Pool<T> {
    /// A new empty container.
    fn add(&mut self) -> Result<u32, String> {
        let index = u32::try_from(self.slots.len()).map_err(|_| too_many())?;
        let start = u32::try_from(self.items.len()).map_err(|_| too_many())?;
        self.slots.push(Slot {
            start,
            len: 0,
            cap: 0,
        });
        Ok(index)
    }

    /// The items of container `index` (empty for an unknown index).
    pub(crate) fn get(&self, index: u32) -> &[T] {
        self.slots
            .get(index as usize)
            .and_then(|s| self.items.get(s.start as usize..(s.start + s.len) as usize))
            .unwrap_or(&[])
    }

    /// Appends `values` to container `index`.
    fn extend<I>(&mut self, index: u32, values: I) -> Result<(), String>
    where
        I: IntoIterator<Item = T>,
        I::IntoIter: ExactSizeIterator,
    {
        let Some(&slot) = self.slots.get(index as usize) else {
            return Ok(());
        };
        let values = values.into_iter();
        let (start, len, cap) = (slot.start as usize, slot.len as usize, slot.cap as usize);
        let new_len = len + values.len();
        let (new_start, new_cap) = if start + cap == self.items.len() {
            // Last in the buffer: grow in place.
            self.items.truncate(start + len);
            self.items.extend(values);
            (start, new_len)
        } else if new_len <= cap {
            for (to, v) in self.items[start + len..start + new_len]
                .iter_mut()
                .zip(values)
            {
                *to = v;
            }
            (start, cap)
        } else {
            let moved = self.items.len();
            let room = new_len.max(2 * len);
            self.items.extend_from_within(start..start + len);
            self.items.extend(values);
            self.items.resize(moved + room, T::default());
            (moved, room)
        };
        let fits = |n: usize| u32::try_from(n).map_err(|_| too_many());
        // The slot's end must be addressable too.
        fits(new_start + new_cap)?;
        self.slots[index as usize] = Slot {
            start: fits(new_start)?,
            len: fits(new_len)?,
            cap: fits(new_cap)?,
        };
        Ok(())
    }
}

fn too_many() -> String {
    "pickle holds too many container items".into()
}

/// A short name for the kind of a node, for error messages.
pub(crate) fn kind(node: &Node) -> &'static str {
    match node {
        Node::None => "None",
        Node::Bool(_) => "bool",
        Node::Int(_) | Node::BigInt => "int",
        Node::Float(_) => "float",
        Node::Str(_) => "str",
        Node::Bytes => "bytes",
        Node::List(_) => "list",
        Node::Tuple(_) => "tuple",
        Node::Dict(_) => "dict",
    }
}

/// Unpickles `data` within `limits`.
#[cfg(test)]
pub(crate) fn load<'a>(data: &'a [u8], limits: &Limits) -> Result<Arena<'a>, String> {
    let mut unpickler = Unpickler::new(data, limits);
    loop {
        if let Some(arena) = unpickler.run(usize::MAX)? {
            return Ok(arena);
        }
    }
}

/// An unpickling in progress, run a slice of opcodes at a time (the page shows progress and
/// stays responsive between slices).
pub(crate) struct Unpickler<'a, 'l> {
    vm: Vm<'a, 'l>,
}

impl<'a, 'l> Unpickler<'a, 'l> {
    pub(crate) fn new(data: &'a [u8], limits: &'l Limits) -> Self {
        // Real snapshots hold about one value per 12 bytes; reserving saves regrowth.
        let expected = (data.len() / 12).min(limits.max_nodes);
        Self {
            vm: Vm {
                data,
                pos: 0,
                op_pos: 0,
                nodes: Vec::with_capacity(expected),
                depth: Vec::with_capacity(expected),
                seqs: Pool::default(),
                dicts: Pool::default(),
                stack: Vec::new(),
                scratch: Vec::new(),
                marks: Vec::new(),
                memo: Vec::new(),
                items: 0,
                limits,
            },
        }
    }

    /// Runs at most `ops` opcodes; returns every value once the pickle's `STOP` is reached.
    pub(crate) fn run(&mut self, ops: usize) -> Result<Option<Arena<'a>>, String> {
        let Some(root) = self.vm.run(ops)? else {
            return Ok(None);
        };
        let vm = &mut self.vm;
        Ok(Some(Arena {
            data: vm.data,
            nodes: std::mem::take(&mut vm.nodes),
            seqs: std::mem::take(&mut vm.seqs),
            dicts: std::mem::take(&mut vm.dicts),
            items: vm.items,
            root,
        }))
    }

    /// Bytes read so far.
    pub(crate) fn position(&self) -> usize {
        self.vm.pos
    }
}

struct Vm<'a, 'l> {
    data: &'a [u8],
    pos: usize,
    /// Offset of the opcode being executed, for error messages.
    op_pos: usize,
    nodes: Vec<Node>,
    /// Nesting depth of each node (0 for scalars).
    depth: Vec<u8>,
    seqs: Pool<NodeId>,
    dicts: Pool<(NodeId, NodeId)>,
    stack: Vec<NodeId>,
    /// Values popped down to a MARK (reused, so a MARK allocates nothing).
    scratch: Vec<NodeId>,
    /// Stack lengths at each open `MARK`.
    marks: Vec<usize>,
    memo: Vec<NodeId>,
    /// Container items created so far.
    items: usize,
    limits: &'l Limits,
}

impl Vm<'_, '_> {
    /// Runs up to `ops` opcodes; the root value once `STOP` is reached.
    fn run(&mut self, ops: usize) -> Result<Option<NodeId>, String> {
        for _ in 0..ops {
            self.op_pos = self.pos;
            let op = self.u8().map_err(|_| self.truncated())?;
            if op == b'.' {
                return self.pop().map(Some);
            }
            self.step(op)?;
        }
        Ok(None)
    }

    fn step(&mut self, op: u8) -> Result<(), String> {
        match op {
            0x80 => self.proto()?,
            0x95 => self.frame()?,
            b'}' => self.new_dict()?,
            b']' => self.new_seq(Node::List, Vec::new(), 1)?,
            b')' => self.new_seq(Node::Tuple, Vec::new(), 1)?,
            b'(' => self.mark()?,
            b'a' => {
                let value = self.pop()?;
                self.extend_list(&[value])?;
            }
            b'e' => self.add_marked(Self::extend_list)?,
            b's' => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.extend_dict(&[key, value])?;
            }
            b'u' => self.add_marked(Self::extend_dict)?,
            b't' => {
                let values = self.pop_mark()?;
                self.push_tuple(values)?;
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let start = self.stack_floor_check(n)?;
                let values = self.stack.split_off(start);
                self.push_tuple(values)?;
            }
            b'N' => self.push(Node::None, 0)?,
            0x88 => self.push(Node::Bool(true), 0)?,
            0x89 => self.push(Node::Bool(false), 0)?,
            b'J' => {
                let v = i32::from_le_bytes(self.array()?);
                self.push(Node::Int(v.into()), 0)?;
            }
            b'K' => {
                let v = self.u8()?;
                self.push(Node::Int(v.into()), 0)?;
            }
            b'M' => {
                let v = u16::from_le_bytes(self.array()?);
                self.push(Node::Int(v.into()), 0)?;
            }
            0x8a => {
                let n = usize::from(self.u8()?);
                let node = long_from_le(self.take(n)?);
                self.push(node, 0)?;
            }
            b'G' => {
                let v = f64::from_be_bytes(self.array()?);
                self.push(Node::Float(v), 0)?;
            }
            0x8c => self.string(1)?,
            b'X' => self.string(4)?,
            0x8d => self.string(8)?,
            b'C' => self.bytes(1)?,
            b'B' => self.bytes(4)?,
            0x8e => self.bytes(8)?,
            0x94 => self.memoize(None)?,
            b'q' => {
                let idx = self.u8()?;
                self.memoize(Some(idx.into()))?;
            }
            b'r' => {
                let idx = u32::from_le_bytes(self.array()?);
                self.memoize(Some(idx as usize))?;
            }
            b'h' => {
                let idx = self.u8()?;
                self.memo_get(idx.into())?;
            }
            b'j' => {
                let idx = u32::from_le_bytes(self.array()?);
                self.memo_get(idx as usize)?;
            }
            _ => {
                return Err(format!(
                    "not a PyTorch memory snapshot: pickle opcode {} (0x{op:02x}) at offset {} is not allowed",
                    opcode_name(op),
                    self.op_pos
                ));
            }
        }
        Ok(())
    }

    // ---- reading the input -------------------------------------------------

    fn truncated(&self) -> String {
        format!(
            "truncated pickle: input ends at offset {} inside the opcode at offset {}",
            self.data.len(),
            self.op_pos
        )
    }

    // The readers below run for every byte of a 100 MB file: they are inlined even in the
    // size-optimised release build.

    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.saturating_add(n);
        match self.data.get(self.pos..end) {
            Some(bytes) => {
                self.pos = end;
                Ok(bytes)
            }
            None => Err(self.truncated()),
        }
    }

    #[inline(always)]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let end = self.pos.saturating_add(N);
        match self
            .data
            .get(self.pos..end)
            .and_then(|b| <[u8; N]>::try_from(b).ok())
        {
            Some(bytes) => {
                self.pos = end;
                Ok(bytes)
            }
            None => Err(self.truncated()),
        }
    }

    #[inline(always)]
    fn u8(&mut self) -> Result<u8, String> {
        match self.data.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.truncated()),
        }
    }

    /// Reads a little-endian length of `width` bytes (1, 4 or 8) and checks it
    /// against the bytes that remain.
    fn length(&mut self, width: usize) -> Result<usize, String> {
        let len = match width {
            1 => u64::from(self.u8()?),
            4 => u64::from(u32::from_le_bytes(self.array()?)),
            _ => u64::from_le_bytes(self.array()?),
        };
        let remaining = self.data.len() - self.pos.min(self.data.len());
        if len > remaining as u64 {
            return Err(format!(
                "truncated pickle: the value at offset {} claims {len} bytes but only {remaining} remain",
                self.op_pos
            ));
        }
        Ok(len as usize)
    }

    // ---- opcodes -----------------------------------------------------------

    fn proto(&mut self) -> Result<(), String> {
        let version = self.u8()?;
        if !(2..=5).contains(&version) {
            return Err(format!(
                "not a PyTorch memory snapshot: unsupported pickle protocol {version}"
            ));
        }
        Ok(())
    }

    fn frame(&mut self) -> Result<(), String> {
        // A FRAME only announces how many bytes follow; the opcodes are read as usual.
        self.length(8).map(|_| ())
    }

    fn string(&mut self, width: usize) -> Result<(), String> {
        let len = self.length(width)?;
        let (Ok(start), Ok(len32)) = (u32::try_from(self.pos), u32::try_from(len)) else {
            return Err("pickle larger than 4 GiB".into());
        };
        let span = Span { start, len: len32 };
        self.pos += len;
        self.push(Node::Str(span), 0)
    }

    fn bytes(&mut self, width: usize) -> Result<(), String> {
        let len = self.length(width)?;
        self.pos += len;
        self.push(Node::Bytes, 0)
    }

    fn mark(&mut self) -> Result<(), String> {
        if self.marks.len() >= self.limits.max_marks {
            return Err(format!(
                "pickle nests more than {} MARKs (offset {})",
                self.limits.max_marks, self.op_pos
            ));
        }
        self.marks.push(self.stack.len());
        Ok(())
    }

    fn memoize(&mut self, index: Option<usize>) -> Result<(), String> {
        let top = *self.stack.last().ok_or_else(|| self.underflow())?;
        let index = index.unwrap_or(self.memo.len());
        if index < self.memo.len() {
            self.memo[index] = top;
        } else if index == self.memo.len() && index < self.limits.max_nodes {
            self.memo.push(top);
        } else {
            return Err(format!(
                "pickle memo index {index} at offset {} is out of order or too large",
                self.op_pos
            ));
        }
        Ok(())
    }

    fn memo_get(&mut self, index: usize) -> Result<(), String> {
        let id = *self.memo.get(index).ok_or_else(|| {
            format!(
                "pickle refers to memo entry {index} at offset {} that was never stored",
                self.op_pos
            )
        })?;
        self.push_id(id)
    }

    // ---- the stack ---------------------------------------------------------

    fn underflow(&self) -> String {
        format!(
            "malformed pickle: stack underflow at offset {}",
            self.op_pos
        )
    }

    /// The lowest stack index that may be popped (the innermost mark).
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// Checks that `n` values above the innermost mark can be popped and returns
    /// the index of the first.
    fn stack_floor_check(&self, n: usize) -> Result<usize, String> {
        let len = self.stack.len();
        if len < self.floor() + n {
            return Err(self.underflow());
        }
        Ok(len - n)
    }

    fn pop(&mut self) -> Result<NodeId, String> {
        self.stack_floor_check(1)?;
        self.stack.pop().ok_or_else(|| self.underflow())
    }

    fn pop_mark(&mut self) -> Result<Vec<NodeId>, String> {
        let mark = self.marks.pop().ok_or_else(|| {
            format!(
                "malformed pickle: no MARK before the opcode at offset {}",
                self.op_pos
            )
        })?;
        let mut values = std::mem::take(&mut self.scratch);
        values.clear();
        values.extend(self.stack.drain(mark.min(self.stack.len())..));
        Ok(values)
    }

    /// Pops the values above the innermost MARK and hands them to `add` (APPENDS, SETITEMS);
    /// the buffer they were popped into is kept for the next MARK.
    fn add_marked(
        &mut self,
        add: fn(&mut Self, &[NodeId]) -> Result<(), String>,
    ) -> Result<(), String> {
        let values = self.pop_mark()?;
        let done = add(self, &values);
        self.scratch = values;
        done
    }

    #[inline(always)]
    fn push_id(&mut self, id: NodeId) -> Result<(), String> {
        if self.stack.len() >= self.limits.max_stack {
            return Err(format!(
                "pickle stack exceeds {} values at offset {}",
                self.limits.max_stack, self.op_pos
            ));
        }
        self.stack.push(id);
        Ok(())
    }

    #[inline(always)]
    fn push(&mut self, node: Node, depth: u8) -> Result<(), String> {
        if self.nodes.len() >= self.limits.max_nodes.min(NodeId::MAX as usize) {
            return Err(format!(
                "pickle holds more than {} values (limit reached at offset {})",
                self.limits.max_nodes, self.op_pos
            ));
        }
        let id = self.nodes.len() as NodeId;
        self.nodes.push(node);
        self.depth.push(depth);
        self.push_id(id)
    }

    // ---- containers --------------------------------------------------------

    /// Counts `n` new container items against the limit and returns the depth a
    /// container holding `children` needs.
    fn account(&mut self, children: &[NodeId]) -> Result<u8, String> {
        self.items = self.items.saturating_add(children.len());
        if self.items > self.limits.max_items {
            return Err(format!(
                "pickle containers hold more than {} items in total (offset {})",
                self.limits.max_items, self.op_pos
            ));
        }
        let child = children
            .iter()
            .map(|&c| self.depth.get(c as usize).copied().unwrap_or(0))
            .max()
            .unwrap_or(0);
        let depth = child.saturating_add(1);
        if usize::from(depth) > self.limits.max_depth.min(254) {
            return Err(format!(
                "pickle nests containers deeper than {} levels (offset {})",
                self.limits.max_depth, self.op_pos
            ));
        }
        Ok(depth)
    }

    fn push_tuple(&mut self, values: Vec<NodeId>) -> Result<(), String> {
        let depth = self.account(&values)?;
        self.new_seq(Node::Tuple, values, depth)
    }

    fn new_seq(
        &mut self,
        node: fn(u32) -> Node,
        items: Vec<NodeId>,
        depth: u8,
    ) -> Result<(), String> {
        let index = self.seqs.add()?;
        self.push(node(index), depth)?;
        self.seqs.extend(index, items)
    }

    fn new_dict(&mut self) -> Result<(), String> {
        let index = self.dicts.add()?;
        self.push(Node::Dict(index), 1)
    }

    /// The container on top of the stack, with its current depth.
    fn top_container(&self) -> Result<NodeId, String> {
        let start = self.stack_floor_check(1)?;
        Ok(self.stack[start])
    }

    fn raise_depth(&mut self, id: NodeId, depth: u8) {
        if let Some(d) = self.depth.get_mut(id as usize) {
            *d = (*d).max(depth);
        }
    }

    fn extend_list(&mut self, values: &[NodeId]) -> Result<(), String> {
        let id = self.top_container()?;
        let depth = self.account(values)?;
        match self.nodes.get(id as usize) {
            Some(Node::List(i)) => {
                let i = *i;
                self.seqs.extend(i, values.iter().copied())?;
            }
            other => {
                let found = other.map_or("nothing", |n| kind(n));
                return Err(format!(
                    "malformed pickle: APPEND(S) at offset {} on a {found}",
                    self.op_pos
                ));
            }
        }
        self.raise_depth(id, depth);
        Ok(())
    }

    fn extend_dict(&mut self, values: &[NodeId]) -> Result<(), String> {
        if values.len() % 2 != 0 {
            return Err(format!(
                "malformed pickle: SETITEMS at offset {} with an odd number of values",
                self.op_pos
            ));
        }
        let id = self.top_container()?;
        let depth = self.account(values)?;
        match self.nodes.get(id as usize) {
            Some(Node::Dict(i)) => {
                let i = *i;
                let pairs = values.chunks_exact(2).map(|kv| (kv[0], kv[1]));
                self.dicts.extend(i, pairs)?;
            }
            other => {
                let found = other.map_or("nothing", |n| kind(n));
                return Err(format!(
                    "malformed pickle: SETITEM(S) at offset {} on a {found}",
                    self.op_pos
                ));
            }
        }
        self.raise_depth(id, depth);
        Ok(())
    }
}

/// Decodes a `LONG1` payload: little-endian two's complement.
fn long_from_le(bytes: &[u8]) -> Node {
    let negative = bytes.last().is_some_and(|b| b & 0x80 != 0);
    let fill = if negative { 0xff } else { 0x00 };
    let (low, high) = bytes.split_at(bytes.len().min(8));
    let mut buf = [fill; 8];
    buf[..low.len()].copy_from_slice(low);
    let value = i64::from_le_bytes(buf);
    let fits = high.iter().all(|&b| b == fill) && (value < 0) == negative;
    if fits {
        Node::Int(value)
    } else {
        Node::BigInt
    }
}

/// The name of a pickle opcode, for error messages.
fn opcode_name(op: u8) -> &'static str {
    const NAMES: &[(u8, &str)] = &[
        (b'(', "MARK"),
        (b'.', "STOP"),
        (b'0', "POP"),
        (b'1', "POP_MARK"),
        (b'2', "DUP"),
        (b'F', "FLOAT"),
        (b'I', "INT"),
        (b'J', "BININT"),
        (b'K', "BININT1"),
        (b'L', "LONG"),
        (b'M', "BININT2"),
        (b'N', "NONE"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
        (b'R', "REDUCE"),
        (b'S', "STRING"),
        (b'T', "BINSTRING"),
        (b'U', "SHORT_BINSTRING"),
        (b'V', "UNICODE"),
        (b'X', "BINUNICODE"),
        (b'a', "APPEND"),
        (b'b', "BUILD"),
        (b'c', "GLOBAL"),
        (b'd', "DICT"),
        (b'}', "EMPTY_DICT"),
        (b'e', "APPENDS"),
        (b'g', "GET"),
        (b'h', "BINGET"),
        (b'i', "INST"),
        (b'j', "LONG_BINGET"),
        (b'l', "LIST"),
        (b']', "EMPTY_LIST"),
        (b'o', "OBJ"),
        (b'p', "PUT"),
        (b'q', "BINPUT"),
        (b'r', "LONG_BINPUT"),
        (b's', "SETITEM"),
        (b't', "TUPLE"),
        (b')', "EMPTY_TUPLE"),
        (b'u', "SETITEMS"),
        (b'G', "BINFLOAT"),
        (0x80, "PROTO"),
        (0x81, "NEWOBJ"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
        (0x85, "TUPLE1"),
        (0x86, "TUPLE2"),
        (0x87, "TUPLE3"),
        (0x88, "NEWTRUE"),
        (0x89, "NEWFALSE"),
        (0x8a, "LONG1"),
        (0x8b, "LONG4"),
        (b'B', "BINBYTES"),
        (b'C', "SHORT_BINBYTES"),
        (0x8c, "SHORT_BINUNICODE"),
        (0x8d, "BINUNICODE8"),
        (0x8e, "BINBYTES8"),
        (0x8f, "EMPTY_SET"),
        (0x90, "ADDITEMS"),
        (0x91, "FROZENSET"),
        (0x92, "NEWOBJ_EX"),
        (0x93, "STACK_GLOBAL"),
        (0x94, "MEMOIZE"),
        (0x95, "FRAME"),
        (0x96, "BYTEARRAY8"),
        (0x97, "NEXT_BUFFER"),
        (0x98, "READONLY_BUFFER"),
    ];
    NAMES
        .iter()
        .find(|(code, _)| *code == op)
        .map_or("<unknown>", |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(data: &[u8]) -> Result<usize, String> {
        load(data, &Limits::default()).map(|a| a.len())
    }

    #[test]
    fn long1_decoding() {
        assert!(matches!(long_from_le(&[]), Node::Int(0)));
        assert!(matches!(long_from_le(&[0xff]), Node::Int(-1)));
        assert!(matches!(long_from_le(&[0x80, 0x00]), Node::Int(128)));
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert!(matches!(long_from_le(&max), Node::Int(i64::MAX)));
        let big = [0, 0, 0, 0, 0, 0, 0, 0x80, 0x00];
        assert!(matches!(long_from_le(&big), Node::BigInt));
        let neg = [0, 0, 0, 0, 0, 0, 0, 0x80, 0xff];
        assert!(matches!(long_from_le(&neg), Node::Int(i64::MIN)));
    }

    #[test]
    fn rejects_global() {
        let err = run(b"\x80\x02cos\nsystem\n.").unwrap_err();
        assert!(err.contains("GLOBAL (0x63) at offset 2"), "{err}");
    }

    #[test]
    fn pop_cannot_cross_a_mark() {
        let err = run(b"\x80\x02](a.").unwrap_err();
        assert!(err.contains("underflow"), "{err}");
    }

    #[test]
    fn self_append_is_bounded_by_depth() {
        let mut p = b"\x80\x04]\x94".to_vec();
        for _ in 0..100 {
            p.extend_from_slice(b"h\x00a");
        }
        p.push(b'.');
        assert!(run(&p).unwrap_err().contains("deeper"));
    }
}
