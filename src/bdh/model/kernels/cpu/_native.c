/* Fused element-wise loops of a BDH layer on the CPU (loaded by bdh/model/kernels/cpu/native.py with ctypes).
 *
 * Each loop reads its inputs once and writes its outputs once, in fp32 arithmetic, rounding a bf16 result
 * once (to nearest even, as PyTorch does). "Rows" are the (B, h, T) rows of N neurons: contiguous tensors for
 * the rotation and the recurrent step, rows at strides of their own for the gate (below). The tables are cos
 * and sin of the rotation angle per (t, pair), (T, N / 2) fp32. A pair is (2k, 2k + 1) for the interleaved
 * layout (layout 1, the official RoPE) and (k, k + N / 2) for the halves layout (layout 2, the standard RoPE).
 * Each loop has a PyTorch reference it is tested against (tests/model/test_native.py); the equations are those
 * of bdh/model/bdh.py (paper Eq. 8).
 *
 * Threads: OpenMP, with the count passed by the caller (PyTorch's); on Linux the library shares PyTorch's
 * OpenMP runtime (same soname), so the two do not compete for cores. */
#ifdef BDH_PYTHON_MODULE
#include <Python.h> /* first, as Python asks */
#endif
#include <stdint.h>
#include <stdlib.h>

typedef uint16_t bf16;
typedef int64_t idx; /* sizes and indices: 64 bits everywhere (C long is 32 bits on Windows) */

/* the hot inner loops are compiled for several instruction sets and picked at load time */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MULTIVERSION
#endif

static inline float bf16_f32(bf16 v) {
    union { uint32_t u; float f; } c;
    c.u = (uint32_t)v << 16;
    return c.f;
}

static inline bf16 f32_bf16(float f) {
    union { uint32_t u; float f; } c;
    c.f = f;
    uint32_t u = c.u;
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* round to nearest, ties to even */
    return (bf16)((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rounded); /* NaN: PyTorch's quiet NaN */
}

static inline float ld_f32(const float *p, idx i) { return p[i]; }
static inline float ld_bf16(const bf16 *p, idx i) { return bf16_f32(p[i]); }
static inline void st_f32(float *p, idx i, float v) { p[i] = v; }
static inline void st_bf16(bf16 *p, idx i, float v) { p[i] = f32_bf16(v); }
static inline float relu(float v) { return v > 0.0f ? v : 0.0f; }

/* One row of x = ReLU(h) and xr = R x, pair k at (I, J): LAY il (2k, 2k + 1) or hv (k, k + half). */
#define RELU_ROPE_ROW(T, SUF, LAY, I, J)                                                                       \
    MULTIVERSION static void relu_rope_row_##LAY##_##SUF(const T *restrict h, T *restrict x, T *restrict xr,    \
                                                         const float *restrict c, const float *restrict s,      \
                                                         idx half) {                                          \
        for (idx k = 0; k < half; ++k) {                                                                      \
            float a = relu(ld_##SUF(h, I)), b = relu(ld_##SUF(h, J));                                          \
            st_##SUF(x, I, a);                                                                                 \
            st_##SUF(x, J, b);                                                                                 \
            st_##SUF(xr, I, a * c[k] - b * s[k]);                                                              \
            st_##SUF(xr, J, a * s[k] + b * c[k]);                                                              \
        }                                                                                                      \
    }

/* One row of the backward: dh = [x > 0] (gx + R^T gxr), R^T the rotation by minus the angle. */
#define RELU_ROPE_BACK_ROW(T, SUF, LAY, I, J)                                                                  \
    MULTIVERSION static void relu_rope_back_row_##LAY##_##SUF(                                                 \
        const T *restrict x, const T *restrict gx, const T *restrict gxr, T *restrict dh,                      \
        const float *restrict c, const float *restrict s, idx half) {                                         \
        for (idx k = 0; k < half; ++k) {                                                                      \
            float ga = ld_##SUF(gxr, I), gb = ld_##SUF(gxr, J);                                                \
            float da = ld_##SUF(gx, I) + (ga * c[k] + gb * s[k]);                                              \
            float db = ld_##SUF(gx, J) + (gb * c[k] - ga * s[k]);                                              \
            st_##SUF(dh, I, ld_##SUF(x, I) > 0.0f ? da : 0.0f);                                                \
            st_##SUF(dh, J, ld_##SUF(x, J) > 0.0f ? db : 0.0f);                                                \
        }                                                                                                      \
    }

