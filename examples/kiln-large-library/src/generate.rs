//! The CUDA C++ generator, shared by the library and its build script
//! (`#[path]`), so that both derive the same owners and keys.
//!
//! Eleven programs, one compile unit each, as a framework's `.cu` files are:
//! element-wise maps over every element type (strided inputs through the
//! shared header's helpers), casts, affine maps, fills, indexing, row
//! reductions, selection, naive convolutions and pooling, bitonic argsorts and
//! rotary embeddings; 608 `extern "C"` kernels in all, every one on every arch,
//! each found by the compiler ([`KernelRequest::every_kernel`]). Each program's
//! source is a prelude of macros and templates and one instantiation line per
//! kernel; the kernels are small, so that the library ships at a size a crate
//! can (about 1 MB for seven archs and PTX).

use std::sync::OnceLock;

use kiln::cuda::{Arch, KernelRequest, Toolchain};
use kiln::image::Digest;

/// The archs shipped as CUBINs, Turing to Blackwell (the lowest also as PTX,
/// which the driver compiles for any newer GPU): those of the other example
/// libraries.
pub const TARGETS: &str = "sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

/// Version of the generator below: recorded as the fingerprint of the
/// definition every entry depends on. Bump it when the generated code changes.
pub const GENERATOR_VERSION: &str = "kiln-large-library generator v1";

/// The definition every entry of this library depends on.
pub const DEFINITION: &str = "kiln-large-library::generator";

/// The header every program includes, given by content.
pub const HEADER_NAME: &str = "kiln_large.cuh";

/// Its text.
pub const HEADER: &str = include_str!("kiln_large.cuh");

/// One compile unit of the library: the specialization its
/// [`KernelLibrary`](kiln::cuda::KernelLibrary) is keyed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Program {
    /// Element-wise functions over the float types (and a few over the signed integers).
    Unary,
    /// Element-wise arithmetic and comparisons of two strided inputs.
    Binary,
    /// Every element type to every other.
    Cast,
    /// `x * mul + add`, clamps, ELU, powers, leaky ReLU.
    Affine,
    /// Fills, 2-D copies, strided constant sets.
    Fill,
    /// `index_select`, `gather`, `index_add`, `scatter_add` over three index types.
    Indexing,
    /// Row sums, extrema and their positions, means, products, prefix sums, softmax, norms.
    Reduce,
    /// `where(cond, t, f)` over three condition types.
    Ternary,
    /// Naive convolutions, transposed convolutions, pooling, upsampling, `im2col`.
    Conv,
    /// Bitonic argsort of each row, ascending and descending.
    Sort,
    /// Rotary embeddings, gated activations, KV concatenation.
    Rope,
}

/// (name in kernel names, C type)
type Dtype = (&'static str, &'static str);

const F32: Dtype = ("f32", "float");
const F64: Dtype = ("f64", "double");
const F16: Dtype = ("f16", "__half");
const U8: Dtype = ("u8", "uint8_t");
const U32: Dtype = ("u32", "uint32_t");
const I16: Dtype = ("i16", "int16_t");
const I32: Dtype = ("i32", "int32_t");
const I64: Dtype = ("i64", "int64_t");

const FLOATS: [Dtype; 3] = [F32, F64, F16];
const ALL: [Dtype; 8] = [F32, F64, F16, U8, U32, I16, I32, I64];
const SIGNED: [Dtype; 3] = [I16, I32, I64];
const INDEX: [Dtype; 3] = [U8, U32, I64];

/// A generated program: its source and the names of its kernels, in order.
pub struct Generated {
    /// The CUDA C++ source.
    pub source: String,
    /// The `extern "C"` kernels it defines.
    pub kernels: Vec<String>,
}

impl Generated {
    fn new(prelude: &str) -> Generated {
        Generated {
            source: format!("#include \"{HEADER_NAME}\"\n{prelude}\n"),
            kernels: Vec::new(),
        }
    }

    /// Adds `MACRO(args..., name)` and the kernel `name`.
    fn kernel(&mut self, macro_name: &str, args: &[&str], name: String) {
        self.source.push_str(macro_name);
        self.source.push('(');
        for arg in args {
            self.source.push_str(arg);
            self.source.push_str(", ");
        }
        self.source.push_str(&name);
        self.source.push_str(")\n");
        self.kernels.push(name);
    }
}

impl Program {
    /// Every program.
    pub const ALL: [Program; 11] = [
        Program::Unary,
        Program::Binary,
        Program::Cast,
        Program::Affine,
        Program::Fill,
        Program::Indexing,
        Program::Reduce,
        Program::Ternary,
        Program::Conv,
        Program::Sort,
        Program::Rope,
    ];

    /// The request's name.
    pub fn name(self) -> &'static str {
        match self {
            Program::Unary => "large_unary",
            Program::Binary => "large_binary",
            Program::Cast => "large_cast",
            Program::Affine => "large_affine",
            Program::Fill => "large_fill",
            Program::Indexing => "large_indexing",
            Program::Reduce => "large_reduce",
            Program::Ternary => "large_ternary",
            Program::Conv => "large_conv",
            Program::Sort => "large_sort",
            Program::Rope => "large_rope",
        }
    }

    /// The program's source and kernels, generated once per process.
    pub fn generated(self) -> &'static Generated {
        static ALL: OnceLock<Vec<Generated>> = OnceLock::new();
        let all = ALL.get_or_init(|| Program::ALL.iter().map(|p| p.generate()).collect());
        &all[self as usize]
    }

    /// The CUDA C++ source.
    pub fn source(self) -> &'static str {
        &self.generated().source
    }

    /// The `extern "C"` kernels the source defines, in order.
    pub fn kernels(self) -> &'static [String] {
        &self.generated().kernels
    }

    fn generate(self) -> Generated {
        match self {
            Program::Unary => unary(),
            Program::Binary => binary(),
            Program::Cast => cast(),
            Program::Affine => affine(),
            Program::Fill => fill(),
            Program::Indexing => indexing(),
            Program::Reduce => reduce(),
            Program::Ternary => ternary(),
            Program::Conv => conv(),
            Program::Sort => sort(),
            Program::Rope => rope(),
        }
    }

    /// The compile request for `arch` under `toolchain` (the recorded one when
    /// looking up shipped entries: the CUDA runtime headers by their recorded
    /// digest, nothing read; this machine's when compiling).
    ///
    /// # Errors
    /// When the toolchain has no CUDA runtime headers (neither recorded nor
    /// found).
    pub fn request(
        self,
        toolchain: &Toolchain,
        arch: Arch,
    ) -> Result<KernelRequest, kiln::cuda::Error> {
        Ok(KernelRequest::new(self.name(), self.source(), arch)
            .nvcc_headers(toolchain)?
            .header(HEADER_NAME, HEADER)
            .every_kernel()
            .dep(DEFINITION, Digest::of(GENERATOR_VERSION.as_bytes())))
    }
}

