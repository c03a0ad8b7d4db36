//! Every op Onyx knows: each family module registers its own.

use super::registry::OpRegistry;
use super::{
    attention, causal, control, conv, domains, einsum, elementwise, generate, indexing, linalg,
    looping, microsoft, movement, nn, norm, pad, quant, recurrent, reduce, resize, scatter, select,
    sequence, shape, signal, spatial, stats, strings, vision,
};

impl OpRegistry {
    /// Every op Onyx knows, one family module at a time.
    pub fn standard() -> Self {
        let mut r = Self::new();
        elementwise::register_all(&mut r);
        linalg::register_all(&mut r);
        conv::register_all(&mut r);
        nn::register_all(&mut r);
        norm::register_all(&mut r);
        shape::register_all(&mut r);
        movement::register_all(&mut r);
        indexing::register_all(&mut r);
        pad::register_all(&mut r);
        resize::register_all(&mut r);
        recurrent::register_all(&mut r);
        generate::register_all(&mut r);
        reduce::register_all(&mut r);
        control::register_all(&mut r);
        looping::register_all(&mut r);
        causal::register_all(&mut r);
        strings::register_all(&mut r);
        sequence::register_all(&mut r);
        attention::register_all(&mut r);
        quant::register_all(&mut r);
        scatter::register_all(&mut r);
        select::register_all(&mut r);
        einsum::register_all(&mut r);
        stats::register_all(&mut r);
        spatial::register_all(&mut r);
        signal::register_all(&mut r);
        vision::register_all(&mut r);
        domains::register_all(&mut r);
        microsoft::register_all(&mut r);
        r
    }
}
