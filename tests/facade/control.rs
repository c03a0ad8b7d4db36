//! Control flow run by the executor: `If` resolved at build time, `Loop`,
//! `Scan`, and what they leave allocated when a body fails.

mod common;

use common::*;
use onyx::{DType, Tensor, Value};

fn bools(b: bool) -> Tensor {
    Tensor::from_bools(vec![], &[b]).unwrap()
}

fn out(o: &onyx::RunOutputs, name: &str) -> Tensor {
    o.get(name).and_then(Value::as_tensor).unwrap().clone()
}

/// `y = If(c) { Neg(x) } else { NoSuchOp(x) }` with `c` an initializer.
fn if_on_constant(c: bool) -> Vec<u8> {
    let branch = |op: &str| {
        graph(vec![node(op, op, &["x"], &["r"], vec![])], vec![], vec![untyped("r")], vec![])
    };
    model(
        graph(
            vec![node(
                "If",
                "if",
                &["c"],
                &["y"],
                vec![
                    ("then_branch", A::G(Box::new(branch("Neg")))),
                    ("else_branch", A::G(Box::new(branch("NoSuchOp")))),
                ],
            )],
            vec![value("x", DType::F32, &[3])],
            vec![value("y", DType::F32, &[3])],
            vec![("c", bools(c))],
        ),
        13,
    )
}

#[test]
fn an_if_on_a_constant_condition_builds_and_runs_only_the_live_branch() {
    // The dead branch holds an op nobody implements: compiling it would fail.
    let s = session(if_on_constant(true), true);
    let x = Tensor::from_vec(vec![3], vec![1f32, -2., 3.]).unwrap();
    let o = s.run([("x", Value::Tensor(x))]).unwrap();
    assert_eq!(out(&o, "y").to_vec::<f32>().unwrap(), vec![-1., 2., -3.]);
    // The same model with the condition flipped must fail to build, naming the op.
    let err = onyx::Session::builder()
        .commit_from_bytes(if_on_constant(false), None)
        .err()
        .expect("the live branch holds an unknown op");
    let chain = onyx::error_chain(&err);
    assert!(chain.contains("NoSuchOp"), "{chain}");
}

/// `Loop(M, cond, a)` whose body adds `one` (captured) to `a`, outputs
/// `Less(i, limit)` as its condition and the new `a` as a scan output.
fn counting_loop(trip: Option<i64>, limit: i64) -> Vec<u8> {
    let body = graph(
        vec![
            node("Add", "add", &["a", "one"], &["a_out"], vec![]),
            node("Less", "less", &["i", "limit"], &["c_out"], vec![]),
            node("Identity", "scan", &["a_out"], &["s"], vec![]),
        ],
        vec![
            value("i", DType::I64, &[]),
            value("c", DType::Bool, &[]),
            value("a", DType::F32, &[2]),
        ],
        vec![untyped("c_out"), untyped("a_out"), untyped("s")],
        vec![("limit", Tensor::scalar(limit))],
    );
    let mut inits =
        vec![("cond", bools(true)), ("one", Tensor::from_vec(vec![2], vec![1f32, 1.]).unwrap())];
    if let Some(m) = trip {
        inits.push(("m", Tensor::scalar(m)));
    }
    let m_name = if trip.is_some() { "m" } else { "" };
    model(
        graph(
            vec![node(
                "Loop",
                "loop",
                &[m_name, "cond", "x"],
                &["a", "s"],
                vec![("body", A::G(Box::new(body)))],
            )],
            vec![value("x", DType::F32, &[2])],
            vec![value("a", DType::F32, &[2]), value("s", DType::F32, &[-1, 2])],
            inits,
        ),
        13,
    )
}

#[test]
fn a_loop_with_a_trip_count_carries_values_and_stacks_scan_outputs() {
    let s = session(counting_loop(Some(4), 100), true);
    let x = Tensor::from_vec(vec![2], vec![0f32, 10.]).unwrap();
    for _ in 0..2 {
        let o = s.run([("x", Value::Tensor(x.clone()))]).unwrap();
        assert_eq!(out(&o, "a").to_vec::<f32>().unwrap(), vec![4., 14.]);
        let scan = out(&o, "s");
        assert_eq!(scan.shape(), &[4, 2]);
        assert_eq!(scan.to_vec::<f32>().unwrap(), vec![1., 11., 2., 12., 3., 13., 4., 14.]);
    }
}

