// The fused codec: one kernel per direction and method, as MindSpore `ops.Custom(..., func_type="aot")` operators.
//
// The stored format is the graph-operator codec's (mf_memopt/compress/codec.py): the tensor is read as float32
// (or float16), padded with zeros to whole groups of G elements; each group keeps `bits`-bit levels, packed
// 8 / bits to a byte (the first element in the lowest bits), and its minimum and scale as float16, relative to
// the tensor's largest magnitude (one float32). Every value is computed by the same float32 operations in the
// same order as the reference's graph operators (built with -ffp-contract=off, so that no fused multiply-add
// changes a rounding): given the same noise, the two give the same levels.
//
// The noise: Philox4x32-10 (Salmon et al., SC'11), a counter-based generator, keyed by the 64-bit seed, with the
// counter (block: 64 bits, call: 64 bits). The call number counts the kernel's calls with that seed in this process,
// so every step draws fresh noise and a run repeated in a new process draws the same. Each 32-bit word gives two
// elements a 16-bit draw k, and the noise is u = (k + 1/2) / 2^16, so that floor(v + u) is unbiased to 2^-17 of a
// level (the reference draws 24 bits; 16 halve the generator's work, see docs/compression.md). The elements are
// taken in chunks of 64 from 8 blocks (chunk c holds blocks 8c .. 8c + 7): element i of a chunk reads lane
// l = i % 16 of vector v = i / 16: word 2 (v / 2) + l / 8 of block 8c + l % 8, its low half for even v, high for odd.
//
// Two builds of the same arithmetic: portable C++ (any compiler and CPU), and AVX-512 (F, BW, VBMI) where the
// compiler targets it (-march=native on such a CPU); the tests compare the two bit for bit.
//
// Entry points (MindSpore's aot signature; params are the inputs, then the outputs):
//   CompressInt8/4/2(x, key int64[2] = (seed, call, or -1 for the next call)) -> packed uint8 (groups, G*bits/8),
//                                      minimum float16 (groups, 1), scale float16 (groups, 1), norm float32 (1)
//   RestoreInt8/4/2(packed, minimum, scale, norm) -> float32 or float16 of groups * G elements (any shape)
//   CodecNoise(key int64[3] = (seed, call, first element)) -> float32: a call's noise (tests feed it to the reference)
//   CodecPhilox(uint32 rows of counter[4], key[2]) -> uint32 rows of 4: the generator alone (known answers)
//   CodecCopy(x) -> y: a plain copy of the same bytes (the bandwidth the codec is measured against)
// A kernel returns 0, or 1 when its arguments do not fit (MindSpore then raises).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VBMI__)
#define MF_CODEC_AVX512 1
#include <immintrin.h>
#endif

namespace {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // Philox4x32 multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // and key increments
constexpr int kChunk = 64;                                     // elements per chunk of noise (8 blocks)

// The reference's constants (codec.py), as float32.
constexpr float kTiny = 6.2e-5f;                  // smallest normal float16, relative to the largest magnitude
constexpr float kMargin = 1.0f / 512.0f;          // 2^-9 > float16's rounding error
constexpr float kNormFloor = 1e-30f;
constexpr float kHalfUnit = 1.0f / 131072.0f;     // 2^-17: u = (2k + 1) 2^-17

// ---- the generator ----

inline void philox(uint32_t &x0, uint32_t &x1, uint32_t &x2, uint32_t &x3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * x0, p1 = static_cast<uint64_t>(kMul1) * x2;
    const uint32_t y0 = static_cast<uint32_t>(p1 >> 32) ^ x1 ^ k0, y2 = static_cast<uint32_t>(p0 >> 32) ^ x3 ^ k1;
    x1 = static_cast<uint32_t>(p1);
    x3 = static_cast<uint32_t>(p0);
    x0 = y0;
    x2 = y2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
}

struct Stream {
  uint64_t seed, call;
};

// The noise of one chunk's 64 elements, in element order (the layout above).
void chunk_noise(const Stream &s, uint64_t chunk, float *out) {
  uint32_t words[4][8];
  for (int b = 0; b < 8; ++b) {
    const uint64_t block = chunk * 8 + static_cast<uint64_t>(b);
    uint32_t x0 = static_cast<uint32_t>(block), x1 = static_cast<uint32_t>(block >> 32);
    uint32_t x2 = static_cast<uint32_t>(s.call), x3 = static_cast<uint32_t>(s.call >> 32);
    philox(x0, x1, x2, x3, static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32));
    words[0][b] = x0;
    words[1][b] = x1;
    words[2][b] = x2;
    words[3][b] = x3;
  }
  for (int i = 0; i < kChunk; ++i) {
    const int v = i / 16, l = i % 16;
    const uint32_t k = (words[2 * (v / 2) + l / 8][l % 8] >> (16 * (v % 2))) & 0xFFFFu;
    out[i] = static_cast<float>(2 * k + 1) * kHalfUnit;
  }
}

