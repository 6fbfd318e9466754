"""The host program (``main.hip``), ``CMakeLists.txt`` and README of an exported project.

``main.hip`` is plain HIP host code a reader can follow: read the ``.npy`` inputs with a
small reader (little-endian f32 / f16 / i32, C order; anything else is refused with a
message), allocate one device buffer per array, run the dispatches once in order and
compare the outputs with the expected ``.npy`` files, then time warm-up + repeated runs
with hipEvents, per dispatch and in total. Exit code 0 = all outputs match, 1 = mismatch,
2 = bad data files, 3 = a HIP error.

The functions here only build text from a ``Plan`` (what ``export.write_project`` has
validated); they never touch the file system.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpusim.hw import Arch
from gpusim.program import Buffer

from .emit import f32_literal, i32_literal, kernel_prototype

#: bf16 arrays are files of raw bfloat16 bit patterns (uint16), as numpy has no bf16
#: int8/uint8 arrays are files of bytes ("|i1", "|u1")
NPY_DTYPE = {"f32": "<f4", "f16": "<f2", "i32": "<i4", "bf16": "<u2", "i8": "|i1", "u8": "|u1"}
#: default (atol, rtol) per dtype: f32 allows reduction-order and libm differences,
#: f16 one rounding of the output, i32 nothing.
DEFAULT_TOLERANCE = {"f32": (1e-4, 1e-3), "f16": (1e-2, 1e-2), "bf16": (8e-2, 8e-2),
                     "i32": (0.0, 0.0), "i8": (0.0, 0.0), "u8": (0.0, 0.0)}


@dataclass
class ArraySpec:
    name: str           # the user's name
    file_stem: str      # safe file name stem under data/
    dtype: str          # f32 / f16 / bf16 / i32 / i8 / u8
    shape: tuple
    has_input: bool     # data/<stem>.npy exists and is uploaded before the first dispatch
    expected: bool      # data/<stem>.expected.npy is compared after the dispatches
    atol: float = 0.0
    rtol: float = 0.0

    @property
    def count(self) -> int:
        n = 1
        for s in self.shape:
            n *= int(s)
        return n


@dataclass
class LaunchSpec:
    kernel: object      # gpusim.program.Kernel
    c_name: str
    args: list          # per param: ("buffer", array index) or ("scalar", dtype, value)


@dataclass
class Plan:
    title: str
    arch: Arch
    kernels: list       # [(Kernel, c_name)]
    arrays: list        # [ArraySpec]
    launches: list      # [LaunchSpec]
    warmup: int = 3
    repeats: int = 20
    launch: str = "stream"   # stream: a launch per dispatch; graph: one HIP graph replay


def _c_string(s: str) -> str:
    """A C string literal; anything but plain printable ASCII becomes an octal escape."""
    out = []
    for ch in str(s):
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= ord(ch) < 127 and ch != "?":
            out.append(ch)
        else:
            out += [f"\\{b:03o}" for b in ch.encode("utf-8")]
    return '"' + "".join(out) + '"'


_NPY_READER = r'''
namespace wfh {

enum Dtype { F32 = 0, F16 = 1, I32 = 2, BF16 = 3, I8 = 4, U8 = 5 };
static const char* dtype_name(int d) {
  return d == F32 ? "f32" : d == F16 ? "f16" : d == BF16 ? "bf16" : d == I8 ? "i8" :
         d == U8 ? "u8" : "i32";
}
static size_t dtype_size(int d) {
  return d == I8 || d == U8 ? 1 : d == F16 || d == BF16 ? 2 : 4;
}

struct HostArray {
  int dtype = F32;
  std::vector<size_t> shape;
  size_t count = 0;
  std::vector<unsigned char> bytes;
};

// The value of a header key in a .npy dict such as {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), }. Returns the text after "key': " up to the end of the value.
static bool npy_value(const std::string& h, const std::string& key, std::string& out) {
  size_t p = h.find("'" + key + "'");
  if (p == std::string::npos) p = h.find("\"" + key + "\"");
  if (p == std::string::npos) return false;
  p = h.find(':', p);
  if (p == std::string::npos) return false;
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (p >= h.size()) return false;
  size_t end;
  if (h[p] == '\'' || h[p] == '"') {
    end = h.find(h[p], p + 1);
    if (end == std::string::npos) return false;
    out = h.substr(p + 1, end - p - 1);
  } else if (h[p] == '(') {
    end = h.find(')', p);
    if (end == std::string::npos) return false;
    out = h.substr(p + 1, end - p - 1);
  } else {
    end = h.find_first_of(",}", p);
    if (end == std::string::npos) return false;
    out = h.substr(p, end - p);
  }
  return true;
}

// Reads a little-endian f32 / f16 / i32, C-order .npy file (format versions 1, 2 and 3).
static bool read_npy(const std::string& path, HostArray& a, std::string& err) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) { err = path + ": cannot open"; return false; }
  unsigned char pre[8];
  bool ok = std::fread(pre, 1, 8, f) == 8 && std::memcmp(pre, "\x93NUMPY", 6) == 0;
  if (!ok) { std::fclose(f); err = path + ": not a .npy file"; return false; }
  uint32_t hlen = 0;
  if (pre[6] == 1) {
    unsigned char b[2];
    ok = std::fread(b, 1, 2, f) == 2;
    hlen = b[0] | (b[1] << 8);
  } else if (pre[6] == 2 || pre[6] == 3) {
    unsigned char b[4];
    ok = std::fread(b, 1, 4, f) == 4;
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | ((uint32_t)b[3] << 24);
  } else {
    ok = false;
  }
  if (!ok || hlen > (1u << 20)) { std::fclose(f); err = path + ": unsupported .npy header"; return false; }
  std::string h(hlen, '\0');
  if (std::fread(&h[0], 1, hlen, f) != hlen) { std::fclose(f); err = path + ": truncated header"; return false; }
  std::string descr, order, shape;
  if (!npy_value(h, "descr", descr) || !npy_value(h, "fortran_order", order) ||
      !npy_value(h, "shape", shape)) {
    std::fclose(f); err = path + ": header lacks descr/fortran_order/shape"; return false;
  }
  if (descr == "<f4") a.dtype = F32;
  else if (descr == "<f2") a.dtype = F16;
  else if (descr == "<i4") a.dtype = I32;
  else if (descr == "<u2") a.dtype = BF16;  // raw bfloat16 bit patterns
  else if (descr == "|i1") a.dtype = I8;
  else if (descr == "|u1") a.dtype = U8;
  else { std::fclose(f); err = path + ": dtype " + descr + " (need <f4, <f2, <i4, <u2, |i1 or |u1)"; return false; }
  if (order.find("False") == std::string::npos) {
    std::fclose(f); err = path + ": Fortran order is not supported"; return false;
  }
  a.shape.clear();
  a.count = 1;
  size_t i = 0;
  while (i < shape.size()) {
    while (i < shape.size() && (shape[i] < '0' || shape[i] > '9')) ++i;
    if (i >= shape.size()) break;
    size_t v = 0;
    while (i < shape.size() && shape[i] >= '0' && shape[i] <= '9') v = v * 10 + (shape[i++] - '0');
    a.shape.push_back(v);
    a.count *= v;
  }
  size_t nbytes = a.count * dtype_size(a.dtype);
  a.bytes.assign(nbytes, 0);
  if (nbytes && std::fread(a.bytes.data(), 1, nbytes, f) != nbytes) {
    std::fclose(f); err = path + ": truncated data"; return false;
  }
  std::fclose(f);
  return true;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) { man <<= 1; --exp; }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

static double value_at(const unsigned char* p, int dtype, size_t i) {
  if (dtype == F32) { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
  if (dtype == I32) { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
  if (dtype == I8) return (double)(signed char)p[i];
  if (dtype == U8) return (double)p[i];
  if (dtype == BF16) {
    uint16_t b; std::memcpy(&b, p + 2 * i, 2);
    uint32_t bits = (uint32_t)b << 16; float v; std::memcpy(&v, &bits, 4); return v;
  }
  uint16_t v; std::memcpy(&v, p + 2 * i, 2); return half_to_float(v);
}

}  // namespace wfh
'''


def main_hip(plan: Plan) -> str:
    """The host harness source."""
    L = []
    w = L.append
    w(f"// {plan.title}: host harness generated by wavefuse codegen_hip for {plan.arch.name}.")
    w("// Loads inputs and expected outputs from .npy files, runs the dispatches in order,")
    w("// checks every expected output, then times warm-up + repeated runs with hipEvents.")
    w("// Usage: ./app [data_dir] [repeats] [warmup]    exit: 0 ok, 1 mismatch, 2 bad data, 3 HIP error")
    w("#include <hip/hip_runtime.h>\n#include <hip/hip_fp16.h>\n")
    w("#include <cmath>\n#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n#include <cstring>")
    w("#include <string>\n#include <vector>\n")
    w("#ifndef WF_DATA_DIR\n#define WF_DATA_DIR \"data\"\n#endif\n")
    w("#define WF_CHECK(call)                                                          \\")
    w("  do {                                                                          \\")
    w("    hipError_t wf_err_ = (call);                                                \\")
    w("    if (wf_err_ != hipSuccess) {                                                \\")
    w("      std::fprintf(stderr, \"HIP error '%s' at %s:%d in %s\\n\",                  \\")
    w("                   hipGetErrorString(wf_err_), __FILE__, __LINE__, #call);       \\")
    w("      std::exit(3);                                                             \\")
    w("    }                                                                           \\")
    w("  } while (0)\n")
    w("// The kernels, one per .hip file next to this one.")
    for k, c_name in plan.kernels:
        w(kernel_prototype(k, c_name))
    w(_NPY_READER)
    dt_enum = {"f32": "wfh::F32", "f16": "wfh::F16", "i32": "wfh::I32", "bf16": "wfh::BF16",
               "i8": "wfh::I8", "u8": "wfh::U8"}
    w("struct ArrayInfo { const char* name; const char* stem; int dtype; size_t count; "
      "bool has_input; bool expected; double atol, rtol; };")
    w(f"static const ArrayInfo kArrays[{len(plan.arrays)}] = {{")
    for a in plan.arrays:
        w(f"  {{{_c_string(a.name)}, {_c_string(a.file_stem)}, {dt_enum[a.dtype]}, {a.count}u, "
          f"{str(a.has_input).lower()}, {str(a.expected).lower()}, {a.atol!r}, {a.rtol!r}}},")
    w("};")
    w(f"static const int kNumArrays = {len(plan.arrays)};")
    w(f"static const int kNumDispatches = {len(plan.launches)};")
    w("static const char* kDispatchNames[kNumDispatches] = {"
      + ", ".join(_c_string(ls.c_name) for ls in plan.launches) + "};\n")
    w("// Launches dispatch d (0-based) on ``stream`` (default: the null stream); dev[i] is")
    w("// array i's device buffer.")
    w("static void launch(int d, void* const* dev, hipStream_t stream = 0) {")
    w("  switch (d) {")
    ctype = {"f32": "float", "f16": "__half", "i32": "int", "bf16": "unsigned short",
             "i8": "signed char", "u8": "unsigned char"}
    for d, ls in enumerate(plan.launches):
        k = ls.kernel
        args = []
        for p, a in zip(k.params, ls.args):
            if a[0] == "buffer":
                const = "const " if isinstance(p, Buffer) and p.intent == "in" else ""
                args.append(f"static_cast<{const}{ctype[p.dtype]}*>(dev[{a[1]}])")
            else:
                _, dt, v = a
                args.append(f32_literal(v) if dt == "f32" else i32_literal(v))
        w(f"    case {d}:  // {k.name}: grid {k.grid} x block {k.block}")
        w(f"      {ls.c_name}<<<dim3({int(k.grid)}), dim3({int(k.block)}), 0, stream>>>(")
        w("          " + ",\n          ".join(args) + ");")
        w("      break;")
    w("  }")
    w("}\n")
    main = _MAIN if plan.launch == "stream" else graph_main()
    w(main.replace("@WARMUP@", str(int(plan.warmup))).replace("@REPEATS@", str(int(plan.repeats)))
      .replace("@TITLE@", _c_string(plan.title)))
    return "\n".join(L) + "\n"


_MAIN = r'''int main(int argc, char** argv) {
  const std::string data_dir = argc > 1 ? argv[1] : WF_DATA_DIR;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : @REPEATS@;
  const int warmup = argc > 3 ? std::atoi(argv[3]) : @WARMUP@;
  std::printf("%s: %d dispatches, data from %s\n", @TITLE@, kNumDispatches, data_dir.c_str());

  // Inputs: read and validate every .npy before touching the GPU.
  std::vector<wfh::HostArray> inputs(kNumArrays), expected(kNumArrays);
  for (int i = 0; i < kNumArrays; ++i) {
    const ArrayInfo& info = kArrays[i];
    for (int which = 0; which < 2; ++which) {
      if (which == 0 ? !info.has_input : !info.expected) continue;
      std::string path = data_dir + "/" + info.stem + (which == 0 ? ".npy" : ".expected.npy");
      wfh::HostArray& a = which == 0 ? inputs[i] : expected[i];
      std::string err;
      if (!wfh::read_npy(path, a, err)) { std::fprintf(stderr, "error: %s\n", err.c_str()); return 2; }
      if (a.dtype != info.dtype || a.count != info.count) {
        std::fprintf(stderr, "error: %s holds %s[%zu], the kernels need %s[%zu]\n", path.c_str(),
                     wfh::dtype_name(a.dtype), a.count, wfh::dtype_name(info.dtype), info.count);
        return 2;
      }
    }
  }

  // One device buffer per array: inputs uploaded, the others zeroed.
  std::vector<void*> dev(kNumArrays, nullptr);
  for (int i = 0; i < kNumArrays; ++i) {
    const size_t nbytes = kArrays[i].count * wfh::dtype_size(kArrays[i].dtype);
    WF_CHECK(hipMalloc(&dev[i], nbytes ? nbytes : 4));
    if (kArrays[i].has_input)
      WF_CHECK(hipMemcpy(dev[i], inputs[i].bytes.data(), nbytes, hipMemcpyHostToDevice));
    else
      WF_CHECK(hipMemset(dev[i], 0, nbytes ? nbytes : 4));
  }

  // Correctness: one run of the whole sequence, then compare every expected output.
  for (int d = 0; d < kNumDispatches; ++d) {
    launch(d, dev.data());
    WF_CHECK(hipGetLastError());
  }
  WF_CHECK(hipDeviceSynchronize());
  int failed = 0;
  for (int i = 0; i < kNumArrays; ++i) {
    const ArrayInfo& info = kArrays[i];
    if (!info.expected) continue;
    std::vector<unsigned char> got(info.count * wfh::dtype_size(info.dtype));
    WF_CHECK(hipMemcpy(got.data(), dev[i], got.size(), hipMemcpyDeviceToHost));
    double max_err = 0.0;
    size_t bad = 0, first_bad = 0;
    for (size_t j = 0; j < info.count; ++j) {
      const double g = wfh::value_at(got.data(), info.dtype, j);
      const double e = wfh::value_at(expected[i].bytes.data(), info.dtype, j);
      bool ok;
      if (std::isnan(e)) ok = std::isnan(g);
      else if (std::isinf(e)) ok = g == e;
      else {
        const double err = std::fabs(g - e);
        ok = !std::isnan(g) && err <= info.atol + info.rtol * std::fabs(e);
        if (!std::isnan(err) && err > max_err) max_err = err;
        if (std::isnan(g)) max_err = NAN;
      }
      if (!ok && bad++ == 0) first_bad = j;
    }
    std::printf("  %-24s %s[%zu]  max abs error %.3g  (atol %.1g, rtol %.1g)  %s\n", info.name,
                wfh::dtype_name(info.dtype), info.count, max_err, info.atol, info.rtol,
                bad ? "MISMATCH" : "ok");
    if (bad) {
      std::printf("    %zu elements differ; first at flat index %zu: got %.7g, expected %.7g\n", bad,
                  first_bad, wfh::value_at(got.data(), info.dtype, first_bad),
                  wfh::value_at(expected[i].bytes.data(), info.dtype, first_bad));
      ++failed;
    }
  }

  // Timing: warm-up runs, then repeats; one event pair per dispatch and one around each run.
  std::vector<hipEvent_t> ev(2 * kNumDispatches + 2);
  for (auto& e : ev) WF_CHECK(hipEventCreate(&e));
  for (int r = 0; r < warmup; ++r)
    for (int d = 0; d < kNumDispatches; ++d) launch(d, dev.data());
  WF_CHECK(hipGetLastError());
  WF_CHECK(hipDeviceSynchronize());
  std::vector<double> per_dispatch(kNumDispatches, 0.0);
  double total_ms = 0.0;
  for (int r = 0; r < repeats; ++r) {
    WF_CHECK(hipEventRecord(ev[2 * kNumDispatches], 0));
    for (int d = 0; d < kNumDispatches; ++d) {
      WF_CHECK(hipEventRecord(ev[2 * d], 0));
      launch(d, dev.data());
      WF_CHECK(hipEventRecord(ev[2 * d + 1], 0));
    }
    WF_CHECK(hipEventRecord(ev[2 * kNumDispatches + 1], 0));
    WF_CHECK(hipEventSynchronize(ev[2 * kNumDispatches + 1]));
    WF_CHECK(hipGetLastError());
    float ms = 0.0f;
    for (int d = 0; d < kNumDispatches; ++d) {
      WF_CHECK(hipEventElapsedTime(&ms, ev[2 * d], ev[2 * d + 1]));
      per_dispatch[d] += ms;
    }
    WF_CHECK(hipEventElapsedTime(&ms, ev[2 * kNumDispatches], ev[2 * kNumDispatches + 1]));
    total_ms += ms;
  }
  if (repeats > 0) {
    for (int d = 0; d < kNumDispatches; ++d)
      std::printf("  dispatch %d %-24s %10.4f ms\n", d, kDispatchNames[d], per_dispatch[d] / repeats);
    std::printf("time: %.4f ms per run (mean of %d, after %d warm-up)\n", total_ms / repeats, repeats, warmup);
  }
  for (auto& e : ev) WF_CHECK(hipEventDestroy(e));
  for (void* p : dev) WF_CHECK(hipFree(p));
  std::printf("%s\n", failed ? "FAILED: outputs differ from the expected .npy files" : "PASSED");
  return failed ? 1 : 0;
}
'''


_CHECK_RUN = """  // Correctness: one run of the whole sequence, then compare every expected output.
  for (int d = 0; d < kNumDispatches; ++d) {
    launch(d, dev.data());
    WF_CHECK(hipGetLastError());
  }
  WF_CHECK(hipDeviceSynchronize());
