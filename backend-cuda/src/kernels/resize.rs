//! Resize and Upsample: every mode (nearest with its rounding modes, linear,
//! cubic with `cubic_coeff_a`), every coordinate transformation,
//! `exclude_outside`, `extrapolation_value`, antialias, `axes` and the
//! aspect-ratio policies, as onyx-core plans them.
//!
//! The core's [`ResizePlan`](onyx_core::ops::resize::ResizePlan) gives the
//! output dims and each axis' tap count; its per-coordinate tap tables cannot
//! travel without a device buffer, so the kernels recompute them with the
//! core's f64 formulas from each axis' scale and crop box, which this file
//! derives exactly as the core does. Floats interpolate (`resize_interp_T`);
//! nearest without exclude_outside or cropping, and nearest on any other
//! dtype, is a pure copy by element width (`resize_nearest_wN`).

use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::resize::{
    AspectPolicy, CoordinateMode, NearestMode, Resize, ResizeArgs, ResizeMode,
};
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::{CudaKernel, Io, MAX_RANK, Registry, is_float, strides, unsupported, width};
use crate::gpu::{Args, Gpu};

/// `ResizeAxis` in resize.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
struct ResizeAxis {
    scale: f64,
    roi0: f64,
    roi1: f64,
    input: i64,
    output: i64,
    stride: i64,
    identity: i32,
    taps: i32,
}

/// `ResizeGeom` in resize.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq)]
struct ResizeGeom {
    total: i64,
    rank: i32,
    mode: i32,
    coord: i32,
    nearest: i32,
    exclude: i32,
    antialias: i32,
    cubic_a: f64,
    extrapolation: f32,
    _pad: i32,
    ax: [ResizeAxis; MAX_RANK],
}

// SAFETY: plain `#[repr(C)]` data matching `struct ResizeGeom` (and the
// `ResizeAxis` it holds) in resize.cu.
unsafe impl cudarc::driver::DeviceRepr for ResizeGeom {}

/// Per-axis scales, and per-axis crop boxes `(start, end)`.
type ScalesAndRoi = (Vec<f64>, Vec<(f64, f64)>);

fn shape_err(msg: String) -> EpError {
    EpError::Kernel(msg)
}

/// Per-axis scales and crop boxes `(start, end)`, as onyx-core's
/// `Resize::geometry` derives them from `scales` or `sizes` (with `axes` and
/// the aspect-ratio policy) and `roi`.
fn scales_and_roi(r: &Resize, dims: &[usize], args: &ResizeArgs) -> Result<ScalesAndRoi, EpError> {
    let rank = dims.len();
    let axes: Vec<usize> = match &r.axes {
        Some(a) => a
            .iter()
            .map(|&v| {
                onyx_core::shape::normalize_axis(v, rank)
                    .ok_or_else(|| shape_err(format!("axis {v} is out of range for rank {rank}")))
            })
            .collect::<Result<_, _>>()?,
        None => (0..rank).collect(),
    };
    let n = axes.len();
    let mut roi = vec![(0.0, 1.0); rank];
    if let Some(v) = &args.roi {
        if r.coordinate == CoordinateMode::TfCropAndResize {
            if v.len() != 2 * n {
                return Err(shape_err(format!("roi has {} values for {n} axes", v.len())));
            }
            for (i, &a) in axes.iter().enumerate() {
                roi[a] = (v[i], v[n + i]);
            }
        }
    }
    let mut scale = vec![1.0; rank];
    if let Some(sizes) = &args.sizes {
        if sizes.len() != n {
            return Err(shape_err(format!("sizes {sizes:?} do not fit {n} axes")));
        }
        for (i, &a) in axes.iter().enumerate() {
            scale[a] = sizes[i] as f64 / dims[a] as f64;
        }
        if r.policy != AspectPolicy::Stretch {
            let pick = axes.iter().map(|&a| scale[a]);
            let s = if r.policy == AspectPolicy::NotLarger {
                pick.fold(f64::INFINITY, f64::min)
            } else {
                pick.fold(f64::NEG_INFINITY, f64::max)
            };
            for &a in &axes {
                scale[a] = s;
            }
        }
        return Ok((scale, roi));
    }
    let attr = r.scales_attr.as_ref().map(|v| v.iter().map(|&x| x as f64).collect::<Vec<_>>());
    let scales = args
        .scales
        .clone()
        .or(attr)
        .ok_or_else(|| shape_err("Resize needs scales or sizes".into()))?;
    if scales.len() != n {
        return Err(shape_err(format!("scales {scales:?} do not fit {n} axes")));
    }
    for (i, &a) in axes.iter().enumerate() {
        scale[a] = scales[i];
    }
    Ok((scale, roi))
}

