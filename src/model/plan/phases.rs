//! The moments of a training step where the peak can occur, each as the list of terms alive then:
//! forward at the loss, start of backward, the recomputed top / first layer under gradient
//! checkpointing (or lm_head's backward when it is trained in full), and the optimizer step.

use super::{total, Phase, PhasePeak};
use crate::model::activations::{self, Ctx, LayerCounts};
use crate::model::arch::LayerKind;
use crate::model::distributed::RankTerms;
use crate::model::settings::SavedModule;
use crate::model::term::{Component, Term, TermKind};
use crate::model::weights::{self, ParamCounts};

/// What every moment of one rank's step is built from.
pub(super) struct Step<'c, 'a> {
    ctx: &'c Ctx<'a>,
    params: &'c ParamCounts,
    /// Weights, optimizer states and communication buffers: alive through the whole step.
    pub statics: Vec<Term>,
    /// This rank's gradients at the optimizer step.
    grads: Vec<Term>,
    /// What this rank keeps in CPU RAM (offload).
    cpu: Vec<Term>,
    /// Saved tensors outside the decoder layers (embeddings, rotary, inputs, mask).
    global: Vec<Term>,
    layers: u128,
}

impl<'c, 'a> Step<'c, 'a> {
    pub(super) fn new(ctx: &'c Ctx<'a>, params: &'c ParamCounts, rank: &RankTerms) -> Self {
        Step {
            ctx,
            params,
            statics: rank.statics.iter().chain(&rank.comm).cloned().collect(),
            grads: rank.grads.clone(),
            cpu: rank.cpu.clone(),
            global: activations::global_terms(ctx),
            layers: ctx.arch.num_hidden_layers as u128,
        }
    }

    /// Every moment, in step order (the peak is chosen by the caller).
    pub(super) fn phases(&self) -> Vec<PhasePeak> {
        let mut phases = if self.ctx.s.grad_ckpt {
            self.checkpointed()
        } else {
            self.plain()
        };
        phases.push(self.optimizer_step());
        phases
    }

    /// CPU RAM of this rank: offloaded states and, with activation offload, every checkpoint.
    pub(super) fn cpu_terms(&self) -> Vec<Term> {
        let mut cpu = self.cpu.clone();
        if self.ctx.s.parallel.offload_activations {
            cpu.extend(activations::checkpoint_terms(self.ctx, self.layers));
        }
        cpu
    }

    fn moment(
        &self,
        phase: Phase,
        moment: &str,
        alive: impl IntoIterator<Item = Term>,
    ) -> PhasePeak {
        let terms: Vec<Term> = self.statics.iter().cloned().chain(alive).collect();
        PhasePeak {
            phase,
            moment: moment.into(),
            bytes: total(&terms),
            terms,
        }
    }

    /// The forward and backward moments of the loss over everything `saved` (and the router
    /// logits the load-balancing loss holds, then their gradients).
    fn loss_moments(&self, saved: &[Term]) -> [PhasePeak; 2] {
        let router = activations::router_logit_terms(self.ctx);
        let with = |extra: Vec<Term>| {
            saved
                .iter()
                .cloned()
                .chain(router.iter().cloned())
                .chain(extra)
                .collect::<Vec<_>>()
        };
        [
            self.moment(
                Phase::Forward,
                "loss (log_softmax)",
                with(activations::loss_forward_terms(self.ctx)),
            ),
            self.moment(
                Phase::Backward,
                "start of backward (log_softmax backward)",
                with(activations::loss_backward_terms(self.ctx)),
            ),
        ]
    }

    /// Checkpoint boundaries on the GPU; activation offloading keeps two there (current +
    /// prefetched).
    fn checkpoints_on_gpu(&self, alive: u128) -> Vec<Term> {
        let alive = if self.ctx.s.parallel.offload_activations {
            alive.min(2)
        } else {
            alive
        };
        activations::checkpoint_terms(self.ctx, alive)
    }

    /// Gradients of the layers above the first, sharded as the strategy shards them (none on the
    /// GPU when parameters are offloaded).
    fn gradients_above_first_layer(&self) -> Vec<Term> {
        self.gradients_above(0)
    }

