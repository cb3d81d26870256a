//! A GRPO step's generation as TRL 1.16 runs it without vLLM (`generation: hf`,
//! `GRPOTrainer._generate_single_turn`, `trl/trainer/grpo_trainer.py:1816-1875`): transformers'
//! `generate` under `torch.no_grad()` with checkpointing off, sampling with the model in train
//! mode (dropout on), its `DynamicCache` (`transformers/cache_utils.py:104-137`: each layer's
//! keys and values `cat`ed one token longer per step), the prefill over the prompts, then one
//! forward per new token over the last token with only the last position's logits
//! (`logits_to_keep=1`), each step's fp32 copy of them, the softmax and the sampled token
//! (`generation/utils.py:3240-3293`). Every row runs to `max_completion_length` tokens: no
//! row samples its end early, the longest generation. Measured with the harness's
//! `grpo_generate: true` (`tests/data/harness/METHODS-EXTENSION.md`).

use super::super::{StepPhase, What};
use super::{Ctx, Prog, X};

/// The generation's state that the decoder stack reads: the rows, each layer's cached keys
/// and values, and the attention mask's length this forward reads.
pub(super) struct GenMode {
    /// Rows generated at once (the step's generation batch on this GPU).
    pub(super) rows: u64,
    /// Each layer's cached keys and values (`None` before the prefill).
    pub(super) kv: Vec<Option<(X, X)>>,
    /// Tokens the attention mask covers in this forward (the cache's length after it).
    pub(super) mask_len: u64,
}

/// The settings of `generate`'s two kinds of model call for GRPO's generation batch: the
/// prefill over the prompts, and one new token per row.
pub(super) fn contexts(
    s: &crate::model::Settings,
) -> (crate::model::Settings, crate::model::Settings) {
    // generate runs over the whole generation batch on this GPU at once (`grpo_trainer.py:1275,
    // 1816-1875`).
    contexts_of(s, s.generation_rows(), s.prompt_tokens())
}

/// The settings of `generate`'s model calls over `rows` prompts of `prompt` tokens, from the
/// settings `s` the model runs with (its dropout: GRPO samples in train mode, an evaluation in
/// eval mode).
/// A peft model generates without autocast: `PeftModel.generate` calls the inner model's
/// forward, which accelerate did not wrap (`peft_model.py`, `base_model.generate`;
/// `accelerate/accelerator.py:1824-1835` wraps the prepared model's own forward).
pub(super) fn contexts_of(
    s: &crate::model::Settings,
    rows: u64,
    prompt: u64,
) -> (crate::model::Settings, crate::model::Settings) {
    let autocast = if s.base_trained() { s.autocast } else { None };
    let prefill = crate::model::Settings {
        seq: prompt,
        autocast,
        batch: rows,
        ..s.clone()
    };
    let decode = crate::model::Settings {
        seq: 1,
        autocast,
        batch: rows,
        ..s.clone()
    };
    (prefill, decode)
}

/// The logits processors of a sampling `generate` (transformers 5.24
/// `generation/utils.py:1619-1633`, in that order): each makes new `[rows, vocab]` scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Warpers {
    /// `TemperatureLogitsWarper` (a temperature other than 1): `scores / temperature`.
    pub(super) temperature: bool,
    /// `TopKLogitsWarper(top_k)`.
    pub(super) top_k: Option<u64>,
    /// `TopPLogitsWarper` (a `top_p` below 1).
    pub(super) top_p: bool,
}

impl Warpers {
    /// None: TRL's GRPO sampling (temperature 1, `top_k` 0, `top_p` 1).
    pub(super) const NONE: Warpers = Warpers {
        temperature: false,
        top_k: None,
        top_p: false,
    };

    /// LLaMA-Factory's generating arguments (`hparams/generating_args.py`: `do_sample`,
    /// temperature 0.95, `top_k` 50, `top_p` 0.7), which its evaluation with
    /// `predict_with_generate` samples with.
    pub(super) const LLAMA_FACTORY: Warpers = Warpers {
        temperature: true,
        top_k: Some(50),
        top_p: true,
    };
}