// The noise of elements [begin, begin + count).
void fill_noise(const Stream &s, uint64_t begin, int64_t count, float *out) {
  float chunk[kChunk];
  while (count > 0) {
    const int skip = static_cast<int>(begin % kChunk);
    const int take = static_cast<int>(count < kChunk - skip ? count : kChunk - skip);
    chunk_noise(s, begin / kChunk, chunk);
    std::memcpy(out, chunk + skip, sizeof(float) * static_cast<size_t>(take));
    out += take;
    begin += static_cast<uint64_t>(take);
    count -= take;
  }
}

// The call number of a compression: the given one (>= 0, tests), or the next of this seed's calls in this process.
uint64_t next_call(int64_t seed, int64_t given) {
  if (given >= 0) return static_cast<uint64_t>(given);
  static std::mutex lock;
  static std::unordered_map<int64_t, uint64_t> calls;
  std::lock_guard<std::mutex> guard(lock);
  return calls[seed]++;
}

// ---- one group: the reference's arithmetic ----

struct Header {
  _Float16 low16, scale16;
  float base, step;   // low16 * norm and scale16 * norm: the float32 values a level is computed from
};

// A group's float16 minimum and scale, as the reference computes them (one float32 operation per step).
Header group_header(float minimum, float maximum, float norm, float levels) {
  const float low = minimum / norm, high = maximum / norm;
  const float margin = std::fabs(low) * kMargin;
  const float lowered = low - margin;
  Header h;
  h.low16 = static_cast<_Float16>(lowered - kTiny);
  const float low_back = static_cast<float>(h.low16);
  const float spread = (high - low_back) / levels;
  const float widened = spread * (1.0f + kMargin) + kTiny;
  h.scale16 = static_cast<_Float16>(widened > kTiny ? widened : kTiny);
  h.base = low_back * norm;
  h.step = static_cast<float>(h.scale16) * norm;
  return h;
}

template <int Bits>
inline uint32_t level_of(float value, float noise, const Header &h) {
  constexpr float kLevels = static_cast<float>((1 << Bits) - 1);
  float level = std::floor((value - h.base) / h.step + noise);
  level = level > 0.0f ? level : 0.0f;          // NaN becomes 0
  level = level < kLevels ? level : kLevels;
  return static_cast<uint32_t>(level);
}

template <int Bits>
void pack_portable(const float *values, const float *noise, int64_t count, const Header &h, uint8_t *out) {
  constexpr int kPerByte = 8 / Bits;
  for (int64_t i = 0; i < count; i += kPerByte) {
    uint32_t byte = 0;
    for (int k = 0; k < kPerByte; ++k) byte |= level_of<Bits>(values[i + k], noise[i + k], h) << (Bits * k);
    out[i / kPerByte] = static_cast<uint8_t>(byte);
  }
}

template <int Bits, typename T>
void restore_portable(const uint8_t *in, int64_t count, float step, float base, T *out) {
  constexpr int kPerByte = 8 / Bits;
  constexpr uint32_t kMask = (1u << Bits) - 1u;
  for (int64_t i = 0; i < count; i += kPerByte) {
    const uint32_t byte = in[i / kPerByte];
    for (int k = 0; k < kPerByte; ++k) {
      const float scaled = static_cast<float>((byte >> (Bits * k)) & kMask) * step;
      out[i + k] = static_cast<T>(scaled + base);
    }
  }
}

// ---- whole tensors, portable ----

template <typename T>
void group_range(const T *x, int64_t count, float &minimum, float &maximum) {
  minimum = maximum = static_cast<float>(x[0]);
  for (int64_t i = 1; i < count; ++i) {
    const float v = static_cast<float>(x[i]);
    minimum = v < minimum ? v : minimum;
    maximum = v > maximum ? v : maximum;
  }
}