    /// Gradients of the layers above layer `li` (0-based), sharded likewise.
    fn gradients_above(&self, li: u64) -> Vec<Term> {
        let par = &self.ctx.s.parallel;
        if par.offload_params {
            return vec![];
        }
        let above = self.layers.saturating_sub(li as u128 + 1);
        weights::gradient_terms(self.ctx, self.params, above, false)
            .into_iter()
            .map(|x| x.per_rank(par.grad_shards()))
            .collect()
    }

    /// Gradient checkpointing: forward keeps only each layer's input; backward recomputes one
    /// layer at a time, at the top with every checkpoint alive, at the bottom with every gradient.
    fn checkpointed(&self) -> Vec<PhasePeak> {
        let saved: Vec<Term> = self
            .checkpoints_on_gpu(self.layers)
            .into_iter()
            .chain(activations::checkpointed_mask_terms(self.ctx))
            .chain(self.global.iter().cloned())
            .collect();
        let a = self.ctx.arch;
        // The recomputed layer's saved tensors and the gradients in flight at its peak, by the
        // kind of the layer (top: the last layer; first: layer 0).
        let layer_of = |li: u64| -> Vec<Term> {
            let kind = a.layer_kind(li);
            let mut t = activations::layer_terms(
                self.ctx,
                LayerCounts {
                    all: 1,
                    grad_input: 1,
                    moe: u128::from(kind == LayerKind::Moe),
                    masked: self.ctx.masked_layers(li, li + 1),
                },
            );
            match kind {
                LayerKind::Dense => t.push(activations::layer_backward_working(self.ctx)),
                LayerKind::Moe => {
                    t.retain(|x| x.kind != TermKind::ExpertOutputs);
                    t.push(activations::moe_backward_working(self.ctx));
                }
            }
            t
        };
        let top_layer = layer_of(a.num_hidden_layers.saturating_sub(1));
        let first_layer = layer_of(0);
        let small_global = self
            .global
            .iter()
            .filter(|t| t.component == Component::ActEmbeddings)
            .cloned();
        let masks = activations::checkpointed_mask_terms(self.ctx);
        let recomputed = |checkpoints: u128, layer: &[Term], grads: Vec<Term>| -> Vec<Term> {
            self.checkpoints_on_gpu(checkpoints)
                .into_iter()
                .chain(masks.iter().cloned())
                .chain(small_global.clone())
                .chain(layer.iter().cloned())
                .chain(grads)
                .collect()
        };
        let [forward, backward] = self.loss_moments(&saved);
        let mut moments = vec![
            forward,
            backward,
            self.moment(
                Phase::Backward,
                "recomputed top layer",
                recomputed(
                    self.layers,
                    &top_layer,
                    activations::router_logit_terms(self.ctx),
                ),
            ),
            self.moment(
                Phase::Backward,
                "recomputed first layer",
                recomputed(1, &first_layer, self.gradients_above_first_layer()),
            ),
        ];
        let eager = activations::eager_softmax_backward_terms(self.ctx);
        if !eager.is_empty() {
            moments.push(self.moment(
                Phase::Backward,
                "eager softmax backward (recomputed top layer)",
                recomputed(
                    self.layers,
                    &eager,
                    activations::router_logit_terms(self.ctx),
                ),
            ));
        }
        // MoE families whose first layers are dense (DeepSeek's first_k_dense_replace, Qwen3-MoE's
        // mlp_only_layers): the lowest MoE layer, recomputed with the gradients above it.
        let lowest_moe = (0..a.num_hidden_layers).find(|&li| a.layer_kind(li) == LayerKind::Moe);
        if let Some(j) = lowest_moe.filter(|&j| j > 0) {
            let layer = layer_of(j);
            moments.push(self.moment(
                Phase::Backward,
                "recomputed lowest MoE layer",
                recomputed(j as u128 + 1, &layer, self.gradients_above(j)),
            ));
        }
        moments
    }

