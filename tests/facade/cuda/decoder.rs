//! Decoder ops on CUDA against the CPU backend: com.microsoft
//! GroupQueryAttention in the shapes onnxruntime-genai's builder writes
//! (decode against a cache, a first prompt with packed QKV) and with every
//! option the kernel takes (rotary halves and interleaved pairs, a window,
//! softcap, an attention bias, head sinks, non-causal), in f32, f16 and bf16.

use super::*;

/// One GroupQueryAttention call: shapes, attributes and the int inputs.
#[derive(Clone)]
struct Case {
    name: &'static str,
    batch: usize,
    q_len: usize,
    heads: usize,
    kv_heads: usize,
    head: usize,
    /// Rows of the past buffers (0: no past inputs).
    past: usize,
    total: i32,
    seqlens: Vec<i32>,
    packed: bool,
    /// Rotary pairs per head (0: no rotary), interleaved or not.
    rotary: Option<(usize, bool)>,
    positions: Option<Vec<i64>>,
    bias: Option<[usize; 2]>,
    sinks: bool,
    attrs: Vec<(&'static str, A)>,
}

impl Case {
    fn present(&self) -> usize {
        self.past.max(self.total as usize)
    }

    /// The model in `dtype`: f32 inputs cast to it, outputs cast back.
    fn model(&self, dtype: DType) -> Vec<u8> {
        let (b, s, n, kv, h) = (self.batch, self.q_len, self.heads, self.kv_heads, self.head);
        let i = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let to = dtype.to_onnx() as i64;
        let mut nodes = Vec::new();
        let mut inputs = Vec::new();
        let mut consts = Vec::new();
        // A float input of `shape` named `name`, cast to `dtype` as `name_t`.
        let mut float_in = |name: &str, shape: &[usize], inputs: &mut Vec<_>| {
            inputs.push(value(name, DType::F32, &i(shape)));
            let cast = format!("{name}_t");
            nodes.push(node(
                "Cast",
                &format!("c_{name}"),
                &[name],
                &[&cast],
                vec![("to", A::I(to))],
            ));
            cast
        };
        let q_width = if self.packed { (n + 2 * kv) * h } else { n * h };
        let mut slots = vec![float_in("query", &[b, s, q_width], &mut inputs)];
        if self.packed {
            slots.extend([String::new(), String::new()]);
        } else {
            slots.push(float_in("key", &[b, s, kv * h], &mut inputs));
            slots.push(float_in("value", &[b, s, kv * h], &mut inputs));
        }
        if self.past > 0 {
            slots.push(float_in("past_key", &[b, kv, self.past, h], &mut inputs));
            slots.push(float_in("past_value", &[b, kv, self.past, h], &mut inputs));
        } else {
            slots.extend([String::new(), String::new()]);
        }
        slots.extend(["seqlens_k".to_string(), "total".to_string()]);
        inputs.push(value("seqlens_k", DType::I32, &[b as i64]));
        inputs.push(value("total", DType::I32, &[]));
        match self.rotary {
            Some((half, _)) => {
                let rows = 32;
                let angle = |p: usize, k: usize| p as f32 / 10f32.powf(k as f32 / half as f32);
                let cos = f32s(&[rows, half], |x| angle(x / half, x % half).cos());
                let sin = f32s(&[rows, half], |x| angle(x / half, x % half).sin());
                consts.push(("cos", stored_as(&cos, dtype)));
                consts.push(("sin", stored_as(&sin, dtype)));
                slots.extend(["cos".to_string(), "sin".to_string()]);
            }
            None => slots.extend([String::new(), String::new()]),
        }
        if self.positions.is_some() {
            inputs.push(value("position_ids", DType::I64, &[b as i64, s as i64]));
            slots.push("position_ids".into());
        } else {
            slots.push(String::new());
        }
        match self.bias {
            Some([bb, nb]) => {
                let shape = [bb, nb, s, self.total as usize];
                slots.push(float_in("bias", &shape, &mut inputs));
            }
            None => slots.push(String::new()),
        }
        if self.sinks {
            consts.push(("sinks", stored_as(&f32s(&[n], |x| x as f32 * 0.5 - 1.0), dtype)));
            slots.push("sinks".into());
        }
        while slots.last().is_some_and(String::is_empty) {
            slots.pop();
        }
        let mut attrs = vec![("num_heads", A::I(n as i64)), ("kv_num_heads", A::I(kv as i64))];
        if let Some((_, interleaved)) = self.rotary {
            attrs.push(("do_rotary", A::I(1)));
            attrs.push(("rotary_interleaved", A::I(interleaved.into())));
        }
        attrs.extend(self.attrs.iter().cloned());
        let slot_refs: Vec<&str> = slots.iter().map(String::as_str).collect();
        let mut gqa =
            node("GroupQueryAttention", "gqa", &slot_refs, &["y_t", "pk_t", "pv_t"], attrs);
        gqa.domain = Some("com.microsoft".into());
        nodes.push(gqa);
        for (from, to_name) in [("y_t", "y"), ("pk_t", "present_key"), ("pv_t", "present_value")] {
            nodes.push(node(
                "Cast",
                &format!("c_{to_name}"),
                &[from],
                &[to_name],
                vec![("to", A::I(1))],
            ));
        }
        let present = [b, kv, self.present(), h];
        contrib_model(graph(
            nodes,
            inputs,
            vec![
                value("y", DType::F32, &i(&[b, s, n * h])),
                value("present_key", DType::F32, &i(&present)),
                value("present_value", DType::F32, &i(&present)),
            ],
            consts,
        ))
    }

