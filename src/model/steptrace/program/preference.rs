//! Preference steps as TRL 1.16 runs them on a peft model (`DPOTrainer._compute_loss`,
//! `trl/trainer/dpo_trainer.py:1285-1612`; `KTOTrainer._compute_loss`,
//! `trl/trainer/kto_trainer.py:1337-1450`): the labels masked to the completion, the policy
//! forward through TRL's fused LM head (`add_fused_lm_head`, `trl/trainer/utils.py:1548-1698`,
//! whose `_ChunkedLogProbFunction` scores the completion tokens in `[4096 × 32768]` tiles,
//! `trl/kernels/chunked_logprob.py:300-465`), the reference forward under `torch.no_grad()` with
//! peft's adapters disabled and checkpointing off, the sigmoid loss and the logged metrics.
//! Trainers that compute the full logits instead (LLaMA-Factory, TRL 0.x, TRL's ORPO and CPO)
//! run the causal-LM head of the SFT step over the same sequences.

use super::super::tape::{Mode, Op, Step, G, X};
use super::super::{StepPhase, What};
use super::{bytes, Prog};
use crate::model::settings::{Logits, Stage};

/// What the fused head returns and the step keeps: the per-token outputs scattered back to
/// `[sequences, seq − 1]` (`log_probs`, `entropy`, `mean_logits`, `is_top1`), the label mask,
/// and the (unused) mean NLL loss with its divisor.
#[derive(Clone, Copy)]
pub(super) struct Head {
    pub(super) logp: X,
    /// The metrics' outputs: the policy's head computes them, a separate reference model's
    /// only the log-probs (`add_fused_lm_head(self.ref_model)`, `dpo_trainer.py:961-962`).
    pub(super) entropy: Option<X>,
    pub(super) mean: Option<X>,
    pub(super) top1: Option<X>,
    pub(super) mask: X,
    pub(super) loss: X,
    /// The loss's divisor, which its `DivBackward` keeps (freed already without a graph).
    pub(super) count: Option<X>,
}

/// The sizes the loss and metric ops of `_compute_loss` allocate, per the batch layout.
#[derive(Clone, Copy)]
enum Sz {
    /// An empty tensor (`log_sigmoid_forward`'s buffer on CUDA).
    Z,
    /// A bool scalar.
    One,
    /// An fp32 scalar.
    F4,
    /// An int64 scalar.
    I8,
    /// One fp32 per pair.
    B4,
    /// One bool per pair.
    B1,
    /// One fp32 per sequence.
    S4,
    /// `[sequences, seq − 1]` fp32.
    Tok4,
    /// `[pairs, seq − 1]` bool.
    RowB,
    /// `nonzero` of the chosen completion mask: `[pairs × completion, 2]` int64.
    Nz,
    /// The chosen completion tokens' values: `[pairs × completion]` fp32.
    Bc4,
}

/// An op of the script: a new tensor (the next local), the release of local `k`, or (in the
/// backward) the release of the forward's saved local `k`.
#[derive(Clone, Copy)]
enum Ev {
    A(Sz),
    F(u8),
    Saved(u8),
}

use Ev::{Saved, A, F};
use Sz::*;