/// One `generate` call: its two kinds of model call, the rows, the prompt's and the new
/// tokens, and the sampling's logits processors.
pub(super) struct GenCall<'c, 'a> {
    pub(super) prefill: &'c Ctx<'a>,
    pub(super) decode: &'c Ctx<'a>,
    pub(super) rows: u64,
    pub(super) prompt: u64,
    pub(super) new_tokens: u64,
    pub(super) warpers: Warpers,
}

/// Decode calls run op by op at each end of a generation (all of them up to twice this many
/// new tokens): the first calls (the first replaces no call's inputs) and the last ones (the
/// largest cache, the step's peak) cover every kind of call.
pub(in crate::model::steptrace) const FULL_DECODE_CALLS: u64 = 4;

impl<'c, 'a> Prog<'c, 'a> {
    /// A decode call's `model_inputs` die: its token, its position, the mask it read.
    fn release_inputs(&mut self, inputs: Option<(X, X, Option<X>)>) {
        if let Some((a, b, m)) = inputs {
            self.drop(a);
            self.drop(b);
            self.drop_opt(m);
        }
    }

    /// `DynamicLayer.update`: the layer's new keys and values appended to its cache (the first
    /// call `cat`s them onto empty tensors), the attention reading the cache; the new ones die
    /// as the attention's locals are rebound.
    pub(super) fn cache_update(&mut self, k: X, v: X) -> (X, X) {
        let li = self.tp.exec as usize;
        let Some(g) = self.gen.as_mut() else {
            return (k, v);
        };
        if g.kv.len() <= li {
            g.kv.resize(li + 1, None);
        }
        let old = g.kv[li];
        let (nk, nv) = match old {
            None => {
                // `torch.tensor([])` for keys and values, then `torch.cat` onto each
                let ek = self.t(0, k.es, What::KvCache);
                let ev = self.t(0, v.es, What::KvCache);
                let nk = self.t(k.n, k.es, What::KvCache);
                self.drop(ek);
                let nv = self.t(v.n, v.es, What::KvCache);
                self.drop(ev);
                (nk, nv)
            }
            Some((ok, ov)) => {
                let nk = self.t(ok.n + k.n, k.es, What::KvCache);
                self.drop(ok);
                let nv = self.t(ov.n + v.n, v.es, What::KvCache);
                self.drop(ov);
                (nk, nv)
            }
        };
        if let Some(g) = self.gen.as_mut() {
            g.kv[li] = Some((nk, nv));
        }
        // The attention's locals now name the cache's tensors.
        self.tp.keep_local(nk.t);
        self.tp.keep_local(nv.t);
        self.drop(k);
        self.drop(v);
        (nk, nv)
    }

    /// One model call of `generate` in context `ctx` (the prompts, or one new token per row)
    /// with the attention mask over `mask_len` tokens: the decoder stack, then the LM head over
    /// the last position only. Returns the `[rows, vocab]` logits.
    fn gen_forward(&mut self, ctx: &'c Ctx<'a>, mask_len: u64) -> X {
        let train = std::mem::replace(&mut self.ctx, ctx);
        if let Some(g) = self.gen.as_mut() {
            g.mask_len = mask_len;
        }
        let rows = ctx.s.batch;
        let (fin, _, _) = self.body(true);
        // hidden_states[:, slice(-1, None), :] (a view) through lm_head
        let h = self.h();
        self.tp.keep_local(fin.t);
        let last = X { n: rows * h, ..fin };
        let head = self.lm_head.map(|p| p.x).unwrap_or(self.params[0].x);
        let mut logits = self.matmul(last, head, rows * ctx.arch.vocab_size, What::Logits);
        self.drop(last);
        self.drop(fin);
        // The call's autocast region ends; accelerate's wrapper returns its outputs in fp32.
        self.clear_autocast_cache();
        if ctx.s.autocast.is_some() && logits.es != 4 {
            let f = self.t(logits.n, 4, What::Logits);
            self.drop(logits);
            logits = f;
        }
        self.ctx = train;
        logits
    }