/// The library's request function (see [`Program::request`]).
///
/// # Errors
/// As [`Program::request`].
pub fn request(
    program: &Program,
    toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln::cuda::Error> {
    program.request(toolchain, arch)
}

const UNARY_PRELUDE: &str = r#"
#define C(v) ((decltype(x))(v))
#define UNARY(T, EXPR, NAME)                                                          \
extern "C" __global__ void NAME(const unsigned numel, const unsigned num_dims,            \
                                const unsigned* info, const T* inp, T* out) {           \
    const unsigned* dims = info;                                                        \
    const unsigned* strides = info + num_dims;                                          \
    bool contiguous = info == nullptr || kl_contiguous(num_dims, dims, strides);      \
    KL_FOR_EACH(i, numel) {                                                           \
        unsigned j = contiguous ? i : kl_strided(i, num_dims, dims, strides);           \
        auto x = kl_up(inp[j]);                                                       \
        out[i] = kl_to<T>::from(EXPR);                                                \
    }                                                                                 \
}
"#;

const FLOAT_UNARY: [(&str, &str); 40] = [
    ("neg", "-x"),
    ("abs", "fabs(x)"),
    ("exp", "exp(x)"),
    ("exp2", "exp2(x)"),
    ("expm1", "expm1(x)"),
    ("log", "log(x)"),
    ("log2", "log2(x)"),
    ("log10", "log10(x)"),
    ("log1p", "log1p(x)"),
    ("sqrt", "sqrt(x)"),
    ("rsqrt", "C(1) / sqrt(x)"),
    ("recip", "C(1) / x"),
    ("sqr", "x * x"),
    ("sin", "sin(x)"),
    ("cos", "cos(x)"),
    ("tan", "tan(x)"),
    ("asin", "asin(x)"),
    ("acos", "acos(x)"),
    ("atan", "atan(x)"),
    ("sinh", "sinh(x)"),
    ("cosh", "cosh(x)"),
    ("tanh", "tanh(x)"),
    ("asinh", "asinh(x)"),
    ("erf", "erf(x)"),
    ("ceil", "ceil(x)"),
    ("floor", "floor(x)"),
    ("round", "round(x)"),
    ("trunc", "trunc(x)"),
    ("sign", "C((x > C(0)) - (x < C(0)))"),
    ("relu", "x > C(0) ? x : C(0)"),
    (
        "gelu",
        "C(0.5) * x * (C(1) + tanh(C(0.7978845608028654) * (x + C(0.044715) * x * x * x)))",
    ),
    (
        "gelu_erf",
        "C(0.5) * x * (C(1) + erf(x * C(0.7071067811865476)))",
    ),
    ("gelu_quick", "x / (C(1) + exp(C(-1.702) * x))"),
    ("silu", "x / (C(1) + exp(-x))"),
    ("sigmoid", "C(1) / (C(1) + exp(-x))"),
    ("softplus", "log1p(exp(x))"),
    ("mish", "x * tanh(log1p(exp(x)))"),
    ("hardswish", "x * fmin(fmax(x + C(3), C(0)), C(6)) / C(6)"),
    ("hardsigmoid", "fmin(fmax(x / C(6) + C(0.5), C(0)), C(1))"),
    ("logsigmoid", "-log1p(exp(-x))"),
];

const SIGNED_UNARY: [(&str, &str); 5] = [
    ("neg", "-x"),
    ("abs", "x < C(0) ? -x : x"),
    ("sqr", "x * x"),
    ("sign", "C((x > C(0)) - (x < C(0)))"),
    ("relu", "x > C(0) ? x : C(0)"),
];

fn unary() -> Generated {
    let mut g = Generated::new(UNARY_PRELUDE);
    for (ty, c) in FLOATS {
        for (op, expr) in FLOAT_UNARY {
            g.kernel("UNARY", &[c, expr], format!("u{op}_{ty}"));
        }
    }
    for (ty, c) in SIGNED {
        for (op, expr) in SIGNED_UNARY {
            g.kernel("UNARY", &[c, expr], format!("u{op}_{ty}"));
        }
    }
    g
}

const BINARY_PRELUDE: &str = r#"
#define BINARY(T, TO, EXPR, NAME)                                                     \
extern "C" __global__ void NAME(const unsigned numel, const unsigned num_dims,            \
                                const unsigned* info, const T* lhs, const T* rhs,       \
                                TO* out) {                                            \
    const unsigned* dims = info;                                                        \
    const unsigned* ls = info + num_dims;                                               \
    const unsigned* rs = info + 2 * num_dims;                                           \
    bool lc = info == nullptr || kl_contiguous(num_dims, dims, ls);                   \
    bool rc = info == nullptr || kl_contiguous(num_dims, dims, rs);                   \
    KL_FOR_EACH(i, numel) {                                                           \
        auto x = kl_up(lhs[lc ? i : kl_strided(i, num_dims, dims, ls)]);              \
        auto y = kl_up(rhs[rc ? i : kl_strided(i, num_dims, dims, rs)]);              \
        out[i] = kl_to<TO>::from(EXPR);                                               \
    }                                                                                 \
}
"#;

const ARITHMETIC: [(&str, &str); 6] = [
    ("add", "x + y"),
    ("sub", "x - y"),
    ("mul", "x * y"),
    ("div", "x / y"),
    ("maximum", "x > y ? x : y"),
    ("minimum", "x < y ? x : y"),
];

const FLOAT_BINARY: [(&str, &str); 4] = [
    ("pow", "pow(x, y)"),
    ("atan2", "atan2(x, y)"),
    ("hypot", "hypot(x, y)"),
    ("fmod", "fmod(x, y)"),
];

const COMPARISONS: [(&str, &str); 6] = [
    ("eq", "x == y"),
    ("ne", "x != y"),
    ("lt", "x < y"),
    ("le", "x <= y"),
    ("gt", "x > y"),
    ("ge", "x >= y"),
];

fn binary() -> Generated {
    let mut g = Generated::new(BINARY_PRELUDE);
    for (ty, c) in ALL {
        for (op, expr) in ARITHMETIC {
            g.kernel("BINARY", &[c, c, expr], format!("b{op}_{ty}"));
        }
    }
    for (ty, c) in FLOATS {
        for (op, expr) in FLOAT_BINARY {
            g.kernel("BINARY", &[c, c, expr], format!("b{op}_{ty}"));
        }
    }
    for (ty, c) in ALL {
        for (op, expr) in COMPARISONS {
            g.kernel("BINARY", &[c, "uint8_t", expr], format!("{op}_{ty}"));
        }
    }
    g
}

const CAST_PRELUDE: &str = r#"
#define CAST(S, D, NAME)                                                              \
extern "C" __global__ void NAME(const unsigned numel, const unsigned num_dims,            \
                                const unsigned* info, const S* inp, D* out) {           \
    const unsigned* dims = info;                                                        \
    const unsigned* strides = info + num_dims;                                          \
    bool contiguous = info == nullptr || kl_contiguous(num_dims, dims, strides);      \
    KL_FOR_EACH(i, numel) {                                                           \
        unsigned j = contiguous ? i : kl_strided(i, num_dims, dims, strides);           \
        out[i] = kl_to<D>::from(kl_up(inp[j]));                                       \
    }                                                                                 \
}
"#;

fn cast() -> Generated {
    let mut g = Generated::new(CAST_PRELUDE);
    for (from, s) in ALL {
        for (to, d) in ALL {
            if from != to {
                g.kernel("CAST", &[s, d], format!("cast_{from}_{to}"));
            }
        }
    }
    g
}

const AFFINE_PRELUDE: &str = r#"
#define AFFINE_KERNEL(T, ARGS, EXPR, NAME)                                            \
extern "C" __global__ void NAME(const unsigned numel, const T* inp, T* out ARGS) {      \
    KL_FOR_EACH(i, numel) {                                                           \
        auto x = kl_up(inp[i]);                                                       \
        typedef decltype(x) A;                                                        \
        out[i] = kl_to<T>::from(EXPR);                                                \
    }                                                                                 \
}
#define COMMA ,
#define AFFINE(T, NAME) AFFINE_KERNEL(T, COMMA double mul COMMA double add, x * (A)mul + (A)add, NAME)
#define CLAMP(T, NAME) AFFINE_KERNEL(T, COMMA double lo COMMA double hi, x < (A)lo ? (A)lo : (x > (A)hi ? (A)hi : x), NAME)
#define ELU(T, NAME) AFFINE_KERNEL(T, COMMA double alpha, x > A(0) ? x : (A)alpha * (exp(x) - A(1)), NAME)
#define POWF(T, NAME) AFFINE_KERNEL(T, COMMA double e, pow(x, (A)e), NAME)
#define LEAKY_RELU(T, NAME) AFFINE_KERNEL(T, COMMA double slope, x > A(0) ? x : (A)slope * x, NAME)
"#;

fn affine() -> Generated {
    let mut g = Generated::new(AFFINE_PRELUDE);
    for (ty, c) in ALL {
        g.kernel("AFFINE", &[c], format!("affine_{ty}"));
        g.kernel("CLAMP", &[c], format!("clamp_{ty}"));
    }
    for (ty, c) in FLOATS {
        g.kernel("ELU", &[c], format!("elu_{ty}"));
        g.kernel("POWF", &[c], format!("powf_{ty}"));
        g.kernel("LEAKY_RELU", &[c], format!("leaky_relu_{ty}"));
    }
    g
}

const FILL_PRELUDE: &str = r#"
#define FILL(T, NAME)                                                                 \
extern "C" __global__ void NAME(T* out, const double value, const unsigned numel) {     \
    KL_FOR_EACH(i, numel) { out[i] = kl_to<T>::from(value); }                         \
}
#define COPY2D(T, NAME)                                                               \
extern "C" __global__ void NAME(const T* src, T* dst, unsigned rows, unsigned cols,      \
                                unsigned src_stride, unsigned dst_stride) {               \
    KL_FOR_EACH(i, rows * cols) {                                                     \
        unsigned r = i / cols, c = i % cols;                                            \
        dst[r * dst_stride + c] = src[r * src_stride + c];                            \
    }                                                                                 \
}
#define CONST_SET(T, NAME)                                                            \
extern "C" __global__ void NAME(const unsigned numel, const unsigned num_dims,            \
                                const unsigned* info, const double value, T* out) {     \
    const unsigned* dims = info;                                                        \
    const unsigned* strides = info + num_dims;                                          \
    bool contiguous = info == nullptr || kl_contiguous(num_dims, dims, strides);      \
    T v = kl_to<T>::from(value);                                                      \
    KL_FOR_EACH(i, numel) {                                                           \
        out[contiguous ? i : kl_strided(i, num_dims, dims, strides)] = v;             \
    }                                                                                 \
}
"#;

fn fill() -> Generated {
    let mut g = Generated::new(FILL_PRELUDE);
    for (ty, c) in ALL {
        g.kernel("FILL", &[c], format!("fill_{ty}"));
        g.kernel("COPY2D", &[c], format!("copy2d_{ty}"));
        g.kernel("CONST_SET", &[c], format!("const_set_{ty}"));
    }
    g
}

const INDEXING_PRELUDE: &str = r#"
// Shapes: (left, src_dim, right) for the source, ids_dim for the indices.
#define INDEX_SELECT(I, T, NAME)                                                      \
extern "C" __global__ void NAME(const unsigned numel, const I* ids, const T* inp,       \
                                T* out, unsigned left, unsigned src_dim, unsigned ids_dim,  \
                                unsigned right) {                                       \
    KL_FOR_EACH(i, numel) {                                                           \
        unsigned r = i % right, rest = i / right;                                       \
        unsigned id = rest % ids_dim, l = rest / ids_dim;                               \
        unsigned s = (unsigned)ids[id];                                                   \
        out[i] = s < src_dim ? inp[(l * src_dim + s) * right + r] : kl_to<T>::from(0); \
    }                                                                                 \
}
#define GATHER(I, T, NAME)                                                            \
extern "C" __global__ void NAME(const unsigned numel, const I* ids, const T* inp,       \
                                T* out, unsigned left, unsigned src_dim, unsigned ids_dim,  \
                                unsigned right) {                                       \
    KL_FOR_EACH(i, numel) {                                                           \
        unsigned r = i % right, l = i / (right * ids_dim);                              \
        unsigned s = (unsigned)ids[i];                                                    \
        out[i] = s < src_dim ? inp[(l * src_dim + s) * right + r] : kl_to<T>::from(0); \
    }                                                                                 \
}
#define INDEX_ADD(I, T, NAME)                                                         \
extern "C" __global__ void NAME(const I* ids, unsigned ids_dim, const T* inp, T* out,   \
                                unsigned left, unsigned src_dim, unsigned dst_dim,          \
                                unsigned right) {                                       \
    KL_FOR_EACH(i, left * right) {                                                    \
        unsigned l = i / right, r = i % right;                                          \
        for (unsigned j = 0; j < ids_dim; ++j) {                                        \
            unsigned d = (unsigned)ids[j];                                                \
            if (d >= dst_dim) continue;                                               \
            unsigned o = (l * dst_dim + d) * right + r;                                 \
            out[o] = kl_to<T>::from(kl_up(out[o]) + kl_up(inp[(l * src_dim + j) * right + r])); \
        }                                                                             \
    }                                                                                 \
}
#define SCATTER_ADD(I, T, NAME)                                                       \
extern "C" __global__ void NAME(const I* ids, const T* inp, T* out, unsigned left,      \
                                unsigned src_dim, unsigned dst_dim, unsigned right) {       \
    KL_FOR_EACH(i, left * right) {                                                    \
        unsigned l = i / right, r = i % right;                                          \
        for (unsigned j = 0; j < src_dim; ++j) {                                        \
            unsigned s = (l * src_dim + j) * right + r;                                 \
            unsigned d = (unsigned)ids[s];                                                \
            if (d >= dst_dim) continue;                                               \
            unsigned o = (l * dst_dim + d) * right + r;                                 \
            out[o] = kl_to<T>::from(kl_up(out[o]) + kl_up(inp[s]));                   \
        }                                                                             \
    }                                                                                 \
}
"#;

fn indexing() -> Generated {
    let mut g = Generated::new(INDEXING_PRELUDE);
    let ops = [
        ("INDEX_SELECT", "is"),
        ("GATHER", "gather"),
        ("INDEX_ADD", "ia"),
        ("SCATTER_ADD", "sa"),
    ];
    for (macro_name, op) in ops {
        for (index, i) in INDEX {
            for (ty, c) in ALL {
                g.kernel(macro_name, &[i, c], format!("{op}_{index}_{ty}"));
            }
        }
    }
    g
}

const REDUCE_PRELUDE: &str = r#"
// One block per row of `cols` contiguous elements.
template <typename T>
__device__ void kl_row_sum(const T* src, T* dst, unsigned cols, bool mean) {
    typedef typename kl_acc<T>::type A;
    __shared__ A shared[KL_BLOCK];
    const T* row = src + blockIdx.x * cols;
    A acc = A(0);
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) acc += kl_up(row[c]);
    A total = kl_block_sum(acc, shared);
    if (threadIdx.x == 0) dst[blockIdx.x] = kl_to<T>::from(mean ? total / (A)cols : total);
}

