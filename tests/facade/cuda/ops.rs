//! Single ops and small fused chains on CUDA against the CPU backend: the
//! biased projection cuBLASLt finishes in its epilogue, TopK, ConvTranspose
//! and ReverseSequence.

use super::*;

#[test]
fn a_projection_and_its_bias_run_as_one_gemm_on_cuda_and_match_the_cpu() {
    let Some(p) = gpu() else { return };
    // 3-D, 2-D and 1-D inputs; 45 columns make rows that are not 16-byte multiples.
    for (x_shape, k, n) in [(vec![2, 7, 64], 64, 96), (vec![5, 24], 24, 45), (vec![16], 16, 8)] {
        let mut out_shape = x_shape.clone();
        *out_shape.last_mut().unwrap() = n;
        let dims = |s: &[usize]| s.iter().map(|&d| d as i64).collect::<Vec<_>>();
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::F16, 2e-2), (DType::BF16, 6e-2)] {
            let to = dtype.to_onnx() as i64;
            let bytes = model(
                graph(
                    vec![
                        node("Cast", "in", &["x"], &["xt"], vec![("to", A::I(to))]),
                        node("MatMul", "proj", &["xt", "w"], &["xw"], vec![]),
                        node("Add", "bias", &["xw", "b"], &["yt"], vec![]),
                        node("Cast", "out", &["yt"], &["y"], vec![("to", A::I(1))]),
                    ],
                    vec![value("x", DType::F32, &dims(&x_shape))],
                    vec![value("y", DType::F32, &dims(&out_shape))],
                    vec![
                        ("w", stored_as(&noise(&[k, n], 3), dtype)),
                        ("b", stored_as(&noise(&[n], 4), dtype)),
                    ],
                ),
                17,
            );
            let inputs = || vec![("x", Value::Tensor(noise(&x_shape, 5)))];
            let want = session(bytes.clone(), true).run(inputs()).unwrap();
            let s = on(bytes, &p, true);
            let ops: Vec<String> = s.placement().into_iter().map(|(n, _)| n.op_type).collect();
            assert!(ops.iter().any(|o| o == "Gemm"), "{dtype} {x_shape:?}: {ops:?}");
            assert!(!ops.iter().any(|o| o == "MatMul" || o == "Add"), "{ops:?}");
            let got = s.run(inputs()).unwrap();
            let err = max_rel(&f32_out(&got, "y"), &f32_out(&want, "y"));
            assert!(err <= tol, "{dtype} {x_shape:?}: {err} > {tol}");
        }
    }
}

/// A one-node model of `op` over f32 inputs `ins` (with `consts` as initializers).
fn one_op(
    op: &str,
    ins: &[(&str, &[usize])],
    outs: &[(&str, DType, &[usize])],
    attrs: Vec<(&str, A)>,
    consts: Vec<(&str, Tensor)>,
) -> Vec<u8> {
    let dims = |s: &[usize]| s.iter().map(|&d| d as i64).collect::<Vec<_>>();
    let mut names: Vec<&str> = ins.iter().map(|(n, _)| *n).collect();
    names.extend(consts.iter().map(|(n, _)| *n));
    let out_names: Vec<&str> = outs.iter().map(|(n, _, _)| *n).collect();
    model(
        graph(
            vec![node(op, "op", &names, &out_names, attrs)],
            ins.iter().map(|(n, s)| value(n, DType::F32, &dims(s))).collect(),
            outs.iter().map(|(n, d, s)| value(n, *d, &dims(s))).collect(),
            consts,
        ),
        17,
    )
}

/// The outputs of `bytes` on the CPU and on CUDA (strict: no fallback).
fn both(
    p: &Arc<CudaProvider>,
    bytes: Vec<u8>,
    inputs: Vec<(&str, Tensor)>,
) -> [onyx::RunOutputs; 2] {
    let feed = || inputs.iter().map(|(n, t)| (*n, Value::Tensor(t.clone()))).collect::<Vec<_>>();
    let want = session(bytes.clone(), true).run(feed()).unwrap();
    let got = on(bytes, p, true).run(feed()).unwrap();
    [want, got]
}

