//! The sandbox helper as a binary of its own, for the core's tests (`cargo test` runs sandboxed
//! commands with it). Shipped builds use `pi-native-ops-server`, whose `main` dispatches the same.

fn main() {
    #[cfg(target_os = "linux")]
    pi_native_ops_core::exec::helper::main_if_helper();
    eprintln!("pi-sandbox-helper: only started by pi-native-ops as a sandbox helper");
    std::process::exit(2);
}