/* rows (B h T) of N neurons, row r at position t = r % t_len; layout 1: interleaved pairs, else halves */
#define RELU_ROPE(T, SUF)                                                                                      \
    RELU_ROPE_ROW(T, SUF, il, 2 * k, 2 * k + 1)                                                                \
    RELU_ROPE_ROW(T, SUF, hv, k, k + half)                                                                     \
    RELU_ROPE_BACK_ROW(T, SUF, il, 2 * k, 2 * k + 1)                                                           \
    RELU_ROPE_BACK_ROW(T, SUF, hv, k, k + half)                                                                \
    void bdh_relu_rope_##SUF(const T *h, T *x, T *xr, const float *cos, const float *sin, idx rows, idx t_len, \
                             idx N, int layout, int threads) {                                                \
        _Pragma("omp parallel for num_threads(threads) schedule(static)") for (idx r = 0; r < rows; ++r) {   \
            idx o = r * N, t = (r % t_len) * (N / 2);                                                         \
            if (layout == 1)                                                                                   \
                relu_rope_row_il_##SUF(h + o, x + o, xr + o, cos + t, sin + t, N / 2);                         \
            else                                                                                               \
                relu_rope_row_hv_##SUF(h + o, x + o, xr + o, cos + t, sin + t, N / 2);                         \
        }                                                                                                      \
    }                                                                                                          \
    void bdh_relu_rope_back_##SUF(const T *x, const T *gx, const T *gxr, T *dh, const float *cos,              \
                                  const float *sin, idx rows, idx t_len, idx N, int layout, int threads) {   \
        _Pragma("omp parallel for num_threads(threads) schedule(static)") for (idx r = 0; r < rows; ++r) {   \
            idx o = r * N, t = (r % t_len) * (N / 2);                                                         \
            if (layout == 1)                                                                                   \
                relu_rope_back_row_il_##SUF(x + o, gx + o, gxr + o, dh + o, cos + t, sin + t, N / 2);          \
            else                                                                                               \
                relu_rope_back_row_hv_##SUF(x + o, gx + o, gxr + o, dh + o, cos + t, sin + t, N / 2);          \
        }                                                                                                      \
    }

/* Dropout draws: entry i of a tensor gets the 16-bit draw (w >> 16 (i mod 4)) mod 2^16 of the word
 * w = splitmix64 output number i / 4 + 1 of the stream seeded with `seed` (Steele et al. 2014), i.e.
 * mix64(seed + (i / 4 + 1) * golden): computable anywhere, in any order, by any thread. It is dropped when
 * the draw is below `drop` = round(p 2^16). bdh/model/kernels/pytorch/dropout.py has the same stream in NumPy. */
#define GOLDEN 0x9e3779b97f4a7c15ull
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline int dropped(uint64_t seed, uint32_t drop, idx i) {
    uint64_t w = mix64(seed + ((uint64_t)(i >> 2) + 1u) * GOLDEN);
    return (uint32_t)((w >> ((i & 3) * 16)) & 0xffffu) < drop;
}

/* entries per chunk whose draws are made at once; the 16-bit draws of a word, lowest bits first, are the
 * 16-bit halves of its memory in little-endian order (elsewhere the draws are made one at a time) */
#define CHUNK 1024
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LITTLE_ENDIAN_WORDS 1
#else
#define LITTLE_ENDIAN_WORDS 0
#endif