// A group as the reference sees it: its elements as float32, zeros past the tensor's end.
template <typename T>
void padded(const T *x, int64_t valid, int64_t size, float *values) {
  for (int64_t i = 0; i < valid; ++i) values[i] = static_cast<float>(x[i]);
  for (int64_t i = valid; i < size; ++i) values[i] = 0.0f;
}

// Pass 1: every group's minimum and maximum, and the largest magnitude (the padding's zeros included).
template <typename T>
float ranges_portable(const T *x, int64_t n, int64_t size, float *lows, float *highs) {
  const int64_t groups = (n + size - 1) / size;
  float norm = 0.0f;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t valid = n - g * size < size ? n - g * size : size;
    group_range(x + g * size, valid, lows[g], highs[g]);
    if (valid < size) {
      lows[g] = lows[g] < 0.0f ? lows[g] : 0.0f;
      highs[g] = highs[g] > 0.0f ? highs[g] : 0.0f;
    }
    const float magnitude = std::fmax(std::fabs(lows[g]), std::fabs(highs[g]));
    norm = magnitude > norm ? magnitude : norm;
  }
  return norm;
}

// Pass 2 for groups [first, groups): levels from the headers and the noise.
template <int Bits, typename T>
void pack_groups_portable(const T *x, int64_t n, int64_t size, int64_t first, int64_t groups, const Header *headers,
                          const Stream &s, uint8_t *packed) {
  std::vector<float> values(static_cast<size_t>(size)), noise(static_cast<size_t>(size));
  for (int64_t g = first; g < groups; ++g) {
    const int64_t begin = g * size;
    padded(x + begin, n - begin < size ? n - begin : size, size, values.data());
    fill_noise(s, static_cast<uint64_t>(begin), size, noise.data());
    pack_portable<Bits>(values.data(), noise.data(), size, headers[g], packed + begin * Bits / 8);
  }
}

// ---- whole tensors, AVX-512: the same operations, 16 lanes at a time ----

#ifdef MF_CODEC_AVX512
inline __m512 load16(const float *x) { return _mm512_loadu_ps(x); }
inline __m512 load16(const _Float16 *x) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x)));
}
inline void store16(float *out, __m512 v) { _mm512_storeu_ps(out, v); }
inline void store16(_Float16 *out, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i *>(out), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Pass 1 over whole groups of a multiple of 16 elements.
template <typename T>
float ranges_avx512(const T *x, int64_t whole, int64_t size, float *lows, float *highs) {
  __m512 norm = _mm512_setzero_ps();
  for (int64_t g = 0; g < whole; ++g) {
    const T *from = x + g * size;
    __m512 low = load16(from), high = low;
    for (int64_t i = 16; i < size; i += 16) {
      const __m512 v = load16(from + i);
      low = _mm512_min_ps(v, low);      // v < low ? v : low, as the portable code
      high = _mm512_max_ps(v, high);
    }
    lows[g] = _mm512_reduce_min_ps(low);
    highs[g] = _mm512_reduce_max_ps(high);
    norm = _mm512_max_ps(norm, _mm512_max_ps(_mm512_abs_ps(low), _mm512_abs_ps(high)));
  }
  return _mm512_reduce_max_ps(norm);
}

// The noise of chunks first .. first + C - 1 (each 8 blocks in the 64-bit lanes), as 4 C vectors of 16 in element
// order. The C chunks are independent chains of multiplications, interleaved so that one's latency hides another's.
template <int C>
inline void chunk_noise_avx512(const Stream &s, uint64_t first, __m512 *noise) {
  const __m512i m0 = _mm512_set1_epi64(kMul0), m1 = _mm512_set1_epi64(kMul1);
  // Only the low 32 bits of each 64-bit lane are the word; the high bits are left over and never read.
  __m512i x0[C], x1[C], x2[C], x3[C];
  for (int c = 0; c < C; ++c) {
    const __m512i block = _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>((first + c) * 8)),
                                           _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    x0[c] = block;
    x1[c] = _mm512_srli_epi64(block, 32);
    x2[c] = _mm512_set1_epi64(static_cast<int64_t>(s.call & 0xFFFFFFFFu));
    x3[c] = _mm512_set1_epi64(static_cast<int64_t>(s.call >> 32));
  }
  uint32_t k0 = static_cast<uint32_t>(s.seed), k1 = static_cast<uint32_t>(s.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const __m512i a0 = _mm512_set1_epi64(k0), a1 = _mm512_set1_epi64(k1);
    for (int c = 0; c < C; ++c) {
      const __m512i p0 = _mm512_mul_epu32(x0[c], m0), p1 = _mm512_mul_epu32(x2[c], m1);
      x0[c] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), x1[c], a0, 0x96);  // three-way xor
      x2[c] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), x3[c], a1, 0x96);
      x1[c] = p1;
      x3[c] = p0;
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i one = _mm512_set1_epi32(1), low17 = _mm512_set1_epi32(0x1FFFF);
  const __m512 unit = _mm512_set1_ps(kHalfUnit);
  for (int c = 0; c < C; ++c) {
    const __m512i words[2] = {_mm512_permutex2var_epi32(x0[c], even, x1[c]),
                              _mm512_permutex2var_epi32(x2[c], even, x3[c])};
    for (int w = 0; w < 2; ++w) {
      // 2k + 1 for the low half ((w << 1 | 1) & 0x1FFFF) and for the high half (w >> 15 | 1)
      const __m512i low = _mm512_ternarylogic_epi32(_mm512_slli_epi32(words[w], 1), one, low17, 0xA8);
      const __m512i high = _mm512_or_si512(_mm512_srli_epi32(words[w], 15), one);
      noise[4 * c + 2 * w] = _mm512_mul_ps(_mm512_cvtepi32_ps(low), unit);
      noise[4 * c + 2 * w + 1] = _mm512_mul_ps(_mm512_cvtepi32_ps(high), unit);
    }
  }
}

