//! `TILEOPS_BACKEND`: the only test of this binary that touches the process environment, so no
//! other test can observe the variable changing.

use candle_core::{Device, Tensor};
use tileops_ops::{paged_gather, Backend, OpError, BACKEND_ENV};

#[test]
fn backend_env_selects_the_default_and_rejects_unknown_values() {
    let dev = Device::Cpu;
    let src = Tensor::arange(0f32, 8.0, &dev)
        .and_then(|t| t.reshape((4, 2)))
        .expect("src");
    let idx = Tensor::new(&[[1i32, 2]], &dev).expect("indices");
    let table = Tensor::new(&[[1i32, 0]], &dev).expect("table");

    // Unset: the simulator.
    std::env::remove_var(BACKEND_ENV);
    assert_eq!(Backend::from_env().expect("unset"), Backend::TileSim);

    // Each choice, in any case and with spaces.
    for (v, b) in [
        ("reference", Backend::Reference),
        (" SIM ", Backend::TileSim),
        ("Ascend950", Backend::Ascend950),
    ] {
        std::env::set_var(BACKEND_ENV, v);
        assert_eq!(Backend::from_env().expect("a listed choice"), b, "{v:?}");
    }

    // `None` follows the variable.
    std::env::set_var(BACKEND_ENV, "reference");
    let out = paged_gather(&src, &idx, &table, 2, 2, None).expect("the reference runs");
    assert_eq!(
        out.to_vec2::<f32>().expect("values"),
        vec![vec![6.0, 7.0], vec![0.0, 1.0]]
    );

    // An unknown value is an error listing the choices, from `from_env` and from every op
    // called without a backend (before any work).
    std::env::set_var(BACKEND_ENV, "cuda");
    let e = Backend::from_env().expect_err("cuda is not a backend");
    let msg = e.to_string();
    assert!(matches!(e, OpError::BadBackend { .. }), "{msg}");
    assert!(
        msg.contains("`cuda`") && msg.contains("reference, sim, ascend950"),
        "{msg}"
    );
    let e = paged_gather(&src, &idx, &table, 2, 2, None).expect_err("bad backend");
    assert!(matches!(e, OpError::BadBackend { .. }), "{e}");

    std::env::remove_var(BACKEND_ENV);
}
