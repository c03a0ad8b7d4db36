// Times and checks Onyx's attention kernels (kernels/cuda/attention.cu) on
// their own, outside a session: the flash-style entry points against the
// warp-per-row kernel, which computes every score in f32, as reference.
// Built with nvcc on the GPU machine (benches/h200_cuda.sh, STEPS=attention):
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels/cuda -o /tmp/attention_harness benches/cuda/attention_harness.cu
//
// Prints one JSON line per case: microseconds per launch (the mean of 100
// back-to-back launches between two events), TFLOP/s and the largest
// difference from the reference.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cmath>
#include <random>

#include "attention.cu"

#define CHECK(x)                                                                        \
    do {                                                                                \
        cudaError_t e = (x);                                                            \
        if (e != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

typedef void (*Entry)(AttnArgs, const u16*, const u16*, const u16*, const void*, u16*);

static u16 to_half(float f, bool bf) {
    if (bf) {
        u32 x;
        memcpy(&x, &f, 4);
        x += 0x7fffu + ((x >> 16) & 1u);
        return (u16)(x >> 16);
    }
    // f32 to IEEE half, round to nearest (inputs here are normal and small).
    u32 x;
    memcpy(&x, &f, 4);
    u32 sign = (x >> 16) & 0x8000u;
    int e = (int)((x >> 23) & 0xff) - 127 + 15;
    u32 mant = x & 0x7fffffu;
    if (e <= 0) return (u16)sign;
    if (e >= 31) return (u16)(sign | 0x7bff);
    u32 h = sign | (e << 10) | (mant >> 13);
    if ((mant & 0x1fffu) > 0x1000u || ((mant & 0x1fffu) == 0x1000u && (h & 1))) ++h;
    return (u16)h;
}
static float from_half(u16 h, bool bf) {
    if (bf) {
        u32 x = (u32)h << 16;
        float f;
        memcpy(&f, &x, 4);
        return f;
    }
    u32 sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, mant = h & 0x3ff;
    u32 x;
    if (e == 0) {
        float f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    }
    x = sign | ((e - 15 + 127) << 23) | (mant << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

struct Case {
    bool bf;
    int batch, heads, q_len, kv_len, d;
    bool rank3, mask;
    bool row_mask;  // a mask row per query, [batch, 1, q, keys], as transformers' eager mask
};

static void run(const Case& c, Entry fa, Entry fa4, Entry old_tiles, Entry rows, int runs) {
    char label[128];
    snprintf(label, sizeof label, "%s_b%d_h%d_q%d_k%d_d%d%s%s", c.bf ? "bf16" : "f16", c.batch, c.heads, c.q_len,
             c.kv_len, c.d, c.rank3 ? "_rank3" : "", c.mask ? (c.row_mask ? "_rowmask" : "_mask") : "");
    // ONLY=text runs only the cases whose label holds it (for Nsight Compute).
    const char* only = getenv("ONLY");
    if (only && !strstr(label, only)) return;
    const int B = c.batch, H = c.heads, S = c.q_len, L = c.kv_len, D = c.d;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    auto fill = [&](size_t n) {
        std::vector<u16> v(n);
        for (auto& x : v) x = to_half(nd(rng), c.bf);
        return v;
    };
    const size_t nq = (size_t)B * H * S * D, nk = (size_t)B * H * L * D;
    std::vector<u16> hq = fill(nq), hk = fill(nk), hv = fill(nk);
    // A padding mask: the last eighth of each odd batch's keys is masked, as
    // BERT's `(1 - mask) * finfo.min` writes it.
    // A row mask repeats it for every query row and also masks key (7 i) mod L of row i.
    const int mrows = c.row_mask ? S : 1;
    const u16 masked = to_half(c.bf ? -3.0e38f : -65504.f, c.bf);
    std::vector<u16> hm((size_t)B * mrows * L, to_half(0.f, c.bf));
    for (int b = 0; b < B; ++b)
        for (int i = 0; i < mrows; ++i) {
            u16* row = &hm[((size_t)b * mrows + i) * L];
            if (b % 2) for (int j = L - L / 8; j < L; ++j) row[j] = masked;
            if (c.row_mask) row[(7 * i) % L] = masked;
        }
    u16 *q, *k, *v, *m, *y, *yr;
    CHECK(cudaMalloc(&q, nq * 2));
    CHECK(cudaMalloc(&k, nk * 2));
    CHECK(cudaMalloc(&v, nk * 2));
    CHECK(cudaMalloc(&m, hm.size() * 2));
    CHECK(cudaMalloc(&y, nq * 2));
    CHECK(cudaMalloc(&yr, nq * 2));
    CHECK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(m, hm.data(), hm.size() * 2, cudaMemcpyHostToDevice));

    AttnArgs a{};
    auto strides = [&](i64* s, int seq) {
        if (c.rank3) s[0] = (i64)seq * H * D, s[1] = D, s[2] = (i64)H * D;
        else s[0] = (i64)H * seq * D, s[1] = (i64)seq * D, s[2] = D;
    };
    strides(a.q_stride, S);
    strides(a.k_stride, L);
    strides(a.v_stride, L);
    strides(a.y_stride, S);
    a.m_stride[0] = (i64)mrows * L;
    a.m_stride[2] = c.row_mask ? L : 0;
    a.batch = B, a.q_heads = H, a.group = 1, a.q_len = S, a.kv_len = L, a.mask_len = L;
    a.head = D, a.v_head = D;
    a.mask_kind = c.mask ? (c.bf ? 3 : 2) : 0;
    a.scale = 1.f / sqrtf((float)D);
    const void* mp = c.mask ? (const void*)m : nullptr;

    rows<<<(unsigned)(((size_t)B * H * S + 3) / 4), 128>>>(a, q, k, v, mp, yr);
    CHECK(cudaGetLastError());
    std::vector<u16> ref(nq), out(nq);
    CHECK(cudaMemcpy(ref.data(), yr, nq * 2, cudaMemcpyDeviceToHost));
    const double flop = 4.0 * B * H * (double)S * L * D;

    struct Variant {
        const char* label;
        Entry f;
        int threads, rows_per_block;
    };
    const int wm = D == 128 ? 1 : 2;
    const char* two = c.row_mask ? "fam 2 warps" : "fa 2 warps";
    const char* four = c.row_mask ? "fam 4 warps (w4)" : "fa 4 warps (w4)";
    Variant vs[] = {
        {"mma (old)", old_tiles, 128, 64},
        {two, fa, 64, 2 * 16 * wm},
        {four, fa4, 128, 4 * 16 * wm},
    };
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (const Variant& var : vs) {
        if (!var.f) continue;
        dim3 grid((S + var.rows_per_block - 1) / var.rows_per_block, H, B);
        // The row-mask kernels stage their mask rows in dynamic shared memory.
        const int shared = var.f != old_tiles && c.row_mask ? (D <= 64 ? 2 : 1) * var.rows_per_block * 72 * 2 : 0;
        if (shared) CHECK(cudaFuncSetAttribute((const void*)var.f, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
        CHECK(cudaMemset(y, 0xff, nq * 2));
        var.f<<<grid, var.threads, shared>>>(a, q, k, v, mp, y);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(out.data(), y, nq * 2, cudaMemcpyDeviceToHost));
        double maxd = 0, maxr = 0;
        for (size_t i = 0; i < nq; ++i) {
            const double r = from_half(ref[i], c.bf), o = from_half(out[i], c.bf);
            const double dd = std::isnan(o) ? 1e30 : fabs(o - r);
            maxd = dd > maxd ? dd : maxd;
            maxr = fabs(r) > maxr ? fabs(r) : maxr;
        }
        for (int i = 0; i < 20; ++i) var.f<<<grid, var.threads, shared>>>(a, q, k, v, mp, y);
        CHECK(cudaEventRecord(e0));
        for (int i = 0; i < runs; ++i) var.f<<<grid, var.threads, shared>>>(a, q, k, v, mp, y);
        CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = ms * 1000.0 / runs;
        printf("{\"case\": \"%s\", \"kernel\": \"%s\", \"us\": %.2f, \"tflops\": %.1f, "
               "\"max_abs_diff\": %.3g, \"max_abs_ref\": %.3g}\n",
               label, var.label, us, flop / us * 1e-6, maxd, maxr);
        fflush(stdout);
    }
    cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(m), cudaFree(y), cudaFree(yr);
}

int main(int argc, char** argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 100;
    for (int bf = 0; bf < 2; ++bf) {
#define E(name) (bf ? (Entry)name##_bf16 : (Entry)name##_f16)
        const Entry rows = E(attention_rows);
        for (int s : {128, 512}) {
            run({(bool)bf, 8, 12, s, s, 64, true, true, false}, E(attention_fa64), E(attention_fa64w4), E(attention_mma64), rows, runs);
            run({(bool)bf, 8, 12, s, s, 64, true, true, true}, E(attention_fam64), E(attention_fam64w4), E(attention_mma64), rows, runs);
            run({(bool)bf, 8, 12, s, s, 64, false, false, false}, E(attention_fa64), E(attention_fa64w4), E(attention_mma64), rows, runs);
        }
        // Ragged lengths, other head sizes.
        run({(bool)bf, 2, 3, 77, 200, 64, false, true, false}, E(attention_fa64), E(attention_fa64w4), E(attention_mma64), rows, 10);
        run({(bool)bf, 2, 3, 77, 200, 64, false, true, true}, E(attention_fam64), E(attention_fam64w4), E(attention_mma64), rows, 10);
        run({(bool)bf, 2, 3, 130, 72, 32, true, true, false}, E(attention_fa32), E(attention_fa32w4), E(attention_mma32), rows, 10);
        run({(bool)bf, 2, 3, 130, 72, 32, true, true, true}, E(attention_fam32), E(attention_fam32w4), E(attention_mma32), rows, 10);
        run({(bool)bf, 8, 12, 512, 512, 128, false, true, false}, E(attention_fa128), E(attention_fa128w4), E(attention_mma128), rows, runs);
        run({(bool)bf, 8, 12, 512, 512, 128, false, true, true}, E(attention_fam128), E(attention_fam128w4), E(attention_mma128), rows, runs);
        run({(bool)bf, 1, 2, 5, 3, 128, false, false, false}, E(attention_fa128), E(attention_fa128w4), E(attention_mma128), rows, 10);
#undef E
    }
    return 0;
}
