"""`wavefuse export MODEL -o DIR`: the tuned kernels as a HIP project you can build.

The model is tuned (as `wavefuse tune`, without the unfused baseline), every chosen kernel
is checked functionally in gpusim against numpy, and the project is written atomically by
``codegen_hip.write_project``: one .hip per dispatch, a host harness that loads the
seeded inputs and the numpy reference outputs from .npy files, CMake and hipcc build
lines. Buffers hold tensors in their memory layout (see ``memory_image``).
``--pin-occupancy`` pins each kernel at the simulated occupancy where hipcc fits it
(``codegen_hip.pins``); a dispatch whose winner hipcc cannot fit takes its fastest other
candidate that it does fit (``compiler.tuning.pinned_schedules``); the summary says how many kept
the pin, which dispatches changed schedule, and why the rest did not.
"""
from __future__ import annotations

from codegen_hip import write_project
from codegen_hip.export import ExportTarget
from codegen_hip.pins import pin_summary
from gpusim.hw import Arch
from gpusim.program import kernels_of

from compiler.lower.common import memory_image
from compiler.tuning.pinned_schedules import honour_pins
from compiler.ir.reference import evaluate, random_inputs
from compiler.tuning.search import SearchError
from compiler.cli.commands import common
from compiler.cli.commands.tune import add_tune_options, run_tune


def register(sub) -> None:
    p = sub.add_parser("export", help="write the tuned kernels as a HIP project (harness, CMake)",
                       description="Tune MODEL, then write one .hip per dispatch, a main.hip "
                                   "harness with .npy data and expected outputs, "
                                   "CMakeLists.txt and a README into DIR.")
    common.add_model(p)
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="directory to create (must be empty or absent unless --force)")
    p.add_argument("--force", action="store_true", help="replace a non-empty DIR")
    p.add_argument("--pin-occupancy", action="store_true",
                   help="emit each kernel with amdgpu_waves_per_eu at the occupancy the "
                        "simulator assumed, where hipcc confirms it fits: each distinct "
                        "kernel is compiled pinned for gfx90a and gfx940 first (an RDNA "
                        "export: its own target), and one "
                        "that spills or misses the pin is replaced by the dispatch's fastest "
                        "other candidate whose pin hipcc fits (values checked again), or, "
                        "when none of the next few does, emitted unpinned with the reason "
                        "(its .sim.json's pin_dropped). Without hipcc the pins are written "
                        "unverified, with a warning. Off by default, so an export does not "
                        "depend on whether hipcc is installed")
    add_tune_options(p)
    common.add_json(p)
    p.set_defaults(func=run, no_baseline=True)


def export_model(graph, result, out_dir, *, arch: Arch, force: bool, seed: int = 0,
                 pin_occupancy: bool = False, pin_compiles: dict | None = None):
    """Writes the project for a TuneResult; returns (path, kernel names)."""
    inputs = random_inputs(graph, seed)
    env = evaluate(graph, inputs, keep_all=True)
    kernels, launches, arrays, counters = [], [], {}, {}
    produced = set()
    for d in result.dispatches:
        # a dispatch lowered to a sequence (split-K): each kernel, launched in order; its
        # workspaces are arrays with no data, which the harness allocates
        ws = {w.name for w in getattr(d.kernel, "workspaces", ())}
        for k in kernels_of(d.kernel):
            kernels.append(k)
            launches.append((k, {b.name: b.name for b in k.buffers}))
            counters[k.name] = dict(d.best.counters, predicted_time_us=d.best.time_us,
                                    kernels_in_dispatch=len(kernels_of(d.kernel)))
            for b in k.buffers:
                if b.name in ws:
                    continue
                if b.intent == "in" and b.name not in produced:
                    arrays[b.name] = memory_image(graph, b.name, env[b.name])
                else:
                    produced.add(b.name)
    expected = {o: memory_image(graph, o, env[o]) for o in graph.outputs}
    path = write_project(out_dir, kernels, launches, arrays, arch=arch, force=force,
                         title=f"wavefuse export of {graph.name} for {arch.name}",
                         expected=expected, counters=counters, pin_occupancy=pin_occupancy,
                         pin_compiles=pin_compiles, launch=getattr(result, "launch", "stream"))
    return path, [k.name for k in kernels]


def _pin_line(pins: dict) -> str:
    """The summary of ``--pin-occupancy``: how many kernels carry the pin and why not the rest."""
    if pins["unverified"]:
        return f"occupancy pinned in {pins['pinned']} kernel(s), unverified (see the warning above)"
    line = (f"occupancy pinned in {pins['pinned']} kernel(s) (hipcc fits them on "
            f"{', '.join(pins['verified_on']) or 'its targets'})")
    failed = sum("hipcc failed" in r for r in pins["dropped"].values())
    spilled = len(pins["dropped"]) - failed
    if spilled:
        line += (f"; {spilled} left to the compiler, because the VGPR estimate is below what "
                 "LLVM fits at that occupancy")
    if failed:
        line += f"; {failed} left unpinned because hipcc failed to compile them pinned"
    if pins["dropped"]:
        line += " (pin_dropped in their .sim.json)"
    return line


def run(args) -> int:
    common.fixed_knobs(args.fix)  # a bad pin fails before the target is even locked
    # the target is checked and locked before tuning: a bad one fails in a second, not
    # after the search, and a concurrent export of the same folder is refused
    with ExportTarget(args.output, args.force) as target:
        result = run_tune(args, quiet=args.json)
        if result.mismatches:
            raise SearchError("refusing to export: simulated outputs differ from numpy for "
                              + ", ".join(d.name for d in result.mismatches))
        graph = result.plan.graph
        compiles = {}   # hipcc's results, shared by the schedule choice and the export
        swaps = honour_pins(graph, result, args.arch, args.seed, compiles) \
            if args.pin_occupancy else []
        path, names = export_model(graph, result, target, arch=args.arch, force=args.force,
                                   seed=args.seed, pin_occupancy=args.pin_occupancy,
                                   pin_compiles=compiles)
    pins = pin_summary(path) if args.pin_occupancy else None
    if args.json:
        doc = {"model": result.model, "arch": args.arch.name, "dir": str(path),
               "kernels": names, "total_time_us": result.total_time_us}
        if pins:
            doc["pins"] = dict(pins, rescheduled=[w.to_json() for w in swaps])
        common.emit_json(doc)
    else:
        con = common.console()
        con.print(f"wrote {len(names)} kernel(s) of {result.model} for {args.arch.name} to "
                  f"[bold]{path}[/] (predicted {result.total_time_us:.2f} us, simulated)")
        if pins:
            con.print(_pin_line(pins), highlight=False)
        if swaps:
            extra = sum(w.new_us - w.old_us for w in swaps)
            con.print(f"{len(swaps)} dispatch(es) took their fastest other schedule whose "
                      f"occupancy hipcc honours ({extra:+.2f} us predicted): "
                      + ", ".join(w.name for w in swaps), highlight=False)
        con.print(f"build: cd {path} && sh build.sh   |   check the ISA: wavefuse check {path}")
    return 0