/// `_compute_loss` after the reference log-probs (`dpo_trainer.py:1363-1612`): the log-ratios,
/// the sigmoid loss `-logsigmoid(β·Δ)` and its mean, then the logged metrics (entropy and mean
/// logits of the completions, chosen and rejected, top-1 accuracy, rewards and margins).
/// Local 0 is the last log-probs sum; local 4 (`β·Δ`) and 6 (`log_sigmoid`'s buffer) are saved
/// for backward and local 10 is the loss.
const TAIL: [Ev; 88] = [
    A(B4),
    A(B4),
    A(B4),
    A(B4),
    A(B4),
    A(Z),
    A(B4),
    F(5),
    A(F4),
    A(F4),
    F(8),
    A(F4),
    F(9),
    A(Tok4),
    A(F4),
    F(11),
    A(I8),
    A(F4),
    F(12),
    A(I8),
    F(13),
    A(One),
    F(16),
    A(F4),
    F(17),
    A(I8),
    A(I8),
    F(18),
    F(19),
    A(RowB),
    A(Nz),
    A(Bc4),
    F(21),
    F(20),
    A(F4),
    F(22),
    A(I8),
    A(RowB),
    A(Nz),
    A(Bc4),
    F(26),
    F(25),
    A(F4),
    F(27),
    A(I8),
    A(F4),
    F(30),
    F(23),
    A(I8),
    F(31),
    F(24),
    A(F4),
    F(32),
    F(28),
    A(I8),
    F(33),
    F(29),
    A(RowB),
    A(RowB),
    F(34),
    A(I8),
    F(15),
    A(I8),
    A(I8),
    A(One),
    F(39),
    A(I8),
    A(F4),
    F(40),
    F(41),
    A(B4),
    A(B4),
    A(F4),
    F(44),
    A(F4),
    F(45),
    A(B1),
    A(B4),
    F(46),
    A(F4),
    F(48),
    A(B4),
    A(F4),
    F(50),
    A(F4),
    F(51),
    A(F4),
    F(52),
];

/// The tail's locals that live until `_compute_loss` returns, in the order its frame releases
/// them; the policy's entropy goes between A and B, its mean logits and top-1 between B and C
/// (see [`Prog::pref_forward`]).
const TAIL_KEPT_A: [u8; 4] = [1, 2, 3, 7];
const TAIL_KEPT_B: [u8; 2] = [14, 36];
const TAIL_KEPT_C: [u8; 7] = [35, 37, 38, 42, 43, 47, 49];

/// The loss's backward down to the gradient of the scattered log-probs: the mean's and the
/// loss weight's, `-logsigmoid`'s (releasing its saved `β·Δ` and buffer), the log-ratios', the
/// `cat` of the chosen and rejected halves, and `slice_backward` of `log_probs[:, -seq_len:]`.
const LOSS_BACKWARD: [Ev; 17] = [
    A(F4),
    A(B4),
    F(0),
    A(B4),
    F(1),
    A(B4),
    F(2),
    Saved(4),
    Saved(6),
    A(B4),
    F(3),
    A(B4),
    A(S4),
    F(4),
    F(5),
    A(Tok4),
    F(6),
];

impl<'c, 'a> Prog<'c, 'a> {
    /// Drops a tensor a head may not have made.
    pub(super) fn drop_opt(&mut self, x: Option<X>) {
        if let Some(x) = x {
            self.drop(x);
        }
    }

    fn sz(&self, z: Sz) -> u64 {
        let s = self.ctx.s;
        let (b, l, c) = (s.batch, s.seq, s.completion_tokens());
        let seqs = s.sequences();
        match z {
            Z => 0,
            One => 1,
            F4 => 4,
            I8 => 8,
            B4 => b * 4,
            B1 => b,
            S4 => seqs * 4,
            Tok4 => seqs * (l - 1) * 4,
            RowB => b * (l - 1),
            Nz => b * c * 16,
            Bc4 => b * c * 4,
        }
    }

    /// The collator's batch (`DataCollatorForPreference`): input ids, attention mask and
    /// completion mask, `[sequences, seq]` int64 each, alive through the run.
    pub(super) fn pref_inputs(&mut self) {
        let n = self.tokens();
        let s = self.ctx.s;
        if s.packing && s.sft_fused_head() {
            // TRL's padding-free collator (`sft_trainer.py:168-226`): input ids, labels,
            // position ids, the documents' boundaries as cu_seq_lens_q and _k (one host tensor
            // moved twice) and each token's document (`seq_idx`, int32).
            self.t(n, 8, What::Input);
            self.t(n, 8, What::Input);
            self.packed_pos = Some(self.t(n, 8, What::Input));
            let bounds = s.packed_documents.max(1) + 1;
            self.t(bounds, 4, What::Input);
            self.t(bounds, 4, What::Input);
            self.t(n, 4, What::Input);
            return;
        }
        for _ in 0..3 {
            self.t(n, 8, What::Input);
        }
    }

