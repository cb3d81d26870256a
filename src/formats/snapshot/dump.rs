//! Typed view of a `torch.cuda.memory._dump_snapshot()` pickle.
//!
//! The unpickled value tree is mapped onto [`Snapshot`] by following the known
//! schema, never by generic recursion. Python frames are interned: identical
//! stacks are stored once in
//! [`Snapshot::stacks`] and referred to by a [`StackId`], and frame strings are
//! shared ([`Rc<str>`]). Work done while mapping is bounded by twice the size of
//! the unpickled value tree (and by [`Limits::max_work`]), so memo sharing cannot
//! blow up time or memory.

use super::IdMap;
use std::rc::Rc;

use serde::Serialize;

use super::pickle::{kind, Arena, Node, NodeId};
use super::Limits;

/// Index into [`Snapshot::stacks`]; `0` is always the empty stack.
pub type StackId = u32;

/// One Python (or C++) frame of a recorded stack.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Frame {
    /// Source file.
    pub filename: Rc<str>,
    /// Line number (0 when missing).
    pub line: i64,
    /// Function name.
    pub name: Rc<str>,
}

/// The state of a block at the time of the dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BlockState {
    /// Handed out to a tensor.
    ActiveAllocated,
    /// Freed by the program, but still in use by a stream.
    ActivePendingFree,
    /// Cached, free for reuse.
    Inactive,
    /// Any other state string.
    Unknown,
}

impl BlockState {
    /// Whether the block still counts as allocated.
    pub fn is_active(self) -> bool {
        matches!(self, Self::ActiveAllocated | Self::ActivePendingFree)
    }
}

/// A block inside a [`Segment`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Block {
    /// Device address.
    pub address: u64,
    /// Size handed out (after rounding).
    pub size: u64,
    /// Size the program asked for.
    pub requested_size: u64,
    /// State at the dump.
    pub state: BlockState,
    /// Stack of the allocation.
    pub stack: StackId,
}

/// A memory segment obtained from `cudaMalloc` (or an expandable segment).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    /// CUDA device index.
    pub device: i64,
    /// Device address.
    pub address: u64,
    /// Bytes reserved.
    pub total_size: u64,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes in active blocks.
    pub active_size: u64,
    /// Bytes requested by the program for the allocated blocks.
    pub requested_size: u64,
    /// Stream the segment belongs to.
    pub stream: i64,
    /// `"large"` or `"small"`.
    pub segment_type: String,
    /// Whether this is an expandable segment.
    pub is_expandable: bool,
    /// Blocks, in address order.
    pub blocks: Vec<Block>,
    /// Stack of the `cudaMalloc`, when recorded.
    pub stack: StackId,
}

/// What a trace event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Action {
    /// A block was handed out (`size` is the requested size).
    Alloc,
    /// The program freed a block; streams may still use it.
    FreeRequested,
    /// The block really returned to the cache.
    FreeCompleted,
    /// `cudaMalloc` of a segment.
    SegmentAlloc,
    /// `cudaFree` of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// `torch.cuda.memory._snapshot()` was taken.
    Snapshot,
    /// An out-of-memory error (`size` is the failed request).
    Oom,
    /// Any other action string.
    Unknown,
}

impl Action {
    fn from_name(name: &[u8]) -> Self {
        match name {
            b"alloc" => Self::Alloc,
            b"free_requested" => Self::FreeRequested,
            b"free_completed" => Self::FreeCompleted,
            b"segment_alloc" => Self::SegmentAlloc,
            b"segment_free" => Self::SegmentFree,
            b"segment_map" => Self::SegmentMap,
            b"segment_unmap" => Self::SegmentUnmap,
            b"snapshot" => Self::Snapshot,
            b"oom" => Self::Oom,
            _ => Self::Unknown,
        }
    }
}

