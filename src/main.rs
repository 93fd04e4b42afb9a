//! The `consoled` binary: parses the command line and runs a command or the server.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use consoled::cli::Invocation;
use consoled::config::Config;
use consoled::failure::Failure;

fn main() {
    // The allocator's setting, before any thread runs (`os::process`).
    consoled::os::process::malloc_room_ahead();
    consoled::logging::init().unwrap_or_else(|e| fail(Failure::config(e)));
    let args: Vec<String> = std::env::args().skip(1).collect();
    let invocation = consoled::cli::parse(&args).unwrap_or_else(|e| fail(e.into()));
    if matches!(invocation, Invocation::Serve) {
        // Returns only if nothing was to change, or the exec failed (`os::process`).
        if let Err(e) = consoled::os::process::exec_without_thread_caches() {
            log::warn!("cannot turn malloc's thread caches off ({e}): each held stream keeps about 3 KiB more");
        }
        consoled::os::process::name_after_program();
    }
    if let Invocation::Help(text) = invocation {
        print!("{text}");
        return;
    }
    // A refused setting is a configuration error: its own exit status, which the systemd unit
    // does not restart on (contrib/consoled.service).
    let config = Config::from_env().unwrap_or_else(|e| fail(Failure::config(e.to_string())));
    if let Invocation::Run(command, flags) = invocation {
        match consoled::cli::run(&config, command, &flags) {
            Ok(out) => println!("{out}"),
            Err(e) => fail(e),
        }
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, stop.clone())
            .unwrap_or_else(|e| fail(e.to_string().into()));
    }
    let service = consoled::serve(config).unwrap_or_else(|e| fail(e));
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
    }
    log::info!("shutting down");
    service.shutdown(Duration::from_secs(8));
    log::info!("stopped");
}

/// Says why on stderr and exits with the failure's status (1, or `EXIT_CONFIG` for a
/// configuration error).
fn fail(failure: Failure) -> ! {
    eprintln!("consoled: {failure}");
    std::process::exit(failure.exit_code);
}
