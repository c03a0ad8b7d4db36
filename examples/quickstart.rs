//! Onyx in a screenful: load the bundled classifier, run a batch of two
//! images on the CPU, print each image's most likely class and what the run
//! held in memory.
//!
//!     cargo run --example quickstart

use onyx::{Session, Tensor, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let model = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/tiny_cnn.onnx");
    let session = Session::builder().with_device("cpu").commit_from_file(model)?;
    for input in session.inputs() {
        let (dtype, shape) = (input.dtype(), input.shape());
        println!(
            "input  {}: {} {}",
            input.name,
            dtype.ok_or("no dtype")?,
            shape.ok_or("no shape")?
        );
    }

    // Two 64×64 RGB images: a gradient and its mirror.
    let pixels: Vec<f32> = (0..2 * 3 * 64 * 64).map(|i| (i % 64) as f32 / 64.0).collect();
    let mirrored: Vec<f32> = pixels.chunks(64).flat_map(|row| row.iter().rev().copied()).collect();
    let batch = [&pixels[..3 * 64 * 64], &mirrored[3 * 64 * 64..]].concat();
    let x = Tensor::from_vec(vec![2, 3, 64, 64], batch)?;

    let out = session.run([("input", Value::Tensor(x))])?;
    let probs = out.get("probabilities").and_then(Value::as_tensor).ok_or("no probabilities")?;
    for (i, row) in probs.to_f64_vec()?.chunks(10).enumerate() {
        let (class, p) =
            row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).ok_or("an empty row")?;
        println!("image {i}: class {class} (p = {p:.3})");
    }
    let m = &out.memory;
    println!(
        "peak {} KiB, {} KiB without release, live-set bound {} KiB, {} buffers released early",
        m.peak_bytes / 1024,
        m.no_release_bytes / 1024,
        m.live_set_bound_bytes / 1024,
        m.releases
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_quickstart_runs() {
        super::main().unwrap();
    }
}