/// One entry of a device's allocation trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEvent {
    /// What happened.
    pub action: Action,
    /// Address of the block or segment.
    pub addr: u64,
    /// Bytes involved.
    pub size: u64,
    /// Stream.
    pub stream: i64,
    /// Timestamp in microseconds, when recorded.
    pub time_us: Option<i64>,
    /// Stack of the event.
    pub stack: StackId,
}

/// The allocator settings recorded in the snapshot, as text.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AllocatorSettings {
    /// `(key, value)` pairs in file order; values rendered Python-style.
    pub entries: Vec<(String, String)>,
}

impl AllocatorSettings {
    /// The value of `key`, if recorded.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A parsed memory snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Snapshot {
    /// Segments at the time of the dump.
    pub segments: Vec<Segment>,
    /// Per device index, the recorded events, oldest first.
    pub device_traces: Vec<Vec<TraceEvent>>,
    /// Allocator settings, when recorded.
    pub allocator_settings: AllocatorSettings,
    /// Distinct frames.
    pub frames: Vec<Frame>,
    /// Distinct stacks as indices into [`Snapshot::frames`], innermost first;
    /// entry 0 is the empty stack.
    pub stacks: Vec<Vec<u32>>,
}

impl Snapshot {
    /// The frames of stack `id` (empty for an unknown id).
    pub fn stack_frames(&self, id: StackId) -> Vec<Frame> {
        let ids = self
            .stacks
            .get(id as usize)
            .map_or(&[][..], |s| s.as_slice());
        ids.iter()
            .filter_map(|&f| self.frames.get(f as usize).cloned())
            .collect()
    }

    /// Number of trace events over all devices.
    pub fn event_count(&self) -> usize {
        self.device_traces.iter().map(Vec::len).sum()
    }
}

/// Maps an unpickled value tree onto a [`Snapshot`].
pub(crate) fn from_arena<'a>(arena: &'a Arena<'_>, limits: &'a Limits) -> Result<Snapshot, String> {
    let mut conv = Converter {
        arena,
        work: 0,
        max_work: limits
            .max_work
            .min(arena.weight().saturating_mul(2) + (1 << 20)),
        text: 0,
        limits,
        strings: IdMap::default(),
        frame_ids: IdMap::default(),
        stack_ids: IdMap::default(),
        frames_scratch: Vec::new(),
        out: Snapshot {
            stacks: vec![Vec::new()],
            ..Snapshot::default()
        },
    };
    conv.root(arena.root)?;
    Ok(conv.out)
}

struct Converter<'a, 'd> {
    arena: &'a Arena<'d>,
    work: u64,
    max_work: u64,
    /// String bytes copied so far.
    text: usize,
    limits: &'a Limits,
    strings: IdMap<NodeId, Rc<str>>,
    /// Frames by (filename, name) string nodes and line.
    frame_ids: IdMap<(NodeId, NodeId, i64), u32>,
    /// Stacks by their frames.
    stack_ids: IdMap<Vec<u32>, StackId>,
    /// The frames of the stack being read (reused).
    frames_scratch: Vec<u32>,
    out: Snapshot,
}