    fn feed(&self) -> Vec<(&'static str, Tensor)> {
        let (b, s, n, kv, h) = (self.batch, self.q_len, self.heads, self.kv_heads, self.head);
        let q_width = if self.packed { (n + 2 * kv) * h } else { n * h };
        let mut f = vec![("query", noise(&[b, s, q_width], 1))];
        if !self.packed {
            f.push(("key", noise(&[b, s, kv * h], 2)));
            f.push(("value", noise(&[b, s, kv * h], 3)));
        }
        if self.past > 0 {
            f.push(("past_key", noise(&[b, kv, self.past, h], 4)));
            f.push(("past_value", noise(&[b, kv, self.past, h], 5)));
        }
        f.push(("seqlens_k", Tensor::from_vec(vec![b], self.seqlens.clone()).unwrap()));
        f.push(("total", Tensor::from_vec(vec![], vec![self.total]).unwrap()));
        if let Some(p) = &self.positions {
            f.push(("position_ids", Tensor::from_vec(vec![b, s], p.clone()).unwrap()));
        }
        if let Some([bb, nb]) = self.bias {
            f.push(("bias", noise(&[bb, nb, s, self.total as usize], 6)));
        }
        f
    }
}

fn cases() -> Vec<Case> {
    let base = Case {
        name: "decode against a cache, rotary halves, two lengths in the batch",
        batch: 2,
        q_len: 1,
        heads: 4,
        kv_heads: 2,
        head: 16,
        past: 8,
        total: 6,
        seqlens: vec![5, 3],
        packed: false,
        rotary: Some((8, false)),
        positions: Some(vec![5, 3]),
        bias: None,
        sinks: false,
        attrs: vec![],
    };
    vec![
        Case {
            name: "a first prompt with packed QKV and partial interleaved rotary",
            batch: 1,
            q_len: 5,
            past: 0,
            total: 5,
            seqlens: vec![4],
            packed: true,
            rotary: Some((4, true)),
            positions: None,
            ..base.clone()
        },
        Case {
            name: "a chunk of three with a window, softcap, a bias and head sinks",
            q_len: 3,
            past: 4,
            total: 7,
            seqlens: vec![6, 6],
            positions: None,
            bias: Some([2, 1]),
            sinks: true,
            attrs: vec![("local_window_size", A::I(3)), ("softcap", A::F(5.0))],
            ..base.clone()
        },
        Case {
            name: "non-causal with smooth softmax and heads of 64",
            batch: 1,
            q_len: 2,
            head: 64,
            past: 3,
            total: 5,
            seqlens: vec![4],
            rotary: None,
            positions: None,
            attrs: vec![("causal", A::I(0)), ("smooth_softmax", A::I(1))],
            ..base.clone()
        },
        Case {
            name: "decode against a 1,400-row cache at Qwen2.5's 14/2 heads of 64 (keys in two chunks)",
            batch: 1,
            heads: 14,
            head: 64,
            past: 1400,
            total: 1300,
            seqlens: vec![1299],
            rotary: Some((32, false)),
            positions: Some(vec![9]),
            ..base.clone()
        },
        Case {
            name: "heads of 12, whose rows are not whole 16-byte words in f16",
            head: 12,
            rotary: Some((6, false)),
            ..base.clone()
        },
        base,
    ]
}

#[test]
fn group_query_attention_matches_the_cpu_in_every_shape_the_builder_writes() {
    // The CPU's outputs first: the models are checked even where no GPU opens.
    let mut runs = Vec::new();
    for case in cases() {
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 2e-2), (DType::BF16, 6e-2)] {
            let bytes = case.model(dtype);
            let feed =
                || case.feed().into_iter().map(|(n, t)| (n, Value::Tensor(t))).collect::<Vec<_>>();
            let want = session(bytes.clone(), true).run(feed()).unwrap();
            runs.push((format!("{} ({dtype})", case.name), bytes, feed(), want, tol));
        }
    }
    let Some(p) = gpu() else { return };
    for (name, bytes, feed, want, tol) in runs {
        let got = on(bytes, &p, true).run(feed).unwrap();
        for out in ["y", "present_key", "present_value"] {
            let err = max_rel(&f32_out(&got, out), &f32_out(&want, out));
            assert!(err <= tol, "{name}, {out}: {err} > {tol}");
        }
    }
}

