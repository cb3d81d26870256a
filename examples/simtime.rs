use lorafit::formats::catalog::resolve_model;
use lorafit::formats::fields::settings_from_json;
use lorafit::model::allocator::AllocConf;
use lorafit::model::{plan, steptrace::simulate};
fn main() {
    let v: serde_json::Value =
        serde_json::from_str(include_str!("../data/validation.json")).unwrap();
    for r in v["published"].as_array().unwrap() {
        let Ok(a) = resolve_model(&r["model"]) else {
            continue;
        };
        let s = settings_from_json(&r["settings"]).unwrap();
        if s.parallel.world() > 1 {
            continue;
        }
        let p = plan(&a, &s).unwrap();
        let sim = simulate(&a, &s, &AllocConf::default()).unwrap();
        let g = |b: f64| b / (1u64 << 30) as f64;
        let smi = r["nvidia_smi_bytes"].as_f64().unwrap();
        let ma = r["max_allocated_bytes"].as_f64().unwrap_or(0.0);
        println!("{}: plan alloc {:.2} sim alloc {:.2} sim reserved {:.2} | measured alloc {:.2} smi {:.2} | smi - sim_res {:.2} GiB, smi - meas_alloc {:.2}", &r["id"].as_str().unwrap()[14..], g(p.peak_allocated_bytes as f64), g(sim.peak_allocated as f64), g(sim.peak_reserved as f64), g(ma), g(smi), g(smi - sim.peak_reserved as f64), g(smi-ma));
    }
}