fn i64_out(o: &onyx::RunOutputs, name: &str) -> Vec<i64> {
    let t = o.get(name).and_then(Value::as_tensor).unwrap();
    t.to_f64_vec().unwrap().into_iter().map(|v| v as i64).collect()
}

#[test]
fn topk_picks_the_cpus_values_and_indices_with_ties_in_axis_order() {
    let Some(p) = gpu() else { return };
    // 700-long lines of 64 distinct values: many ties, broken by the lower index.
    let x = f32s(&[3, 700, 2], |i| ((i * 37) % 64) as f32 - 20.0);
    let k = Tensor::from_vec(vec![1], vec![25i64]).unwrap();
    for largest in [1, 0] {
        let bytes = one_op(
            "TopK",
            &[("x", &[3, 700, 2])],
            &[("v", DType::F32, &[3, 25, 2]), ("i", DType::I64, &[3, 25, 2])],
            vec![("axis", A::I(1)), ("largest", A::I(largest))],
            vec![("k", k.clone())],
        );
        let [want, got] = both(&p, bytes, vec![("x", x.clone())]);
        assert_eq!(f32_out(&got, "v"), f32_out(&want, "v"), "largest {largest}");
        assert_eq!(i64_out(&got, "i"), i64_out(&want, "i"), "largest {largest}");
    }
}