#[test]
fn a_cache_length_beyond_the_buffers_fails_the_run_and_frees_everything() {
    let Some(p) = gpu() else { return };
    let case = Case { seqlens: vec![20, 3], ..cases().pop().unwrap() };
    let s = on(case.model(DType::F32), &p, true);
    let feed: Vec<_> =
        case.feed().into_iter().map(|(n, t)| (n, Value::Tensor(t))).collect::<Vec<_>>();
    let Err(err) = s.run(feed) else { panic!("seqlens_k 20 is past the 8-row cache") };
    let msg = onyx::error_chain(&err);
    assert!(msg.contains("seqlens_k"), "{msg}");
    drop(s);
    assert_eq!(p.memory_stats().in_use_bytes, 0, "nothing leaks on the error path");
}

/// Pseudo-random bytes.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect()
}

#[test]
fn gather_block_quantized_dequantizes_the_gathered_rows_as_the_cpu_does() {
    // (data dtype, physical data shape, bits, gather axis, quantize axis, block, zero points)
    type GbqCase = (DType, [usize; 2], i64, i64, i64, usize, bool);
    let cases: [GbqCase; 5] = [
        // An onnxruntime-genai embedding: uint8 rows of 4-bit values, blocks along the row.
        (DType::U8, [10, 24], 4, 0, 1, 16, true),
        // A row of 40 values in blocks of 32: the last block is partial.
        (DType::U8, [10, 20], 4, 0, -1, 32, false),
        (DType::U8, [10, 16], 8, 0, 1, 8, true),
        // int4 packed over the whole tensor, gathered across the blocks' axis.
        (DType::I4, [8, 6], 4, 1, 0, 4, true),
        (DType::U4, [10, 12], 4, 0, 1, 4, false),
    ];
    let mut runs = Vec::new();
    for (i, (dtype, shape, bits, ga, qa, block, zp)) in cases.into_iter().enumerate() {
        let mut logical = shape.to_vec();
        if dtype == DType::U8 {
            logical[1] *= 8 / bits as usize;
        }
        let q = if qa < 0 { 1 } else { qa as usize };
        let mut sshape = logical.clone();
        sshape[q] = logical[q].div_ceil(block);
        let packed = |shape: &[usize], seed| -> Tensor {
            let n: usize = shape.iter().product();
            let len = if dtype == DType::U8 { n } else { n.div_ceil(2) };
            Tensor::from_bytes(dtype, shape.to_vec(), bytes(len, seed).into()).unwrap()
        };
        let data = packed(&shape, i as u64);
        let mut consts = vec![("data", data)];
        let mut names = vec!["data", "idx", "scales"];
        for scale_dtype in [DType::F32, DType::F16] {
            let scales = stored_as(&f32s(&sshape, |k| 0.01 + 0.003 * (k % 7) as f32), scale_dtype);
            let mut consts = consts.clone();
            let mut names = names.clone();
            consts.push(("scales", scales));
            if zp {
                let mut zshape = sshape.clone();
                if dtype == DType::U8 {
                    zshape[1] = (zshape[1] * bits as usize).div_ceil(8);
                }
                consts.push(("zp", packed(&zshape, 99)));
                names.push("zp");
            }
            // Indices: the last row by -1, and one outside the axis (zeros).
            let axis = logical[if ga < 0 { 1 } else { ga as usize }] as i64;
            let idx: Vec<i64> = vec![0, axis - 1, -1, 2, axis + 3, 1];
            let mut out = logical.clone();
            out.splice(ga as usize..=ga as usize, [2, 3]);
            let mut op = node(
                "GatherBlockQuantized",
                "gbq",
                &names,
                &["yt"],
                vec![
                    ("gather_axis", A::I(ga)),
                    ("quantize_axis", A::I(qa)),
                    ("block_size", A::I(block as i64)),
                    ("bits", A::I(bits)),
                ],
            );
            op.domain = Some("com.microsoft".into());
            let dims = |s: &[usize]| s.iter().map(|&d| d as i64).collect::<Vec<_>>();
            let bytes = contrib_model(graph(
                vec![op, node("Cast", "c", &["yt"], &["y"], vec![("to", A::I(1))])],
                vec![value("idx", DType::I64, &[2, 3])],
                vec![value("y", DType::F32, &dims(&out))],
                consts,
            ));
            let feed = vec![("idx", Value::Tensor(Tensor::from_vec(vec![2, 3], idx).unwrap()))];
            let want = session(bytes.clone(), true).run(feed.clone()).unwrap();
            let name = format!("{dtype} {shape:?} axis {ga}/{qa} block {block}, {scale_dtype}");
            runs.push((name, bytes, feed, want));
        }
        consts.clear();
        names.clear();
    }
    let Some(p) = gpu() else { return };
    for (name, bytes, feed, want) in runs {
        let got = on(bytes, &p, true).run(feed).unwrap();
        assert_eq!(f32_out(&got, "y"), f32_out(&want, "y"), "{name}");
    }
}