    /// `labels = input_ids.masked_fill(completion_mask == 0, -100)`.
    pub(super) fn pref_labels(&mut self) -> X {
        let n = self.tokens();
        let eq = self.t(n, 1, What::Loss);
        let labels = self.t(n, 8, What::Loss);
        self.drop(eq);
        labels
    }

    /// One model call with `fused_lm_head=True` (or the full logits): the decoder stack, then
    /// the head over the completion tokens.
    pub(super) fn pref_model(&mut self) -> Head {
        let (fin, _, _) = self.body(true);
        self.fused_head(fin)
    }

    /// TRL's fused head (`trl/trainer/utils.py:1611-1660`): `last_hidden_state[:, :-1]`, the
    /// completion positions picked by a boolean index (`hidden_states[mask]`, the CUDA
    /// "compact" branch), `_ChunkedLogProbFunction` over them, the outputs scattered back to
    /// `[sequences, seq − 1]`, and the mean NLL loss.
    pub(super) fn fused_head(&mut self, fin: X) -> Head {
        let ctx = self.ctx;
        let s = ctx.s;
        let h = self.h();
        let seqs = s.sequences();
        let rows = seqs * (s.seq - 1);
        let n = seqs * s.scored_tokens();
        let grad = self.tp.mode != Mode::NoGrad;
        // hidden_states[:, :-1] (a view whose backward is slice_backward)
        let mut hs = fin;
        hs.n = rows * h;
        hs.g = self
            .tp
            .node(Op::Slice, rows * h, fin.es, &[Self::edge(&fin)], &[]);
        self.tp.keep_local(fin.t);
        // mask = labels != -100; hidden_states[mask] through nonzero
        let mask = self.t(rows, 1, What::Loss);
        let nz = self.t(n * 2, 8, What::Loss);
        let mut hidden = self.t(n * h, fin.es, What::Logits);
        hidden.g = self
            .tp
            .node(Op::Scatter, n * h, fin.es, &[Self::edge(&hs)], &[mask.t]);
        self.drop(nz);
        self.drop(hs);
        let nz = self.t(n * 2, 8, What::Loss);
        let targets = self.t(n, 8, What::Loss);
        self.drop(nz);
        // _ChunkedLogProbFunction.forward
        let ce = s.autocast.map_or(fin.es, bytes);
        let head = self.lm_head.map(|p| p.x).unwrap_or(self.params[0].x);
        let v = ctx.arch.vocab_size;
        const TOKENS: u64 = 4096;
        const VOCAB: u64 = 32768;
        let stats: Vec<X> = (0..7).map(|_| self.t(n, 4, What::Logits)).collect();
        let tile = self.t(n.min(TOKENS) * VOCAB, ce, What::Logits);
        let token_chunks = n.div_ceil(TOKENS);
        let vocab_chunks = v.div_ceil(VOCAB);
        let mut hidden_chunk: Option<X> = None;
        for i in 0..token_chunks {
            let rows_i = (n - i * TOKENS).min(TOKENS);
            if hidden.es != ce {
                let c = self.t(rows_i * h, ce, What::Logits);
                if let Some(o) = hidden_chunk.replace(c) {
                    self.drop(o);
                }
            }
            for j in 0..vocab_chunks {
                if head.es != ce {
                    // weight[start:end].to(compute_dtype), a temporary of the mm call
                    let w = self.t((v - j * VOCAB).min(VOCAB) * h, ce, What::WeightCopy);
                    self.drop(w);
                }
                self.tp.gemm(false);
            }
        }
        let log = self.t(n, 4, What::Logits);
        let log_z = self.t(n, 4, What::Logits);
        self.drop(log);
        let mut logp = self.t(n, 4, What::Logits);
        // The outputs TRL asks for besides the log-probs: DPOTrainer's and KTOTrainer's policy
        // head adds entropy, mean logits and top-1 (`dpo_trainer.py:954-960`), SFTTrainer's
        // entropy and top-1 (`sft_trainer.py:1140-1146`), GRPOTrainer's entropy, a separate
        // reference model's none.
        let metrics = !self.ref_copy;
        let (mut entropy, mut mean, mut top1) = (None, None, None);
        if metrics {
            let d = self.t(n, 4, What::Logits);
            entropy = Some(self.t(n, 4, What::Logits));
            self.drop(d);
            if s.preference() {
                mean = Some(self.t(n, 4, What::Logits));
            }
            // GRPOTrainer's head: log-probs and entropy only (`grpo_trainer.py:1068-1073`).
            if !s.grpo() {
                let ge = self.t(n, 1, What::Logits);
                let gt = self.t(n, 1, What::Logits);
                top1 = Some(self.t(n, 1, What::Logits));
                self.drop(ge);
                self.drop(gt);
            }
        }
        let (hidden_chunk_bytes, hidden_last_bytes) = if hidden.es != ce {
            (
                n.min(TOKENS) * h * ce,
                n.saturating_sub(token_chunks.saturating_sub(1) * TOKENS) * h * ce,
            )
        } else {
            (0, 0)
        };
        let (weight_chunk_bytes, weight_last_bytes) = if head.es != ce {
            (
                v.min(VOCAB) * h * ce,
                v.saturating_sub(vocab_chunks.saturating_sub(1) * VOCAB) * h * ce,
            )
        } else {
            (0, 0)
        };
        logp.g = self.tp.node(
            Op::ChunkedLogprob {
                hidden_n: n * h,
                tile_bytes: n.min(TOKENS) * VOCAB * ce,
                hidden_chunk_bytes,
                hidden_last_bytes,
                weight_chunk_bytes,
                weight_last_bytes,
                token_chunks: token_chunks.min(u64::from(u32::MAX)) as u32,
                vocab_chunks: vocab_chunks.min(u64::from(u32::MAX)) as u32,
            },
            n,
            4,
            // The head weight's edge needs no gradient unless it is trained.
            &[Self::edge(&hidden), Self::edge(&head)],
            &[
                hidden.t,
                targets.t,
                log_z.t,
                entropy.map_or(log_z.t, |e| e.t),
            ],
        );
        // The frame's locals: the statistics, the hidden chunk, the tile buffer (through its
        // last view); without a graph, log_z, then the context's saved hidden states and
        // targets.
        for x in stats {
            self.drop(x);
        }
        if let Some(c) = hidden_chunk {
            self.drop(c);
        }
        self.drop(tile);
        self.drop(log_z);
        self.drop(hidden);
        self.drop(targets);
        // x.new_zeros(mask.shape).masked_scatter(mask, x) for each output
        let scatter = |p: &mut Self, x: X, es: u64| {
            let z = p.t(rows, es, What::Logits);
            let mut y = p.t(rows, es, What::Logits);
            y.g = p.tp.node(Op::Slice, rows, es, &[Self::edge(&x)], &[mask.t]);
            p.drop(z);
            y
        };
        let logp_full = scatter(self, logp, 4);
        let entropy_full = entropy.map(|x| scatter(self, x, 4));
        let mean_full = mean.map(|x| scatter(self, x, 4));
        let top1_full = top1.map(|x| scatter(self, x, 1));
        self.drop_opt(mean);
        if !grad {
            self.drop_opt(entropy);
        }
        self.drop(logp);
        self.drop_opt(top1);
        if grad {
            self.drop_opt(entropy);
        }
        // loss = -log_probs.sum() / mask.sum().clamp(min=1) (no one takes its gradient)
        let sum = self.t(1, 4, What::Loss);
        let neg = self.t(1, 4, What::Loss);
        self.drop(sum);
        let cnt = self.t(1, 8, What::Loss);
        let count = self.t(1, 8, What::Loss);
        self.drop(cnt);
        let loss = self.t(1, 4, What::Loss);
        self.drop(neg);
        let count = if grad {
            Some(count)
        } else {
            self.drop(count);
            None
        };
        self.drop(fin);
        Head {
            logp: logp_full,
            entropy: entropy_full,
            mean: mean_full,
            top1: top1_full,
            mask,
            loss,
            count,
        }
    }