    /// A decode call of the middle of a long generation, with only what outlives it: each
    /// layer's cache one token longer (the same `cat`s in the same order) and the logits. Its
    /// transients (one token's activations, the same in every decode call) are those of the
    /// full calls around it, so the phase's peak is the same; the allocator sees the cache grow
    /// step by step.
    fn gen_skip_forward(&mut self, ctx: &'c Ctx<'a>, len: u64, logits_like: (u64, u64)) -> X {
        let train = std::mem::replace(&mut self.ctx, ctx);
        let kv = self.gen.as_ref().map(|g| g.kv.clone()).unwrap_or_default();
        for (li, entry) in kv.into_iter().enumerate() {
            let Some((ok, ov)) = entry else { continue };
            self.tp.exec = li as u32;
            let old_len = len.saturating_sub(1).max(1);
            let nk = self.t(ok.n + ok.n / old_len, ok.es, What::KvCache);
            self.drop(ok);
            let nv = self.t(ov.n + ov.n / old_len, ov.es, What::KvCache);
            self.drop(ov);
            if let Some(g) = self.gen.as_mut() {
                g.kv[li] = Some((nk, nv));
            }
        }
        self.tp.exec = super::NO_LAYER;
        let logits = self.t(logits_like.0, logits_like.1, What::Logits);
        self.ctx = train;
        logits
    }

    /// The sampling's logits processors over the fp32 next-token logits `nl` (which the loop
    /// keeps) of `r` rows over `v` tokens: the processed scores, `None` without processors.
    /// Each processor's input dies as the list moves on (`LogitsProcessorList.__call__`);
    /// the first is the loop's own logits.
    fn warp(&mut self, w: Warpers, nl: X, r: u64, v: u64) -> Option<X> {
        let mut out: Option<X> = None;
        let _ = nl;
        if w.temperature {
            // scores / temperature
            out = Some(self.t(r * v, 4, What::Logits));
        }
        if let Some(k) = w.top_k {
            // scores < torch.topk(scores, top_k)[0][..., -1, None]; scores.masked_fill(...)
            let k = k.min(v);
            // (topk's indices die as its values are taken; the values as the comparison ends)
            let vals = self.t(r * k, 4, What::Logits);
            let idx = self.t(r * k, 8, What::Logits);
            self.drop(idx);
            let lt = self.t(r * v, 1, What::Logits);
            self.drop(vals);
            let filled = self.t(r * v, 4, What::Logits);
            self.drop(lt);
            if let Some(x) = out.replace(filled) {
                self.drop(x);
            }
        }
        if w.top_p {
            // sort; softmax(...).cumsum(...); cumulative_probs <= 1 - top_p; scatter back to the
            // vocabulary's order; scores.masked_fill(...)
            let sorted = self.t(r * v, 4, What::Logits);
            let order = self.t(r * v, 8, What::Logits);
            let sm = self.t(r * v, 4, What::Logits);
            let cum = self.t(r * v, 4, What::Logits);
            self.drop(sm);
            let le = self.t(r * v, 1, What::Logits);
            let back = self.t(r * v, 1, What::Logits);
            let filled = self.t(r * v, 4, What::Logits);
            for x in [sorted, order, cum, le, back] {
                self.drop(x);
            }
            if let Some(x) = out.replace(filled) {
                self.drop(x);
            }
        }
        out
    }

    /// `generate` for the step's rows (`prefill`: the prompts' context, `decode`: one token
    /// per row), from the prompts on the GPU to the generated ids; everything but the
    /// prompts dies with it (TRL turns the ids into lists).
    pub(super) fn grpo_generate(&mut self, step: u8, prefill: &'c Ctx<'a>, decode: &'c Ctx<'a>) {
        let s = self.ctx.s;
        let r = s.generation_rows();
        let p = s.prompt_tokens();
        self.phase(step, StepPhase::Generate);
        // The prompts and their mask on the GPU.
        let prompt = self.t(r * p, 8, What::Input);
        let prompt_mask = self.t(r * p, 8, What::Input);
        let ids = self.generate_ids(&GenCall {
            prefill,
            decode,
            rows: r,
            prompt: p,
            new_tokens: s.completion_tokens(),
            warpers: Warpers::NONE,
        });
        self.drop(ids);
        self.drop(prompt);
        self.drop(prompt_mask);
    }