// 64 elements and their noise -> 64 levels, one per byte.
template <int Bits, typename T>
inline __m512i levels64(const T *x, const __m512 noise[4], __m512 base, __m512 step) {
  const __m512 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(static_cast<float>((1 << Bits) - 1));
  __m512i all = _mm512_setzero_si512();
  for (int q = 0; q < 4; ++q) {
    __m512 v = _mm512_div_ps(_mm512_sub_ps(load16(x + 16 * q), base), step);
    v = _mm512_roundscale_ps(_mm512_add_ps(v, noise[q]), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(v, zero), top);   // max(NaN, 0) is 0 here, as in the portable code
    all = _mm512_inserti32x4(all, _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(v)), q);
  }
  return all;
}

template <int Bits>
inline void store_levels(__m512i levels, uint8_t *to) {
  if (Bits == 8) {
    _mm512_storeu_si512(to, levels);
  } else if (Bits == 4) {   // l0 + 16 l1 per byte
    const __m512i pairs = _mm512_maddubs_epi16(levels, _mm512_set1_epi16(0x1001));
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(to), _mm512_cvtepi16_epi8(pairs));
  } else {                  // (l0 + 4 l1) + 16 (l2 + 4 l3) per byte
    const __m512i pairs = _mm512_maddubs_epi16(levels, _mm512_set1_epi16(0x0401));
    const __m512i quads = _mm512_madd_epi16(pairs, _mm512_set1_epi32(0x00100001));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(to), _mm512_cvtepi32_epi8(quads));
  }
}

// Pass 2 over whole groups of C x 64 elements.
template <int C, int Bits, typename T>
void pack_groups_avx512(const T *x, int64_t whole, int64_t size, const Header *headers, const Stream &s,
                        uint8_t *packed) {
  __m512 noise[4 * C];
  for (int64_t g = 0; g < whole; ++g) {
    const __m512 base = _mm512_set1_ps(headers[g].base), step = _mm512_set1_ps(headers[g].step);
    for (int64_t i = g * size; i < (g + 1) * size; i += C * kChunk) {
      chunk_noise_avx512<C>(s, static_cast<uint64_t>(i) / kChunk, noise);
      for (int c = 0; c < C; ++c)
        store_levels<Bits>(levels64<Bits>(x + i + c * kChunk, noise + 4 * c, base, step), packed + (i + c * kChunk) * Bits / 8);
    }
  }
}

