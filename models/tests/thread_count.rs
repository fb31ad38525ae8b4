//! `engine::pin_thread_count`, alone in its own test binary: it writes the process environment,
//! so no other test may run beside it.

use tileops_models::engine::pin_thread_count;

#[test]
fn pins_candle_threads_once_and_respects_the_users_choice() {
    const VAR: &str = "RAYON_NUM_THREADS";
    // Unset (or unusable): set to the physical core count, candle's own default.
    for unusable in [None, Some("0"), Some("many")] {
        match unusable {
            None => std::env::remove_var(VAR),
            Some(v) => std::env::set_var(VAR, v),
        }
        let n = pin_thread_count();
        assert_eq!(n, num_cpus::get_physical().max(1));
        assert_eq!(std::env::var(VAR).ok(), Some(n.to_string()));
    }
    // Set by the user: left alone.
    std::env::set_var(VAR, "3");
    assert_eq!(pin_thread_count(), 3);
    assert_eq!(std::env::var(VAR).ok().as_deref(), Some("3"));
}