/* Rows of N neurons, (B, H, T) of them, each tensor with its own strides (in elements) for b, h and t and its
 * N entries contiguous: head-major (B, H, T, N) tensors and the heads-outer (H, B, T, N) layout of the per-head
 * products (bdh/model/kernels/dispatch.py) are both read and written in place. Row r is (b, h, t) of the logical
 * (B, H, T, N) shape, so entry i = r N + j has the same index (and the same dropout draw) in every layout. */
static inline idx row_at(const idx *strides, idx q, idx heads, idx len) { /* row q = (b, h, t) */
    return q / (heads * len) * strides[0] + q / len % heads * strides[1] + q % len * strides[2];
}

/* The gate y = ReLU(z) * keep * x over entries [i0, i0 + n) of the tensor (one row); keep is 0 where dropout
 * drops (drop = 0: none). r, when given, receives ReLU(z) * keep: the backward's mask and factor. */
#define GATE(T, SUF)                                                                                           \
    MULTIVERSION static void gate_block_##SUF(const T *restrict z, const T *restrict x, uint64_t seed,         \
                                              uint32_t drop, T *restrict y, T *restrict r, idx i0, idx n) {    \
        idx i = 0;                                                                                             \
        if (!drop && !r)                                                                                       \
            for (; i < n; ++i) st_##SUF(y, i, relu(ld_##SUF(z, i)) * ld_##SUF(x, i));                          \
        else if (drop && r && LITTLE_ENDIAN_WORDS && i0 % 4 == 0) {                                            \
            union { uint64_t w[CHUNK / 4]; uint16_t d[CHUNK]; } draws; /* a chunk's draws, made then used */   \
            for (; i < n; i += CHUNK) {                                                                        \
                idx m = n - i < CHUNK ? n - i : CHUNK;                                                         \
                uint64_t k0 = (uint64_t)((i0 + i) >> 2) + 1u;                                                  \
                for (idx k = 0; k < (m + 3) / 4; ++k) draws.w[k] = mix64(seed + (k0 + (uint64_t)k) * GOLDEN);  \
                for (idx j = 0; j < m; ++j) {                                                                  \
                    float rz = draws.d[j] < drop ? 0.0f : relu(ld_##SUF(z, i + j));                            \
                    st_##SUF(y, i + j, rz * ld_##SUF(x, i + j));                                               \
                    st_##SUF(r, i + j, rz);                                                                    \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        for (; i < n; ++i) { /* any other case: one draw at a time */                                          \
            float rz = drop && dropped(seed, drop, i0 + i) ? 0.0f : relu(ld_##SUF(z, i));                      \
            st_##SUF(y, i, rz * ld_##SUF(x, i));                                                               \
            if (r) st_##SUF(r, i, rz);                                                                         \
        }                                                                                                      \
    }                                                                                                          \
    /* backward from r = ReLU(z) * keep (or z itself without dropout): dz = [r > 0] g x, dx = g ReLU(r) */     \
    MULTIVERSION static void gate_back_block_##SUF(const T *g, const T *r, const T *x, T *dz, T *dx, idx n) { \
        for (idx i = 0; i < n; ++i) {                                                                         \
            float gi = ld_##SUF(g, i), ri = ld_##SUF(r, i);                                                    \
            if (dz) st_##SUF(dz, i, ri > 0.0f ? gi * ld_##SUF(x, i) : 0.0f);                                   \
            if (dx) st_##SUF(dx, i, gi * relu(ri));                                                            \
        }                                                                                                      \
    }                                                                                                          \
    /* shape: B, H, T, N; strides: 3 per tensor (b, h, t) for z, x, y, r in this order */                      \
    void bdh_gate_##SUF(const T *z, const T *x, uint64_t seed, uint32_t drop, T *y, T *r, const idx *shape,  \
                        const idx *st, int threads) {                                                          \
        idx heads = shape[1], len = shape[2], n = shape[3], rows = shape[0] * heads * len;                    \
        _Pragma("omp parallel for num_threads(threads) schedule(static)") for (idx q = 0; q < rows; ++q)      \
            gate_block_##SUF(z + row_at(st, q, heads, len), x + row_at(st + 3, q, heads, len), seed, drop,     \
                             y + row_at(st + 6, q, heads, len), r ? r + row_at(st + 9, q, heads, len) : 0,     \
                             q * n, n);                                                                        \
    }                                                                                                          \
    /* shape: B, H, T, N; strides: 3 per tensor (b, h, t) for g, r, x, dz, dx in this order */                 \
    void bdh_gate_back_##SUF(const T *g, const T *r, const T *x, T *dz, T *dx, const idx *shape, const idx *st, \
                             int threads) {                                                                    \
        idx heads = shape[1], len = shape[2], n = shape[3], rows = shape[0] * heads * len;                    \
        _Pragma("omp parallel for num_threads(threads) schedule(static)") for (idx q = 0; q < rows; ++q)      \
            gate_back_block_##SUF(g + row_at(st, q, heads, len), r + row_at(st + 3, q, heads, len),            \
                                  x + row_at(st + 6, q, heads, len),                                           \
                                  dz ? dz + row_at(st + 9, q, heads, len) : 0,                                 \
                                  dx ? dx + row_at(st + 12, q, heads, len) : 0, n);                            \
    }