template <int Bits, typename T>
void restore_avx512(const uint8_t *in, int64_t count, float step_value, float base_value, T *out) {
  const __m512 step = _mm512_set1_ps(step_value), base = _mm512_set1_ps(base_value);
  const int64_t whole = count / 64 * 64;
  for (int64_t i = 0; i < whole; i += 64) {
    const uint8_t *from = in + i * Bits / 8;
    __m512i levels;   // 64 levels, one per byte
    if (Bits == 8) {
      levels = _mm512_loadu_si512(from);
    } else if (Bits == 4) {   // each 64-bit lane takes 4 bytes (8 levels) and picks level k at bit 4k
      const __m512i lanes = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(from)));
      levels = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x1C1814100C080400LL), lanes),
                                _mm512_set1_epi8(0x0F));
    } else {                  // each 64-bit lane takes 2 bytes (8 levels) and picks level k at bit 2k
      const __m512i lanes = _mm512_cvtepu16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i *>(from)));
      levels = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x0E0C0A0806040200LL), lanes),
                                _mm512_set1_epi8(0x03));
    }
    for (int q = 0; q < 4; ++q) {
      const __m512 level = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(levels, q)));
      store16(out + i + 16 * q, _mm512_add_ps(_mm512_mul_ps(level, step), base));
    }
  }
  restore_portable<Bits, T>(in + whole * Bits / 8, count - whole, step_value, base_value, out + whole);
}
#endif

// ---- the kernels ----

int64_t elements(int ndim, const int64_t *shape) {
  int64_t count = 1;
  for (int d = 0; d < ndim; ++d) count *= shape[d];
  return count;
}

bool is(const char *dtype, const char *name) { return std::strcmp(dtype, name) == 0; }

template <int Bits, typename T>
int compress(void **params, int *ndims, int64_t **shapes) {
  constexpr int kPerByte = 8 / Bits;
  const T *x = static_cast<const T *>(params[0]);
  const int64_t *key = static_cast<const int64_t *>(params[1]);
  auto *packed = static_cast<uint8_t *>(params[2]);
  auto *low16 = static_cast<_Float16 *>(params[3]);
  auto *scale16 = static_cast<_Float16 *>(params[4]);
  const int64_t n = elements(ndims[0], shapes[0]);
  if (n <= 0 || ndims[2] != 2 || elements(ndims[1], shapes[1]) != 2) return 1;
  const int64_t groups = shapes[2][0], size = shapes[2][1] * kPerByte;
  if (size <= 0 || groups != (n + size - 1) / size) return 1;
  std::vector<float> lows(static_cast<size_t>(groups)), highs(static_cast<size_t>(groups));
  int64_t fast = 0;   // whole groups done by the AVX-512 passes
  float norm = 0.0f;
#ifdef MF_CODEC_AVX512
  if (size % kChunk == 0) fast = n / size;
  norm = ranges_avx512(x, fast, size, lows.data(), highs.data());
#endif
  if (fast < groups) {
    const float rest = ranges_portable(x + fast * size, n - fast * size, size, lows.data() + fast, highs.data() + fast);
    norm = rest > norm ? rest : norm;
  }
  norm = std::fmax(norm, kNormFloor);
  static_cast<float *>(params[5])[0] = norm;
  std::vector<Header> headers(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) {
    headers[g] = group_header(lows[g], highs[g], norm, static_cast<float>((1 << Bits) - 1));
    low16[g] = headers[g].low16;
    scale16[g] = headers[g].scale16;
  }
  const Stream stream{static_cast<uint64_t>(key[0]), next_call(key[0], key[1])};
#ifdef MF_CODEC_AVX512
  if (size % (4 * kChunk) == 0)
    pack_groups_avx512<4, Bits>(x, fast, size, headers.data(), stream, packed);
  else
    pack_groups_avx512<1, Bits>(x, fast, size, headers.data(), stream, packed);
#endif
  pack_groups_portable<Bits>(x, n, size, fast, groups, headers.data(), stream, packed);
  return 0;
}

template <int Bits, typename T>
int restore(void **params, int *ndims, int64_t **shapes) {
  constexpr int kPerByte = 8 / Bits;
  const auto *packed = static_cast<const uint8_t *>(params[0]);
  const auto *low16 = static_cast<const _Float16 *>(params[1]);
  const auto *scale16 = static_cast<const _Float16 *>(params[2]);
  const float norm = static_cast<const float *>(params[3])[0];
  T *out = static_cast<T *>(params[4]);
  if (ndims[0] != 2) return 1;
  const int64_t groups = shapes[0][0], bytes = shapes[0][1], size = bytes * kPerByte;
  if (elements(ndims[1], shapes[1]) != groups || elements(ndims[2], shapes[2]) != groups ||
      elements(ndims[4], shapes[4]) != groups * size)
    return 1;
  for (int64_t g = 0; g < groups; ++g) {
    const float step = static_cast<float>(scale16[g]) * norm, base = static_cast<float>(low16[g]) * norm;
#ifdef MF_CODEC_AVX512
    restore_avx512<Bits, T>(packed + g * bytes, size, step, base, out + g * size);
#else
    restore_portable<Bits, T>(packed + g * bytes, size, step, base, out + g * size);
#endif
  }
  return 0;
}

