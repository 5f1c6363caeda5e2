// Gated DeltaNet (GDN), one head, on raw pointers: the recurrence, its chunk-parallel form, and
// the affine block summaries that let a view's state be composed from per-block pieces
// (AsyncLLM, "affine composition"). Reference kernels, templated on the scalar type: float for
// the engine, double for the tests that check the algebra to 1e-10.
//
// State S is [d_v][d_k] row-major (row i is value dimension i). One token with key k (L2-
// normalised), value v, query q, log-decay g <= 0 (alpha = exp(g)) and write strength beta:
//
//   S_t = S_{t-1} * A_t + B_t,   A_t = alpha_t (I - beta_t k_t k_t^T),   B_t = beta_t v_t k_t^T
//   o_t = S_t q_t
//
// which is the delta rule  S <- alpha S;  S <- S + beta (v - S k) k^T  written as an affine map
// of S. A run of tokens is again affine, S -> S * A + B with A = A_1 ... A_n and
// B = sum_t B_t A_{t+1} ... A_n (B is the state the run leaves when started from zero).
// Composition of a left run L and a right run R:  (A, B) = (A_L A_R, B_L A_R + B_R).
#pragma once

#include <cstddef>

namespace chorus::gdn {

// One token of the recurrence: S <- S A_t + B_t; if out != nullptr, out [d_v] = S q.
// q may be null when out is.
template <class T>
void step(T* S, const T* q, const T* k, const T* v, T g, T beta, T* out, int dk, int dv);

// n tokens at once in the chunk-parallel (WY) form; equals n calls of step() up to rounding.
// Q, K: [n][dk]; V: [n][dv] or nullptr (v = 0); g, beta: [n]; out: [n][dv] or nullptr (then Q
// may be null). S is read as the start state and left as the end state. scratch holds
// chunk_scratch(n, dv) elements. With V == nullptr and dv == dk this multiplies a summary's A
// by the run's A from the right (A <- A * A_1 ... A_n).
template <class T>
void chunk(T* S, const T* Q, const T* K, const T* V, const T* g, const T* beta, int n, T* out, int dk, int dv,
           T* scratch);
size_t chunk_scratch(int n, int dv);

// Summary (A [dk][dk], B [dv][dk]) of the empty run: A = I, B = 0.
template <class T>
void summary_identity(T* A, T* B, int dk, int dv);

// Appends one token to a summary: (A, B) <- (A A_t, B A_t + B_t). O(dk^2 + dv dk).
template <class T>
void summary_append(T* A, T* B, const T* k, const T* v, T g, T beta, int dk, int dv);

// Appends n tokens (K [n][dk], V [n][dv], g, beta [n]) in the chunk-parallel form; scratch
// holds chunk_scratch(n, max(dk, dv)) elements.
template <class T>
void summary_append_chunk(T* A, T* B, const T* K, const T* V, const T* g, const T* beta, int n, int dk,
                          int dv, T* scratch);

// (A, B) = (A_L A_R, B_L A_R + B_R). Outputs must not alias inputs.
template <class T>
void summary_compose(const T* AL, const T* BL, const T* AR, const T* BR, T* A, T* B, int dk, int dv);

// S <- S A + B. tmp holds dv * dk elements.
template <class T>
void summary_apply(T* S, const T* A, const T* B, int dk, int dv, T* tmp);

// Causal depthwise convolution over channels, kernel width K, with the K-1 inputs that precede
// x (prev [K-1][C], oldest first; zeros at the start of a sequence):
//   y[t][c] = sum_{j<K} w[c][j] * z[t + j][c],   z = prev ++ x
// then SiLU if silu. x [n][C], w [C][K], y [n][C] (y must not alias x).
template <class T>
void conv_causal(const T* prev, const T* x, int n, const T* w, int C, int K, bool silu, T* y);

// x <- x / max(||x||_2, eps): the L2 normalisation of q and k.
template <class T>
void l2_normalize(T* x, int n, T eps);

}  // namespace chorus::gdn