/* One recurrent step (paper Eq. 8) over rows [lo, hi) of one head's fp32 state S (N x D): the read
 * a += q_i S_i (before the write) and the write S_i = u (S_i + k_i v), in one pass over S. Rows with
 * q_i = k_i = 0 and no damping are not touched. */
#define STEP(T, SUF)                                                                                           \
    MULTIVERSION static void step_rows_##SUF(const T *q, const T *k, const float *v, float *S, float *acc,     \
                                             float u, int damped, idx lo, idx hi, idx D) {                  \
        for (idx i = lo; i < hi; ++i) {                                                                       \
            float qi = ld_##SUF(q, i), ki = ld_##SUF(k, i);                                                    \
            float *row = S + i * D;                                                                            \
            if (qi != 0.0f)                                                                                    \
                for (idx d = 0; d < D; ++d) acc[d] += qi * row[d];                                            \
            if (damped)                                                                                        \
                for (idx d = 0; d < D; ++d) row[d] = u * (row[d] + ki * v[d]);                                \
            else if (ki != 0.0f)                                                                               \
                for (idx d = 0; d < D; ++d) row[d] += ki * v[d];                                              \
        }                                                                                                      \
    }                                                                                                          \
    int bdh_step_##SUF(const T *q, const T *k, const float *v, float *S, T *a, const float *u, idx B, idx H,  \
                       idx N, idx D, idx v_heads, idx parts, int threads) {                                \
        idx tasks = B * H * parts, per = (N + parts - 1) / parts;                                             \
        float *acc = (float *)calloc((size_t)(tasks * D), sizeof(float));                                      \
        if (!acc) return 1;                                                                                    \
        _Pragma("omp parallel for num_threads(threads) schedule(static)") for (idx t = 0; t < tasks; ++t) {  \
            idx bh = t / parts, p = t % parts, b = bh / H, h = bh % H;                                        \
            idx lo = p * per, hi = lo + per < N ? lo + per : N;                                               \
            const float *vb = v + (b * v_heads + (v_heads == 1 ? 0 : h)) * D;                                  \
            if (lo < hi)                                                                                       \
                step_rows_##SUF(q + bh * N, k + bh * N, vb, S + bh * N * D, acc + t * D, u ? u[h] : 1.0f,      \
                                u != 0, lo, hi, D);                                                            \
        }                                                                                                      \
        for (idx bh = 0; bh < B * H; ++bh)                                                                    \
            for (idx d = 0; d < D; ++d) {                                                                     \
                float sum = 0.0f;                                                                              \
                for (idx p = 0; p < parts; ++p) sum += acc[(bh * parts + p) * D + d];                         \
                st_##SUF(a, bh * D + d, sum);                                                                  \
            }                                                                                                  \
        free(acc);                                                                                             \
        return 0;                                                                                              \
    }