    /// transformers' `generate` under `torch.no_grad()` over `call.rows` prompts already on
    /// the GPU: returns the generated ids (`[rows, prompt + new tokens]`); everything else it
    /// made dies with it.
    pub(super) fn generate_ids(&mut self, call: &GenCall<'c, 'a>) -> X {
        let (prefill, decode) = (call.prefill, call.decode);
        let r = call.rows;
        let c = call.new_tokens;
        let p = call.prompt;
        let v = self.ctx.arch.vocab_size;
        // _prepare_special_tokens: the bos (where the config has one), eos and pad ids as
        // tensors, and their checks.
        let bos = self.ctx.arch.family.layout().bos_default;
        let special: Vec<X> = (0..2 + u64::from(bos))
            .map(|_| self.t(1, 8, What::Input))
            .collect();
        for n in [1, 1, r] {
            let a = self.t(n, 1, What::Input);
            let b = self.t(1, 1, What::Input);
            self.drop(a);
            self.drop(b);
        }
        // position_ids = attention_mask.long().cumsum(-1) - 1, masked_fill(mask == 0, 1)
        let cs = self.t(r * p, 8, What::Input);
        let sub = self.t(r * p, 8, What::Input);
        self.drop(cs);
        let eq = self.t(r * p, 1, What::Input);
        let pos0 = self.t(r * p, 8, What::Input);
        self.drop(eq);
        self.drop(sub);
        // the attention mask's checks (all ones? any padding?)
        for _ in 0..2 {
            let a = self.t(r * p, 1, What::Input);
            let b = self.t(1, 1, What::Input);
            self.drop(a);
            self.drop(b);
        }
        let mut unfinished = self.t(r, 8, What::Input);
        // The prefill's input ids (`input_ids.clone()` in prepare_inputs_for_generation).
        let ids_in = self.t(r * p, 8, What::Input);
        let mode = std::mem::replace(&mut self.tp.mode, super::super::tape::Mode::NoGrad);
        self.gen = Some(GenMode {
            rows: r,
            kv: vec![],
            mask_len: p,
        });
        let mut logits = self.gen_forward(prefill, p);
        // The prefill's inputs die with its call.
        self.drop(ids_in);
        // model_kwargs' position ids and mask (at first the prompts'), the last decode call's
        // inputs (its `model_inputs`: the last token, its position, the mask it read).
        let (mut ids, mut mask, mut pos): (Option<X>, Option<X>, Option<X>) = (None, None, None);
        let mut inputs: Option<(X, X, Option<X>)> = None;
        let (mut nlog, mut probs, mut tok): (Option<X>, Option<X>, Option<X>) = (None, None, None);
        let mut scores: Option<X> = None;
        for k in 1..=c {
            let len = p + k;
            // _update_model_kwargs_for_generation: the next position and mask column
            let ar = self.t(1, 8, What::Input);
            let a1 = self.t(r, 8, What::Input);
            self.drop(ar);
            let a2 = self.t(r, 8, What::Input);
            self.drop(a1);
            let new_pos = self.t(r * len, 8, What::Input);
            self.drop(a2);
            let ones = self.t(r, 8, What::Input);
            let new_mask = self.t(r * len, 8, What::Input);
            self.drop(ones);
            // The mask it replaces lives on in the last call's inputs (the prompts' in the
            // caller's); the position ids it replaces die (the prompts' live on in generate).
            if let Some(old) = mask.replace(new_mask) {
                match inputs.as_mut() {
                    Some(i) => i.2 = Some(old),
                    None => self.drop(old),
                }
            }
            if let Some(old) = pos.replace(new_pos) {
                self.drop(old);
            }
            // next_token_logits = logits[:, -1].to(float32), softmax, multinomial
            let nl = self.t(r * v, 4, What::Logits);
            if let Some(x) = nlog.replace(nl) {
                self.drop(x);
            }
            // next_token_scores = logits_processor(input_ids, next_token_logits): the
            // processors' scores (the logits themselves without any) live until the next token's
            if let Some(sc) = self.warp(call.warpers, nl, r, v) {
                if let Some(x) = scores.replace(sc) {
                    self.drop(x);
                }
            }
            let pr = self.t(r * v, 4, What::Logits);
            if let Some(x) = probs.replace(pr) {
                self.drop(x);
            }
            if !self.tp.emulated {
                // CUDA's multinomial for one sample: `q = empty_like(probs).exponential_()`
                let q = self.t(r * v, 4, What::Logits);
                self.drop(q);
            }
            let nt = self.t(r, 8, What::Input);
            if let Some(x) = tok.take() {
                self.drop(x);
            }
            // next_tokens * unfinished + pad * (1 - unfinished)
            let m1 = self.t(r, 8, What::Input);
            let rs = self.t(r, 8, What::Input);
            let m2 = self.t(r, 8, What::Input);
            self.drop(rs);
            let t = self.t(r, 8, What::Input);
            self.drop(m1);
            self.drop(m2);
            self.drop(nt);
            tok = Some(t);
            // input_ids = cat([input_ids, next_tokens[:, None]])
            let new_ids = self.t(r * len, 8, What::Input);
            if let Some(x) = ids.replace(new_ids) {
                self.drop(x);
            }
            // the stopping criteria: max length, eos
            let f1 = self.t(r, 1, What::Input);
            let f2 = self.t(r, 1, What::Input);
            let or1 = self.t(r, 1, What::Input);
            self.drop(f2);
            self.drop(f1);
            let isin = self.t(r, 1, What::Input);
            let any = self.t(r, 1, What::Input);
            self.drop(isin);
            let or2 = self.t(r, 1, What::Input);
            self.drop(any);
            self.drop(or1);
            let not = self.t(r, 1, What::Input);
            self.drop(or2);
            let un = self.t(r, 8, What::Input);
            self.drop(not);
            self.drop(unfinished);
            unfinished = un;
            let mx = self.t(1, 8, What::Input);
            let eqz = self.t(1, 1, What::Input);
            self.drop(mx);
            self.drop(eqz);
            // del outputs
            self.drop(logits);
            if k == c {
                break;
            }
            // prepare_inputs_for_generation: the last token and its position, cloned; the
            // last call's inputs die as they are replaced
            let last_id = self.t(r, 8, What::Input);
            let last_pos = self.t(r, 8, What::Input);
            self.release_inputs(inputs.take());
            inputs = Some((last_id, last_pos, None));
            // A long generation runs its first and last decode calls op by op and only the
            // cache's growth in between (see `gen_skip_forward`).
            logits = if self.exact_generation || k < FULL_DECODE_CALLS || k + FULL_DECODE_CALLS >= c
            {
                self.gen_forward(decode, len)
            } else {
                self.gen_skip_forward(decode, len, (logits.n, logits.es))
            };
        }
        // generate returns: its locals die, the cache with them.
        let g = self.gen.take();
        self.tp.mode = mode;
        for x in [mask, pos].into_iter().flatten() {
            self.drop(x);
        }
        self.drop(unfinished);
        self.release_inputs(inputs.take());
        for x in [nlog, scores, probs, tok].into_iter().flatten() {
            self.drop(x);
        }
        // the bos and pad ids' tensors, then (after the cache) the eos id's
        let eos = special[usize::from(bos)];
        for x in special.iter().filter(|x| x.t != eos.t) {
            self.drop(*x);
        }
        self.drop(pos0);
        if let Some(g) = g {
            for (k, v) in g.kv.into_iter().flatten().rev() {
                self.drop(k);
                self.drop(v);
            }
        }
        self.drop(eos);
        ids.unwrap_or_else(|| self.t(r * p, 8, What::Input))
    }
}