template <typename T>
__device__ void kl_row_prod(const T* src, T* dst, unsigned cols) {
    typedef typename kl_acc<T>::type A;
    __shared__ A shared[KL_BLOCK];
    const T* row = src + blockIdx.x * cols;
    A acc = A(1);
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) acc *= kl_up(row[c]);
    shared[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] *= shared[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) dst[blockIdx.x] = kl_to<T>::from(shared[0]);
}

// The row's extremum (`max`) or its position (`arg`).
template <typename T, bool max, bool arg, typename O>
__device__ void kl_row_extremum(const T* src, O* dst, unsigned cols) {
    typedef typename kl_acc<T>::type A;
    __shared__ A values[KL_BLOCK];
    __shared__ uint32_t positions[KL_BLOCK];
    const T* row = src + blockIdx.x * cols;
    A best = max ? kl_limits<A>::lowest() : kl_limits<A>::highest();
    uint32_t at = 0;
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
        A v = kl_up(row[c]);
        if (max ? v > best : v < best) { best = v; at = (uint32_t)c; }
    }
    values[threadIdx.x] = best;
    positions[threadIdx.x] = at;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            A other = values[threadIdx.x + s];
            if (max ? other > values[threadIdx.x] : other < values[threadIdx.x]) {
                values[threadIdx.x] = other;
                positions[threadIdx.x] = positions[threadIdx.x + s];
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (arg) dst[blockIdx.x] = kl_to<O>::from(positions[0]);
        else dst[blockIdx.x] = kl_to<O>::from(values[0]);
    }
}