template <int Bits>
int compress_any(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (!is(dtypes[1], "int64") || !is(dtypes[2], "uint8") || !is(dtypes[3], "float16") || !is(dtypes[4], "float16") ||
      !is(dtypes[5], "float32"))
    return 1;
  if (is(dtypes[0], "float32")) return compress<Bits, float>(params, ndims, shapes);
  if (is(dtypes[0], "float16")) return compress<Bits, _Float16>(params, ndims, shapes);
  return 1;
}

template <int Bits>
int restore_any(void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  if (!is(dtypes[0], "uint8") || !is(dtypes[1], "float16") || !is(dtypes[2], "float16") || !is(dtypes[3], "float32"))
    return 1;
  if (is(dtypes[4], "float32")) return restore<Bits, float>(params, ndims, shapes);
  if (is(dtypes[4], "float16")) return restore<Bits, _Float16>(params, ndims, shapes);
  return 1;
}

}  // namespace

#define MF_AOT(name) \
  extern "C" int name(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *, void *)

MF_AOT(CompressInt8) { return nparam == 6 ? compress_any<8>(params, ndims, shapes, dtypes) : 1; }
MF_AOT(CompressInt4) { return nparam == 6 ? compress_any<4>(params, ndims, shapes, dtypes) : 1; }
MF_AOT(CompressInt2) { return nparam == 6 ? compress_any<2>(params, ndims, shapes, dtypes) : 1; }
MF_AOT(RestoreInt8) { return nparam == 5 ? restore_any<8>(params, ndims, shapes, dtypes) : 1; }
MF_AOT(RestoreInt4) { return nparam == 5 ? restore_any<4>(params, ndims, shapes, dtypes) : 1; }
MF_AOT(RestoreInt2) { return nparam == 5 ? restore_any<2>(params, ndims, shapes, dtypes) : 1; }

MF_AOT(CodecNoise) {
  if (nparam != 2 || !is(dtypes[0], "int64") || elements(ndims[0], shapes[0]) != 3 || !is(dtypes[1], "float32"))
    return 1;
  const int64_t *key = static_cast<const int64_t *>(params[0]);
  const Stream stream{static_cast<uint64_t>(key[0]), static_cast<uint64_t>(key[1])};
  fill_noise(stream, static_cast<uint64_t>(key[2]), elements(ndims[1], shapes[1]), static_cast<float *>(params[1]));
  return 0;
}

MF_AOT(CodecPhilox) {
  if (nparam != 2 || !is(dtypes[0], "uint32") || !is(dtypes[1], "uint32")) return 1;
  const int64_t rows = elements(ndims[0], shapes[0]) / 6;
  if (elements(ndims[0], shapes[0]) != rows * 6 || elements(ndims[1], shapes[1]) != rows * 4) return 1;
  const auto *in = static_cast<const uint32_t *>(params[0]);
  auto *out = static_cast<uint32_t *>(params[1]);
  for (int64_t r = 0; r < rows; ++r, in += 6, out += 4) {
    uint32_t x0 = in[0], x1 = in[1], x2 = in[2], x3 = in[3];
    philox(x0, x1, x2, x3, in[4], in[5]);
    out[0] = x0;
    out[1] = x1;
    out[2] = x2;
    out[3] = x3;
  }
  return 0;
}

MF_AOT(CodecCopy) {
  if (nparam != 2 || elements(ndims[0], shapes[0]) != elements(ndims[1], shapes[1]) || !is(dtypes[0], dtypes[1]))
    return 1;
  const int64_t n = elements(ndims[0], shapes[0]);
  const int64_t width = is(dtypes[0], "float32") || is(dtypes[0], "int32") ? 4 : is(dtypes[0], "float16") ? 2 : 1;
  std::memcpy(params[1], params[0], static_cast<size_t>(n * width));
  return 0;
}
