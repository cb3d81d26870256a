//! Entry point: the CLI natively, the web app in the browser.

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = lorafit::cli::run(
        &args,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    std::process::exit(code);
}

#[cfg(target_arch = "wasm32")]
fn main() {
    // The panic's message and place in the console (console_error_panic_hook's JavaScript stack
    // costs the first visit about 1 KiB of gzip; the full planner's page keeps it).
    std::panic::set_hook(Box::new(|info| {
        web_sys::console::error_1(&info.to_string().into());
    }));
    lorafit::web::app::mount();
}
