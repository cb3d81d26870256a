//! The page's controls (wasm only): a number box with a slider, a select, a checkbox, and
//! [`FieldControl`], which draws any setting of the settings table
//! ([`crate::formats::fields`]) with the control its kind calls for and writes it through the
//! table's `set`, so the page, the CLI and links agree on names, ranges and parsing.

use leptos::either::EitherOf5;
use leptos::prelude::*;

use crate::formats::fields::{Field, Kind};
use crate::model::Settings;
use crate::planning::evaluate::Evaluation;
use crate::web::state::UiState;

/// Text or an attribute that follows the state. Erased behind a `Signal`, so every such node
/// shares one instantiation of the rendering code (the wasm stays small).
pub fn text(f: impl Fn() -> String + Send + Sync + 'static) -> Signal<String> {
    Signal::derive(f)
}

/// A class or visibility switch that follows the state (erased like [`text`]).
pub fn flag(f: impl Fn() -> bool + Send + Sync + 'static) -> Signal<bool> {
    Signal::derive(f)
}

/// A labelled number input with a slider (log2 scale when `log`).
#[component]
pub fn NumberControl(
    /// Visible label.
    label: &'static str,
    /// `data-testid` of the number input.
    #[prop(into)]
    testid: String,
    /// Current value.
    #[prop(into)]
    value: Signal<f64>,
    /// Called with a parsed, clamped value.
    on_set: Callback<f64>,
    /// Minimum.
    min: f64,
    /// Maximum.
    max: f64,
    /// Step of the number field.
    step: f64,
    /// Slider on a log2 scale (ticks at powers of two).
    #[prop(optional)]
    log: bool,
) -> impl IntoView {
    let set = move |raw: String| {
        if let Ok(v) = raw.trim().parse::<f64>() {
            if v.is_finite() {
                on_set.run(v.clamp(min, max));
            }
        }
    };
    let id = format!("ctl-{testid}");
    let ticks = format!("ticks-{testid}");
    let slider_testid = format!("slider-{testid}");
    let (smin, smax, sstep) = if log {
        (min.log2(), max.log2(), 0.01)
    } else {
        (min, max, step)
    };
    let slider_value = text(move || {
        if log {
            value.get().max(min).log2().to_string()
        } else {
            value.get().to_string()
        }
    });
    let from_slider = move |raw: String| {
        if let Ok(p) = raw.parse::<f64>() {
            let v = if log { 2f64.powf(p).round() } else { p };
            if v.is_finite() {
                on_set.run(v.clamp(min, max));
            }
        }
    };
    let tick_list = (log).then(|| {
        let marks: Vec<f64> = (smin.ceil() as i32..=smax.floor() as i32).map(f64::from).collect();
        view! { <datalist id=ticks.clone()>{marks.into_iter().map(|m| view! { <option value=m.to_string()></option> }).collect_view()}</datalist> }
    });
    // "Sequence length (longest padded batch)": the part in parentheses may be hidden (embed).
    let lang = crate::web::lang::lang();
    let part = move |paren: bool| {
        text(move || {
            let l = crate::web::i18n::tr(lang.get(), label);
            // The bracket it splits at stays with the hidden part (" (" or "（").
            let at = l.find(" (").or_else(|| l.find('（'));
            match (at, paren) {
                (Some(i), false) => l[..i].to_string(),
                (Some(i), true) => l[i..].to_string(),
                (None, false) => l.into_owned(),
                (None, true) => String::new(),
            }
        })
    };
    let slider_label = text(move || {
        let l = lang.get();
        format!(
            "{} {}",
            crate::web::i18n::tr(l, label),
            crate::web::i18n::tr(l, "slider")
        )
    });
    view! {
        <div class="control">
            <label for=id.clone()>{part(false)}<span class="paren">{part(true)}</span></label>
            <input type="range" aria-label=slider_label min=smin max=smax step=sstep list=log.then(|| ticks.clone())
                data-testid=slider_testid
                prop:value=slider_value
                on:input:target=move |ev| from_slider(ev.target().value()) />
            <input type="number" id=id data-testid=testid min=min max=max step=step
                prop:value=text(move || value.get().to_string())
                on:input:target=move |ev| set(ev.target().value()) />
            {tick_list}
        </div>
    }
}