"""

_GRAPH_CHECK_RUN = """  // HIP graph: the whole sequence captured once from a stream and replayed with one
  // hipGraphLaunch per run (the host submits the model once, not once per dispatch).
  hipStream_t stream;
  WF_CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  hipGraph_t graph;
  hipGraphExec_t graph_exec;
  WF_CHECK(hipStreamBeginCapture(stream, hipStreamCaptureModeGlobal));
  for (int d = 0; d < kNumDispatches; ++d) launch(d, dev.data(), stream);
  WF_CHECK(hipStreamEndCapture(stream, &graph));
  WF_CHECK(hipGraphInstantiate(&graph_exec, graph, nullptr, nullptr, 0));
  // Correctness: one replay of the graph, then compare every expected output.
  WF_CHECK(hipGraphLaunch(graph_exec, stream));
  WF_CHECK(hipStreamSynchronize(stream));
  WF_CHECK(hipGetLastError());
"""

_GRAPH_TIMING = """  // Timing: warm-up replays, then repeats, one event pair around each replay (a replay's
  // dispatches are one submission: there is no per-dispatch time to take).
  hipEvent_t ev[2];
  for (auto& e : ev) WF_CHECK(hipEventCreate(&e));
  for (int r = 0; r < warmup; ++r) WF_CHECK(hipGraphLaunch(graph_exec, stream));
  WF_CHECK(hipStreamSynchronize(stream));
  double total_ms = 0.0;
  for (int r = 0; r < repeats; ++r) {
    WF_CHECK(hipEventRecord(ev[0], stream));
    WF_CHECK(hipGraphLaunch(graph_exec, stream));
    WF_CHECK(hipEventRecord(ev[1], stream));
    WF_CHECK(hipEventSynchronize(ev[1]));
    float ms = 0.0f;
    WF_CHECK(hipEventElapsedTime(&ms, ev[0], ev[1]));
    total_ms += ms;
  }
  WF_CHECK(hipGetLastError());
  if (repeats > 0)
    std::printf("time: %.4f ms per run (HIP graph replay of %d dispatches; mean of %d, after %d warm-up)\\n",
                total_ms / repeats, kNumDispatches, repeats, warmup);
  for (auto& e : ev) WF_CHECK(hipEventDestroy(e));
  WF_CHECK(hipGraphExecDestroy(graph_exec));
  WF_CHECK(hipGraphDestroy(graph));
  WF_CHECK(hipStreamDestroy(stream));