// Inclusive prefix sum of each row, one thread per row.
template <typename T>
__device__ void kl_cumsum(const T* src, T* dst, unsigned rows, unsigned cols) {
    typedef typename kl_acc<T>::type A;
    KL_FOR_EACH(r, rows) {
        A acc = A(0);
        for (unsigned c = 0; c < cols; ++c) {
            acc += kl_up(src[r * cols + c]);
            dst[r * cols + c] = kl_to<T>::from(acc);
        }
    }
}

template <typename T>
__device__ void kl_softmax(const T* src, T* dst, unsigned cols) {
    typedef typename kl_acc<T>::type A;
    __shared__ A shared[KL_BLOCK];
    const T* row = src + blockIdx.x * cols;
    T* out = dst + blockIdx.x * cols;
    A high = -INFINITY;
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) high = fmax(high, kl_up(row[c]));
    shared[threadIdx.x] = high;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] = fmax(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    high = shared[0];
    __syncthreads();
    A sum = A(0);
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) sum += exp(kl_up(row[c]) - high);
    sum = kl_block_sum(sum, shared);
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x)
        out[c] = kl_to<T>::from(exp(kl_up(row[c]) - high) / sum);
}

template <typename T>
__device__ void kl_norm(const T* src, T* dst, const T* alpha, const T* beta, unsigned cols,
                        float eps, bool center) {
    typedef typename kl_acc<T>::type A;
    __shared__ A shared[KL_BLOCK];
    const T* row = src + blockIdx.x * cols;
    T* out = dst + blockIdx.x * cols;
    A mean = A(0);
    if (center) {
        A sum = A(0);
        for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) sum += kl_up(row[c]);
        mean = kl_block_sum(sum, shared) / (A)cols;
    }
    A squares = A(0);
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
        A d = kl_up(row[c]) - mean;
        squares += d * d;
    }
    A scale = A(1) / sqrt(kl_block_sum(squares, shared) / (A)cols + (A)eps);
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
        A y = (kl_up(row[c]) - mean) * scale * kl_up(alpha[c]);
        if (beta != nullptr) y += kl_up(beta[c]);
        out[c] = kl_to<T>::from(y);
    }
}