/// The kernel codes of the op's modes.
fn codes(r: &Resize) -> (i32, i32, i32) {
    let mode = match r.mode {
        ResizeMode::Nearest => 0,
        ResizeMode::Linear => 1,
        ResizeMode::Cubic => 2,
    };
    let coord = match r.coordinate {
        CoordinateMode::HalfPixel => 0,
        CoordinateMode::HalfPixelSymmetric => 1,
        CoordinateMode::PytorchHalfPixel => 2,
        CoordinateMode::AlignCorners => 3,
        CoordinateMode::Asymmetric => 4,
        CoordinateMode::TfCropAndResize => 5,
    };
    let nearest = match r.nearest {
        NearestMode::RoundPreferFloor => 0,
        NearestMode::RoundPreferCeil => 1,
        NearestMode::Floor => 2,
        NearestMode::Ceil => 3,
        NearestMode::Simple => 4,
    };
    (mode, coord, nearest)
}

/// The launch geometry for input dims `dims`: the core's plan for the output
/// dims and tap counts, with this file's scales and crop boxes.
fn plan_geometry(r: &Resize, dims: &[usize], args: &ResizeArgs) -> Result<ResizeGeom, EpError> {
    if dims.len() > MAX_RANK {
        return Err(EpError::Unsupported(format!(
            "Resize of rank {} exceeds the CUDA kernels' {MAX_RANK}",
            dims.len()
        )));
    }
    let plan = r.plan(dims, args).map_err(|e| shape_err(e.to_string()))?;
    let (scales, roi) = scales_and_roi(r, dims, args)?;
    let (mode, coord, nearest) = codes(r);
    let st = strides(dims);
    let mut g = ResizeGeom {
        total: plan.output.iter().product::<usize>() as i64,
        rank: dims.len() as i32,
        mode,
        coord,
        nearest,
        exclude: r.exclude_outside as i32,
        antialias: r.antialias as i32,
        cubic_a: r.cubic_a,
        extrapolation: r.extrapolation,
        ..Default::default()
    };
    for (a, taps) in plan.axes.iter().enumerate() {
        g.ax[a] = ResizeAxis {
            scale: scales[a],
            roi0: roi[a].0,
            roi1: roi[a].1,
            input: dims[a] as i64,
            output: plan.output[a] as i64,
            stride: st[a] as i64,
            identity: (taps.taps == 1) as i32,
            taps: taps.taps as i32,
        };
    }
    Ok(g)
}

/// Resize over one dtype with a fixed entry point.
struct ResizeKernel {
    op: Resize,
    name: &'static str,
}

impl CudaKernel for ResizeKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = io.input(0)?;
        let args = self.op.args(
            |i| io.has_value(i).then(|| io.floats(i).ok()).flatten(),
            |i| io.has_value(i).then(|| io.ints(i).ok()).flatten(),
        );
        let g = plan_geometry(&self.op, &x.shape, &args)?;
        let y = io.output(0)?;
        if y.numel() as i64 != g.total
            || y.shape.iter().zip(&g.ax).any(|(&d, a)| d as i64 != a.output)
        {
            return Err(shape_err(format!("Resize output {:?} does not match the plan", y.shape)));
        }
        if g.total == 0 || x.numel() == 0 {
            return Ok(());
        }
        let f = gpu.function(Kernel::Resize, self.name)?;
        let args = Args::new().push(g).push(io.in_ptr(0)?).push(io.out_ptr(0)?);
        // SAFETY: matches `resize_interp_T` / `resize_nearest_wN(ResizeGeom,
        // const T*, T*)`; every input index is clamped into X's dims, and Y was
        // checked to hold `total` elements.
        unsafe { args.launch(gpu, &f, gpu.grid(g.total as u64)) }
    }
}

