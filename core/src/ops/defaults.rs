//! The ONNX attribute defaults that more than one place reads: the op
//! builders, the fusions that read a node's attributes before it becomes an
//! op, and the activations of FusedConv and the recurrent ops. Each value is
//! the spec's, written here once.

macro_rules! defaults {
    ($($(#[$doc:meta])* $name:ident: $op:literal . $attr:literal = $value:expr;)*) => {
        $(
            #[doc = concat!("`", $op, "`'s `", $attr, "` default.")]
            $(#[$doc])*
            pub const $name: f32 = $value;
        )*

        /// Every default, as `(op, attribute, value)`.
        pub const TABLE: &[(&str, &str, f32)] = &[$(($op, $attr, $value),)*];
    };
}

defaults! {
    LEAKY_RELU_ALPHA: "LeakyRelu"."alpha" = 0.01;
    ELU_ALPHA: "Elu"."alpha" = 1.0;
    SELU_ALPHA: "Selu"."alpha" = 1.673_263_2;
    SELU_GAMMA: "Selu"."gamma" = 1.050_701;
    HARD_SIGMOID_ALPHA: "HardSigmoid"."alpha" = 0.2;
    HARD_SIGMOID_BETA: "HardSigmoid"."beta" = 0.5;
    CELU_ALPHA: "Celu"."alpha" = 1.0;
    THRESHOLDED_RELU_ALPHA: "ThresholdedRelu"."alpha" = 1.0;
    SHRINK_BIAS: "Shrink"."bias" = 0.0;
    SHRINK_LAMBD: "Shrink"."lambd" = 0.5;
    /// Also InstanceNormalization's and GroupNormalization's.
    BATCH_NORM_EPSILON: "BatchNormalization"."epsilon" = 1e-5;
    LAYER_NORM_EPSILON: "LayerNormalization"."epsilon" = 1e-5;
    /// com.microsoft's SkipLayerNormalization.
    SKIP_LAYER_NORM_EPSILON: "SkipLayerNormalization"."epsilon" = 1e-12;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_attribute_has_two_defaults() {
        for (i, a) in TABLE.iter().enumerate() {
            assert!(
                TABLE[i + 1..].iter().all(|b| (a.0, a.1) != (b.0, b.1)),
                "{}.{} twice",
                a.0,
                a.1
            );
        }
    }
}