#define RSUM(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, unsigned cols) { kl_row_sum<T>(src, dst, cols, false); }
#define MEAN(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, unsigned cols) { kl_row_sum<T>(src, dst, cols, true); }
#define PROD(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, unsigned cols) { kl_row_prod<T>(src, dst, cols); }
#define RMIN(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, unsigned cols) { kl_row_extremum<T, false, false, T>(src, dst, cols); }
#define RMAX(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, unsigned cols) { kl_row_extremum<T, true, false, T>(src, dst, cols); }
#define ARGMIN(T, NAME) extern "C" __global__ void NAME(const T* src, uint32_t* dst, unsigned cols) { kl_row_extremum<T, false, true, uint32_t>(src, dst, cols); }
#define ARGMAX(T, NAME) extern "C" __global__ void NAME(const T* src, uint32_t* dst, unsigned cols) { kl_row_extremum<T, true, true, uint32_t>(src, dst, cols); }
#define CUMSUM(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, unsigned rows, unsigned cols) { kl_cumsum<T>(src, dst, rows, cols); }
#define SOFTMAX(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, unsigned cols) { kl_softmax<T>(src, dst, cols); }
#define RMSNORM(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, const T* alpha, unsigned cols, float eps) { kl_norm<T>(src, dst, alpha, nullptr, cols, eps, false); }
#define LAYERNORM(T, NAME) extern "C" __global__ void NAME(const T* src, T* dst, const T* alpha, const T* beta, unsigned cols, float eps) { kl_norm<T>(src, dst, alpha, beta, cols, eps, true); }
"#;

fn reduce() -> Generated {
    let mut g = Generated::new(REDUCE_PRELUDE);
    let every = [
        ("RSUM", "fast_sum"),
        ("PROD", "fast_prod"),
        ("RMIN", "fast_min"),
        ("RMAX", "fast_max"),
        ("ARGMIN", "fast_argmin"),
        ("ARGMAX", "fast_argmax"),
        ("CUMSUM", "cumsum"),
    ];
    for (macro_name, op) in every {
        for (ty, c) in ALL {
            g.kernel(macro_name, &[c], format!("{op}_{ty}"));
        }
    }
    let floats = [
        ("MEAN", "fast_mean"),
        ("SOFTMAX", "softmax"),
        ("RMSNORM", "rmsnorm"),
        ("LAYERNORM", "layernorm"),
    ];
    for (macro_name, op) in floats {
        for (ty, c) in FLOATS {
            g.kernel(macro_name, &[c], format!("{op}_{ty}"));
        }
    }
    g
}

const TERNARY_PRELUDE: &str = r#"
#define WHERE(I, T, NAME)                                                             \
extern "C" __global__ void NAME(const unsigned numel, const unsigned num_dims,            \
                                const unsigned* info, const I* ids, const T* t,         \
                                const T* f, T* out) {                                 \
    const unsigned* dims = info;                                                        \
    const unsigned* is = info + num_dims;                                               \
    const unsigned* ts = info + 2 * num_dims;                                           \
    const unsigned* fs = info + 3 * num_dims;                                           \
    bool ic = info == nullptr || kl_contiguous(num_dims, dims, is);                   \
    bool tc = info == nullptr || kl_contiguous(num_dims, dims, ts);                   \
    bool fc = info == nullptr || kl_contiguous(num_dims, dims, fs);                   \
    KL_FOR_EACH(i, numel) {                                                           \
        I c = ids[ic ? i : kl_strided(i, num_dims, dims, is)];                        \
        out[i] = c ? t[tc ? i : kl_strided(i, num_dims, dims, ts)]                    \
                   : f[fc ? i : kl_strided(i, num_dims, dims, fs)];                   \
    }                                                                                 \
}
"#;

fn ternary() -> Generated {
    let mut g = Generated::new(TERNARY_PRELUDE);
    for (index, i) in INDEX {
        for (ty, c) in ALL {
            g.kernel("WHERE", &[i, c], format!("where_{index}_{ty}"));
        }
    }
    g
}