#[test]
fn a_loop_without_a_trip_count_stops_when_its_body_turns_the_condition_false() {
    // Iterations 0, 1 and 2 run; the third returns Less(2, 2) = false.
    let s = session(counting_loop(None, 2), true);
    let x = Tensor::from_vec(vec![2], vec![0f32, 10.]).unwrap();
    let o = s.run([("x", Value::Tensor(x))]).unwrap();
    assert_eq!(out(&o, "a").to_vec::<f32>().unwrap(), vec![3., 13.]);
    assert_eq!(out(&o, "s").shape(), &[3, 2]);
}

#[test]
fn a_loop_with_a_zero_trip_count_returns_its_initial_values_and_empty_scans() {
    let s = session(counting_loop(Some(0), 100), true);
    let x = Tensor::from_vec(vec![2], vec![5f32, 6.]).unwrap();
    let o = s.run([("x", Value::Tensor(x))]).unwrap();
    assert_eq!(out(&o, "a").to_vec::<f32>().unwrap(), vec![5., 6.]);
    assert_eq!(out(&o, "s").numel(), 0);
}

#[test]
fn a_loop_body_that_fails_midway_leaves_nothing_allocated() {
    // The body gathers row `i` of a 2-row table: iteration 2 is out of bounds.
    let body = graph(
        vec![
            node("Gather", "g", &["table", "i"], &["row"], vec![]),
            node("Add", "add", &["a", "row"], &["a_out"], vec![]),
            node("Identity", "c", &["c"], &["c_out"], vec![]),
        ],
        vec![
            value("i", DType::I64, &[]),
            value("c", DType::Bool, &[]),
            value("a", DType::F32, &[2]),
        ],
        vec![untyped("c_out"), untyped("a_out")],
        vec![],
    );
    let m = model(
        graph(
            vec![node(
                "Loop",
                "loop",
                &["m", "cond", "x"],
                &["a"],
                vec![("body", A::G(Box::new(body)))],
            )],
            vec![value("x", DType::F32, &[2])],
            vec![value("a", DType::F32, &[2])],
            vec![
                ("m", Tensor::scalar(5i64)),
                ("cond", bools(true)),
                ("table", Tensor::from_vec(vec![2, 2], vec![1f32, 2., 3., 4.]).unwrap()),
            ],
        ),
        13,
    );
    let s = session(m, true);
    let before = s.provider().memory_stats();
    let x = Tensor::from_vec(vec![2], vec![0f32, 0.]).unwrap();
    let err = s.run([("x", Value::Tensor(x))]).unwrap_err();
    let chain = onyx::error_chain(&err);
    assert!(chain.contains("out of bounds") && chain.contains("loop"), "{chain}");
    let after = s.provider().memory_stats();
    assert_eq!(after.in_use_bytes, before.in_use_bytes);
    assert_eq!(after.allocations - before.allocations, after.frees - before.frees);
}

#[test]
fn a_scan_runs_its_body_over_reversed_slices_and_stacks_along_the_output_axis() {
    // Running sum over the rows of x (3×2), scanned from the end; the partial
    // sums are stacked along axis 1 of the output (2×3).
    let body = graph(
        vec![
            node("Add", "add", &["acc", "row"], &["acc_out"], vec![]),
            node("Identity", "id", &["acc_out"], &["partial"], vec![]),
        ],
        vec![value("acc", DType::F32, &[2]), value("row", DType::F32, &[2])],
        vec![untyped("acc_out"), untyped("partial")],
        vec![],
    );
    let m = model(
        graph(
            vec![node(
                "Scan",
                "scan",
                &["init", "x"],
                &["total", "partials"],
                vec![
                    ("body", A::G(Box::new(body))),
                    ("num_scan_inputs", A::I(1)),
                    ("scan_input_directions", A::Is(vec![1])),
                    ("scan_output_axes", A::Is(vec![1])),
                ],
            )],
            vec![value("init", DType::F32, &[2]), value("x", DType::F32, &[3, 2])],
            vec![value("total", DType::F32, &[2]), value("partials", DType::F32, &[2, 3])],
            vec![],
        ),
        16,
    );
    let s = session(m, true);
    let init = Tensor::from_vec(vec![2], vec![0f32, 100.]).unwrap();
    let x = Tensor::from_vec(vec![3, 2], vec![1f32, 2., 3., 4., 5., 6.]).unwrap();
    let o = s.run([("init", Value::Tensor(init)), ("x", Value::Tensor(x))]).unwrap();
    assert_eq!(out(&o, "total").to_vec::<f32>().unwrap(), vec![9., 112.]);
    let p = out(&o, "partials");
    assert_eq!(p.shape(), &[2, 3]);
    assert_eq!(p.to_vec::<f32>().unwrap(), vec![5., 8., 9., 106., 110., 112.]);
}
