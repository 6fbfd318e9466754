"""Writes a self-contained HIP project for a sequence of dispatches.

The directory holds one ``<kernel>.hip`` per kernel, its ``<kernel>.sim.json`` (what the
simulator assumed, for ``check_dir``), ``main.hip``, ``CMakeLists.txt``, ``README.md`` and
the ``data/*.npy`` files. It is written atomically: everything goes into a temporary
directory next to ``out_dir`` and is renamed into place at the end, so a failure never
leaves a half-written project, and an existing non-empty ``out_dir`` is only replaced
with ``force=True`` when it holds the marker file of a previous export. SIGINT, SIGTERM
and SIGHUP are held while the temporary folder is made, swapped in or removed, so a
signal (which the CLI turns into an exception) always finds it either in place or gone.
An ``ExportTarget`` checks the target and locks it (a ``flock`` on a hidden file beside
it) before the caller's slow work, so a second export of the same folder fails at once
instead of replacing the first one. Every file name is built from sanitised
identifiers, so nothing is ever written outside ``out_dir``.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from gpusim.hw import DEFAULT_ARCH, Arch, get_arch
from gpusim.program import Kernel, Scalar

from .emit import emit_kernel
from .errors import ExportError
from .harness import (DEFAULT_TOLERANCE, ArraySpec, LaunchSpec, Plan, cmakelists, hipcc_command,
                      main_hip, readme)
from .names import Namer
from .pins import verify_pins
from .signals import signals_held as _signals_held
from .simfacts import sim_info

NP_DTYPE = {"f32": np.float32, "f16": np.float16, "i32": np.int32, "i8": np.int8,
            "u8": np.uint8}


def _dtype_of(arr: np.ndarray, want: str | None = None) -> str | None:
    """The buffer dtype of an array; a bf16 buffer's values come as float32 (bf16 values,
    see compiler.ir.graph) and are written as their raw 16-bit patterns (``_bf16_bits``)."""
    if want == "bf16" and arr.dtype == np.float32:
        return "bf16"
    for k, v in NP_DTYPE.items():
        if arr.dtype == np.dtype(v):
            return k
    return None


def _bf16_bits(arr) -> np.ndarray:
    """float32 bf16 values -> their bfloat16 bit patterns (little-endian uint16); the
    values are already bf16, so this is the top half of each float32, NaN kept."""
    bits = np.ascontiguousarray(arr, np.float32).view(np.uint32)
    return (bits >> 16).astype("<u2")


def build_plan(kernels, launches, arrays, *, arch: Arch, title, expected, tolerances,
               warmup=3, repeats=20, launch: str = "stream") -> Plan:
    """Validates the inputs and fixes every name; raises ExportError on any inconsistency."""
    if launch not in ("stream", "graph"):
        raise ExportError(f"launch={launch!r}; use stream or graph")
    kernels = list(kernels)
    if not kernels:
        raise ExportError("nothing to export: no kernels given")
    knamer = Namer(taken=["app", "wfh", "launch", "kArrays", "kNumArrays", "kNumDispatches",
                          "kDispatchNames", "ArrayInfo", "WF_CHECK", "WF_DATA_DIR"])
    c_names = {}
    for k in kernels:
        if not isinstance(k, Kernel):
            raise ExportError(f"kernels must be gpusim.program.Kernel, got {type(k).__name__}")
        if id(k) in c_names:
            continue
        c_names[id(k)] = knamer.fresh(k.name)
    arrays = dict(arrays or {})
    expected = dict(expected or {})
    tolerances = dict(tolerances or {})
    specs: dict[str, ArraySpec] = {}
    fnamer = Namer()
    launch_specs = []
    for n, item in enumerate(launches):
        try:
            k, binding = item
        except (TypeError, ValueError):
            raise ExportError(f"launch {n}: expected (kernel, {{param: array name}})") from None
        if id(k) not in c_names:
            raise ExportError(f"launch {n}: kernel {getattr(k, 'name', k)!r} is not in kernels")
        binding = dict(binding)
        names = {p.name for p in k.params}
        extra = set(binding) - names
        if extra:
            raise ExportError(f"launch {n} ({k.name}): no parameter(s) {sorted(extra)}")
        args, bound = [], {}  # bound: array name -> (intent, param name) in this launch
        for p in k.params:
            if p.name not in binding:
                raise ExportError(f"launch {n} ({k.name}): parameter {p.name!r} is not bound")
            v = binding[p.name]
            if isinstance(p, Scalar):
                if isinstance(v, (str, bytes)) or not np.isscalar(v):
                    raise ExportError(f"launch {n} ({k.name}): scalar {p.name!r} needs a number")
                args.append(("scalar", p.dtype, int(v) if p.dtype == "i32" else float(v)))
                continue
            if not isinstance(v, str):
                raise ExportError(f"launch {n} ({k.name}): buffer {p.name!r} must name an array")
            if v in bound and (p.intent != "in" or bound[v][0] != "in"):
                raise ExportError(f"launch {n} ({k.name}): array {v!r} is bound to both "
                                  f"{bound[v][1]!r} and {p.name!r} and written: the "
                                  "kernel's __restrict__ pointers must not alias")
            bound[v] = (p.intent, p.name)
            spec = specs.get(v)
            if spec is None:
                given = arrays.get(v)
                if given is not None:
                    given = np.asarray(given)
                    dt = _dtype_of(given, p.dtype)
                    if dt is None:
                        raise ExportError(f"array {v!r}: dtype {given.dtype} (need float32, float16, int32, int8 or uint8)")
                    shape = tuple(int(s) for s in given.shape)
                else:
                    dt, shape = p.dtype, tuple(int(s) for s in p.shape)
                atol, rtol = tolerances.get(v, DEFAULT_TOLERANCE[dt])
                spec = ArraySpec(v, fnamer.fresh(v), dt, shape, given is not None, v in expected,
                                 float(atol), float(rtol))
                specs[v] = spec
            if spec.dtype != p.dtype or spec.count != p.size:
                raise ExportError(f"launch {n} ({k.name}): buffer {p.name!r} is {p.dtype}[{p.size}] "
                                  f"but array {v!r} is {spec.dtype}[{spec.count}]")
            args.append(("buffer", list(specs).index(v)))
        launch_specs.append(LaunchSpec(k, c_names[id(k)], args))
    for name in arrays:
        if name not in specs:
            raise ExportError(f"array {name!r} is not bound to any launch parameter")
    for name, arr in expected.items():
        if name not in specs:
            raise ExportError(f"expected output {name!r} is not bound to any launch parameter")
        arr = np.asarray(arr)
        if _dtype_of(arr, specs[name].dtype) != specs[name].dtype or \
                arr.size != specs[name].count:
            raise ExportError(f"expected output {name!r} is {arr.dtype}[{arr.size}], the array is "
                              f"{specs[name].dtype}[{specs[name].count}]")
    kernel_list = []
    for k in kernels:
        if all(k is not kk for kk, _ in kernel_list):
            kernel_list.append((k, c_names[id(k)]))
    return Plan(title=title, arch=arch, kernels=kernel_list, arrays=list(specs.values()),
                launches=launch_specs, warmup=warmup, repeats=repeats, launch=launch)


def _inside(root: Path, path: Path) -> Path:
    """``path`` after checking it lies inside ``root`` (defence in depth for file names)."""
    r = path.resolve()
    if os.path.commonpath([str(root.resolve()), str(r)]) != str(root.resolve()):
        raise ExportError(f"refusing to write {path}: outside the export directory")
    return path


MARKER = ".wavefuse-export"
"""The file every export holds; ``force`` replaces only a folder that has it, so a typo
such as ``-o . --force`` can never delete files that wavefuse did not write."""


def _prepare_target(out_dir, force: bool) -> tuple[Path, Path]:
    """Checks the target and its parent before anything is written; returns (target, parent).

    The spelling is checked before the path is made absolute: ``''``, ``.`` and ``..`` name a
    folder the user is standing in, never a folder of its own.
    """
    raw = str(out_dir)
    if raw.strip() in ("", ".", "..") or raw.rstrip("/\\") in ("", ".", ".."):
        raise ExportError(f"refusing to export into {raw!r}: give a new folder of its own, "
                          "such as -o out/export")
    out_dir = Path(raw).expanduser().absolute()
    resolved = out_dir.resolve()
    cwd = Path.cwd().resolve()
    protected = {Path("/"), Path.home().resolve()}
    if resolved in protected or cwd.is_relative_to(resolved):
        raise ExportError(f"refusing to export into {out_dir}: it is the home, root or current "
                          "folder (or holds it); give a new folder of its own")
    parent = out_dir.parent
    if not parent.is_dir():
        raise ExportError(f"cannot export to {out_dir}: parent directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ExportError(f"cannot export to {out_dir}: parent directory {parent} is not writable")
    if out_dir.exists() or out_dir.is_symlink():
        if not out_dir.is_dir() or out_dir.is_symlink():
            raise ExportError(f"cannot export to {out_dir}: it exists and is not a directory")
        if any(out_dir.iterdir()):
            if not force:
                raise ExportError(f"{out_dir} is not empty; pass force=True (--force) to replace "
                                  "a previous export")
            if not (out_dir / MARKER).is_file():
                raise ExportError(f"refusing to replace {out_dir}: it is not a wavefuse export (no "
                                  f"{MARKER} file); remove it yourself or choose another folder")
    return out_dir, parent


class ExportTarget:
    """An export folder, checked and locked until ``release`` (or the end of a ``with``).

    The lock is an exclusive ``flock`` on ``.NAME.wavefuse-lock`` beside the folder,
    taken without waiting: a concurrent export of the same folder is refused in one line.
    The lock file is removed on release; one left by a killed process holds no lock.
    """

    def __init__(self, out_dir, force: bool = False):
        self._fd = None
        self.path, self.parent = _prepare_target(out_dir, force)
        self.force = force
        self.lock_path = self.parent / f".{self.path.name}.wavefuse-lock"
        self._acquire()

    def _acquire(self):
        import fcntl  # POSIX only: imported where the lock is taken, not by every user
        for _ in range(100):
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise ExportError(f"cannot export to {self.path}: cannot write in {self.parent} "
                                  f"({e.strerror or e})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise ExportError(f"{self.path} is being written by another wavefuse export "
                                  f"(lock {self.lock_path}); wait for it or choose another "
                                  "folder") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.lock_path))
            except FileNotFoundError:
                same = False
            if same:  # not a file its last holder removed between our open and flock
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._fd = fd
                return
            os.close(fd)
        raise ExportError(f"cannot lock {self.lock_path}: it keeps being replaced")

    def release(self) -> None:
        if self._fd is None:
            return
        with _signals_held():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.lock_path)
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        if getattr(self, "_fd", None) is not None:
            self.release()


def write_project(out_dir, kernels, launches, arrays, *, arch: Arch | str = DEFAULT_ARCH,
                  force: bool = False,
                  title: str = "wavefuse export", expected: dict | None = None,
                  counters: dict | None = None, tolerances: dict | None = None,
                  warmup: int = 3, repeats: int = 20, pin_occupancy: bool = False,
                  verify_pins: bool = True, pin_compiles: dict | None = None,
                  launch: str = "stream") -> Path:
    """Writes the project atomically and returns its path.

    ``launches``: ordered (kernel, {param name: array name or scalar value}).
    ``arrays``: initial contents of device buffers by name (arrays not given start zeroed).
    ``expected``: arrays the harness compares after the last dispatch.
    ``counters``: {kernel name: simulator counters} for the kernel headers and sidecars.
    ``tolerances``: {array name: (atol, rtol)} overriding the per-dtype defaults.
    ``arch``: a name is resolved here, once (the package's entry point).
    ``pin_occupancy``: emit each kernel with ``amdgpu_waves_per_eu`` at the residency the
    simulator assumed (``codegen_hip.emit.emit_kernel``) where hipcc fits it there:
    with ``verify_pins`` (the default) each distinct pinned source is first compiled for
    the targets ``check`` uses (``codegen_hip.pins``), and a kernel that spills or misses
    the pin on any of them is emitted unpinned, the reason in its header and sidecar
    (``pin_dropped``). Pinned blindly, ResNet-50's 16x32x32 KW 4 tiles of small K spill
    3-7 VGPRs: the estimate (72) is below what LLVM fits (78-80). Without hipcc, or with
    ``verify_pins=False``, the pins are written unverified (sidecar ``pin_unverified``;
    a warning without hipcc). Off by default: the export would otherwise depend on
    whether hipcc is installed (README, "Whole models at full size", note f).
    ``pin_compiles``: hipcc results of an earlier ``pins.verify_pins`` call, reused.
    ``launch``: ``graph`` makes the harness capture the dispatches into a HIP graph once
    (stream capture) and check and time replays of it (``codegen_hip.harness.graph_main``).
    """
    plan = build_plan(kernels, launches, arrays, arch=get_arch(arch), title=title,
                      expected=expected, tolerances=tolerances, warmup=warmup, repeats=repeats,
                      launch=launch)
    if isinstance(out_dir, ExportTarget):
        target, own = out_dir, False
    else:
        target, own = ExportTarget(out_dir, force), True
    try:
        return _write_locked(target, plan, arrays, expected, counters or {}, pin_occupancy,
                             verify_pins, pin_compiles)
    finally:
        if own:
            target.release()


def _write_locked(target: ExportTarget, plan: Plan, arrays, expected, counters,
                  pin_occupancy: bool = False, verify_pins: bool = True,
                  pin_compiles: dict | None = None) -> Path:
    # checked again: while the caller tuned, something other than wavefuse may have
    # created the folder (another export cannot: it would need the lock)
    out_dir, parent = _prepare_target(target.path, target.force)
    tmp = None
    try:
        with _signals_held():
            try:
                tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=parent))
            except OSError as e:
                raise ExportError(f"cannot export to {out_dir}: cannot create a directory in "
                                  f"{parent} ({e.strerror or e})") from None
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; a project dir is not
        _write_files(tmp, plan, arrays or {}, expected or {}, counters, pin_occupancy,
                     verify_pins, pin_compiles)
        with _signals_held():
            _swap_into_place(tmp, out_dir)
    except BaseException:
        if tmp is not None:
            with _signals_held():
                shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _write_files(tmp: Path, plan: Plan, arrays: dict, expected: dict, counters: dict,
                 pin_occupancy: bool = False, verify_pins: bool = True,
                 pin_compiles: dict | None = None):
    sources = ["main.hip"]
    (tmp / MARKER).write_text(json.dumps({"title": plan.title, "arch": plan.arch.name}) + "\n")
    infos, srcs = {}, {}
    for k, c_name in plan.kernels:
        kc = counters.get(k.name)
        info = sim_info(k, plan.arch, c_name=c_name, counters=kc,
                        estimated_vgprs=(kc or {}).get("vgprs") if isinstance(kc, dict) else None,
                        pin=pin_occupancy)
        # pinned (when asked) at the simulated residency: hipcc allocates within it
        infos[c_name] = info
        srcs[c_name] = emit_kernel(k, plan.arch, c_name=c_name, counters=kc,
                                   waves_per_eu=info["waves_per_eu"])
    if pin_occupancy:
        _settle_pins(plan, counters, infos, srcs, verify_pins, pin_compiles)
    for k, c_name in plan.kernels:
        _inside(tmp, tmp / f"{c_name}.hip").write_text(srcs[c_name])
        _inside(tmp, tmp / f"{c_name}.sim.json").write_text(
            json.dumps(infos[c_name], indent=2) + "\n")
        sources.append(f"{c_name}.hip")
    (tmp / "main.hip").write_text(main_hip(plan))
    (tmp / "CMakeLists.txt").write_text(cmakelists(plan, "wavefuse_export", sources))
    (tmp / "README.md").write_text(readme(plan, sources))
    (tmp / "build.sh").write_text("#!/bin/sh\n# One-line build with hipcc; run from this directory.\n"
                                  f"{hipcc_command(plan, sources)}\n")
    # the NVIDIA compatibility headers, so `nvcc -I nvidia` builds the same sources
    shutil.copytree(Path(__file__).parent / "nvidia", tmp / "nvidia")
    data = tmp / "data"
    data.mkdir()
    for a in plan.arrays:
        def as_file(values, a=a):
            if a.dtype == "bf16":
                return _bf16_bits(values)
            return np.ascontiguousarray(np.asarray(values),
                                        dtype=np.dtype(NP_DTYPE[a.dtype]).newbyteorder("<"))
        if a.has_input:
            arr = as_file(arrays[a.name])
            np.save(_inside(tmp, data / f"{a.file_stem}.npy"), arr, allow_pickle=False)
        if a.expected:
            arr = as_file(expected[a.name]).reshape(a.shape)
            np.save(_inside(tmp, data / f"{a.file_stem}.expected.npy"), arr, allow_pickle=False)


def _settle_pins(plan: Plan, counters: dict, infos: dict, srcs: dict, verify: bool,
                 compiled: dict | None = None):
    """Verifies the pins with hipcc (``pins.verify_pins``) and re-emits unpinned each kernel
    whose pin hipcc does not fit; records the verdict in every sidecar."""
    asked = {c: (srcs[c], info["waves_per_eu"]) for c, info in infos.items()
             if info["waves_per_eu"]}
    for info in infos.values():
        info.update(pin_asked=info["waves_per_eu"], pin_verified_on=None, pin_dropped=None,
                    pin_unverified=None)
    if not asked:
        return
    if not verify:
        for c in asked:
            infos[c]["pin_unverified"] = "verification not asked (verify_pins=False)"
        return
    verdicts = verify_pins(asked, plan.arch, compiled=compiled,
                           estimates={c: infos[c]["estimated_vgprs"] for c in asked})
    unverified = {v.unverified for v in verdicts.values() if v.unverified}
    for why in sorted(unverified):   # one line per export (the CLI prints it as one)
        warnings.warn(f"--pin-occupancy: {why}", stacklevel=2)
    by_c = {c: k for k, c in plan.kernels}
    for c, v in verdicts.items():
        info = infos[c]
        k = by_c[c]
        if v.unverified:
            info["pin_unverified"] = v.unverified
            note = f"The pin is not verified: {v.unverified}."
        elif v.kept:
            info["pin_verified_on"] = list(v.targets)
            info["pin_figures"] = v.figures
            note = (f"The pin is verified: hipcc fits it without spills on "
                    f"{', '.join(v.targets)}.")
        else:
            info["waves_per_eu"] = None
            info["pin_dropped"] = v.reason
            info["pin_figures"] = v.figures
            note = f"Occupancy not pinned, left to the compiler: {v.reason}."
        # comments only: the code hipcc compiled (kept) or the unpinned kernel (dropped)
        srcs[c] = emit_kernel(k, plan.arch, c_name=c, counters=counters.get(k.name),
                              waves_per_eu=info["waves_per_eu"], header_comment=note)


def _swap_into_place(tmp: Path, out_dir: Path):
    """rename(tmp -> out_dir); an existing directory is moved aside first and restored on failure."""
    if not out_dir.exists():
        os.rename(tmp, out_dir)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
    os.rmdir(old)
    os.rename(out_dir, old)
    try:
        os.rename(tmp, out_dir)
    except BaseException:
        os.rename(old, out_dir)
        raise
    shutil.rmtree(old, ignore_errors=True)