    /// No checkpointing: every layer's saved tensors live from forward into backward.
    fn plain(&self) -> Vec<PhasePeak> {
        let s = self.ctx.s;
        // Layer 0's input is the frozen embedding's output: it needs no gradient unless the
        // embedding itself is trained (modules_to_save), so layer 0 saves less.
        let grad_input = if s.modules_to_save.contains(&SavedModule::EmbedTokens) {
            self.layers
        } else {
            self.layers.saturating_sub(1)
        };
        let saved: Vec<Term> = activations::layer_terms(
            self.ctx,
            LayerCounts {
                all: self.layers,
                grad_input,
                moe: self.ctx.arch.moe_layers(),
                masked: self.ctx.masked_layers(0, self.ctx.arch.num_hidden_layers),
            },
        )
        .into_iter()
        .chain(self.global.iter().cloned())
        .collect();
        let mut phases = self.loss_moments(&saved).to_vec();
        if s.modules_to_save.contains(&SavedModule::LmHead) {
            // Right after lm_head's backward: its full weight gradient exists while every
            // activation is still saved.
            let lm_head_grad = self
                .grads
                .iter()
                .filter(|t| t.kind == TermKind::LmHeadGradient)
                .cloned();
            let alive = saved
                .iter()
                .cloned()
                .chain(lm_head_grad)
                .chain(activations::lm_head_backward_terms(self.ctx));
            phases.push(self.moment(
                Phase::Backward,
                "lm_head backward (trainable lm_head)",
                alive,
            ));
        }
        if let Some(m) = self.top_experts_backward(grad_input) {
            phases.push(m);
        }
        if let Some(m) = self.top_eager_softmax_backward(grad_input) {
            phases.push(m);
        }
        phases
    }

    /// Eager attention without checkpointing: inside the top layer's softmax backward, every
    /// lower layer's saved tensors are alive with the top layer's scores at their widest.
    fn top_eager_softmax_backward(&self, grad_input: u128) -> Option<PhasePeak> {
        let a = self.ctx.arch;
        let top = activations::eager_softmax_backward_terms(self.ctx);
        if top.is_empty() || a.is_moe() {
            return None;
        }
        let below = activations::layer_terms(
            self.ctx,
            LayerCounts {
                all: self.layers.saturating_sub(1),
                grad_input: grad_input.saturating_sub(1),
                moe: 0,
                masked: self
                    .ctx
                    .masked_layers(0, self.ctx.arch.num_hidden_layers.saturating_sub(1)),
            },
        );
        let alive = below
            .into_iter()
            .chain(top)
            .chain(self.global.iter().cloned());
        Some(self.moment(Phase::Backward, "eager softmax backward (top layer)", alive))
    }

    /// MoE families without checkpointing: inside the top layer's experts' backward, every
    /// layer's saved tensors but the top layer's expert outputs are alive with the experts'
    /// gradients (the peak when the vocabulary is small next to the experts).
    fn top_experts_backward(&self, grad_input: u128) -> Option<PhasePeak> {
        let a = self.ctx.arch;
        let top = a.num_hidden_layers.saturating_sub(1);
        if a.layer_kind(top) != LayerKind::Moe {
            return None;
        }
        let top_grad = u128::from(grad_input > 0);
        let below = activations::layer_terms(
            self.ctx,
            LayerCounts {
                all: self.layers - 1,
                grad_input: grad_input - top_grad,
                moe: a.moe_layers() - 1,
                masked: self.ctx.masked_layers(0, top),
            },
        );
        let mut top_layer = activations::layer_terms(
            self.ctx,
            LayerCounts {
                all: 1,
                grad_input: top_grad,
                moe: 1,
                masked: self.ctx.masked_layers(top, top + 1),
            },
        );
        top_layer.retain(|t| t.kind != TermKind::ExpertOutputs);
        let lm_head_grad = self
            .grads
            .iter()
            .filter(|t| t.kind == TermKind::LmHeadGradient)
            .cloned();
        let alive = below
            .into_iter()
            .chain(top_layer)
            .chain([activations::moe_backward_working(self.ctx)])
            .chain(self.global.iter().cloned())
            .chain(activations::router_logit_terms(self.ctx))
            .chain(lm_head_grad);
        Some(self.moment(
            Phase::Backward,
            "backward through the top layer's experts",
            alive,
        ))
    }

    /// optimizer.step(): every gradient, and the optimizer's temporaries unless it runs on the CPU.
    fn optimizer_step(&self) -> PhasePeak {
        let par = &self.ctx.s.parallel;
        let mut alive = self.grads.clone();
        if !(par.offload_optimizer || par.offload_params) {
            alive.extend(weights::optimizer_step_terms(self.ctx, self.params));
        }
        self.moment(Phase::Optimizer, "optimizer.step()", alive)
    }
}
