#include "kernels/cpu/gdn.h"

#include <algorithm>
#include <cmath>

namespace chorus::gdn {

template <class T>
void step(T* S, const T* q, const T* k, const T* v, T g, T beta, T* out, int dk, int dv) {
  const T alpha = std::exp(g);
  for (int i = 0; i < dv; ++i) {
    T* s = S + static_cast<size_t>(i) * dk;
    T sk = 0;
    for (int j = 0; j < dk; ++j) sk += s[j] * k[j];
    // delta = beta (v - alpha S k); S <- alpha S + delta k^T
    const T delta = beta * ((v ? v[i] : T(0)) - alpha * sk);
    T o = 0;
    for (int j = 0; j < dk; ++j) {
      s[j] = alpha * s[j] + delta * k[j];
      if (out) o += s[j] * q[j];
    }
    if (out) out[i] = o;
  }
}

size_t chunk_scratch(int n, int dv) {
  const auto N = static_cast<size_t>(n);
  return N                                   // G: cumulative log decay
         + N * N                             // key Gram matrix, then the query-key products
         + 2 * N * static_cast<size_t>(dv);  // S k_t, then delta_t
}

// With G_t = g_1 + ... + g_t (so Gamma_t = exp(G_t) is the decay from the chunk start) the
// recurrence unrolls to S_t = Gamma_t S_0 + sum_{s<=t} (Gamma_t / Gamma_s) delta_s k_s^T, where
//   delta_t = beta_t (v_t - Gamma_t S_0 k_t - sum_{s<t} (Gamma_t / Gamma_s) (k_s . k_t) delta_s)
// is a lower-triangular solve over the chunk. Everything else is a product of the chunk's
// matrices: S_0 K^T, K K^T, K Q^T.
template <class T>
void chunk(T* S, const T* Q, const T* K, const T* V, const T* g, const T* beta, int n, T* out, int dk, int dv,
           T* scratch) {
  if (n <= 0) return;
  const auto N = static_cast<size_t>(n), DK = static_cast<size_t>(dk), DV = static_cast<size_t>(dv);
  T* G = scratch;
  T* gram = G + N;         // [n][n]
  T* sk = gram + N * N;    // [n][dv]
  T* delta = sk + N * DV;  // [n][dv]
  T acc = 0;
  for (size_t t = 0; t < N; ++t) G[t] = acc += g[t];
  for (size_t t = 0; t < N; ++t) {
    const T* kt = K + t * DK;
    for (size_t s = 0; s < t; ++s) {
      const T* ks = K + s * DK;
      T d = 0;
      for (size_t j = 0; j < DK; ++j) d += ks[j] * kt[j];
      gram[t * N + s] = d;
    }
    for (size_t i = 0; i < DV; ++i) {
      const T* si = S + i * DK;
      T d = 0;
      for (size_t j = 0; j < DK; ++j) d += si[j] * kt[j];
      sk[t * DV + i] = d;
    }
  }
  for (size_t t = 0; t < N; ++t) {
    const T gt = std::exp(G[t]);
    T* dt = delta + t * DV;
    for (size_t i = 0; i < DV; ++i) dt[i] = (V ? V[t * DV + i] : T(0)) - gt * sk[t * DV + i];
    for (size_t s = 0; s < t; ++s) {
      const T c = std::exp(G[t] - G[s]) * gram[t * N + s];
      const T* ds = delta + s * DV;
      for (size_t i = 0; i < DV; ++i) dt[i] -= c * ds[i];
    }
    for (size_t i = 0; i < DV; ++i) dt[i] *= beta[t];
  }
  if (out) {
    // o_t = Gamma_t S_0 q_t + sum_{s<=t} (Gamma_t / Gamma_s) (k_s . q_t) delta_s
    T* kq = gram;  // reuse: [t][s] = k_s . q_t
    for (size_t t = 0; t < N; ++t) {
      const T* qt = Q + t * DK;
      for (size_t s = 0; s <= t; ++s) {
        const T* ks = K + s * DK;
        T d = 0;
        for (size_t j = 0; j < DK; ++j) d += ks[j] * qt[j];
        kq[t * N + s] = d;
      }
      T* ot = out + t * DV;
      const T gt = std::exp(G[t]);
      for (size_t i = 0; i < DV; ++i) {
        const T* si = S + i * DK;
        T d = 0;
        for (size_t j = 0; j < DK; ++j) d += si[j] * qt[j];
        ot[i] = gt * d;
      }
      for (size_t s = 0; s <= t; ++s) {
        const T c = std::exp(G[t] - G[s]) * kq[t * N + s];
        const T* ds = delta + s * DV;
        for (size_t i = 0; i < DV; ++i) ot[i] += c * ds[i];
      }
    }
  }
  // S <- Gamma_n S_0 + sum_s (Gamma_n / Gamma_s) delta_s k_s^T
  const T gn = std::exp(G[N - 1]);
  for (size_t i = 0; i < DV; ++i) {
    T* si = S + i * DK;
    for (size_t j = 0; j < DK; ++j) si[j] *= gn;
  }
  for (size_t s = 0; s < N; ++s) {
    const T c = std::exp(G[N - 1] - G[s]);
    const T* ks = K + s * DK;
    for (size_t i = 0; i < DV; ++i) {
      const T di = c * delta[s * DV + i];
      T* si = S + i * DK;
      for (size_t j = 0; j < DK; ++j) si[j] += di * ks[j];
    }
  }
}

template <class T>
void summary_identity(T* A, T* B, int dk, int dv) {
  std::fill(A, A + static_cast<size_t>(dk) * dk, T(0));
  for (int i = 0; i < dk; ++i) A[static_cast<size_t>(i) * dk + i] = T(1);
  std::fill(B, B + static_cast<size_t>(dv) * dk, T(0));
}

template <class T>
void summary_append(T* A, T* B, const T* k, const T* v, T g, T beta, int dk, int dv) {
  step<T>(A, nullptr, k, nullptr, g, beta, nullptr, dk, dk);  // A <- A A_t (B_t = 0 for A)
  step<T>(B, nullptr, k, v, g, beta, nullptr, dk, dv);        // B <- B A_t + B_t
}

template <class T>
void summary_append_chunk(T* A, T* B, const T* K, const T* V, const T* g, const T* beta, int n, int dk,
                          int dv, T* scratch) {
  chunk<T>(A, nullptr, K, nullptr, g, beta, n, nullptr, dk, dk, scratch);
  chunk<T>(B, nullptr, K, V, g, beta, n, nullptr, dk, dv, scratch);
}

namespace {

// C [m][dk] = X [m][dk] * A [dk][dk] (+ C if accumulate).
template <class T>
void mul_right(const T* X, const T* A, T* C, int m, int dk, bool accumulate) {
  const auto DK = static_cast<size_t>(dk);
  for (size_t i = 0; i < static_cast<size_t>(m); ++i) {
    T* c = C + i * DK;
    if (!accumulate) std::fill(c, c + DK, T(0));
    const T* x = X + i * DK;
    for (size_t l = 0; l < DK; ++l) {
      const T xl = x[l];
      const T* a = A + l * DK;
      for (size_t j = 0; j < DK; ++j) c[j] += xl * a[j];
    }
  }
}

}  // namespace

template <class T>
void summary_compose(const T* AL, const T* BL, const T* AR, const T* BR, T* A, T* B, int dk, int dv) {
  mul_right<T>(AL, AR, A, dk, dk, false);
  std::copy(BR, BR + static_cast<size_t>(dv) * dk, B);
  mul_right<T>(BL, AR, B, dv, dk, true);
}

template <class T>
void summary_apply(T* S, const T* A, const T* B, int dk, int dv, T* tmp) {
  const size_t n = static_cast<size_t>(dv) * dk;
  std::copy(B, B + n, tmp);
  mul_right<T>(S, A, tmp, dv, dk, true);
  std::copy(tmp, tmp + n, S);
}

template <class T>
void conv_causal(const T* prev, const T* x, int n, const T* w, int C, int K, bool silu, T* y) {
  const auto CC = static_cast<size_t>(C);
  for (int t = 0; t < n; ++t) {
    T* yt = y + static_cast<size_t>(t) * CC;
    for (size_t c = 0; c < CC; ++c) {
      T acc = 0;
      for (int j = 0; j < K; ++j) {
        const int z = t + j;  // index into prev ++ x
        const T in =
            z < K - 1 ? prev[static_cast<size_t>(z) * CC + c] : x[static_cast<size_t>(z - (K - 1)) * CC + c];
        acc += w[c * static_cast<size_t>(K) + static_cast<size_t>(j)] * in;
      }
      yt[c] = silu ? acc / (T(1) + std::exp(-acc)) : acc;
    }
  }
}

template <class T>
void l2_normalize(T* x, int n, T eps) {
  double ss = 0;  // in double, as ggml's l2_norm
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i] * x[i]);
  const T scale = T(1) / std::max(std::sqrt(static_cast<T>(ss)), eps);
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

#define CHORUS_GDN_INSTANTIATE(T)                                                                           \
  template void step<T>(T*, const T*, const T*, const T*, T, T, T*, int, int);                              \
  template void chunk<T>(T*, const T*, const T*, const T*, const T*, const T*, int, T*, int, int, T*);      \
  template void summary_identity<T>(T*, T*, int, int);                                                      \
  template void summary_append<T>(T*, T*, const T*, const T*, T, T, int, int);                              \
  template void summary_append_chunk<T>(T*, T*, const T*, const T*, const T*, const T*, int, int, int, T*); \
  template void summary_compose<T>(const T*, const T*, const T*, const T*, T*, T*, int, int);               \
  template void summary_apply<T>(T*, const T*, const T*, int, int, T*);                                     \
  template void conv_causal<T>(const T*, const T*, int, const T*, int, int, bool, T*);                      \
  template void l2_normalize<T>(T*, int, T);
CHORUS_GDN_INSTANTIATE(float)
CHORUS_GDN_INSTANTIATE(double)
#undef CHORUS_GDN_INSTANTIATE

}  // namespace chorus::gdn
