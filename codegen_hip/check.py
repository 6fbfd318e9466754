"""Compile emitted kernels with the real compiler and compare its ISA with the simulator.

The simulator prices each IR access at the width the IR gives it (a width-4 Load is one
``global_load_dwordx4``), sizes LDS from the IR's arrays, never spills, and derives
occupancy from its own VGPR estimate. hipcc may disagree: it can merge neighbouring
scalar loads into a vector load, split an access it cannot prove aligned, turn a
uniform load into a scalar ``s_load``, remove a redundant load, spill to scratch or need
more registers. ``check_dir`` compiles every kernel (device only, to assembly, one hipcc
process per kernel and arch, in parallel threads) and ``compare`` lists each such
disagreement, so the simulator's numbers are only trusted where the ISA backs them.

Occupancy is judged by what the simulator's timing uses: a VGPR-limited occupancy that
differs (beyond ``check``'s rule) is an error when it changes the workgroups per CU the
simulator ran, a warning when the LDS or workgroup limit binds first. A kernel exported
with ``--pin-occupancy`` carries ``amdgpu_waves_per_eu`` (its sidecar's ``waves_per_eu``):
hipcc then allocates within that occupancy or spills, and both a spill (scratch, or VGPRs
spilled into AGPRs) and a count below the pin are disagreements. The exporter verifies
each pin with this module's compiler first (``pins.verify_pins``) and drops the ones
hipcc does not fit, so only an unverified pin (no hipcc at export) or another compiler
can still show them.

Counts are static: instructions in the assembly, not executed instructions.
The installed clang (15) does not know gfx942; gfx940 has the same CDNA3 ISA, so gfx942
is checked as gfx940 and the report says so.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .errors import ExportError
from .signals import signals_held as _signals_held
from .names import c_identifier
from gpusim.errors import KernelError
from gpusim.hw import get_arch
from gpusim.occupancy import residency

from .simfacts import SIM_FORMAT, TARGET_ARCH, sim_info as _sim_info, vgpr_occupancy

#: archs the installed clang does not know, and the one with the same ISA it checks instead.
CHECK_AS = {"gfx942": "gfx940", "gfx941": "gfx940"}
#: the simulator's VGPR-limited occupancy may differ from the compiler's by this many waves
#: when its estimate is also off by more than ``VGPR_AGREEMENT_REL`` of the compiler's count
#: (issue 13: "within 10% of hipcc's VGPR count, or the same occupancy").
OCCUPANCY_TOLERANCE = 0
VGPR_AGREEMENT_REL = 0.10
#: the VGPR estimate may differ from the compiler's count by max(abs, rel * compiler's).
VGPR_TOLERANCE_ABS = 8
VGPR_TOLERANCE_REL = 0.25

_WIDTH_SUFFIX = {"dword": 4, "dwordx2": 8, "dwordx3": 12, "dwordx4": 16,
                 "ushort": 2, "sshort": 2, "short": 2, "short_d16": 2, "short_d16_hi": 2,
                 "ubyte": 1, "sbyte": 1, "byte": 1, "ubyte_d16": 1, "sbyte_d16": 1,
                 "ubyte_d16_hi": 1, "byte_d16_hi": 1}
_VMEM = re.compile(r"^(global|buffer|flat)_(load|store)_(\w+)$")
_LDS = re.compile(r"^ds_(read|write|load|store)(2st64|2)?_(b32|b64|b96|b128|u16|i16|u8|i8|b16|b8|"
                  r"u16_d16|u16_d16_hi|u8_d16|u8_d16_hi|i8_d16|i8_d16_hi|b16_d16_hi|b8_d16_hi)$")
_LDS_BYTES = {"b32": 4, "b64": 8, "b96": 12, "b128": 16, "u16": 2, "i16": 2, "b16": 2,
              "u8": 1, "i8": 1, "b8": 1}
_INSN = re.compile(r"^\s+([a-z][a-z0-9_]*)\b")
_META = {"vgprs": r"^\s+\.vgpr_count:\s+(\d+)", "agprs": r"^\s+\.agpr_count:\s+(\d+)",
         "sgprs": r"^\s+\.sgpr_count:\s+(\d+)",
         "lds_bytes": r"^\s+\.group_segment_fixed_size:\s+(\d+)",
         "scratch_bytes": r"^\s+\.private_segment_fixed_size:\s+(\d+)",
         "vgpr_spills": r"^\s+\.vgpr_spill_count:\s+(\d+)",
         "sgpr_spills": r"^\s+\.sgpr_spill_count:\s+(\d+)",
         "occupancy": r"^; Occupancy:\s+(\d+)"}


#: the targets a check can compare with the simulator (it needs their VGPR file).
CHECK_ARCHES = tuple(TARGET_ARCH)


def check_archs(archs) -> tuple[str, ...]:
    """The targets to check, each once; raises ExportError for none or an unknown one."""
    out = []
    for a in archs:
        a = str(a).strip()
        if not a:
            continue
        if a not in CHECK_ARCHES:
            raise ExportError(f"unknown arch {a!r} to check; known: {', '.join(CHECK_ARCHES)}")
        if a in out:
            raise ExportError(f"arch {a!r} is given twice; name each arch once")
        out.append(a)
    if not out:
        raise ExportError(f"no arch to check; give some of {', '.join(CHECK_ARCHES)}, "
                          "e.g. --arch gfx90a,gfx940")
    return tuple(out)


def check_arch(arch: str) -> tuple[str, str | None]:
    """(arch given to hipcc, note) for an arch we emitted for."""
    if arch in CHECK_AS:
        return CHECK_AS[arch], (f"{arch} is checked as {CHECK_AS[arch]}: the installed clang "
                                f"does not know {arch}; {CHECK_AS[arch]} has the same CDNA3 ISA")
    return arch, None


_OFFSETS = re.compile(r"offset0:(\d+)\s+offset1:(\d+)|offset1:(\d+)")


def _adjacent_pair(line: str) -> bool:
    """A ``ds_read2_*``/``ds_write2_*`` whose two slots are neighbours (offset1 =
    offset0 + 1, in element units): one access of twice the element width, split in two
    by the compiler (a 16-byte read as ``ds_read2_b64``), not two accesses merged."""
    m = _OFFSETS.search(line)
    if not m:
        return False
    if m.group(3) is not None:  # offset0 omitted: 0
        return int(m.group(3)) == 1
    return int(m.group(2)) == int(m.group(1)) + 1


def _access_bytes(mnemonic: str) -> tuple[str, str, int] | None:
    """(space, op, bytes per lane) of a memory instruction, or None if it is not one."""
    m = _VMEM.match(mnemonic)
    if m and m.group(3) in _WIDTH_SUFFIX:
        return m.group(1), m.group(2), _WIDTH_SUFFIX[m.group(3)]
    m = _LDS.match(mnemonic)
    if m:
        op = "load" if m.group(1) in ("read", "load") else "store"
        kind = m.group(3).split("_")[0]
        return "lds", op, _LDS_BYTES[kind]
    return None


#: cache maintenance, not memory accesses: what ``__threadfence()`` compiles to
#: (gfx90a: buffer_wbinvl1_vol; gfx940: buffer_wbl2, buffer_inv; gfx10+: buffer_gl*_inv)
CACHE_MAINTENANCE = ("buffer_wbinvl1", "buffer_wbl2", "buffer_inv", "buffer_gl0_inv",
                     "buffer_gl1_inv")


def parse_asm(text: str) -> dict:
    """Resources and instruction counts of the (single) kernel in a hipcc ``-S`` output."""
    out = {}
    for key, pat in _META.items():
        m = re.search(pat, text, re.M)
        out[key] = int(m.group(1)) if m else None
    insts = {}
    pairs = {}  # ds_read2/ds_write2 mnemonic -> how many address adjacent slots
    for line in text.splitlines():
        m = _INSN.match(line)
        if not m or line.lstrip().startswith((".", ";")):
            continue
        name = m.group(1)
        if name.endswith(":"):
            continue
        insts[name] = insts.get(name, 0) + 1
        if re.match(r"^ds_(read|write)2_", name) and _adjacent_pair(line):
            pairs[name] = pairs.get(name, 0) + 1
    mem = {k: v for k, v in insts.items()
           if k.startswith(("global_", "buffer_", "flat_", "ds_", "scratch_", "s_load_",
                            "s_buffer_load_", "s_store_"))}
    widths = {"global_load": {}, "global_store": {}, "lds_load": {}, "lds_store": {}}
    paired = {k: {} for k in widths}  # of those widths, how many are adjacent ds_*2 pairs
    for name, n in mem.items():
        if name.startswith("buffer_"):
            # the emitted kernels address memory through pointers (global_*); hipcc uses a
            # buffer resource only for the private segment: these are register spills
            # ("Folded Spill/Reload"), reported as scratch, not IR accesses of that width
            continue
        acc = _access_bytes(name)
        if acc is None:
            continue
        space, op, nbytes = acc
        key = ("lds" if space == "lds" else "global") + "_" + op
        split = pairs.get(name, 0)  # adjacent pairs: one access of 2x the element width
        if split:
            widths[key][2 * nbytes] = widths[key].get(2 * nbytes, 0) + split
            paired[key][2 * nbytes] = paired[key].get(2 * nbytes, 0) + split
        if n - split:
            widths[key][nbytes] = widths[key].get(nbytes, 0) + n - split
    out.update({
        "mem_insts": dict(sorted(mem.items())),
        "widths": {k: dict(sorted(v.items())) for k, v in widths.items()},
        "paired_widths": {k: dict(sorted(v.items())) for k, v in paired.items() if v},
        "flat_insts": sum(v for k, v in mem.items() if k.startswith("flat_")),
        "scratch_insts": sum(v for k, v in mem.items()
                             if k.startswith(("scratch_", "buffer_"))
                             and not k.startswith(CACHE_MAINTENANCE)),
        "valu_insts": sum(v for k, v in insts.items() if k.startswith("v_")),
        "salu_insts": sum(v for k, v in insts.items() if k.startswith("s_")),
        "cross_lane_insts": sum(v for k, v in insts.items()
                                if k.startswith(("ds_bpermute", "ds_permute", "ds_swizzle", "v_permlane",
                                                 "v_readlane", "v_writelane"))
                                or "_dpp" in k),
    })
    return out


def hipcc_path() -> str | None:
    return shutil.which("hipcc")


def compile_to_asm(src: Path, arch: str, asm_path: Path, hipcc: str | None = None,
                   timeout: float = 180) -> dict:
    """One device-only hipcc run; returns rc, stderr and seconds (asm at ``asm_path``)."""
    hipcc = hipcc or hipcc_path()
    if hipcc is None:
        raise FileNotFoundError("hipcc not found on PATH (install the Debian package 'hipcc')")
    cmd = [hipcc, "-Wno-unused-command-line-argument", "--cuda-device-only", "-S",
           f"--offload-arch={arch}", "-O3", str(src), "-o", str(asm_path)]
    t0 = time.perf_counter()
    # clang leaves an empty ``/tmp/<stem>-XXXXXX`` folder behind for every device compile;
    # a private TMPDIR, removed afterwards, keeps check from littering the temp directory.
    with tempfile.TemporaryDirectory(prefix="wavefuse-hipcc-") as scratch:
        env = dict(os.environ, HIP_PLATFORM="amd", TMPDIR=scratch)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            rc, err = -1, f"hipcc timed out after {timeout} s"
    return {"rc": rc, "stderr": err.strip(), "compile_s": round(time.perf_counter() - t0, 3),
            "command": " ".join(cmd)}


#: a sidecar lists one kernel's accesses; anything this large is not one.
MAX_SIDECAR_BYTES = 16 << 20


def _sidecar(p: Path) -> dict:
    """One ``.sim.json``, checked: a tampered or truncated one is an error naming the file."""
    if p.stat().st_size > MAX_SIDECAR_BYTES:
        raise ExportError(f"{p}: {p.stat().st_size} bytes, far more than a sidecar holds "
                          f"(at most {MAX_SIDECAR_BYTES}); the export is damaged")
    try:
        info = json.loads(p.read_text())
    except UnicodeDecodeError:
        info = None
    except json.JSONDecodeError as e:
        raise ExportError(f"{p}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                          "the export is damaged, export it again") from None
    if not isinstance(info, dict):
        raise ExportError(f"{p}: not a wavefuse sidecar (expected a JSON object); the export "
                          "is damaged, export it again")
    if info.get("format") != SIM_FORMAT:
        raise ExportError(f"{p}: format {info.get('format')!r}, expected {SIM_FORMAT!r}; "
                          "export it again with this wavefuse")
    problems = [k for k, t in (("c_name", str), ("lds_bytes", int), ("accesses", list))
                if not isinstance(info.get(k), t) or isinstance(info.get(k), bool)]
    est = info.get("estimated_vgprs")
    if est is not None and (not isinstance(est, int) or isinstance(est, bool) or est < 0):
        problems.append("estimated_vgprs")
    for key in ("waves_per_eu", "block"):
        val = info.get(key)
        if val is not None and (not isinstance(val, int) or isinstance(val, bool) or val < 1):
            problems.append(key)
    for a in info.get("accesses") or []:
        if not (isinstance(a, dict) and a.get("space") in ("global", "lds")
                and a.get("op") in ("load", "store") and isinstance(a.get("bytes"), int)
                and isinstance(a.get("name"), str)):
            problems.append("accesses")
            break
    if problems:
        raise ExportError(f"{p}: missing or malformed field(s) {', '.join(problems)}; the "
                          "export is damaged, export it again")
    if info["c_name"] != p.name[:-len(".sim.json")]:
        raise ExportError(f"{p}: describes kernel {info['c_name']!r}, not "
                          f"{p.name[:-len('.sim.json')]!r}; the export is damaged")
    return info


def _kernel_files(d: Path):
    """(hip file, sidecar dict) for every kernel source in an export directory.

    A folder with no kernel source is an error (nothing to check, so no success to
    claim), and so is a kernel without its sidecar: there would be nothing to compare.
    """
    files = []
    for p in sorted(d.glob("*.hip")):
        if p.name == "main.hip" or not p.is_file():
            continue
        side = p.with_name(p.stem + ".sim.json")
        if not side.is_file():
            raise ExportError(f"{p}: no {side.name} beside it, so nothing to compare the ISA "
                              "with; check a folder written by `wavefuse export`")
        files.append((p, _sidecar(side)))
    if not files:
        raise ExportError(f"nothing to check: {d} holds no kernel .hip files; give a folder "
                          "written by `wavefuse export`")
    return files


_TYPES = ("float", "double", "int", "bool", "half", "__half", "half2", "float2", "float4",
          "char", "short", "long", "unsigned", "uint32_t", "int32_t", "int64_t", "uint64_t",
          "_Float16")
#: an identifier the source declares: after a type (``const``, ``*``, ``__restrict__`` and
#: an alignment between), before what may follow a declarator
_DECL = re.compile(r"\b(?:" + "|".join(_TYPES) + r")\b(?:\s*\*)?(?:\s*__restrict__)?"
                   r"\s+([A-Za-z_]\w*)\s*(?=[=;,)\[])")
_IDENT = re.compile(r"(?<![.\w])([A-Za-z_]\w*)")


def _code_lines(text: str) -> str:
    """The source without its comment lines (they name graph tensors, compile to nothing)."""
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("//"))


def source_key(text: str, c_name: str) -> str:
    """The kernel source with every name it declares (the kernel, its parameters, its
    locals and LDS arrays: what the emitter derives from graph tensor names) replaced by
    the order of its first appearance. Keywords, types and builtins are never declared,
    so they stay: two sources with one key are the same program up to a one-to-one
    renaming, and compile to the same instructions. Identical layers share a key."""
    code = _code_lines(text)
    declared = set(_DECL.findall(code)) | {c_name}
    order: dict = {}

    def canon(m):
        name = m.group(1)
        if name not in declared:
            return name
        return f"\x00{order.setdefault(name, len(order))}\x00"
    return _IDENT.sub(canon, code)


def _distinct_sources(files) -> dict:
    """kernel stem -> the stem of the kernel whose compile stands for it (itself when its
    source is the first of its kind)."""
    first, rep = {}, {}
    for src, info in files:
        key = source_key(src.read_text(), info.get("c_name", src.stem))
        rep[src.stem] = first.setdefault(key, src.stem)
    return rep


def check_dir(directory, archs=("gfx90a", "gfx940"), *, hipcc: str | None = None,
              jobs: int | None = None, asm_dir=None) -> dict:
    """Compile every kernel ``.hip`` in ``directory`` for each arch and compare with its sidecar.

    Returns a plain-data report (see ``to_json``); ``asm_dir`` keeps the ``.s`` files.
    Kernels whose sources differ only in graph-derived names (a model's identical layers)
    are compiled once per arch; each still gets its own entry, compared with its own
    sidecar, with ``same_source_as`` naming the kernel that was compiled.
    """
    d = Path(directory)
    if not d.is_dir():
        raise ExportError(f"{d}: no such directory" if not d.exists() else
                          f"{d}: not a directory; give a folder written by `wavefuse export`")
    archs = check_archs(archs)
    files = _kernel_files(d)
    hipcc = hipcc or hipcc_path()
    if hipcc is None:
        raise FileNotFoundError("hipcc not found on PATH (install the Debian package 'hipcc')")
    notes, targets = [], []
    for a in archs:
        real, note = check_arch(a)
        if note and note not in notes:
            notes.append(note)
        targets.append((a, real))
    if any(info and info.get("arch") in CHECK_AS for _, info in files):
        for a in {info["arch"] for _, info in files if info and info.get("arch") in CHECK_AS}:
            note = (f"kernels were emitted for {a}; the check compiles them for "
                    f"{CHECK_AS[a]}, which shares the CDNA3 ISA (clang 15 does not know {a})")
            if note not in notes:
                notes.append(note)
    tmp = tempfile.TemporaryDirectory(prefix="wavefuse-check-",
                                      ignore_cleanup_errors=True) if asm_dir is None else None
    out_dir = Path(asm_dir) if asm_dir is not None else Path(tmp.name)
    out_dir.mkdir(parents=True, exist_ok=True)

    def one(job):
        (src, info), (asked, real) = job
        asm = out_dir / f"{src.stem}.{real}.s"
        res = compile_to_asm(src, real, asm, hipcc)
        entry = {"kernel": src.stem, "ir_name": info.get("kernel") if info else None,
                 "file": src.name, "arch": asked, "checked_as": real, **res}
        if res["rc"] == 0 and asm.exists():
            entry.update(parse_asm(asm.read_text()))
        return entry

    rep = _distinct_sources(files)
    jobs_list = [(f, t) for f in files if rep[f[0].stem] == f[0].stem for t in targets]
    t0 = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=jobs or min(32, (os.cpu_count() or 4)))
    try:
        compiled = list(pool.map(one, jobs_list))
    finally:
        # interrupted: the queued compiles are dropped, the running ones finish (their
        # hipcc writes into the folder), and only then is it removed, with a second
        # Ctrl-C held until it is gone
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            if tmp is not None:
                with _signals_held():
                    tmp.cleanup()
    by_job = {(e["kernel"], e["arch"]): e for e in compiled}
    entries = []
    for src, info in files:
        for asked, _ in targets:
            e = by_job[(rep[src.stem], asked)]
            if rep[src.stem] != src.stem:
                e = {**e, "kernel": src.stem, "ir_name": info.get("kernel") if info else None,
                     "file": src.name, "compile_s": 0.0, "same_source_as": rep[src.stem]}
            entries.append(e)
    report = {"dir": str(d), "hipcc": hipcc, "archs": list(archs), "notes": notes,
              "wall_s": round(time.perf_counter() - t0, 3), "kernels": entries,
              "distinct_sources": len(set(rep.values())),
              "tolerances": {"occupancy_waves": OCCUPANCY_TOLERANCE,
                             "vgprs_agreement_rel": VGPR_AGREEMENT_REL,
                             "vgprs_abs": VGPR_TOLERANCE_ABS, "vgprs_rel": VGPR_TOLERANCE_REL}}
    found = compare(report, None, {f.stem: i for f, i in files})
    report["disagreements"] = [d for d in found if d["severity"] == "error"]
    report["warnings"] = [d for d in found if d["severity"] != "error"]
    report["ok"] = not report["disagreements"]
    return report


def _fmt_widths(ws):
    return ", ".join(f"{b} B x{n}" for b, n in sorted(ws.items())) or "none"


def _vmem_name(op, nbytes):
    suffix = {1: "ubyte", 2: "ushort/short_d16", 4: "dword", 8: "dwordx2", 12: "dwordx3",
              16: "dwordx4"}.get(nbytes, f"{nbytes}B")
    return f"global_{op}_{suffix}"


def _lds_name(op, nbytes):
    return f"ds_{'read' if op == 'load' else 'write'}_b{nbytes * 8}"


def _split_pieces(ir: list, isa: dict) -> dict:
    """ISA LDS read widths that are pieces of wider IR reads: width -> the IR width.

    hipcc sometimes issues a 16-byte LDS read as ``ds_read_b96`` + one slot of a
    ``ds_read2_b32``, or as two ``ds_read_b64``: its scheduler pairs a piece with a
    neighbouring read, or it drops slots whose values are never used (seen in the
    exported attention and GEMM kernels of tests/data/bert_2layer.onnx). The bytes read
    are the IR's; only the instruction count differs. That is a split, not another
    width, while the IR's width stays what hipcc issues for most reads: the pieces
    (ISA widths the IR lacks, narrower than a width both have) are at most as many as the
    IR-width instructions. A kernel whose wide reads hipcc split wholesale (it could
    not prove them aligned) fails that test and stays a disagreement."""
    kept = [w for w in ir if w in isa]
    if not kept:
        return {}
    widest = max(kept)
    narrow = {b: n for b, n in isa.items() if b not in ir and b < widest}
    if not narrow or sum(narrow.values()) > sum(isa[w] for w in kept if w > min(narrow)):
        return {}
    return {b: min(w for w in kept if w > b) for b in narrow}


def _same_residency(info: dict, est: int, vgprs: int, target: str):
    """The workgroups per CU when the estimate and hipcc's count give the same number
    (with the sidecar's workgroup size and LDS bytes), else None: the simulator's timing
    depends on the residency, not on the VGPR-limited count by itself. A grid that puts
    fewer workgroups on a CU than either limit (the timed CU 0 owns ``ceil(grid / CUs)``:
    a persistent stream-K kernel of two workgroups per CU) runs them all at once either
    way, so that count is the residency both give."""
    if not isinstance(info.get("block"), int):
        return None
    arch = TARGET_ARCH[target]
    try:
        sim = residency(info["block"], info["lds_bytes"], est, arch)
        isa = residency(info["block"], info["lds_bytes"], vgprs, arch)
    except KernelError:
        return None
    sim_n, isa_n = sim.workgroups_per_cu, isa.workgroups_per_cu
    if isinstance(info.get("grid"), int) and info["grid"] > 0:
        try:  # the CUs of the arch the kernel was simulated on (the sidecar's)
            cus = get_arch(info.get("arch") or arch).num_cus
        except KernelError:
            cus = arch.num_cus
        owned = -(-info["grid"] // cus)
        sim_n, isa_n = min(sim_n, owned), min(isa_n, owned)
    return sim_n if sim_n == isa_n else None


def compare(report: dict, kernels=None, sim_info: dict | None = None) -> list[dict]:
    """Every disagreement between the compiled ISA and what the simulator assumed.

    Each item has a ``severity``: "error" for what changes the simulator's numbers (widths,
    LDS bytes, scratch and spills, occupancy beyond its tolerance that changes the
    workgroups per CU, a pinned occupancy hipcc did not reach, compile failures),
    "warning" for a VGPR estimate off by more than its tolerance while occupancy still
    agrees, or an occupancy difference the LDS or workgroup limit makes moot.

    ``sim_info`` maps a kernel's C name to its sidecar dict; ``kernels`` (IR kernels, in
    the same order names were given at export, or a {c_name: Kernel} dict) fills in
    sidecars that are missing, using gpusim for the VGPR estimate.
    """
    infos = dict(sim_info or {})
    if kernels:
        pairs = kernels.items() if isinstance(kernels, dict) else \
            ((getattr(k, "name", None), k) for k in kernels)
        for name, k in pairs:
            cname = name if isinstance(kernels, dict) else c_identifier(name)
            if cname not in infos:
                infos[cname] = _sim_info(k, c_name=cname)
    out = []
    for e in report.get("kernels", []):
        kname, arch = e["kernel"], e["arch"]

        def add(what, expected, actual, message, severity="error"):
            out.append({"kernel": kname, "arch": arch, "what": what, "expected": expected,
                        "actual": actual, "severity": severity,
                        "message": f"{kname} [{arch}]: {message}"})

        if e.get("rc") != 0:
            first = (e.get("stderr") or "").splitlines()[:3]
            add("compile", "compiles", "error", "hipcc failed: " + " | ".join(first))
            continue
        info = infos.get(kname)
        if info is None:
            continue  # a .hip without a sidecar: compiled, nothing to compare against
        pin = info.get("waves_per_eu")
        pinned = (f" to fit the pinned {pin} waves per SIMD (amdgpu_waves_per_eu): the VGPR "
                  f"estimate {info.get('estimated_vgprs')} is below what LLVM can fit"
                  if pin else "")
        if e.get("scratch_bytes"):
            spills = f", {e['vgpr_spills']} VGPRs spilled" if e.get("vgpr_spills") else ""
            add("scratch", 0, e["scratch_bytes"],
                f"{e['scratch_bytes']} B of scratch (register spills or a private array"
                f"{spills}){pinned}; the simulator assumes none")
        elif e.get("vgpr_spills"):
            # on gfx90a/gfx940 LLVM spills VGPRs into free AGPRs first: no scratch, but
            # copies the simulator does not count, in the register file it sized
            add("spills", 0, e["vgpr_spills"],
                f"{e['vgpr_spills']} VGPRs spilled (into AGPRs, no scratch){pinned}; the "
                "simulator assumes no spills")
        if e.get("lds_bytes") != info.get("lds_bytes"):
            add("lds_bytes", info.get("lds_bytes"), e.get("lds_bytes"),
                f"LDS {e.get('lds_bytes')} B in the ISA, {info.get('lds_bytes')} B in the IR")
        if e.get("flat_insts"):
            add("flat", 0, e["flat_insts"],
                f"{e['flat_insts']} flat_* instructions: the simulator models global_* only")
        for space, key, namefn in (("global", "global", _vmem_name), ("lds", "lds", _lds_name)):
            for op in ("load", "store"):
                ir = sorted({a["bytes"] for a in info.get("accesses", [])
                             if a["space"] == space and a["op"] == op})
                isa = e["widths"][f"{key}_{op}"]
                pairs = e.get("paired_widths", {}).get(f"{key}_{op}", {})
                for b in ir:
                    if b not in isa and pairs.get(2 * b):
                        continue  # all merged into adjacent pairs (see below)
                    if b not in isa:
                        same = [a for a in info["accesses"] if a["space"] == space
                                and a["op"] == op and a["bytes"] == b]
                        who = sorted({a["name"] for a in same})
                        # a 4-byte uniform load becomes s_load_dword (a kernel's 4-byte
                        # scalar arguments may too: the check cannot tell them apart)
                        scalar = e.get("mem_insts", {}).get("s_load_dword", 0) if b == 4 else 0
                        if space == "global" and op == "load" and scalar and \
                                all(a.get("uniform") for a in same):
                            # every such load has a wave-uniform address and the ISA reads
                            # dwords through the scalar cache: hipcc's s_load, which the
                            # simulator prices as a one-line vector load (it has no scalar
                            # memory path): the same bytes, a small cost difference
                            add(f"{space}_{op}_width", b, _fmt_widths(isa),
                                f"IR's {b}-byte loads of {', '.join(who)} have wave-uniform "
                                f"addresses; hipcc reads them with s_load (scalar cache), the "
                                f"simulator as one-line vector loads", severity="warning")
                            continue
                        hint = (" (merged into wider accesses, turned into scalar s_load for a "
                                "uniform address, or removed as redundant)" if op == "load" else "")
                        add(f"{space}_{op}_width", b, _fmt_widths(isa),
                            f"IR has {b}-byte {space} {op}s of {', '.join(who)} but the ISA has no "
                            f"{namefn(op, b)}; ISA widths: {_fmt_widths(isa)}{hint}")
                pieces = _split_pieces(ir, isa) if space == "lds" and op == "load" else {}
                for b, n in isa.items():
                    if b not in ir and pairs.get(b) == n and b // 2 in ir:
                        # every one of them is an adjacent ds_*2 pair of the element width
                        # the IR has: two IR accesses hipcc merged into one instruction,
                        # the same bytes from the same addresses (not a different width)
                        continue
                    if b in pieces:
                        add(f"{space}_{op}_width", ir, b,
                            f"ISA has {n} {namefn(op, b)}: pieces of {pieces[b]}-byte IR "
                            f"LDS reads hipcc split (the same bytes; most reads keep the IR's "
                            f"width)", severity="warning")
                        continue
                    if b not in ir:
                        add(f"{space}_{op}_width", ir, b,
                            f"ISA has {n} {namefn(op, b)} but no IR {space} {op} is {b} bytes wide "
                            f"(the compiler merged or split accesses)")
        est = info.get("estimated_vgprs")
        if est is not None and e.get("vgprs") is not None:
            real = e["checked_as"]
            occ_c = vgpr_occupancy(e["vgprs"], real)
            occ_s = vgpr_occupancy(est, real)
            e["vgpr_occupancy"] = occ_c
            e["sim_vgprs"] = est
            e["sim_vgpr_occupancy"] = occ_s
            close = abs(est - e["vgprs"]) <= VGPR_AGREEMENT_REL * e["vgprs"]
            if pin and occ_c < pin:
                add("pin", pin, occ_c,
                    f"hipcc's {e['vgprs']} VGPRs allow {occ_c} waves/SIMD, below the pinned "
                    f"amdgpu_waves_per_eu({pin}): the compiler did not honour the pin")
            elif abs(occ_c - occ_s) > OCCUPANCY_TOLERANCE and not close:
                msg = (f"VGPR-limited occupancy {occ_c} waves/SIMD from the compiler's "
                       f"{e['vgprs']} VGPRs vs {occ_s} from the simulator's estimate of {est}, "
                       f"which is off by more than {VGPR_AGREEMENT_REL:.0%}")
                same = _same_residency(info, est, e["vgprs"], real)
                if same is not None:
                    add("occupancy", occ_s, occ_c,
                        msg + f"; both allow the {same} workgroups per CU the simulator "
                        "ran (its LDS or workgroup limit, or the grid, binds first), so the prediction "
                        "stands", severity="warning")
                else:
                    add("occupancy", occ_s, occ_c, msg)
            tol = max(VGPR_TOLERANCE_ABS, VGPR_TOLERANCE_REL * e["vgprs"])
            if abs(est - e["vgprs"]) > tol:
                add("vgprs", est, e["vgprs"],
                    f"VGPR estimate {est} vs compiler {e['vgprs']} (tolerance {tol:g}); "
                    "a warning while the occupancy they imply agrees", severity="warning")
    return out


def to_json(report: dict) -> str:
    """The report as stable, indented JSON (for ``--json`` and CI artefacts)."""
    return json.dumps(report, indent=2, sort_keys=True, default=str)


def render_check(report: dict, console) -> None:
    """A rich table of the compiled kernels, then every disagreement and note."""

    t = Table(title=f"hipcc check of {report.get('dir')}", show_lines=False)
    for col in ("kernel", "arch", "VGPR (sim)", "SGPR", "LDS B", "scratch", "occ (VGPR/sim)",
                "global ld", "global st", "LDS rd", "LDS wr", "VALU", "hipcc s"):
        t.add_column(col, justify="left" if col in ("kernel", "arch") else "right")
    for e in report.get("kernels", []):
        arch = e["arch"] if e["arch"] == e["checked_as"] else f"{e['arch']}→{e['checked_as']}"
        if e.get("rc") != 0:
            t.add_row(e["kernel"], arch, "[red]compile error[/]", *[""] * 9, str(e.get("compile_s")))
            continue
        sim_v = f" ({e['sim_vgprs']})" if e.get("sim_vgprs") is not None else ""
        occ = f"{e.get('occupancy')}"
        if e.get("sim_vgpr_occupancy") is not None:
            occ = f"{e['vgpr_occupancy']}/{e['sim_vgpr_occupancy']}"
        w = e["widths"]
        t.add_row(e["kernel"], arch, f"{e['vgprs']}{sim_v}", str(e["sgprs"]), str(e["lds_bytes"]),
                  str(e["scratch_bytes"]), occ, _fmt_widths(w["global_load"]),
                  _fmt_widths(w["global_store"]), _fmt_widths(w["lds_load"]),
                  _fmt_widths(w["lds_store"]), str(e["valu_insts"]),
                  "shared" if e.get("same_source_as") else f"{e['compile_s']:.2f}")
    console.print(t)
    n_kernels = len({e["kernel"] for e in report.get("kernels", [])})
    if report.get("distinct_sources") and report["distinct_sources"] < n_kernels:
        console.print(f"[cyan]note:[/] {report['distinct_sources']} distinct sources among "
                      f"{n_kernels} kernels: each compiled once per arch; 'shared' rows reuse "
                      "the compile of a kernel that differs only in names")
    for n in report.get("notes", []):
        console.print(f"[cyan]note:[/] {n}")
    dis = report.get("disagreements", [])
    if not dis:
        console.print("[green]ISA agrees with the simulator's assumptions.[/]")
    for d in dis:
        console.print(f"[red]disagreement:[/] {d['message']}", highlight=False)
    for d in report.get("warnings", []):
        console.print(f"[yellow]warning:[/] {d['message']}", highlight=False)


def main(argv=None) -> int:
    """``python -m codegen_hip.check DIR [--arch gfx90a,gfx940] [--json]``; exit 1 on disagreement."""
    ap = argparse.ArgumentParser(prog="python -m codegen_hip.check", description=main.__doc__)
    ap.add_argument("dir")
    ap.add_argument("--arch", default="gfx90a,gfx940")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        report = check_dir(args.dir, tuple(args.arch.split(",")))
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(to_json(report))
    else:
        render_check(report, Console())
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