const CONV_PRELUDE: &str = r#"
// Layouts: input (b, c_in, l) or (b, c_in, h, w); kernel (c_out, c_in, k) or
// (c_out, c_in, kh, kw); no dilation, one group.
template <typename T>
__device__ void kl_conv1d(const T* x, const T* k, T* y, unsigned b, unsigned c_in, unsigned l,
                          unsigned c_out, unsigned kl, unsigned stride, unsigned pad) {
    typedef typename kl_acc<T>::type A;
    unsigned l_out = (l + 2 * pad - kl) / stride + 1;
    KL_FOR_EACH(i, b * c_out * l_out) {
        unsigned o = i % l_out, co = (i / l_out) % c_out, n = i / (l_out * c_out);
        A acc = A(0);
        for (unsigned ci = 0; ci < c_in; ++ci)
            for (unsigned j = 0; j < kl; ++j) {
                unsigned p = o * stride + j;
                if (p < pad || p - pad >= l) continue;
                acc += kl_up(x[(n * c_in + ci) * l + p - pad]) * kl_up(k[(co * c_in + ci) * kl + j]);
            }
        y[i] = kl_to<T>::from(acc);
    }
}

template <typename T>
__device__ void kl_conv2d(const T* x, const T* k, T* y, unsigned b, unsigned c_in, unsigned h,
                          unsigned w, unsigned c_out, unsigned kh, unsigned kw, unsigned stride,
                          unsigned pad) {
    typedef typename kl_acc<T>::type A;
    unsigned h_out = (h + 2 * pad - kh) / stride + 1, w_out = (w + 2 * pad - kw) / stride + 1;
    KL_FOR_EACH(i, b * c_out * h_out * w_out) {
        unsigned ox = i % w_out, oy = (i / w_out) % h_out;
        unsigned co = (i / (w_out * h_out)) % c_out, n = i / (w_out * h_out * c_out);
        A acc = A(0);
        for (unsigned ci = 0; ci < c_in; ++ci)
            for (unsigned ky = 0; ky < kh; ++ky)
                for (unsigned kx = 0; kx < kw; ++kx) {
                    unsigned py = oy * stride + ky, px = ox * stride + kx;
                    if (py < pad || px < pad || py - pad >= h || px - pad >= w) continue;
                    acc += kl_up(x[((n * c_in + ci) * h + py - pad) * w + px - pad]) *
                           kl_up(k[((co * c_in + ci) * kh + ky) * kw + kx]);
                }
        y[i] = kl_to<T>::from(acc);
    }
}

template <typename T>
__device__ void kl_conv_transpose1d(const T* x, const T* k, T* y, unsigned b, unsigned c_in,
                                    unsigned l, unsigned c_out, unsigned kl, unsigned stride) {
    typedef typename kl_acc<T>::type A;
    unsigned l_out = (l - 1) * stride + kl;
    KL_FOR_EACH(i, b * c_out * l_out) {
        unsigned o = i % l_out, co = (i / l_out) % c_out, n = i / (l_out * c_out);
        A acc = A(0);
        for (unsigned ci = 0; ci < c_in; ++ci)
            for (unsigned j = 0; j < kl; ++j) {
                if (o < j || (o - j) % stride != 0) continue;
                unsigned p = (o - j) / stride;
                if (p >= l) continue;
                acc += kl_up(x[(n * c_in + ci) * l + p]) * kl_up(k[(ci * c_out + co) * kl + j]);
            }
        y[i] = kl_to<T>::from(acc);
    }
}

template <typename T>
__device__ void kl_conv_transpose2d(const T* x, const T* k, T* y, unsigned b, unsigned c_in,
                                    unsigned h, unsigned w, unsigned c_out, unsigned kh, unsigned kw,
                                    unsigned stride) {
    typedef typename kl_acc<T>::type A;
    unsigned h_out = (h - 1) * stride + kh, w_out = (w - 1) * stride + kw;
    KL_FOR_EACH(i, b * c_out * h_out * w_out) {
        unsigned ox = i % w_out, oy = (i / w_out) % h_out;
        unsigned co = (i / (w_out * h_out)) % c_out, n = i / (w_out * h_out * c_out);
        A acc = A(0);
        for (unsigned ci = 0; ci < c_in; ++ci)
            for (unsigned ky = 0; ky < kh; ++ky)
                for (unsigned kx = 0; kx < kw; ++kx) {
                    if (oy < ky || ox < kx || (oy - ky) % stride || (ox - kx) % stride) continue;
                    unsigned py = (oy - ky) / stride, px = (ox - kx) / stride;
                    if (py >= h || px >= w) continue;
                    acc += kl_up(x[((n * c_in + ci) * h + py) * w + px]) *
                           kl_up(k[((ci * c_out + co) * kh + ky) * kw + kx]);
                }
        y[i] = kl_to<T>::from(acc);
    }
}

template <typename T, bool max>
__device__ void kl_pool2d(const T* x, T* y, unsigned planes, unsigned h, unsigned w, unsigned k,
                          unsigned stride) {
    typedef typename kl_acc<T>::type A;
    unsigned h_out = (h - k) / stride + 1, w_out = (w - k) / stride + 1;
    KL_FOR_EACH(i, planes * h_out * w_out) {
        unsigned ox = i % w_out, oy = (i / w_out) % h_out, p = i / (w_out * h_out);
        A acc = max ? A(-INFINITY) : A(0);
        for (unsigned ky = 0; ky < k; ++ky)
            for (unsigned kx = 0; kx < k; ++kx) {
                A v = kl_up(x[(p * h + oy * stride + ky) * w + ox * stride + kx]);
                acc = max ? fmax(acc, v) : acc + v;
            }
        y[i] = kl_to<T>::from(max ? acc : acc / (A)(k * k));
    }
}

template <typename T>
__device__ void kl_upsample2d(const T* x, T* y, unsigned planes, unsigned h, unsigned w,
                              unsigned h_out, unsigned w_out) {
    KL_FOR_EACH(i, planes * h_out * w_out) {
        unsigned ox = i % w_out, oy = (i / w_out) % h_out, p = i / (w_out * h_out);
        y[i] = x[(p * h + oy * h / h_out) * w + ox * w / w_out];
    }
}