impl<'a> Converter<'a, '_> {
    /// Counts `n` units of work against the limit.
    fn charge(&mut self, n: usize) -> Result<(), String> {
        self.work = self.work.saturating_add(n as u64);
        if self.work > self.max_work {
            return Err(format!(
                "snapshot too large or too self-referential: more than {} values to map",
                self.max_work
            ));
        }
        Ok(())
    }

    // ---- typed accessors ---------------------------------------------------

    fn dict(&mut self, id: NodeId, what: &str) -> Result<&'a [(NodeId, NodeId)], String> {
        let arena = self.arena;
        let entries = arena
            .dict(id)
            .ok_or_else(|| format!("{what}: expected a dict, found {}", kind(arena.node(id))))?;
        self.charge(entries.len() + 1)?;
        Ok(entries)
    }

    fn seq(&mut self, id: NodeId, what: &str) -> Result<&'a [NodeId], String> {
        let arena = self.arena;
        let items = arena
            .seq(id)
            .ok_or_else(|| format!("{what}: expected a list, found {}", kind(arena.node(id))))?;
        self.charge(items.len() + 1)?;
        Ok(items)
    }

    fn key(&self, id: NodeId) -> &'a [u8] {
        self.arena.str(id).unwrap_or(b"")
    }

    fn int(&self, id: NodeId, what: &str) -> Result<i64, String> {
        match self.arena.node(id) {
            Node::Int(v) => Ok(*v),
            Node::Bool(b) => Ok(i64::from(*b)),
            Node::None => Ok(0),
            Node::BigInt => Err(format!("{what}: integer out of range")),
            other => Err(format!("{what}: expected an int, found {}", kind(other))),
        }
    }

    fn uint(&self, id: NodeId, what: &str) -> Result<u64, String> {
        let v = self.int(id, what)?;
        u64::try_from(v).map_err(|_| format!("{what}: negative value {v}"))
    }

    fn string(&mut self, id: NodeId, what: &str) -> Result<String, String> {
        let arena = self.arena;
        match arena.node(id) {
            Node::Str(_) => {
                let bytes = arena.str(id).unwrap_or(b"");
                self.charge(1)?;
                self.text = self.text.saturating_add(bytes.len());
                if self.text > self.limits.max_text_bytes {
                    return Err(format!(
                        "snapshot too large: more than {} bytes of text to copy",
                        self.limits.max_text_bytes
                    ));
                }
                Ok(String::from_utf8_lossy(bytes).into_owned())
            }
            Node::None => Ok(String::new()),
            other => Err(format!("{what}: expected a str, found {}", kind(other))),
        }
    }

    /// Like [`Self::string`], but each string value is copied only once.
    fn shared_string(&mut self, id: NodeId, what: &str) -> Result<Rc<str>, String> {
        if let Some(s) = self.strings.get(&id) {
            return Ok(Rc::clone(s));
        }
        let s: Rc<str> = self.string(id, what)?.into();
        self.strings.insert(id, Rc::clone(&s));
        Ok(s)
    }

    // ---- schema ------------------------------------------------------------

    fn root(&mut self, id: NodeId) -> Result<(), String> {
        if let Some(items) = self.arena.seq(id) {
            // Very old snapshots were just the list of segments. An empty list is no run: a
            // process that touched the GPU has at least one segment, so a bare `[]` is refused
            // rather than read as a run that allocated nothing.
            if items.is_empty() {
                return Err(
                    "not a PyTorch memory snapshot: the pickle holds an empty list (an old-style snapshot is a list of segments, and a run has at least one)"
                        .into(),
                );
            }
            return self.segments(id);
        }
        let entries = self.dict(id, "snapshot").map_err(|_| {
            format!(
                "not a PyTorch memory snapshot: the pickle holds a {}, not a dict",
                kind(self.arena.node(id))
            )
        })?;
        let known = entries
            .iter()
            .any(|&(k, _)| matches!(self.key(k), b"segments" | b"device_traces"));
        if !known {
            return Err(
                "not a PyTorch memory snapshot: the pickled dict has neither 'segments' nor 'device_traces'"
                    .into(),
            );
        }
        for &(k, v) in entries {
            match self.key(k) {
                b"segments" => self.segments(v)?,
                b"device_traces" => self.device_traces(v)?,
                b"allocator_settings" => self.allocator_settings(v)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn segments(&mut self, id: NodeId) -> Result<(), String> {
        for (i, &seg) in self.seq(id, "segments")?.iter().enumerate() {
            let segment = self
                .segment(seg)
                .map_err(|e| format!("segments[{i}]: {e}"))?;
            self.out.segments.push(segment);
        }
        Ok(())
    }

    fn segment(&mut self, id: NodeId) -> Result<Segment, String> {
        let mut s = Segment {
            device: 0,
            address: 0,
            total_size: 0,
            allocated_size: 0,
            active_size: 0,
            requested_size: 0,
            stream: 0,
            segment_type: String::new(),
            is_expandable: false,
            blocks: Vec::new(),
            stack: 0,
        };
        let mut blocks = None;
        for &(k, v) in self.dict(id, "segment")? {
            match self.key(k) {
                b"device" => s.device = self.int(v, "device")?,
                b"address" => s.address = self.uint(v, "address")?,
                b"total_size" => s.total_size = self.uint(v, "total_size")?,
                b"allocated_size" => s.allocated_size = self.uint(v, "allocated_size")?,
                b"active_size" => s.active_size = self.uint(v, "active_size")?,
                b"requested_size" => s.requested_size = self.uint(v, "requested_size")?,
                b"stream" => s.stream = self.int(v, "stream")?,
                b"segment_type" => s.segment_type = self.string(v, "segment_type")?,
                b"is_expandable" => s.is_expandable = self.int(v, "is_expandable")? != 0,
                b"frames" => s.stack = self.stack(v)?,
                b"blocks" => blocks = Some(v),
                _ => {}
            }
        }
        if let Some(v) = blocks {
            s.blocks = self.blocks(v, s.address)?;
        }
        Ok(s)
    }

    fn blocks(&mut self, id: NodeId, segment_address: u64) -> Result<Vec<Block>, String> {
        let items = self.seq(id, "blocks")?;
        let mut blocks = Vec::with_capacity(items.len());
        let mut next_address = segment_address;
        for (i, &b) in items.iter().enumerate() {
            let block = self
                .block(b, next_address)
                .map_err(|e| format!("blocks[{i}]: {e}"))?;
            next_address = block.address.saturating_add(block.size);
            blocks.push(block);
        }
        Ok(blocks)
    }

    /// A block; `default_address` serves old snapshots that leave it implicit.
    fn block(&mut self, id: NodeId, default_address: u64) -> Result<Block, String> {
        let mut b = Block {
            address: default_address,
            size: 0,
            requested_size: 0,
            state: BlockState::Unknown,
            stack: 0,
        };
        for &(k, v) in self.dict(id, "block")? {
            match self.key(k) {
                b"address" => b.address = self.uint(v, "address")?,
                b"size" => b.size = self.uint(v, "size")?,
                b"requested_size" => b.requested_size = self.uint(v, "requested_size")?,
                b"state" => b.state = self.block_state(v),
                b"frames" => b.stack = self.stack(v)?,
                _ => {}
            }
        }
        Ok(b)
    }

    fn block_state(&self, id: NodeId) -> BlockState {
        match self.key(id) {
            b"active_allocated" => BlockState::ActiveAllocated,
            b"active_pending_free" => BlockState::ActivePendingFree,
            b"inactive" => BlockState::Inactive,
            _ => BlockState::Unknown,
        }
    }

    fn device_traces(&mut self, id: NodeId) -> Result<(), String> {
        for (d, &trace) in self.seq(id, "device_traces")?.iter().enumerate() {
            let events = self.seq(trace, "device trace")?;
            let mut out = Vec::with_capacity(events.len());
            for (i, &e) in events.iter().enumerate() {
                let event = self
                    .event(e)
                    .map_err(|err| format!("device_traces[{d}][{i}]: {err}"))?;
                out.push(event);
            }
            self.out.device_traces.push(out);
        }
        Ok(())
    }

    fn event(&mut self, id: NodeId) -> Result<TraceEvent, String> {
        let mut e = TraceEvent {
            action: Action::Unknown,
            addr: 0,
            size: 0,
            stream: 0,
            time_us: None,
            stack: 0,
        };
        for &(k, v) in self.dict(id, "trace event")? {
            match self.key(k) {
                b"action" => e.action = Action::from_name(self.key(v)),
                b"addr" => e.addr = self.uint(v, "addr")?,
                b"size" => e.size = self.uint(v, "size")?,
                b"stream" => e.stream = self.int(v, "stream")?,
                b"time_us" => e.time_us = Some(self.int(v, "time_us")?),
                b"frames" => e.stack = self.stack(v)?,
                _ => {}
            }
        }
        Ok(e)
    }

    /// Interns the frame list `id`: equal stacks are stored once, whether the pickle shared
    /// them through its memo or (as `_dump_snapshot` does) wrote each event's list anew.
    fn stack(&mut self, id: NodeId) -> Result<StackId, String> {
        if matches!(self.arena.node(id), Node::None) {
            return Ok(0);
        }
        let mut frames = std::mem::take(&mut self.frames_scratch);
        frames.clear();
        let read = self.read_frames(id, &mut frames);
        let sid = read.map(|()| match self.stack_ids.get(frames.as_slice()) {
            Some(&sid) => sid,
            None => {
                let sid = self.out.stacks.len() as StackId;
                self.out.stacks.push(frames.clone());
                self.stack_ids.insert(frames.clone(), sid);
                sid
            }
        });
        self.frames_scratch = frames;
        sid
    }

    fn read_frames(&mut self, id: NodeId, frames: &mut Vec<u32>) -> Result<(), String> {
        for &f in self.seq(id, "frames")? {
            frames.push(self.frame(f)?);
        }
        Ok(())
    }

    /// Interns the frame dict `id` by its content (file, function, line).
    fn frame(&mut self, id: NodeId) -> Result<u32, String> {
        let (mut filename, mut name, mut line) = (None, None, 0);
        for &(k, v) in self.dict(id, "frame")? {
            match self.key(k) {
                b"filename" => filename = Some(v),
                b"name" => name = Some(v),
                b"line" => line = self.int(v, "line")?,
                _ => {}
            }
        }
        let key = (
            filename.unwrap_or(NodeId::MAX),
            name.unwrap_or(NodeId::MAX),
            line,
        );
        if let Some(&fid) = self.frame_ids.get(&key) {
            return Ok(fid);
        }
        let mut frame = Frame {
            line,
            ..Frame::default()
        };
        if let Some(v) = filename {
            frame.filename = self.shared_string(v, "filename")?;
        }
        if let Some(v) = name {
            frame.name = self.shared_string(v, "name")?;
        }
        let fid = self.out.frames.len() as u32;
        self.out.frames.push(frame);
        self.frame_ids.insert(key, fid);
        Ok(fid)
    }

    fn allocator_settings(&mut self, id: NodeId) -> Result<(), String> {
        let Some(entries) = self.arena.dict(id) else {
            return Ok(()); // lenient: ignore a malformed settings value
        };
        self.charge(entries.len())?;
        for &(k, v) in entries {
            let key = self.render(k, 0)?;
            let value = self.render(v, 0)?;
            self.out.allocator_settings.entries.push((key, value));
        }
        Ok(())
    }

    /// Renders a settings value Python-style, one container level deep.
    fn render(&mut self, id: NodeId, depth: u8) -> Result<String, String> {
        let arena = self.arena;
        Ok(match arena.node(id) {
            Node::None => "None".into(),
            Node::Bool(b) => if *b { "True" } else { "False" }.into(),
            Node::Int(v) => v.to_string(),
            Node::BigInt => "<big int>".into(),
            Node::Float(v) => format!("{v:?}"),
            Node::Str(_) => self.string(id, "setting")?,
            Node::Bytes => "<bytes>".into(),
            _ if depth > 0 => "…".into(),
            Node::List(_) | Node::Tuple(_) => {
                let items = arena.seq(id).unwrap_or(&[]);
                self.charge(items.len())?;
                let parts = items
                    .iter()
                    .map(|&i| self.render(i, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                format!("[{}]", parts.join(", "))
            }
            Node::Dict(_) => {
                let entries = arena.dict(id).unwrap_or(&[]);
                self.charge(entries.len())?;
                let mut parts = Vec::with_capacity(entries.len());
                for &(k, v) in entries {
                    let (k, v) = (self.render(k, depth + 1)?, self.render(v, depth + 1)?);
                    parts.push(format!("{k}: {v}"));
                }
                format!("{{{}}}", parts.join(", "))
            }
        })
    }
}