    /// One forward of a preference step through its loss (the policy pass, the reference pass
    /// in its own phase, the loss and metrics); returns the loss's node and the loss.
    pub(super) fn pref_forward(&mut self, step: u8) -> (G, X) {
        let s = self.ctx.s;
        if s.logits_run() == Logits::Full {
            return self.pref_forward_logits(step);
        }
        let labels = self.pref_labels();
        if s.stage == Stage::Kto {
            // KL_logps: the policy over mismatched completions under no_grad, adapters on
            // (kto_trainer.py:1337-1367), before the policy forward.
            let kl = self.no_grad_pass(false);
            self.release_head(kl, true);
        }
        let policy = self.pref_model();
        // logps = per_token_logps.sum(dim=1) (the view's and sum's backward are in the loss
        // backward's script)
        let sum = self.t(s.sequences(), 4, What::Loss);
        let reference = if s.reference_pass() {
            let r = self.reference_pass(step);
            let rs = self.t(s.sequences(), 4, What::Loss);
            Some((r, rs))
        } else {
            None
        };
        let first = reference.map_or(sum, |r| r.1);
        let mut locals = vec![first];
        for ev in TAIL {
            match ev {
                A(z) => {
                    let b = self.sz(z);
                    let x = self.t(b, 1, What::Loss);
                    locals.push(x);
                }
                F(k) => self.drop(locals[k as usize]),
                Saved(_) => {}
            }
        }
        let loss_x = locals[10];
        // The frame's locals die: the labels, the policy outputs' loss, log-probs and sum,
        // the reference's outputs, then the tail's.
        self.drop(labels);
        if let Some(c) = policy.count {
            self.drop(c);
        }
        self.drop(policy.loss);
        self.drop(policy.logp);
        self.drop(sum);
        if let Some((r, rs)) = reference {
            // Its log-probs last: the view `ref_per_token_logps` outlives the output.
            self.release_head(r, false);
            self.drop(r.logp);
            self.drop(rs);
        }
        for k in TAIL_KEPT_A {
            self.drop(locals[k as usize]);
        }
        self.drop_opt(policy.entropy);
        for k in TAIL_KEPT_B {
            self.drop(locals[k as usize]);
        }
        self.drop_opt(policy.mean);
        self.drop_opt(policy.top1);
        for k in TAIL_KEPT_C {
            self.drop(locals[k as usize]);
        }
        self.drop(policy.mask);
        self.clear_autocast_cache();
        let script = LOSS_BACKWARD
            .iter()
            .map(|ev| match *ev {
                A(z) => Step::Alloc(self.sz(z)),
                F(k) => Step::Free(u16::from(k)),
                Saved(k) => Step::Release(locals[k as usize].t),
            })
            .collect();
        let g = self.tp.script_node(script, 1, 4, Self::edge(&policy.logp));
        (g, loss_x)
    }