/* The delta rule's read (no gradient) over T tokens, in place on a block of columns of one head's fp32 state S
 * (N x D): a_t = q_t^T S, then S = u_t (S + k_t w_t^T) with w_t = b_t (v_t - S^T k_t) (read before write,
 * unit keys k; bdh/model/kernels/naive.py, naive_state_rule). Column d of w_t reads column d of S only, so the
 * blocks of columns are independent (no sum across threads). S is kept as s S' with a scalar s: u_t multiplies
 * s, not the rows, so a row with q_i = k_i = 0 is not touched; w_t / s is written into S' and s is folded back
 * into the rows at the end (or when it falls below DELTA_TINY). One pass over the rows per token: token t-1's
 * write of row i, then token t's reads of it. A block is DELTA_COLS columns, its sums held in registers. */
#define DELTA_TINY 1e-15f
#define DELTA_COLS 64 /* the columns of a block held in registers; a narrower last block takes the generic loop */
/* One pass over the rows for token t: token t-1's pending write (keys kp, w / s in wp), then t's sums ra = S^T q_t
 * and rk = S^T k_t. W is DELTA_COLS or the width of a narrower block. */
#define DELTA_PASS(T, SUF, W)                                                                                  \
    for (idx i = 0; i < N; ++i) {                                                                             \
        float kw = kp ? ld_##SUF(kp, i) : 0.0f, qi = ld_##SUF(qt, i), ki = ld_##SUF(kt, i);                  \
        float *restrict row = S + i * D;                                                                       \
        if (kw != 0.0f)                                                                                        \
            for (idx d = 0; d < W; ++d) row[d] += kw * wp[d];                                                 \
        if (qi != 0.0f || ki != 0.0f)                                                                          \
            for (idx d = 0; d < W; ++d) {                                                                     \
                ra[d] += qi * row[d];                                                                          \
                rk[d] += ki * row[d];                                                                          \
            }                                                                                                  \
    }
/* The block's tokens in order, with its scale s (above); S points at the block's first column. */
#define DELTA_BLOCK(T, SUF, W)                                                                                 \
    float s = 1.0f;                                                                                            \
    const T *kp = 0; /* the keys of the token whose write is pending (none before the first) */              \
    for (idx t = 0; t <= Tn; ++t) {                                                                           \
        const T *qt = t < Tn ? q + t * N : 0, *kt = t < Tn ? k + t * N : 0;                                    \
        for (idx d = 0; d < W; ++d) ra[d] = rk[d] = 0.0f;                                                     \
        if (t == Tn) { /* the last write, and s folded into the rows */                                        \
            for (idx i = 0; kp && i < N; ++i) {                                                               \
                float kw = ld_##SUF(kp, i), *restrict row = S + i * D;                                         \
                for (idx d = 0; d < W; ++d) row[d] = s * (row[d] + kw * wp[d]);                               \
            }                                                                                                  \
            break;                                                                                             \
        }                                                                                                      \
        DELTA_PASS(T, SUF, W)                                                                                  \
        const float *vt = v + t * D;                                                                           \
        for (idx d = 0; d < W; ++d) {                                                                         \
            st_##SUF(a, t * D + d, s * ra[d]);                                                                 \
            wp[d] = beta[t] * (vt[d] / s - rk[d]); /* w_t / s */                                               \
        }                                                                                                      \
        kp = kt;                                                                                               \
        if (u) s *= u[t];                                                                                      \
        if (s < DELTA_TINY && t + 1 < Tn) { /* fold s into the rows early (its last write with it) */          \
            for (idx i = 0; i < N; ++i) {                                                                     \
                float kw = ld_##SUF(kp, i), *restrict row = S + i * D;                                         \
                for (idx d = 0; d < W; ++d) row[d] = s * (row[d] + kw * wp[d]);                               \
            }                                                                                                  \
            kp = 0, s = 1.0f;                                                                                  \
        }                                                                                                      \
    }
