//! `Config::from_file` on DeepSeek-V3.2's own `config_671B_v3.2.json` (written for this repo from
//! the field list in the shared A5-FACTS §4: DeepSeek's file omits the YaRN fields and
//! `max_seq_len`, and carries `score_func`, `dtype` and `scale_fmt`), and the errors of files that
//! differ from it.

use std::path::PathBuf;
use tileops_models::deepseek::config::Config;

fn v32_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/config_671B_v3.2.json")
}

fn v32_json() -> serde_json::Value {
    let text = std::fs::read_to_string(v32_path()).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn deepseek_v32_config_loads_with_its_defaults() {
    let c = Config::from_file(&v32_path()).unwrap();
    assert_eq!(
        (c.vocab_size, c.dim, c.inter_dim, c.moe_inter_dim),
        (129280, 7168, 18432, 2048)
    );
    assert_eq!((c.n_layers, c.n_dense_layers, c.n_heads), (61, 3, 128));
    assert_eq!(
        (
            c.n_routed_experts,
            c.n_shared_experts,
            c.n_activated_experts,
            c.n_expert_groups,
            c.n_limited_groups
        ),
        (256, 1, 8, 8, 4)
    );
    assert_eq!(c.route_scale, 2.5);
    assert_eq!(
        (
            c.q_lora_rank,
            c.kv_lora_rank,
            c.qk_nope_head_dim,
            c.qk_rope_head_dim,
            c.v_head_dim
        ),
        (1536, 512, 128, 64, 128)
    );
    assert_eq!(
        (c.index_n_heads, c.index_head_dim, c.index_topk),
        (64, 128, 2048)
    );
    // The omitted fields take ModelArgs' defaults, so YaRN extends 4096 to 16384.
    assert_eq!((c.original_seq_len, c.max_seq_len), (4096, 16384));
    assert_eq!(
        (
            c.rope_theta,
            c.rope_factor,
            c.beta_fast,
            c.beta_slow,
            c.mscale
        ),
        (10000.0, 40.0, 32.0, 1.0, 1.0)
    );
    assert!(c.yarn());
    // MLA's scale with YaRN's mscale^2: 192^-0.5 * (0.1 ln 40 + 1)^2.
    let m = 0.1 * 40f32.ln() + 1.0;
    assert!((c.softmax_scale() - 192f32.powf(-0.5) * m * m).abs() < 1e-6);
}

#[test]
fn a_field_in_the_file_overrides_the_v32_default() {
    let mut v = v32_json();
    v["max_seq_len"] = 163840.into();
    v["rope_factor"] = 10.0.into();
    let c = Config::from_json(&v.to_string()).unwrap();
    assert_eq!((c.max_seq_len, c.rope_factor), (163840, 10.0));
}

#[test]
fn the_crate_s_own_checkpoint_config_still_loads() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("checkpoints/tiny/config.json");
    let c = Config::from_file(&p).unwrap();
    assert_eq!((c.n_layers, c.max_seq_len), (2, 2048));
}

#[test]
fn deepseek_fields_outside_their_values_and_unknown_fields_are_errors() {
    type Edit = (&'static str, serde_json::Value, &'static str);
    let cases: Vec<Edit> = vec![
        ("score_func", "softmax".into(), "score_func"),
        ("score_func", 1.into(), "score_func"),
        ("dtype", "fp4".into(), "dtype"),
        ("scale_fmt", "e4m3".into(), "scale_fmt"),
        ("max_batch_size", 0.into(), "max_batch_size"),
        ("max_batch_size", (-1).into(), "max_batch_size"),
        ("n_routed_exprets", 256.into(), "n_routed_exprets"),
        ("n_limited_groups", 9.into(), "n_limited_groups"),
        ("index_head_dim", 32.into(), "index_head_dim"),
        ("max_seq_len", 0.into(), "max_seq_len"),
        ("rope_factor", (-1.0).into(), "rope_factor"),
    ];
    for (field, value, frag) in cases {
        let mut v = v32_json();
        v[field] = value.clone();
        let e = Config::from_json(&v.to_string())
            .err()
            .unwrap_or_else(|| panic!("{field} = {value} was accepted"));
        assert!(
            e.to_string().contains(frag),
            "{field} = {value}: the error does not name it: {e}"
        );
    }
    // Accepted values of DeepSeek's own fields.
    for (field, value) in [
        ("dtype", serde_json::Value::from("bf16")),
        ("scale_fmt", serde_json::Value::Null),
        ("max_batch_size", 8.into()),
    ] {
        let mut v = v32_json();
        v[field] = value;
        Config::from_json(&v.to_string()).unwrap();
    }
    // A field given twice (the first, or one DeepSeek's file omits).
    let text = std::fs::read_to_string(v32_path()).unwrap();
    for dup in [
        "\"dim\": 1,",
        "\"max_seq_len\": 8,\n    \"max_seq_len\": 9,",
    ] {
        let twice = text.replacen('{', &format!("{{\n    {dup}"), 1);
        let e = Config::from_json(&twice).unwrap_err().to_string();
        assert!(e.contains("duplicate field"), "{dup}: {e}");
    }
    // Not an object, not JSON, a missing file.
    assert!(Config::from_json("[1, 2]").is_err());
    assert!(Config::from_json("{").is_err());
    let missing = Config::from_file(std::path::Path::new("/no/such/config.json")).unwrap_err();
    assert!(missing.to_string().contains("/no/such/config.json"));
}