/// A labelled `<select>` over (value, label) options.
#[component]
pub fn SelectControl(
    /// Visible label.
    label: &'static str,
    /// `data-testid`.
    #[prop(into)]
    testid: String,
    /// Options as (value, label).
    #[prop(into)]
    options: Signal<Vec<(String, String)>>,
    /// Current value.
    #[prop(into)]
    value: Signal<String>,
    /// Called with the chosen value.
    on_set: Callback<String>,
) -> impl IntoView {
    let id = format!("ctl-{testid}");
    view! {
        <div class="control">
            <label for=id.clone()>{crate::web::lang::t(label)}</label>
            <select id=id data-testid=testid
                prop:value=value
                on:change:target=move |ev| on_set.run(ev.target().value())>
                {move || options.get().into_iter().map(|(v, l)| {
                    let v2 = v.clone();
                    view! { <option value=v selected=flag(move || value.get() == v2)>{crate::web::lang::ts(l)}</option> }
                }).collect_view()}
            </select>
        </div>
    }
}

/// A labelled number typed in (a setting without a slider: optional counts such as the eval
/// batch). Empty is unset; text the setting refuses stays in the box with the setting's reason
/// beside it, and the plan keeps the last value it took.
#[component]
pub fn EntryControl(
    /// Visible label.
    label: &'static str,
    /// `data-testid`.
    #[prop(into)]
    testid: String,
    /// Current value (empty: unset).
    #[prop(into)]
    value: Signal<String>,
    /// Called with the typed text; the setting's reason when it refuses it.
    on_set: Callback<String, Result<(), String>>,
) -> impl IntoView {
    let id = format!("ctl-{testid}");
    let refused: RwSignal<Option<String>> = RwSignal::new(None);
    let error_testid = format!("{testid}-error");
    view! {
        <div class="control">
            <label for=id.clone()>{crate::web::lang::t(label)}</label>
            <input type="text" inputmode="numeric" id=id data-testid=testid placeholder=crate::web::lang::t("unset")
                prop:value=value
                on:change:target=move |ev| refused.set(on_set.run(ev.target().value()).err()) />
            <span class="error" role="alert" data-testid=error_testid class:hidden=flag(move || refused.with(Option::is_none))>
                {crate::web::lang::tx(move || refused.get().unwrap_or_default())}
            </span>
        </div>
    }
}

/// Writes `text` to `field` of the state through the settings table, then `then`; the table's
/// reason when it refuses the text (the state is left as it was).
pub(crate) fn write_setting(
    field: &'static Field,
    state: RwSignal<UiState>,
    then: Option<fn(&mut Settings)>,
    text: &str,
) -> Result<(), String> {
    let mut next = state.with_untracked(|st| st.settings.clone());
    (field.set)(&mut next, text)?;
    if let Some(f) = then {
        f(&mut next);
    }
    state.update(|st| st.settings = next);
    Ok(())
}

/// A typed-in setting's control ([`EntryControl`]) for a whole or decimal number without a
/// slider; None for any other setting. Only the sections hold such settings, so the page's
/// first bundle does not carry it.
pub(crate) fn typed_control(
    field: &'static Field,
    state: RwSignal<UiState>,
    then: Option<fn(&mut Settings)>,
) -> Option<impl IntoView> {
    if !matches!(
        (field.kind, field.slider),
        (Kind::Int { .. } | Kind::Float { .. }, None)
    ) {
        return None;
    }
    let text = Memo::new(move |_| state.with(|st| (field.get)(&st.settings)));
    Some(view! {
        <EntryControl label=field.label testid=field.testid.unwrap_or(field.name) value=text
            on_set=Callback::new(move |t: String| write_setting(field, state, then, &t)) />
    })
}