    /// The reference forward (`dpo_trainer.py:1318-1347`): `torch.no_grad()`, checkpointing
    /// off, peft's adapters disabled; its own phase.
    /// KTO's reference runs twice: over the KL completions, then the batch.
    fn reference_pass(&mut self, step: u8) -> Head {
        self.phase(step, StepPhase::RefForward);
        if self.ctx.s.stage == Stage::Kto {
            let kl = self.no_grad_pass(true);
            self.release_head(kl, true);
        }
        let r = self.no_grad_pass(true);
        self.phase(step, StepPhase::Forward);
        r
    }

    /// A model call under `torch.no_grad()`: the policy, or the reference (peft's adapters
    /// disabled, or the reference copy of a trained base).
    fn no_grad_pass(&mut self, reference: bool) -> Head {
        self.under_no_grad(reference, |p| p.pref_model())
    }

    /// Runs `f` under `torch.no_grad()`, as the reference model if `reference`.
    pub(super) fn under_no_grad<R>(
        &mut self,
        reference: bool,
        f: impl FnOnce(&mut Self) -> R,
    ) -> R {
        // A trained base's reference copy exists only for a reference pass in every step;
        // precomputing runs the policy itself (TRL's ref_model is None then).
        let copy = reference && self.ctx.s.base_trained() && self.ctx.s.reference_pass();
        let mode = std::mem::replace(&mut self.tp.mode, Mode::NoGrad);
        let off = std::mem::replace(&mut self.adapters_off, reference && !copy);
        let rc = std::mem::replace(&mut self.ref_copy, copy);
        let r = f(self);
        self.ref_copy = rc;
        self.adapters_off = off;
        self.tp.mode = mode;
        r
    }