#[test]
fn conv_transpose_matches_the_cpu_with_strides_pads_groups_and_output_padding() {
    let Some(p) = gpu() else { return };
    // X [2, 4, 5, 6], W [4, 3, 3, 2] in 2 groups: 6 output channels.
    type Attrs = Vec<(&'static str, A)>;
    let cases: [(Attrs, [usize; 2]); 3] = [
        (vec![("strides", A::Is(vec![2, 3])), ("group", A::I(2))], [11, 17]),
        (
            vec![
                ("strides", A::Is(vec![2, 2])),
                ("pads", A::Is(vec![1, 0, 0, 1])),
                ("output_padding", A::Is(vec![1, 1])),
                ("dilations", A::Is(vec![1, 2])),
                ("group", A::I(2)),
            ],
            [11, 13],
        ),
        (vec![("auto_pad", A::S("SAME_UPPER")), ("group", A::I(2))], [5, 6]),
    ];
    for (attrs, [oh, ow]) in cases {
        let bytes = one_op(
            "ConvTranspose",
            &[("x", &[2, 4, 5, 6])],
            &[("y", DType::F32, &[2, 6, oh, ow])],
            attrs,
            vec![("w", noise(&[4, 3, 3, 2], 7)), ("b", noise(&[6], 8))],
        );
        let [want, got] = both(&p, bytes, vec![("x", noise(&[2, 4, 5, 6], 9))]);
        let err = max_rel(&f32_out(&got, "y"), &f32_out(&want, "y"));
        assert!(err <= 1e-5, "{oh}x{ow}: {err}");
    }
}

#[test]
fn reverse_sequence_matches_the_cpu_on_either_axis_order() {
    let Some(p) = gpu() else { return };
    let lens = Tensor::from_vec(vec![4], vec![4i64, 0, 1, 3]).unwrap();
    for (time, batch, shape) in [(0, 1, [5usize, 4, 3]), (1, 0, [4, 5, 3])] {
        let bytes = one_op(
            "ReverseSequence",
            &[("x", &shape)],
            &[("y", DType::F32, &shape)],
            vec![("time_axis", A::I(time)), ("batch_axis", A::I(batch))],
            vec![("lens", lens.clone())],
        );
        let [want, got] = both(&p, bytes, vec![("x", noise(&shape, 3))]);
        assert_eq!(f32_out(&got, "y"), f32_out(&want, "y"), "time axis {time}");
    }
}

/// Random packed weights: `n` rows of `kb` blocks of `block × bits / 8` bytes.
fn packed_bytes(len: usize, seed: u64) -> Tensor {
    let mut rng = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let data: Vec<u8> = (0..len)
        .map(|_| {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (rng >> 33) as u8
        })
        .collect();
    Tensor::from_vec(vec![len], data).unwrap()
}

#[test]
fn matmul_nbits_dequantizes_on_the_device_and_matches_the_cpu() {
    let Some(p) = gpu() else { return };
    // (bits, block, k, n, rows of A, zero points: 0 none / 1 packed / 2 float, bias)
    let cases: [(usize, usize, usize, usize, usize, u8, bool); 8] = [
        (4, 32, 64, 48, 1, 1, false),
        (4, 32, 40, 33, 5, 1, true), // K not a multiple of the block; 5 rows
        (4, 16, 96, 17, 3, 0, false),
        (4, 64, 128, 64, 9, 2, true),
        (4, 128, 256, 8, 2, 1, false),
        (8, 32, 64, 24, 4, 1, true),
        (2, 16, 48, 20, 1, 1, false),
        (4, 32, 2080, 24, 2, 1, true), // three 16-byte words a lane, the last partial
    ];
    // f32, and f16 (A, scales, float zero points and bias) between two Casts.
    for (bits, block, k, n, m, zp, bias) in cases {
        for (dtype, tol) in [(DType::F32, 1e-4), (DType::F16, 1e-2)] {
            let kb = k.div_ceil(block);
            let blob = block * bits / 8;
            let mut b = packed_bytes(n * kb * blob, (bits * 1000 + k) as u64);
            b = b.reshaped(vec![n, kb, blob]).unwrap();
            let scales = stored_as(&f32s(&[n * kb], |i| 0.01 + 0.002 * (i % 13) as f32), dtype);
            let mut consts = vec![("b", b), ("scales", scales)];
            let mut inputs = vec!["a_t", "b", "scales"];
            match zp {
                1 => {
                    let len = n * (kb * bits).div_ceil(8);
                    consts.push(("zp", packed_bytes(len, 77)));
                    inputs.push("zp");
                }
                2 => {
                    consts
                        .push(("zp", stored_as(&f32s(&[n * kb], |i| (i % 5) as f32 + 0.5), dtype)));
                    inputs.push("zp");
                }
                _ => inputs.push(""),
            }
            if bias {
                inputs.extend(["", "bias"]);
                consts
                    .push(("bias", stored_as(&f32s(&[n], |i| (i % 7) as f32 * 0.1 - 0.3), dtype)));
            }
            while inputs.last() == Some(&"") {
                inputs.pop();
            }
            let to = A::I(dtype.to_onnx() as i64);
            let cast_in = node("Cast", "ca", &["a"], &["a_t"], vec![("to", to)]);
            let cast_out = node("Cast", "cy", &["y_t"], &["y"], vec![("to", A::I(1))]);
            let mut op = node(
                "MatMulNBits",
                "mm",
                &inputs,
                &["y_t"],
                vec![
                    ("K", A::I(k as i64)),
                    ("N", A::I(n as i64)),
                    ("bits", A::I(bits as i64)),
                    ("block_size", A::I(block as i64)),
                ],
            );
            op.domain = Some("com.microsoft".into());
            let bytes = contrib_model(graph(
                vec![cast_in, op, cast_out],
                vec![value("a", DType::F32, &[m as i64, k as i64])],
                vec![value("y", DType::F32, &[m as i64, n as i64])],
                consts,
            ));
            let [want, got] = both(&p, bytes, vec![("a", noise(&[m, k], 9))]);
            let err = max_rel(&f32_out(&got, "y"), &f32_out(&want, "y"));
            assert!(err <= tol, "{dtype}: {bits} bits, block {block}, K {k}, N {n}, M {m}: {err}");
        }
    }
}

#[test]
fn a_gated_pair_of_matmul_nbits_runs_as_one_kernel_and_matches_the_chain_on_the_cpu() {
    let Some(p) = gpu() else { return };
    // (k, n, rows of A, zero points of the gate and the up projection:
    // 0 none / 1 packed / 2 float): the 16-byte GEMV (K of whole words), the
    // 8-weight kernel (K 40) and a prefill of 6 rows.
    let cases: [(usize, usize, usize, u8, u8); 4] =
        [(896, 40, 1, 1, 1), (64, 24, 3, 0, 2), (40, 33, 1, 2, 0), (2080, 16, 6, 1, 0)];
    let (bits, block) = (4, 32);
    for (k, n, m, zg, zu) in cases {
        for (dtype, tol) in [(DType::F32, 1e-4), (DType::F16, 2e-2)] {
            let kb = k.div_ceil(block);
            let mut consts = vec![];
            let mut ins = |name: &'static str, zp: u8, seed: u64| {
                let b = packed_bytes(n * kb * 16, seed).reshaped(vec![n, kb, 16]).unwrap();
                let s = stored_as(
                    &f32s(&[n * kb], |i| 0.01 + 0.002 * (i % (11 + seed as usize)) as f32),
                    dtype,
                );
                let (bn, sn, zn) = match name {
                    "g" => ("bg", "sg", "zg"),
                    _ => ("bu", "su", "zu"),
                };
                consts.push((bn, b));
                consts.push((sn, s));
                match zp {
                    1 => consts.push((zn, packed_bytes(n * kb.div_ceil(2), seed + 5))),
                    2 => consts
                        .push((zn, stored_as(&f32s(&[n * kb], |i| (i % 5) as f32 + 0.5), dtype))),
                    _ => return vec![bn, sn],
                }
                vec![bn, sn, zn]
            };
            let (gi, ui) = (ins("g", zg, 3), ins("u", zu, 4));
            let (gi, ui): (Vec<&str>, Vec<&str>) =
                ([&["a_t"][..], &gi].concat(), [&["a_t"][..], &ui].concat());
            let attrs = || {
                vec![
                    ("K", A::I(k as i64)),
                    ("N", A::I(n as i64)),
                    ("bits", A::I(bits)),
                    ("block_size", A::I(block as i64)),
                ]
            };
            let mut gate = node("MatMulNBits", "gate", &gi, &["g"], attrs());
            let mut up = node("MatMulNBits", "up", &ui, &["u"], attrs());
            gate.domain = Some("com.microsoft".into());
            up.domain = Some("com.microsoft".into());
            let to = A::I(dtype.to_onnx() as i64);
            let bytes = contrib_model(graph(
                vec![
                    node("Cast", "ca", &["a"], &["a_t"], vec![("to", to)]),
                    gate,
                    up,
                    node("Sigmoid", "sig", &["g"], &["s"], vec![]),
                    node("Mul", "silu", &["g", "s"], &["h"], vec![]),
                    node("Mul", "glu", &["h", "u"], &["y_t"], vec![]),
                    node("Cast", "cy", &["y_t"], &["y"], vec![("to", A::I(1))]),
                ],
                vec![value("a", DType::F32, &[m as i64, k as i64])],
                vec![value("y", DType::F32, &[m as i64, n as i64])],
                consts,
            ));
            let fused = on(bytes.clone(), &p, true);
            let ops: Vec<String> = fused.placement().into_iter().map(|(n, _)| n.op_type).collect();
            assert!(ops.contains(&"GatedMatMulNBits".to_string()), "{ops:?}");
            assert!(!ops.contains(&"Sigmoid".to_string()), "{ops:?}");
            let chain =
                onyx::Session::builder().with_fusion(false).commit_from_bytes(bytes, None).unwrap();
            let feed = || vec![("a", Value::Tensor(noise(&[m, k], 9)))];
            let got = fused.run(feed()).unwrap();
            let want = chain.run(feed()).unwrap();
            let err = max_rel(&f32_out(&got, "y"), &f32_out(&want, "y"));
            assert!(err <= tol, "{dtype}: K {k}, N {n}, M {m}, zero points {zg}/{zu}: {err}");
        }
    }
}
