"""The Python peers of the GPU comparison (bench/gpu/compare.py): the same
first launch as `kiln-bench gpu --path cubin` (kiln_axpy<float>, 1M
elements copied in, one launch, copied back, checked), in a fresh process.

    python3 peers.py cupy                  # CuPy RawModule, its kernel cache warm
    python3 peers.py cuda-core CUBIN ENTRY # cuda.core loading the CUBIN Kiln serves
    python3 peers.py triton                # Triton, its cache warm

Prints one JSON line (ns from the start of the interpreter's work here);
the comparison times the whole process from outside.
"""

import json
import sys
import time

STARTED = time.perf_counter_ns()

N = 1 << 20
A = 2.0

# The kernel set's source (examples/kiln-kernel-set), unchanged.
AXPY = r"""
template <typename T>
__global__ void kiln_axpy(int n, T a, const T* __restrict__ x, T* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def inputs(np):
    i = np.arange(N)
    return (i % 17).astype(np.float32), (i % 5).astype(np.float32)


def check(np, x, y, got):
    want = np.float32(A) * x + y
    wrong = int(np.count_nonzero(got != want))
    if wrong:
        raise SystemExit(f"{wrong} elements differ from the CPU reference")


def cupy_axpy():
    import cupy as cp
    import numpy as np

    module = cp.RawModule(code=AXPY, name_expressions=["kiln_axpy<float>"])
    kernel = module.get_function("kiln_axpy<float>")
    x, y = inputs(np)
    dx, dy = cp.asarray(x), cp.asarray(y)
    kernel(((N + 255) // 256,), (256,), (np.int32(N), np.float32(A), dx, dy))
    got = cp.asnumpy(dy)
    return np, x, y, got


def cuda_core_axpy(cubin, entry):
    import numpy as np

    try:
        from cuda.core import Device, LaunchConfig, ObjectCode, launch
    except ImportError:  # cuda.core before 1.0
        from cuda.core.experimental import Device, LaunchConfig, ObjectCode, launch
    from cuda.bindings import driver

    def ok(result):
        status = result[0] if isinstance(result, tuple) else result
        if int(status) != 0:
            raise SystemExit(f"driver call failed: {status}")

    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    kernel = ObjectCode.from_cubin(cubin).get_kernel(entry)
    x, y = inputs(np)
    dx = device.allocate(x.nbytes, stream=stream)
    dy = device.allocate(y.nbytes, stream=stream)
    stream.sync()
    ok(driver.cuMemcpyHtoD(dx.handle, x, x.nbytes))
    ok(driver.cuMemcpyHtoD(dy.handle, y, y.nbytes))
    config = LaunchConfig(grid=(N + 255) // 256, block=256)
    launch(stream, config, kernel, np.int32(N), np.float32(A), dx, dy)
    stream.sync()
    got = np.empty_like(y)
    ok(driver.cuMemcpyDtoH(got, dy.handle, got.nbytes))
    return np, x, y, got


def triton_axpy():
    import numpy as np
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, n, a, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(y_ptr + offsets, a * x + y, mask=mask)

    x, y = inputs(np)
    dx = torch.from_numpy(x).cuda()
    dy = torch.from_numpy(y).cuda()
    axpy[(triton.cdiv(N, 1024),)](dx, dy, N, A, BLOCK=1024)
    got = dy.cpu().numpy()
    return np, x, y, got


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "cupy":
        result = cupy_axpy()
    elif mode == "cuda-core" and len(sys.argv) == 4:
        result = cuda_core_axpy(sys.argv[2], sys.argv[3])
    elif mode == "triton":
        result = triton_axpy()
    else:
        raise SystemExit(__doc__)
    total = time.perf_counter_ns() - STARTED
    check(*result)
    print(json.dumps({"total_ns": total}))


if __name__ == "__main__":
    main()