fn build_resize(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let dtype = spec.input_dtype(0)?;
    let r = spec.op_as::<Resize>()?.clone();
    let float = is_float(dtype);
    let copy = r.mode == ResizeMode::Nearest
        && r.coordinate != CoordinateMode::TfCropAndResize
        && (!float || !r.exclude_outside);
    let name = if copy {
        match width(dtype) {
            Some(1) => "resize_nearest_w1",
            Some(2) => "resize_nearest_w2",
            Some(4) => "resize_nearest_w4",
            Some(8) => "resize_nearest_w8",
            _ => return Err(unsupported(&spec.node.op_type, dtype)),
        }
    } else if float {
        entry("resize_interp", dtype)?
    } else {
        // Interpolating integers would need the spec's saturating casts: nearest only.
        return Err(unsupported(&spec.node.op_type, dtype));
    };
    Ok(Box::new(ResizeKernel { op: r, name }))
}

/// Registers Resize and Upsample.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("Resize", build_resize);
    r.register("Upsample", build_resize);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_geometry_struct_has_the_size_of_its_cuda_twin() {
        // A 48-byte header and eight 56-byte axes.
        assert_eq!(std::mem::size_of::<ResizeAxis>(), 56);
        assert_eq!(std::mem::size_of::<ResizeGeom>(), 48 + 8 * 56);
    }

    /// resize.cu's `source`, `prepare` and `weight` for one axis, transcribed:
    /// the clamped index and f32 weight of every tap, and whether `y` is
    /// outside the crop box.
    fn kernel_taps(g: &ResizeGeom, a: &ResizeAxis, y: f64) -> (Vec<u32>, Vec<f32>, bool) {
        let (inw, outw) = (a.input as f64, a.scale * a.input as f64);
        let mut outside = false;
        let x = match g.coord {
            3 if outw == 1.0 => 0.0,
            3 => y * (inw - 1.0) / (outw - 1.0),
            4 => y / a.scale,
            5 => {
                let span = a.roi1 - a.roi0;
                let lead = if outw == 1.0 {
                    span * (inw - 1.0) / 2.0
                } else {
                    y * span * (inw - 1.0) / (outw - 1.0)
                };
                let x = lead + a.roi0 * (inw - 1.0);
                outside = x < 0.0 || x > inw - 1.0;
                x
            }
            2 if outw == 1.0 => -0.5,
            1 => inw / 2.0 * (1.0 - a.output as f64 / outw) + (y + 0.5) / a.scale - 0.5,
            _ => (y + 0.5) / a.scale - 0.5,
        };
        let base = x.floor();
        let exact = x == base;
        let r = if exact { 1.0 } else { x - base };
        let taps = a.taps as i64;
        let start = base as i64 - taps / 2 + if exact { 0 } else { 1 };
        let second = r == 1.0
            || match g.nearest {
                0 => r > 0.5,
                1 => r >= 0.5,
                2 => false,
                3 => true,
                _ => a.scale < 1.0,
            };
        let cubic = |x: f64, a: f64| {
            let x = x.abs();
            if x <= 1.0 {
                (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
            } else if x < 2.0 {
                a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
            } else {
                0.0
            }
        };
        let raw = |t: i64| -> f64 {
            let sc = a.scale.min(1.0);
            let (a, q, tf) = (g.cubic_a, 1.0 - r, t as f64);
            match (g.mode, g.antialias != 0) {
                (0, _) => ((t == 1) == second) as u8 as f64,
                (1, true) => {
                    let s0 = (-1.0 / sc).floor() + 1.0;
                    (1.0 - ((s0 + tf - r) * sc).abs()).clamp(0.0, 1.0)
                }
                (1, false) => [1.0 - r, r][t as usize],
                (_, true) => cubic(sc * ((-2.0 / sc).floor() + 1.0 + tf - r), a),
                _ => [
                    ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                    ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                    ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0,
                    ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a,
                ][t as usize],
            }
        };
        let norm = g.antialias != 0 && g.mode != 0;
        let s1: f64 = if norm { (0..taps).map(raw).sum() } else { 1.0 };
        let inside = |t: i64| (0..a.input).contains(&(start + t));
        let s2: f64 = (0..taps)
            .map(|t| if inside(t) { if norm { raw(t) / s1 } else { raw(t) } } else { 0.0 })
            .sum();
        let weight = |t: i64| {
            let mut c = raw(t);
            if norm {
                c /= s1;
            }
            if g.exclude != 0 {
                if !inside(t) {
                    c = 0.0;
                } else if s2 != 0.0 {
                    c /= s2;
                }
            }
            c as f32
        };
        let index = (0..taps).map(|t| (start + t).clamp(0, a.input - 1) as u32).collect();
        (index, (0..taps).map(weight).collect(), outside)
    }

    #[test]
    fn the_kernel_tap_formulas_reproduce_the_core_plan_for_every_mode() {
        let modes = [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic];
        let coords = [
            CoordinateMode::HalfPixel,
            CoordinateMode::HalfPixelSymmetric,
            CoordinateMode::PytorchHalfPixel,
            CoordinateMode::AlignCorners,
            CoordinateMode::Asymmetric,
            CoordinateMode::TfCropAndResize,
        ];
        let nearests = [
            NearestMode::RoundPreferFloor,
            NearestMode::RoundPreferCeil,
            NearestMode::Floor,
            NearestMode::Ceil,
            NearestMode::Simple,
        ];
        let mut checked = 0;
        let mut configs = Vec::new();
        for &m in &modes {
            for &c in &coords {
                for &n in &nearests {
                    for (aa, ex) in [(false, false), (true, false), (false, true), (true, true)] {
                        configs.push((m, c, n, aa, ex));
                    }
                }
            }
        }
        for (mode, coordinate, nearest, antialias, exclude) in configs {
            let r = Resize {
                mode,
                coordinate,
                nearest,
                cubic_a: -0.5,
                exclude_outside: exclude,
                extrapolation: 0.0,
                antialias,
                axes: Some(vec![1]),
                policy: AspectPolicy::Stretch,
                slots: [Some(1), Some(2), Some(3)],
                scales_attr: None,
            };
            for input in [1usize, 4, 5, 8] {
                for (scales, sizes) in [
                    (Some(vec![0.5]), None),
                    (Some(vec![0.6]), None),
                    (Some(vec![1.7]), None),
                    (Some(vec![3.0]), None),
                    (None, Some(vec![3])),
                    (None, Some(vec![7])),
                ] {
                    let args = ResizeArgs { roi: Some(vec![-0.2, 1.3]), scales, sizes };
                    let dims = [2, input];
                    let plan = r.plan(&dims, &args).unwrap();
                    let g = plan_geometry(&r, &dims, &args).unwrap();
                    assert_eq!(g.ax[0].identity, 1);
                    let (a, t) = (&g.ax[1], &plan.axes[1]);
                    if a.identity == 1 {
                        continue;
                    }
                    for y in 0..plan.output[1] {
                        let (index, weight, outside) = kernel_taps(&g, a, y as f64);
                        let k = y * t.taps..(y + 1) * t.taps;
                        let ctx = format!("{r:?} {dims:?} {args:?} y={y}");
                        assert_eq!(outside, t.outside[y], "{ctx}");
                        assert_eq!(index, t.index[k.clone()], "{ctx}");
                        assert_eq!(weight, t.weight[k], "{ctx}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    #[test]
    fn sizes_with_a_policy_give_every_resized_axis_one_scale() {
        let mut r = Resize {
            mode: ResizeMode::Linear,
            coordinate: CoordinateMode::HalfPixel,
            nearest: NearestMode::RoundPreferFloor,
            cubic_a: -0.75,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
            axes: Some(vec![-1, 2]),
            policy: AspectPolicy::NotSmaller,
            slots: [Some(1), Some(2), Some(3)],
            scales_attr: None,
        };
        let args = ResizeArgs { sizes: Some(vec![8, 7]), ..Default::default() };
        let (s, _) = scales_and_roi(&r, &[1, 1, 4, 4], &args).unwrap();
        assert_eq!(s, vec![1.0, 1.0, 2.0, 2.0]);
        r.policy = AspectPolicy::NotLarger;
        let (s, _) = scales_and_roi(&r, &[1, 1, 4, 4], &args).unwrap();
        assert_eq!(s, vec![1.0, 1.0, 1.75, 1.75]);
        assert_eq!(plan_geometry(&r, &[1, 1, 4, 4], &args).unwrap().ax[2].output, 7);
    }
}