/// A labelled checkbox.
#[component]
pub fn Toggle(
    /// Visible label.
    label: &'static str,
    /// `data-testid`.
    #[prop(into)]
    testid: String,
    /// Checked state.
    #[prop(into)]
    checked: Signal<bool>,
    /// Called with the new state.
    on_set: Callback<bool>,
) -> impl IntoView {
    let id = format!("ctl-{testid}");
    view! {
        <div class="toggle">
            <input type="checkbox" id=id.clone() data-testid=testid
                prop:checked=checked
                on:change:target=move |ev| on_set.run(ev.target().checked()) />
            <label for=id>{crate::web::lang::t(label)}</label>
        </div>
    }
}

/// One setting of the table, drawn by its kind: a number with its slider, a select, a checkbox, or
/// one checkbox per item of a list (`data-testid` = the field's `testid`, or `testid-item` for a
/// list item). `then` runs after each change (the page's own rules, e.g. picking a strategy when
/// the GPU count grows).
#[component]
pub fn FieldControl(
    /// The setting.
    field: &'static Field,
    /// The page state.
    state: RwSignal<UiState>,
    /// Runs after each change.
    then: Option<fn(&mut Settings)>,
) -> impl IntoView {
    let testid = field.testid.unwrap_or(field.name);
    let write = move |text: String| write_setting(field, state, then, &text);
    let text = Memo::new(move |_| state.with(|st| (field.get)(&st.settings)));
    match (field.kind, field.slider) {
        (Kind::Int { .. } | Kind::Float { .. }, Some(sl)) => {
            let whole = matches!(field.kind, Kind::Int { .. });
            let value = Signal::derive(move || text.get().parse::<f64>().unwrap_or(sl.min));
            EitherOf5::A(view! {
                <NumberControl label=field.label testid=testid min=sl.min max=sl.max step=sl.step log=sl.log
                    value=value
                    on_set=Callback::new(move |v: f64| { let _ = write(if whole { (v.round() as u64).to_string() } else { v.to_string() }); }) />
            })
        }
        (Kind::Choice(choices), _) => {
            let options: Vec<(String, String)> =
                choices().into_iter().map(|(v, l)| (v.to_string(), l.to_string())).collect();
            EitherOf5::B(view! {
                <SelectControl label=field.label testid=testid options=Signal::derive(move || options.clone())
                    value=text on_set=Callback::new(move |v: String| { let _ = write(v); }) />
            })
        }
        (Kind::Bool, _) => EitherOf5::C(view! {
            <Toggle label=field.label testid=testid checked=Signal::derive(move || text.get() == "1")
                on_set=Callback::new(move |on: bool| { let _ = write(if on { "1".into() } else { "0".into() }); }) />
        }),

        (Kind::List { items, .. }, _) => EitherOf5::D(items()
            .into_iter()
            .map(|(item, label)| {
                let checked = Memo::new(move |_| state.with(|st| field.holds(&st.settings, item)));
                view! {
                    <Toggle label=label testid=format!("{testid}-{item}") checked=checked
                        on_set=Callback::new(move |on: bool| state.update(|st| {
                            let Some(text) = field.with_item(&st.settings, item, on) else { return };
                            let mut next = st.settings.clone();
                            // Switching an item off never turns a valid plan into an invalid one
                            // (the last trainable module stays).
                            if (field.set)(&mut next, &text).is_ok()
                                && (on || next.validate().is_ok() || st.settings.validate().is_err())
                            {
                                if let Some(f) = then {
                                    f(&mut next);
                                }
                                st.settings = next;
                            }
                        })) />
                }
            })
            .collect_view()),
        _ => EitherOf5::E(()),
    }
}

/// Reads one value out of the current evaluation (a default while it is an error).
pub(crate) fn read<T: Default>(
    eval: Memo<Result<Evaluation, String>>,
    f: impl Fn(&Evaluation) -> T,
) -> T {
    eval.with(|r| r.as_ref().map(&f).unwrap_or_default())
}

pub(crate) fn status_words(s: &str) -> &'static str {
    match s {
        "fits" => "Fits",
        "tight" => "Tight",
        "oom" => "Out of memory",
        _ => "",
    }
}

/// A fraction as a CSS percentage.
pub(crate) fn pct(f: f64) -> String {
    format!("{:.3}%", (f * 100.0).clamp(0.0, 100.0))
}