template <typename T>
__device__ void kl_im2col(const T* x, T* cols, unsigned c, unsigned h, unsigned w, unsigned kh,
                          unsigned kw, unsigned stride, unsigned pad) {
    unsigned h_out = (h + 2 * pad - kh) / stride + 1, w_out = (w + 2 * pad - kw) / stride + 1;
    KL_FOR_EACH(i, c * kh * kw * h_out * w_out) {
        unsigned ox = i % w_out, oy = (i / w_out) % h_out, r = i / (w_out * h_out);
        unsigned kx = r % kw, ky = (r / kw) % kh, ci = r / (kw * kh);
        unsigned py = oy * stride + ky, px = ox * stride + kx;
        bool inside = py >= pad && px >= pad && py - pad < h && px - pad < w;
        cols[i] = inside ? x[(ci * h + py - pad) * w + px - pad] : kl_to<T>::from(0);
    }
}

template <typename T>
__device__ void kl_col2im1d(const T* cols, T* x, unsigned c, unsigned l, unsigned k,
                            unsigned stride) {
    typedef typename kl_acc<T>::type A;
    unsigned l_in = (l - 1) * stride + k;
    KL_FOR_EACH(i, c * l_in) {
        unsigned p = i % l_in, ci = i / l_in;
        A acc = A(0);
        for (unsigned j = 0; j < k; ++j) {
            if (p < j || (p - j) % stride) continue;
            unsigned o = (p - j) / stride;
            if (o < l) acc += kl_up(cols[(ci * k + j) * l + o]);
        }
        x[i] = kl_to<T>::from(acc);
    }
}

#define CONV1D(T, NAME) extern "C" __global__ void NAME(const T* x, const T* k, T* y, unsigned b, unsigned c_in, unsigned l, unsigned c_out, unsigned kl, unsigned stride, unsigned pad) { kl_conv1d<T>(x, k, y, b, c_in, l, c_out, kl, stride, pad); }
#define CONV2D(T, NAME) extern "C" __global__ void NAME(const T* x, const T* k, T* y, unsigned b, unsigned c_in, unsigned h, unsigned w, unsigned c_out, unsigned kh, unsigned kw, unsigned stride, unsigned pad) { kl_conv2d<T>(x, k, y, b, c_in, h, w, c_out, kh, kw, stride, pad); }
#define CONV_TRANSPOSE1D(T, NAME) extern "C" __global__ void NAME(const T* x, const T* k, T* y, unsigned b, unsigned c_in, unsigned l, unsigned c_out, unsigned kl, unsigned stride) { kl_conv_transpose1d<T>(x, k, y, b, c_in, l, c_out, kl, stride); }
#define CONV_TRANSPOSE2D(T, NAME) extern "C" __global__ void NAME(const T* x, const T* k, T* y, unsigned b, unsigned c_in, unsigned h, unsigned w, unsigned c_out, unsigned kh, unsigned kw, unsigned stride) { kl_conv_transpose2d<T>(x, k, y, b, c_in, h, w, c_out, kh, kw, stride); }
#define AVG_POOL2D(T, NAME) extern "C" __global__ void NAME(const T* x, T* y, unsigned planes, unsigned h, unsigned w, unsigned k, unsigned stride) { kl_pool2d<T, false>(x, y, planes, h, w, k, stride); }
#define MAX_POOL2D(T, NAME) extern "C" __global__ void NAME(const T* x, T* y, unsigned planes, unsigned h, unsigned w, unsigned k, unsigned stride) { kl_pool2d<T, true>(x, y, planes, h, w, k, stride); }
#define UPSAMPLE_NEAREST1D(T, NAME) extern "C" __global__ void NAME(const T* x, T* y, unsigned planes, unsigned l, unsigned l_out) { kl_upsample2d<T>(x, y, planes, 1, l, 1, l_out); }
#define UPSAMPLE_NEAREST2D(T, NAME) extern "C" __global__ void NAME(const T* x, T* y, unsigned planes, unsigned h, unsigned w, unsigned h_out, unsigned w_out) { kl_upsample2d<T>(x, y, planes, h, w, h_out, w_out); }
#define IM2COL1D(T, NAME) extern "C" __global__ void NAME(const T* x, T* cols, unsigned c, unsigned l, unsigned k, unsigned stride, unsigned pad) { kl_im2col<T>(x, cols, c, 1, l, 1, k, stride, pad); }
#define IM2COL(T, NAME) extern "C" __global__ void NAME(const T* x, T* cols, unsigned c, unsigned h, unsigned w, unsigned kh, unsigned kw, unsigned stride, unsigned pad) { kl_im2col<T>(x, cols, c, h, w, kh, kw, stride, pad); }
#define COL2IM1D(T, NAME) extern "C" __global__ void NAME(const T* cols, T* x, unsigned c, unsigned l, unsigned k, unsigned stride) { kl_col2im1d<T>(cols, x, c, l, k, stride); }
"#;

fn conv() -> Generated {
    let mut g = Generated::new(CONV_PRELUDE);
    let ops = [
        "CONV1D",
        "CONV2D",
        "CONV_TRANSPOSE1D",
        "CONV_TRANSPOSE2D",
        "AVG_POOL2D",
        "MAX_POOL2D",
        "UPSAMPLE_NEAREST1D",
        "UPSAMPLE_NEAREST2D",
        "IM2COL1D",
        "IM2COL",
        "COL2IM1D",
    ];
    for macro_name in ops {
        for (ty, c) in FLOATS {
            let op = macro_name.to_lowercase();
            g.kernel(macro_name, &[c], format!("{op}_{ty}"));
        }
    }
    g
}

