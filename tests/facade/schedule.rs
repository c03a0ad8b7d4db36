//! Schedules: the first run with an input signature decides, later runs
//! follow, with their intermediates in an arena; runs whose device data
//! decides their shapes leave the schedule and stay right.

mod common;

use common::*;
use onyx::{DType, Tensor, Value};

const N: usize = 32;

fn run(s: &onyx::Session, name: &str, t: Tensor) -> onyx::RunOutputs {
    s.run([(name, Value::Tensor(t))]).unwrap()
}

fn out<T: onyx::core::tensor::Element>(o: &onyx::RunOutputs, name: &str) -> Vec<T> {
    o.get(name).and_then(Value::as_tensor).unwrap().to_vec::<T>().unwrap()
}

/// c = Relu(x); a = T(x); b = T(a); y = b + c (in place over b): c and a
/// are intermediates that live at once, and both die within the run.
fn diamond() -> Vec<u8> {
    let mut x = value("x", DType::F32, &[N as i64, N as i64]);
    symbolic_first_dim(&mut x, "rows");
    model(
        graph(
            vec![
                node("Relu", "c", &["x"], &["c"], vec![]),
                node("Transpose", "a", &["x"], &["a"], vec![]),
                node("Transpose", "b", &["a"], &["b"], vec![]),
                node("Add", "d", &["b", "c"], &["y"], vec![]),
            ],
            vec![x],
            vec![untyped("y")],
            vec![],
        ),
        13,
    )
}

fn square(rows: usize) -> Tensor {
    f32s(&[rows, N], |i| (i % 11) as f32 - 5.0)
}

#[test]
fn a_second_run_follows_the_schedule_with_its_intermediates_in_an_arena() {
    let s = session(diamond(), true);
    let first = run(&s, "x", square(N));
    assert_eq!(s.schedules(), 1);
    let second = run(&s, "x", square(N));
    assert_eq!(out::<f32>(&first, "y"), out::<f32>(&second, "y"));
    // The same figures, and the measured peak is still the live set.
    assert_eq!(first.memory.live_set_bound_bytes, second.memory.live_set_bound_bytes);
    assert_eq!(second.memory.peak_bytes, second.memory.live_set_bound_bytes);
    // The first run planned the arena and the second held it: c and a,
    // 4 KiB each, live together (b becomes the output y, so it is not in it).
    assert_eq!(first.memory.arena_bytes, 2 * 4096);
    assert_eq!(second.memory.arena_bytes, 2 * 4096);
    assert!(second.memory.arena_bytes <= second.memory.live_set_bound_bytes);
    // Nothing is left behind: every view and the arena went back.
    let st = s.provider().memory_stats();
    assert_eq!((st.in_use_bytes, st.arena_bytes), (0, 0));
}

#[test]
fn each_input_shape_gets_its_own_schedule_up_to_the_cache_size() {
    let s =
        onyx::Session::builder().with_schedule_cache(2).commit_from_bytes(diamond(), None).unwrap();
    let reference = session(diamond(), true);
    for rows in [N, 4, N, 4, 9, N, 9] {
        let got = out::<f32>(&run(&s, "x", square(rows)), "y");
        let want = out::<f32>(&run(&reference, "x", square(rows)), "y");
        assert_eq!(got, want, "rows {rows}");
    }
    assert_eq!(s.schedules(), 2);
}

#[test]
fn without_a_cache_every_run_decides_anew_and_holds_no_arena() {
    let s =
        onyx::Session::builder().with_schedule_cache(0).commit_from_bytes(diamond(), None).unwrap();
    run(&s, "x", square(N));
    let o = run(&s, "x", square(N));
    assert_eq!(s.schedules(), 0);
    assert_eq!(o.memory.arena_bytes, 0);
    assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes);
}

#[test]
fn an_if_on_device_data_takes_either_branch_under_one_schedule() {
    let s = session(if_on_input_data(), true);
    for _ in 0..2 {
        for (x, want) in if_on_input_data_cases() {
            let o = run(&s, "x", Tensor::from_vec(vec![3], x).unwrap());
            assert_eq!(out::<f32>(&o, "y"), want);
            assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes);
        }
    }
}

/// y = Reshape(x, shape) with `shape` a graph input: the output's shape is
/// the input's data, which the signature (dtypes and shapes) does not fix.
fn reshape_by_input() -> Vec<u8> {
    model(
        graph(
            vec![
                node("Relu", "r", &["x"], &["a"], vec![]),
                node("Reshape", "reshape", &["a", "shape"], &["b"], vec![]),
                node("Neg", "n", &["b"], &["y"], vec![]),
            ],
            vec![value("x", DType::F32, &[12]), value("shape", DType::I64, &[2])],
            vec![untyped("y")],
            vec![],
        ),
        13,
    )
}

#[test]
fn a_shape_read_from_device_data_leaves_the_schedule_and_stays_right() {
    let s = session(reshape_by_input(), true);
    let x = f32s(&[12], |i| i as f32 - 6.0);
    let want: Vec<f32> = x.to_vec::<f32>().unwrap().iter().map(|v| -v.max(0.0)).collect();
    for dims in [[3i64, 4], [3, 4], [4, 3], [2, 6], [3, 4], [6, 2]] {
        let o = s
            .run([
                ("x", Value::Tensor(x.clone())),
                ("shape", Value::Tensor(Tensor::from_vec(vec![2], dims.to_vec()).unwrap())),
            ])
            .unwrap();
        let y = o.get("y").and_then(Value::as_tensor).unwrap();
        assert_eq!(y.shape(), [dims[0] as usize, dims[1] as usize]);
        assert_eq!(y.to_vec::<f32>().unwrap(), want);
        assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes);
    }
}

#[test]
fn concurrent_runs_share_one_schedule() {
    let s = std::sync::Arc::new(session(diamond(), true));
    let want = out::<f32>(&run(&s, "x", square(N)), "y");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (s, want) = (s.clone(), want.clone());
            std::thread::spawn(move || {
                for _ in 0..50 {
                    assert_eq!(out::<f32>(&run(&s, "x", square(N)), "y"), want);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = s.provider().memory_stats();
    assert_eq!((st.in_use_bytes, st.arena_bytes), (0, 0));
}