"""


def graph_main() -> str:
    """The harness's ``main`` for ``launch=graph``: the stream harness with its run and
    its timing replaced by a captured HIP graph's replays (stream capture of the same
    ``launch`` calls, so the graph holds exactly the dispatches the stream harness runs)."""
    start = _MAIN.index("  // Timing:")
    end = _MAIN.index("  for (void* p : dev)")
    out = _MAIN[:start] + _GRAPH_TIMING + _MAIN[end:]
    assert _CHECK_RUN in out
    return out.replace(_CHECK_RUN, _GRAPH_CHECK_RUN)


def cmakelists(plan: Plan, project: str, sources: list[str]) -> str:
    """CMake's own HIP language; CMAKE_HIP_ARCHITECTURES defaults to the export arch."""
    return f"""cmake_minimum_required(VERSION 3.21)
# Build: cmake -S . -B build [-DCMAKE_HIP_ARCHITECTURES=gfx90a] && cmake --build build && ./build/app
if(NOT DEFINED CMAKE_HIP_ARCHITECTURES)
  set(CMAKE_HIP_ARCHITECTURES {plan.arch.name})
endif()
project({project} LANGUAGES CXX HIP)

add_executable(app {' '.join(sources)})
set_source_files_properties({' '.join(sources)} PROPERTIES LANGUAGE HIP)
target_compile_definitions(app PRIVATE WF_DATA_DIR="${{CMAKE_CURRENT_SOURCE_DIR}}/data")
target_compile_options(app PRIVATE -O3)
"""