#[test]
fn rotary_embedding_turns_each_head_as_the_cpu_does() {
    // (input shape, num_heads, rotary_embedding_dim, interleaved, position ids)
    type RopeCase = (Vec<usize>, i64, i64, bool, Vec<i64>);
    let cases: Vec<RopeCase> = vec![
        (vec![2, 3, 32], 4, 0, false, vec![0, 1, 2, 7, 8, 9]),
        (vec![1, 2, 5, 16], 0, 8, true, vec![3]),
        (vec![2, 4, 24], 2, 8, false, vec![5]),
    ];
    let mut runs = Vec::new();
    for (shape, heads, dim, interleaved, ids) in cases {
        let head = if shape.len() == 4 { shape[3] } else { shape[2] / heads as usize };
        let half = if dim == 0 { head / 2 } else { dim as usize / 2 };
        let angle = |x: usize| (x / half) as f32 / 10f32.powf((x % half) as f32 / half as f32);
        for (dtype, tol) in [(DType::F32, 1e-6), (DType::F16, 1e-2), (DType::BF16, 5e-2)] {
            let cos = stored_as(&f32s(&[16, half], |x| angle(x).cos()), dtype);
            let sin = stored_as(&f32s(&[16, half], |x| angle(x).sin()), dtype);
            let mut attrs = vec![("interleaved", A::I(interleaved.into()))];
            if heads > 0 {
                attrs.push(("num_heads", A::I(heads)));
            }
            if dim > 0 {
                attrs.push(("rotary_embedding_dim", A::I(dim)));
            }
            let mut rope =
                node("RotaryEmbedding", "rope", &["xt", "pos", "cos", "sin"], &["yt"], attrs);
            rope.domain = Some("com.microsoft".into());
            let to = dtype.to_onnx() as i64;
            let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            // One offset, or one id per token.
            let pos_shape =
                if ids.len() > 1 { vec![shape[0], ids.len() / shape[0]] } else { vec![1] };
            let pos_dims: Vec<i64> = pos_shape.iter().map(|&d| d as i64).collect();
            let bytes = contrib_model(graph(
                vec![
                    node("Cast", "in", &["x"], &["xt"], vec![("to", A::I(to))]),
                    rope,
                    node("Cast", "out", &["yt"], &["y"], vec![("to", A::I(1))]),
                ],
                vec![value("x", DType::F32, &dims), value("pos", DType::I64, &pos_dims)],
                vec![value("y", DType::F32, &dims)],
                vec![("cos", cos), ("sin", sin)],
            ));
            let feed = vec![
                ("x", Value::Tensor(noise(&shape, 21))),
                ("pos", Value::Tensor(Tensor::from_vec(pos_shape, ids.clone()).unwrap())),
            ];
            let want = session(bytes.clone(), true).run(feed.clone()).unwrap();
            runs.push((format!("{shape:?} {dtype}"), bytes, feed, want, tol));
        }
    }
    let Some(p) = gpu() else { return };
    for (name, bytes, feed, want, tol) in runs {
        let got = on(bytes, &p, true).run(feed).unwrap();
        let err = max_rel(&f32_out(&got, "y"), &f32_out(&want, "y"));
        assert!(err <= tol, "{name}: {err} > {tol}");
    }
}