const SORT_PRELUDE: &str = r#"
// Bitonic argsort of one row per block: `ncols_pad` (a power of two, at most
// the block size) positions in dynamic shared memory.
template <typename T, bool ascending>
__device__ void kl_argsort(const T* x, uint32_t* dst, int ncols, int ncols_pad) {
    extern __shared__ int row_positions[];
    int col = threadIdx.x;
    int row = blockIdx.y;
    if (col >= ncols_pad) return;
    const T* row_x = x + row * ncols;
    row_positions[col] = col;
    __syncthreads();
    for (int k = 2; k <= ncols_pad; k *= 2) {
        for (int j = k / 2; j > 0; j /= 2) {
            int ixj = col ^ j;
            if (ixj > col) {
                int a = row_positions[col], b = row_positions[ixj];
                bool a_after = a >= ncols || (b < ncols && (ascending
                    ? kl_up(row_x[a]) > kl_up(row_x[b]) : kl_up(row_x[a]) < kl_up(row_x[b])));
                bool b_after = b >= ncols || (a < ncols && (ascending
                    ? kl_up(row_x[b]) > kl_up(row_x[a]) : kl_up(row_x[b]) < kl_up(row_x[a])));
                bool swap = (col & k) == 0 ? a_after : b_after;
                if (swap) { row_positions[col] = b; row_positions[ixj] = a; }
            }
            __syncthreads();
        }
    }
    if (col < ncols) dst[row * ncols + col] = (uint32_t)row_positions[col];
}

#define ASORT_ASC(T, NAME) extern "C" __global__ void NAME(const T* x, uint32_t* dst, const int ncols, int ncols_pad) { kl_argsort<T, true>(x, dst, ncols, ncols_pad); }
#define ASORT_DESC(T, NAME) extern "C" __global__ void NAME(const T* x, uint32_t* dst, const int ncols, int ncols_pad) { kl_argsort<T, false>(x, dst, ncols, ncols_pad); }
"#;

fn sort() -> Generated {
    let mut g = Generated::new(SORT_PRELUDE);
    for (ty, c) in ALL {
        g.kernel("ASORT_ASC", &[c], format!("asort_asc_{ty}"));
        g.kernel("ASORT_DESC", &[c], format!("asort_desc_{ty}"));
    }
    g
}

const ROPE_PRELUDE: &str = r#"
// x: (b, h, t, d); cos, sin: (t, d / 2).
template <typename T, int layout>
__device__ void kl_rope(const T* x, const T* cs, const T* sn, T* dst, uint32_t bh,
                        uint32_t t, uint32_t d) {
    typedef typename kl_acc<T>::type A;
    KL_FOR_EACH(i, (unsigned)bh * t * d / 2) {
        uint32_t hd = d / 2;
        uint32_t pair = i % hd, pos = (i / hd) % t;
        unsigned base = (i / hd) * d;
        unsigned a, b;
        if (layout == 0) { a = base + pair; b = base + pair + hd; }  // halves
        else { a = base + 2 * pair; b = a + 1; }                    // interleaved
        A c = kl_up(cs[pos * hd + pair]), s = kl_up(sn[pos * hd + pair]);
        A xa = kl_up(x[a]), xb = kl_up(x[b]);
        dst[a] = kl_to<T>::from(xa * c - xb * s);
        dst[b] = kl_to<T>::from(xa * s + xb * c);
    }
}

template <typename T, bool gelu>
__device__ void kl_gated(const T* x, T* dst, unsigned rows, unsigned d) {
    typedef typename kl_acc<T>::type A;
    KL_FOR_EACH(i, rows * d) {
        unsigned r = i / d, c = i % d;
        A g = kl_up(x[r * 2 * d + c]), u = kl_up(x[r * 2 * d + d + c]);
        A act = gelu ? A(0.5) * g * (A(1) + erf(g * A(0.7071067811865476)))
                     : g / (A(1) + exp(-g));
        dst[i] = kl_to<T>::from(act * u);
    }
}

#define ROPE(T, NAME) extern "C" __global__ void NAME(const T* x, const T* cs, const T* sn, T* dst, uint32_t bh, uint32_t t, uint32_t d) { kl_rope<T, 0>(x, cs, sn, dst, bh, t, d); }
#define ROPE_I(T, NAME) extern "C" __global__ void NAME(const T* x, const T* cs, const T* sn, T* dst, uint32_t bh, uint32_t t, uint32_t d) { kl_rope<T, 1>(x, cs, sn, dst, bh, t, d); }
#define ROPE_THD(T, NAME) extern "C" __global__ void NAME(const T* x, const T* cs, const T* sn, T* dst, uint32_t b, uint32_t t, uint32_t hd) { kl_rope<T, 0>(x, cs, sn, dst, b, t, hd); }
#define SILU_MUL(T, NAME) extern "C" __global__ void NAME(const T* x, T* dst, unsigned rows, unsigned d) { kl_gated<T, false>(x, dst, rows, d); }
#define GELU_MUL(T, NAME) extern "C" __global__ void NAME(const T* x, T* dst, unsigned rows, unsigned d) { kl_gated<T, true>(x, dst, rows, d); }
#define KVCONCAT(T, NAME)                                                             \
extern "C" __global__ void NAME(const T* a, const T* b, T* dst, unsigned rows,          \
                                unsigned a_cols, unsigned b_cols) {                       \
    unsigned cols = a_cols + b_cols;                                                    \
    KL_FOR_EACH(i, rows * cols) {                                                     \
        unsigned r = i / cols, c = i % cols;                                            \
        dst[i] = c < a_cols ? a[r * a_cols + c] : b[r * b_cols + c - a_cols];         \
    }                                                                                 \
}
"#;

fn rope() -> Generated {
    let mut g = Generated::new(ROPE_PRELUDE);
    for (ty, c) in FLOATS {
        for macro_name in ["ROPE", "ROPE_I", "ROPE_THD", "SILU_MUL", "GELU_MUL"] {
            let op = macro_name.to_lowercase();
            g.kernel(macro_name, &[c], format!("{op}_{ty}"));
        }
    }
    for (ty, c) in ALL {
        g.kernel("KVCONCAT", &[c], format!("kvconcat_{ty}"));
    }
    g
}