def hipcc_command(plan: Plan, sources: list[str]) -> str:
    # HIP_PLATFORM=amd: hipcc would pick the NVIDIA path on a machine that also has nvcc
    return f"HIP_PLATFORM=amd hipcc --offload-arch={plan.arch.name} -O3 {' '.join(sources)} -o app"


def readme(plan: Plan, sources: list[str]) -> str:
    lines = [f"# {plan.title}", "",
             f"Generated by wavefuse `codegen_hip` for **{plan.arch.name}**: {len(plan.launches)} dispatches "
             f"of {len(plan.kernels)} kernels. Each kernel file is the program gpusim simulated.", "",
             "## Build and run", "",
             "One line with hipcc (run from this directory, it reads `data/`):", "",
             "```sh", hipcc_command(plan, sources) + " && ./app", "```", "",
             "Or with CMake (its HIP language; the arch defaults to the export's):", "",
             "```sh", "cmake -S . -B build && cmake --build build && ./build/app", "```", "",
             "NVIDIA (sm_90, warpSize 32) through the compatibility headers in `nvidia/`:", "",
             "```sh", f"nvcc -I nvidia -arch=sm_90 -x cu {' '.join(sources)} -o app && ./app", "```", "",
             "`./app [data_dir] [repeats] [warmup]` prints the max error of each output, the "
             "mean time per dispatch and per run; exit code 0 means every output matched.", "",
             "## Files", "",
             "| file | what |", "|---|---|"]
    for k, c in plan.kernels:
        lines.append(f"| `{c}.hip` | kernel `{k.name}`: grid {k.grid} x block {k.block}"
                     f"{f', LDS {k.lds_bytes} B' if k.lds else ''} |")
        lines.append(f"| `{c}.sim.json` | what the simulator assumed for `{c}` (for `check`) |")
    lines += ["| `main.hip` | host harness: .npy reader, dispatches in order, check, hipEvent timing |",
              "| `CMakeLists.txt` | CMake build (`project(... LANGUAGES CXX HIP)`) |"]
    for a in plan.arrays:
        what = []
        if a.has_input:
            what.append(f"`data/{a.file_stem}.npy` initial contents")
        if a.expected:
            what.append(f"`data/{a.file_stem}.expected.npy` expected result")
        if what:
            lines.append(f"| array `{a.name}` {a.dtype}{list(a.shape)} | {'; '.join(what)} |")
    lines += ["", "## Dispatch order", ""]
    for i, ls in enumerate(plan.launches):
        lines.append(f"{i}. `{ls.c_name}`")
    lines += ["", "## Check against the simulator", "",
              "`python -m codegen_hip.check .` compiles each kernel for gfx90a and gfx940 "
              "(device only, to assembly) and lists where the ISA disagrees with the simulator's "
              "assumptions (vector widths, LDS bytes, scratch, VGPR occupancy). gfx942 is "
              "checked as gfx940, which has the same CDNA3 ISA.", ""]
    return "\n".join(lines)