#define DELTA(T, SUF)                                                                                          \
    MULTIVERSION static void delta_cols_##SUF(const T *q, const T *k, const float *v, const float *beta,        \
                                              const float *u, float *S, T *a, idx Tn, idx N, idx D) {          \
        float ra[DELTA_COLS], rk[DELTA_COLS], wp[DELTA_COLS] = {0};                                            \
        DELTA_BLOCK(T, SUF, DELTA_COLS)                                                                        \
    }                                                                                                          \
    MULTIVERSION static void delta_narrow_##SUF(const T *q, const T *k, const float *v, const float *beta,      \
                                                const float *u, float *S, T *a, idx Tn, idx N, idx D, idx W) { \
        float ra[DELTA_COLS], rk[DELTA_COLS], wp[DELTA_COLS] = {0};                                            \
        DELTA_BLOCK(T, SUF, W)                                                                                 \
    }                                                                                                          \
    int bdh_delta_read_##SUF(const T *q, const T *k, const float *v, const float *beta, const float *u,       \
                             float *S, T *a, idx B, idx H, idx Tn, idx N, idx D, idx v_heads, int threads) {  \
        idx blocks = (D + DELTA_COLS - 1) / DELTA_COLS, tasks = B * H * blocks;                               \
        _Pragma("omp parallel for num_threads(threads) schedule(static)") for (idx t = 0; t < tasks; ++t) {  \
            idx bh = t / blocks, d0 = (t % blocks) * DELTA_COLS, b = bh / H, h = bh % H;                      \
            idx W = d0 + DELTA_COLS < D ? DELTA_COLS : D - d0;                                                \
            const float *vb = v + (b * v_heads + (v_heads == 1 ? 0 : h)) * Tn * D + d0;                        \
            const T *qb = q + bh * Tn * N, *kb = k + bh * Tn * N;                                              \
            const float *bb = beta + bh * Tn, *ub = u ? u + bh * Tn : 0;                                       \
            if (W == DELTA_COLS)                                                                               \
                delta_cols_##SUF(qb, kb, vb, bb, ub, S + bh * N * D + d0, a + bh * Tn * D + d0, Tn, N, D);     \
            else                                                                                               \
                delta_narrow_##SUF(qb, kb, vb, bb, ub, S + bh * N * D + d0, a + bh * Tn * D + d0, Tn, N, D, W); \
        }                                                                                                      \
        return 0;                                                                                              \
    }

/* Mamba's selective scan (bdh/baselines/mamba.py, selective_scan_sequential; the zoo's, not BDH's), fp32, per
 * (sequence b, channel c) row of N states, with abar = exp(delta_t A_c) and u_t = delta_t x_t:
 *     h_t = abar ⊙ h_{t-1} + u_t B_t,   y_t = h_t . C_t        (Gu & Dao 2023, Eq. 2 with Eq. 4; D x_t is added outside)
 * The (b, T, e, N) tensors the PyTorch scans form are never written: a row's states live in a thread's buffer.
 * Layouts (contiguous): x, delta, y (b, T, e); A (e, N); B, C (b, T, N); h (b, e, N), h_0 in and h_T out.
 * exp is `exp_f32` below (a few ulp, vectorised), so the loops are within fp32 rounding of PyTorch's, not equal. */
/* exp(x) for x <= 88 by 2^k exp(r), r = x - k ln 2 in [-ln2/2, ln2/2], exp(r) by Cephes' degree-6 polynomial
 * (about 2 ulp); 0 below -87 (fp32's normal range; 2^k built from its bits). No branch, so that it vectorises
 * (GCC does not if-convert a float clamp for AVX2); the scan's arguments delta A are <= 0. */