    /// `precompute_ref_log_probs`: before training, one no-grad pass over the batch with the
    /// adapters disabled (`compute_ref_log_probs`, `dpo_trainer.py:1243-1283`); the sums go to
    /// the CPU and come back with the batch (two `[pairs]` fp32 tensors).
    pub(super) fn precompute(&mut self) {
        let s = self.ctx.s;
        self.phase(0, StepPhase::Precompute);
        let labels = self.pref_labels();
        let r = self.no_grad_pass(true);
        // The output's fields die except the log-probs the sum reads (a view keeps them).
        let logp = r.logp;
        self.release_head(r, false);
        let sum = self.t(s.sequences(), 4, What::Loss);
        self.drop(labels);
        self.drop(logp);
        self.drop(sum);
        self.phase(0, StepPhase::Inputs);
        // ref_chosen_logps / ref_rejected_logps (KTO: ref_logps / ref_KL_logps), batch each
        for _ in 0..2 {
            self.t(s.batch, 4, What::Input);
        }
    }

    /// A preference step whose log-probs come from the full logits (LLaMA-Factory's
    /// `concatenated_forward`, TRL 0.x, TRL's ORPO and CPO trainers: `[sequences, seq, vocab]`
    /// logits cast to fp32 and a log-softmax over them); for KTO, its KL pass over mismatched
    /// completions under no_grad before the policy forward, and a reference pass for both.
    /// Not measured by the harness: the policy head is the SFT step's cross-entropy head over
    /// the same tokens, whose allocations (the fp32 logits, the saved log-softmax, a gradient
    /// of the logits' size) are those of `log_softmax` + `gather`.
    fn pref_forward_logits(&mut self, step: u8) -> (G, X) {
        let s = self.ctx.s;
        let labels = self.pref_labels();
        if s.stage == Stage::Kto {
            // KL_logps: the policy over the mismatched completions, under no_grad.
            let (_, l) = self.under_no_grad(false, |p| p.forward());
            self.drop(l);
        }
        let (root, loss) = self.forward();
        if s.reference_pass() {
            // The reference model's concatenated forward under no_grad: the peft model with
            // its adapters disabled, or the separate reference copy of a trained base.
            self.phase(step, StepPhase::RefForward);
            let passes = if s.stage == Stage::Kto { 2 } else { 1 };
            for _ in 0..passes {
                let (_, l) = self.under_no_grad(true, |p| p.forward());
                self.drop(l);
            }
            self.phase(step, StepPhase::Forward);
        }
        self.drop(labels);
        (root, loss)
    }

    /// A model output dies: its fields in order (the log-probs too unless a view of them lives
    /// on).
    pub(super) fn release_head(&mut self, r: Head, with_logp: bool) {
        if let Some(c) = r.count {
            self.drop(c);
        }
        self.drop(r.loss);
        if with_logp {
            self.drop(r.logp);
        }
        self.drop_opt(r.entropy);
        self.drop_opt(r.mean);
        self.drop_opt(r.top1);
        self.drop(r.mask);
    }
}
