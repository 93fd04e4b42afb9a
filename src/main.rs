//! The `consoled` binary: parses the command line and runs a command or the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use consoled::config::Config;

fn main() {
    consoled::logging::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if matches!(
        args.first().map(String::as_str),
        Some("-h" | "--help" | "help")
    ) {
        println!("{}", consoled::cli::USAGE);
        return;
    }
    let config = Config::from_env().unwrap_or_else(|e| fail(&e.to_string()));
    let serve = args.is_empty() || (args.len() == 1 && args[0] == "serve");
    if !serve {
        match consoled::cli::run(&config, &args) {
            Ok(out) => println!("{out}"),
            Err(e) => fail(&e),
        }
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, stop.clone()).unwrap_or_else(|e| fail(&e.to_string()));
    }
    let service = consoled::serve(config).unwrap_or_else(|e| fail(&e));
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    log::info!("shutting down");
    service.shutdown(Duration::from_secs(8));
    log::info!("stopped");
}

fn fail(message: &str) -> ! {
    eprintln!("consoled: {message}");
    std::process::exit(1);
}
