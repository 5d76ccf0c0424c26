//! `cancel::shutdown`, in a process of its own: it stops every operation of the process.

use pi_native_ops_core::cancel::{shutdown, shutting_down};
use pi_native_ops_core::Cancel;

#[test]
fn shutdown_cancels_every_operation_running_and_to_come() {
    let running = Cancel::new();
    let seen = running.clone();
    let dropped = Cancel::new();
    drop(dropped);
    assert!(!seen.is_cancelled());
    assert!(!shutting_down());
    shutdown();
    assert!(running.is_cancelled() && seen.is_cancelled());
    assert!(shutting_down());
    assert!(
        Cancel::new().is_cancelled(),
        "one made after the exit began"
    );
}
