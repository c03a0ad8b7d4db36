"""com.microsoft RotaryEmbedding, Attention, MultiHeadAttention and
GroupQueryAttention.

Masks never hide a whole row: onnxruntime adds mask_filter_value (-10000) to
masked scores instead of -inf, so a fully masked row's softmax depends on how
(score - 10000) rounds."""

import numpy as np

from .common import BF16, F16, F32, I32, I64, NUMPY, ORT_F32, TOL_BF16, TOL_F16, case

MAX_SEQ = 16


def rope_cache(rot_dim, t=F32):
    """cos/sin caches [MAX_SEQ, rot_dim / 2] as exporters make them (base 10000)."""
    inv = 10000.0 ** (-np.arange(0, rot_dim, 2) / rot_dim)
    ang = np.arange(MAX_SEQ)[:, None] * inv[None, :]
    return [("cos_cache", t, [MAX_SEQ, rot_dim // 2]), ("sin_cache", t, [MAX_SEQ, rot_dim // 2])], \
        {"cos_cache": np.cos(ang), "sin_cache": np.sin(ang)}


def small(shape, scale=0.5):
    return lambda rng: rng.uniform(-scale, scale, size=shape)


def rotary_cases():
    """Inputs: input (3D [B, S, N*H] or 4D [B, N, S, H]), position_ids (int64,
    [1] = offset of the first position, or [B, S]), cos_cache, sin_cache."""
    b, s, n, h = 2, 3, 2, 8
    v = []

    def rope(name, t=F32, four_d=False, ids=False, inter=0, rot=0, heads=0, oracle=None):
        shape = [b, n, s, h] if four_d else [b, s, n * h]
        cache, vals = rope_cache(rot or h, t)
        pos = ("position_ids", I64, [b, s] if ids else [1])
        vals["position_ids"] = ((lambda rng: rng.integers(0, MAX_SEQ, size=[b, s])) if ids
                                else np.array([5]))
        attrs = {"interleaved": inter}
        if rot:
            attrs["rotary_embedding_dim"] = rot
        if heads:
            attrs["num_heads"] = heads
        tol = {F16: TOL_F16, BF16: TOL_BF16}.get(t, (1e-5, 1e-5))
        kw = {"oracle": oracle} if oracle else {}
        v.append(case(name, "RotaryEmbedding", [("input", t, shape), pos] + cache, [("output", t)],
                      attrs, values=vals, tol=tol, **kw))

    rope("rotary_embedding_3d_position_offset")
    rope("rotary_embedding_3d_interleaved_position_offset", inter=1)
    rope("rotary_embedding_3d_position_ids_2d", ids=True)
    rope("rotary_embedding_3d_interleaved_position_ids_2d", ids=True, inter=1)
    rope("rotary_embedding_3d_num_heads_full_rotary", ids=True, heads=n)
    rope("rotary_embedding_4d_bnsh_position_ids_2d", four_d=True, ids=True)
    rope("rotary_embedding_4d_bnsh_interleaved_position_offset", four_d=True, inter=1)
    rope("rotary_embedding_3d_partial_rotary_dim", ids=True, rot=4, heads=n)
    rope("rotary_embedding_3d_interleaved_partial_rotary_dim", rot=4, heads=n, inter=1)
    rope("rotary_embedding_4d_partial_rotary_dim", four_d=True, ids=True, rot=4, heads=n)
    rope("rotary_embedding_f16_3d_position_ids_2d", F16, ids=True)
    rope("rotary_embedding_f16_4d_interleaved_position_offset", F16, four_d=True, inter=1)
    rope("rotary_embedding_f16_3d_partial_rotary_dim", F16, rot=4, heads=n)
    rope("rotary_embedding_bf16_3d_position_ids_2d", BF16, ids=True, oracle=ORT_F32)
    return v


def attention_cases():
    """Attention: input [B, S, D], weights [D, Hq + Hk + Hv] (Q, K, V stacked
    on the second axis), bias, mask_index, past [2, B, N, P, H], attention_bias;
    outputs output and present [2, B, N, P + S, H]."""
    b, s, n, d = 2, 4, 2, 8
    v = []

    def att(name, s=s, mask=None, past=0, qkv=None, abias=None, attrs=None, bias=True, t=F32):
        width = sum(qkv) if qkv else 3 * 8
        ins = [("input", t, [b, s, d]), ("weights", t, [d, width]),
               ("bias", t, [width]) if bias else None]
        vals = {"weights": small([d, width])}
        total = past + s
        if mask is not None:
            mask = np.array(mask, np.int32)
            vals["mask_index"] = mask
        ins.append(("mask_index", I32, list(mask.shape)) if mask is not None else None)
        ins += [("past", t, [2, b, n, past, 4]) if past else None,
                ("attention_bias", t, [abias[0], abias[1], s, total]) if abias else None]
        while ins[-1] is None:
            ins.pop()
        a = {"num_heads": n, **(attrs or {})}
        if qkv:
            a["qkv_hidden_sizes"] = qkv
        outs = [("output", t)] + ([("present", t)] if past else [])
        v.append(case(name, "Attention", ins, outs, a, values=vals,
                      tol=TOL_F16 if t == F16 else (1e-4, 1e-5)))

    att("attention_packed_qkv_bias")
    att("attention_no_bias", bias=False)
    att("attention_mask_1d_key_lengths", mask=[4, 2])
    att("attention_mask_1d_end_and_start_left_padding", mask=[4, 4, 0, 1])
    att("attention_mask_2d_raw", mask=[[1, 1, 1, 1], [1, 1, 0, 0]])
    att("attention_mask_2d_left_padding", mask=[[1, 1, 1, 1], [0, 0, 1, 1]])
    att("attention_mask_3d", mask=[[[1, 0, 1, 1], [0, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]],
                                   [[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]]])
    att("attention_unidirectional", attrs={"unidirectional": 1})
    att("attention_unidirectional_mask_2d", mask=[[1, 1, 1, 1], [1, 1, 1, 0]],
        attrs={"unidirectional": 1})
    att("attention_past_present_unidirectional", s=2, past=3, attrs={"unidirectional": 1})
    att("attention_past_present_decode_mask_2d", s=1, past=3, mask=[[1, 1, 1, 1], [0, 1, 1, 1]],
        attrs={"unidirectional": 1})
    att("attention_past_present_bidirectional_mask_1d", s=2, past=3, mask=[5, 4])
    att("attention_qkv_hidden_sizes_wider_v", qkv=[8, 8, 16])
    att("attention_qkv_hidden_sizes_mask_1d", qkv=[8, 8, 16], mask=[3, 4])
    att("attention_bias_4d", abias=(b, n))
    att("attention_bias_broadcast", abias=(1, 1))
    att("attention_scale", attrs={"scale": 0.1})
    att("attention_mask_filter_value", mask=[[1, 0, 1, 1], [1, 1, 0, 0]],
        attrs={"mask_filter_value": -1e9})
    att("attention_f16_unidirectional", t=F16, attrs={"unidirectional": 1})
    return v


def mha_ref(vals, n=2):
    """MultiHeadAttention with a packed [B, L, N, 2, H] key (onnxruntime's CPU
    kernel refuses packed KV): the NumPy reference checked against
    onnxruntime on the unpacked layouts in this module."""
    q = vals["query"].astype(np.float64)
    kv = vals["key"].astype(np.float64)
    b, s, _ = q.shape
    q = q.reshape(b, s, n, -1).transpose(0, 2, 1, 3)
    k, v = kv[:, :, :, 0].transpose(0, 2, 1, 3), kv[:, :, :, 1].transpose(0, 2, 1, 3)
    x = np.einsum("bnsh,bnth->bnst", q, k) / np.sqrt(q.shape[-1])
    p = np.exp(x - x.max(-1, keepdims=True))
    o = np.einsum("bnst,bnth->bnsh", p / p.sum(-1, keepdims=True), v)
    return [o.transpose(0, 2, 1, 3).reshape(b, s, -1)]


def mha_cases():
    """MultiHeadAttention: query [B, S, N*H], key/value [B, L, N*H] (value may
    be wider), bias [3 hidden], key_padding_mask int32 ([B] lengths, [B, T] or
    [B, S, T] 0/1), attention_bias [B|1, N|1, S, T], past_key/past_value
    [B, N, P, H]; outputs output, present_key, present_value [B, N, P + L, H]."""
    b, s, kl, n, h = 2, 3, 5, 2, 4
    hid = n * h
    v = []

    def mha(name, s=s, kl=kl, vh=hid, bias=False, kpm=None, abias=None, past=0, present=False,
            attrs=None, t=F32):
        ins = [("query", t, [b, s, hid]), ("key", t, [b, kl, hid]), ("value", t, [b, kl, vh]),
               ("bias", t, [2 * hid + vh]) if bias else None]
        vals = {}
        if kpm is not None:
            kpm = np.array(kpm, np.int32)
            ins.append(("key_padding_mask", I32, list(kpm.shape)))
            vals["key_padding_mask"] = kpm
        else:
            ins.append(None)
        ins.append(("attention_bias", t, [abias[0], abias[1], s, past + kl]) if abias else None)
        if past:
            ins += [("past_key", t, [b, n, past, h]), ("past_value", t, [b, n, past, h])]
        while ins[-1] is None:
            ins.pop()
        outs = [("output", t)]
        if past or present:
            outs += [("present_key", t), ("present_value", t)]
        v.append(case(name, "MultiHeadAttention", ins, outs, {"num_heads": n, **(attrs or {})},
                      values=vals, tol=TOL_F16 if t == F16 else (1e-4, 1e-5)))

    mha("mha_cross_attention")
    mha("mha_cross_attention_bias", bias=True)
    mha("mha_self_attention_bias", kl=s, bias=True)
    mha("mha_wider_value", vh=12, bias=True)
    mha("mha_key_padding_mask_1d_lengths", kpm=[5, 3])
    mha("mha_key_padding_mask_2d", kpm=[[1, 1, 1, 1, 1], [1, 1, 0, 1, 0]])
    mha("mha_key_padding_mask_3d", kpm=[[[1, 1, 1, 0, 1], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]],
                                        [[0, 1, 1, 0, 1], [1, 1, 0, 1, 0], [0, 0, 0, 0, 1]]])
    mha("mha_attention_bias_4d", abias=(b, n))
    mha("mha_attention_bias_broadcast_heads", abias=(b, 1))
    mha("mha_attention_bias_broadcast_batch", abias=(1, n))
    mha("mha_unidirectional_self_attention", kl=s, attrs={"unidirectional": 1})
    mha("mha_scale", attrs={"scale": 0.2})
    mha("mha_present_without_past", present=True)
    mha("mha_past_present", kl=s, bias=True, past=4)
    mha("mha_past_present_unidirectional", kl=s, past=4, attrs={"unidirectional": 1})
    mha("mha_past_present_decode", s=1, kl=1, bias=True, past=4)
    mha("mha_past_present_decode_key_padding_mask_2d", s=1, kl=1, past=4,
        kpm=[[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    mha("mha_f16_cross_attention_bias", bias=True, t=F16)
    mha("mha_f16_past_present_decode", s=1, kl=1, past=4, t=F16)
    v.append(case("mha_packed_kv", "MultiHeadAttention",
                  [("query", F32, [b, s, hid]), ("key", F32, [b, kl, n, 2, h])], [("output", F32)],
                  {"num_heads": n}, oracle=NUMPY, ref=mha_ref, tol=(1e-4, 1e-5)))
    return v


def gqa_cases():
    """GroupQueryAttention: query [B, S, N*H] (or packed [B, S, (N + 2 KV) H]
    with key/value omitted), key/value [B, S, KV*H], past_key/past_value
    [B, KV, P, H] (BNSH), seqlens_k int32 [B] = total length - 1 per batch
    entry, total_sequence_length int32 scalar, cos_cache/sin_cache
    [max, H/2] with do_rotary; outputs output, present_key/present_value
    [B, KV, max(P, total), H]. onnxruntime's CPU kernel needs H % 16 == 0 for
    rotary, batch 1 for several new tokens on a past, float32 or float16.
    Past rows beyond a batch entry's own past length are zero, since present
    rows past its total length are unspecified (onnxruntime writes zeros)."""
    n, kv, h = 4, 2, 16
    v = []

    def gqa(name, s, past, b=2, seqlens=None, cap=None, packed=False, rotary=False, nkv=kv,
            attrs=None, t=F32, oracle=None, positions=None, bias=None, sink=False):
        seqlens = np.array(seqlens if seqlens is not None else [past + s - 1] * b, np.int32)
        total = int(seqlens.max()) + 1
        with_past = past > 0 or cap is not None
        cap = past if cap is None else cap
        vals = {"seqlens_k": seqlens, "total_sequence_length": np.array(total, np.int32)}
        if packed:
            ins = [("query", t, [b, s, (n + 2 * nkv) * h]), None, None]
        else:
            ins = [("query", t, [b, s, n * h]), ("key", t, [b, s, nkv * h]),
                   ("value", t, [b, s, nkv * h])]
        if with_past:
            ins += [("past_key", t, [b, nkv, cap, h]), ("past_value", t, [b, nkv, cap, h])]
            keep = (np.arange(cap)[None, :] < (seqlens + 1 - s)[:, None])[:, None, :, None]
            vals["past_key"] = vals["past_value"] = \
                lambda rng: rng.uniform(-2, 2, size=[b, nkv, cap, h]) * keep
        else:
            ins += [None, None]
        ins += [("seqlens_k", I32, [b]), ("total_sequence_length", I32, [])]
        a = {"num_heads": n, "kv_num_heads": nkv, **(attrs or {})}
        if rotary:
            cache, cv = rope_cache(h, t)
            ins += cache
            vals.update(cv)
            a["do_rotary"] = 1
        else:
            ins += [None, None]
        # The newer inputs: position_ids [B, S] (int64), attention_bias
        # [B or 1, N or 1, S, total] and head_sink [N].
        if positions is not None:
            ins.append(("position_ids", I64, [b, s]))
            vals["position_ids"] = np.array(positions, np.int64).reshape(b, s)
        else:
            ins.append(None)
        ins.append(("attention_bias", t, [*bias, s, total]) if bias else None)
        ins.append(("head_sink", t, [n]) if sink else None)
        while ins and ins[-1] is None:
            ins.pop()
        outs = [("output", t), ("present_key", t), ("present_value", t)]
        tol = {F16: TOL_F16, BF16: TOL_BF16}.get(t, (1e-4, 1e-5))
        v.append(case(name, "GroupQueryAttention", ins, outs, a, values=vals, tol=tol,
                      **({"oracle": oracle} if oracle else {})))

    gqa("gqa_prompt_no_past", 4, 0)
    gqa("gqa_prompt_empty_past", 4, 0, cap=0)
    gqa("gqa_decode_past_5", 1, 5)
    gqa("gqa_decode_ragged_seqlens", 1, 5, seqlens=[5, 2])
    gqa("gqa_decode_shared_buffer", 1, 5, cap=8)
    gqa("gqa_decode_shared_buffer_ragged", 1, 5, cap=8, seqlens=[5, 3])
    gqa("gqa_chunk_on_past_batch_1", 3, 4, b=1)
    gqa("gqa_multi_query_decode", 1, 4, nkv=1)
    gqa("gqa_rotary_prompt", 4, 0, rotary=True)
    gqa("gqa_rotary_interleaved_prompt", 4, 0, rotary=True, attrs={"rotary_interleaved": 1})
    gqa("gqa_rotary_decode", 1, 5, rotary=True)
    gqa("gqa_rotary_decode_ragged_seqlens", 1, 5, rotary=True, seqlens=[5, 2])
    gqa("gqa_packed_qkv_prompt", 4, 0, packed=True)
    gqa("gqa_packed_qkv_rotary_decode", 1, 3, packed=True, rotary=True)
    gqa("gqa_local_window_prompt", 6, 0, attrs={"local_window_size": 2})
    gqa("gqa_local_window_decode", 1, 6, attrs={"local_window_size": 3})
    gqa("gqa_softcap_prompt", 4, 0, attrs={"softcap": 2.0})
    gqa("gqa_scale_decode", 1, 3, attrs={"scale": 0.3})
    gqa("gqa_f16_prompt", 4, 0, t=F16)
    gqa("gqa_f16_rotary_decode", 1, 5, rotary=True, t=F16)
    gqa("gqa_f16_decode_shared_buffer_ragged", 1, 5, cap=8, seqlens=[5, 3], t=F16)
    gqa("gqa_bf16_decode", 1, 5, t=BF16, oracle=ORT_F32)
    # The schema's later inputs and attributes (onnxruntime-genai's builder
    # writes twelve input slots).
    gqa("gqa_rotary_decode_position_ids", 1, 5, rotary=True, positions=[2, 7])
    gqa("gqa_rotary_chunk_position_ids", 3, 4, b=1, rotary=True, positions=[1, 3, 9])
    gqa("gqa_attention_bias_prompt", 4, 0, bias=[2, 4])
    gqa("gqa_attention_bias_broadcast_decode", 1, 5, cap=8, bias=[1, 1])
    gqa("gqa_softcap_then_attention_bias_prompt", 4, 0, bias=[1, 4], attrs={"softcap": 1.0})
    gqa("gqa_head_sink_prompt", 4, 0, sink=True)
    gqa("gqa_head_sink_local_window_decode", 1, 6, sink=True, attrs={"local_window_size": 3})
    gqa("gqa_smooth_softmax_prompt", 4, 0, attrs={"smooth_softmax": 1})
    gqa("gqa_not_causal_prompt", 4, 0, attrs={"causal": 0})
    gqa("gqa_not_causal_chunk_on_past", 2, 3, b=1, attrs={"causal": 0})
    gqa("gqa_f16_head_sink_bias_decode", 1, 5, t=F16, sink=True, bias=[2, 1])
    return v