static inline float exp_f32(float x) {
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round to nearest: 1.5 2^23 */
    float r = x - k * 0.693359375f + k * 2.12194440e-4f;              /* ln 2 in two parts (Cephes' C1, C2) */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t ki = (int32_t)k;
    union { uint32_t i; float f; } two = {((uint32_t)(ki + 127) << 23) & (uint32_t)-(int32_t)(ki >= -126)};
    return p * two.f;
}
MULTIVERSION static void exp_rows(const float *restrict x, float *restrict out, idx n) {
    for (idx i = 0; i < n; ++i) out[i] = exp_f32(x[i]);
}
/* one row forward; abar and h of every step into ab, hs (T x N) when given (the backward's record) */
MULTIVERSION static void scan_row(const float *x, const float *delta, const float *restrict A, const float *B,
                                  const float *C, float *restrict h, float *y, float *restrict ab,
                                  float *restrict hs, float *restrict tmp, idx T, idx e, idx N) {
    for (idx t = 0; t < T; ++t) {
        float dt = delta[t * e], u = dt * x[t * e], acc[8] = {0};
        const float *restrict Bt = B + t * N, *restrict Ct = C + t * N;
        for (idx n = 0; n < N; ++n) tmp[n] = dt * A[n];
        float *restrict a = ab ? ab + t * N : tmp;
        exp_rows(tmp, a, N);
        idx n = 0;
        for (; n + 8 <= N; n += 8)
            for (idx j = 0; j < 8; ++j) {
                h[n + j] = a[n + j] * h[n + j] + u * Bt[n + j];
                acc[j] += h[n + j] * Ct[n + j];
            }
        for (; n < N; ++n) {
            h[n] = a[n] * h[n] + u * Bt[n];
            acc[0] += h[n] * Ct[n];
        }
        if (hs)
            for (n = 0; n < N; ++n) hs[t * N + n] = h[n];
        y[t * e] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
}
int bdh_scan_f32(const float *x, const float *delta, const float *A, const float *B, const float *C, float *h,
                 float *y, idx b, idx T, idx e, idx N, int threads) {
    int failed = 0;
    _Pragma("omp parallel num_threads(threads) reduction(| : failed)") {
        float *tmp = (float *)malloc((size_t)N * sizeof(float));
        if (!tmp) failed = 1;
        _Pragma("omp for schedule(static)") for (idx r = 0; r < b * e; ++r) {
            idx s = r / e, c = r % e;
            if (tmp)
                scan_row(x + s * T * e + c, delta + s * T * e + c, A + c * N, B + s * T * N, C + s * T * N,
                         h + r * N, y + s * T * e + c, 0, 0, tmp, T, e, N);
        }
        free(tmp);
    }
    return failed;
}
/* One row backward from the record (ab, hs) of its forward. gh holds dL/dh_T on entry, dL/dh_0 on exit; the
 * sequence's dB and dC rows are summed into (its e channels share them: one thread owns a sequence), dA (N) summed
 * over t; dx and ddelta written (the gradients through u_t = delta_t x_t and abar = exp(delta_t A)). */
MULTIVERSION static void scan_row_back(const float *x, const float *delta, const float *restrict A, const float *B,
                                       const float *C, const float *gy, const float *restrict h0,
                                       const float *restrict ab, const float *restrict hs, float *restrict gh,
                                       float *dB, float *dC, float *restrict dA, float *dx, float *ddelta, idx T,
                                       idx e, idx N) {
    for (idx t = T - 1; t >= 0; --t) {
        float dt = delta[t * e], u = dt * x[t * e], g_y = gy[t * e], du[8] = {0}, dd[8] = {0};
        const float *restrict a = ab + t * N, *restrict ht = hs + t * N, *restrict Bt = B + t * N;
        const float *restrict Ct = C + t * N, *restrict hp = t > 0 ? hs + (t - 1) * N : h0;
        float *restrict dBt = dB + t * N, *restrict dCt = dC + t * N;
        idx n = 0;
        for (; n + 8 <= N; n += 8)
            for (idx j = 0; j < 8; ++j) {
                float g = gh[n + j] + g_y * Ct[n + j]; /* dL/dh_t */
                float da = g * hp[n + j] * a[n + j];    /* dL/d(delta_t A) through the exp */
                dCt[n + j] += g_y * ht[n + j];
                dBt[n + j] += g * u;
                du[j] += g * Bt[n + j];
                dd[j] += da * A[n + j];
                dA[n + j] += da * dt;
                gh[n + j] = g * a[n + j]; /* its share of dL/dh_{t-1} */
            }
        for (; n < N; ++n) {
            float g = gh[n] + g_y * Ct[n], da = g * hp[n] * a[n];
            dCt[n] += g_y * ht[n];
            dBt[n] += g * u;
            du[0] += g * Bt[n];
            dd[0] += da * A[n];
            dA[n] += da * dt;
            gh[n] = g * a[n];
        }
        float su = ((du[0] + du[1]) + (du[2] + du[3])) + ((du[4] + du[5]) + (du[6] + du[7]));
        float sd = ((dd[0] + dd[1]) + (dd[2] + dd[3])) + ((dd[4] + dd[5]) + (dd[6] + dd[7]));
        dx[t * e] = su * dt;
        ddelta[t * e] = sd + su * x[t * e];
    }
}
/* The backward of bdh_scan_f32: the forward of each row again, recorded (2 T N floats a thread), then the row
 * backward. h0 (b, e, N) or NULL (zeros); gh (b, e, N): dL/dh_T in, dL/dh_0 out; dA (b, e, N): each sequence's
 * share (the caller sums over b); dB, dC (b, T, N) and dA zeroed by the caller. Returns 1 where a buffer could not
 * be allocated. */
int bdh_scan_back_f32(const float *x, const float *delta, const float *A, const float *B, const float *C,
                      const float *h0, const float *gy, float *gh, float *dx, float *ddelta, float *dA, float *dB,
                      float *dC, idx b, idx T, idx e, idx N, int threads) {
    int failed = 0;
    _Pragma("omp parallel num_threads(threads) reduction(| : failed)") {
        float *buf = (float *)calloc((size_t)(2 * T * N + 3 * N), sizeof(float));
        if (!buf) failed = 1;
        _Pragma("omp for schedule(static)") for (idx s = 0; s < b; ++s) {
            if (!buf) continue;
            float *ab = buf, *hs = ab + T * N, *tmp = hs + T * N, *h = tmp + N, *zero = h + N;
            for (idx c = 0; c < e; ++c) {
                const float *start = h0 ? h0 + (s * e + c) * N : zero;
                for (idx n = 0; n < N; ++n) h[n] = start[n];
                const float *xr = x + s * T * e + c, *dr = delta + s * T * e + c;
                float *yr = dx + s * T * e + c; /* scratch for the forward's y, overwritten below */
                scan_row(xr, dr, A + c * N, B + s * T * N, C + s * T * N, h, yr, ab, hs, tmp, T, e, N);
                scan_row_back(xr, dr, A + c * N, B + s * T * N, C + s * T * N, gy + s * T * e + c, start, ab, hs,
                              gh + (s * e + c) * N, dB + s * T * N, dC + s * T * N, dA + (s * e + c) * N, yr,
                              ddelta + s * T * e + c, T, e, N);
            }
        }
        free(buf);
    }
    return failed;
}

RELU_ROPE(float, f32)
RELU_ROPE(bf16, bf16)
GATE(float, f32)
GATE(bf16, bf16)
STEP(float, f32)
STEP(bf16, bf16)
DELTA(float, f32)
DELTA(bf16, bf16)

/* the version of this interface, checked by the loader */
int bdh_native_version(void) { return 5; }

#ifdef BDH_PYTHON_MODULE
/* built by setup.py as the (empty) Python module bdh.model.kernels.cpu._native, so that it installs and is found
 * like any extension module; its functions are called through ctypes (bdh/model/kernels/cpu/native.py) */
static struct PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native", "BDH's fused CPU loops (ctypes).", -1};
PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
#endif
