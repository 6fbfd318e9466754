"""How many waves fit on a SIMD, and what stops more from fitting.

Register estimate (``estimate_vgprs``), by live ranges over the statement tree:

- program points are statements in program order; a register is live from its first
  definition to its last read; a register read inside a loop but defined before it, or
  defined in the loop and read before that definition in the body (loop-carried), is live
  for the whole loop;
- per-lane registers (see ``analysis.Uniformity``) take one VGPR each; uniform i32
  registers (loop counters with uniform bounds, values computed from block_id and scalar
  parameters) live in SGPRs and cost no VGPR; uniform f32 values still take a VGPR
  (CDNA has no scalar float ALU);
- at each point we add the temporaries of the statement's own expressions (``_temps``):
  one VGPR per value (f32) operator node that is not the final result (a simple upper
  bound; the real compiler reuses some), and for a per-lane integer (index) subtree its
  Sethi-Ullman number, the fewest registers that evaluate the tree. Counting every index
  node as well (the rule before issue 28) gave 142 VGPRs where hipcc takes 11 for the
  long view-index chains of a gathered Swin window, and 22 for an elementwise kernel
  hipcc compiles to 10; figures below measured before that change say so where it moved
  them. An f32 sum of registers (a split-K reduce's ``((p0 + p1) + p2) + ...``) takes
  its Sethi-Ullman number too: LLVM adds in place, one register for a left-deep chain
  (Swin's fc2 reduce, 8 splits: 75 with a register per add, 70 so, hipcc 68 / 75 on
  gfx90a / gfx940);
- MFMA accumulators: on gfx90a-class targets AGPRs and VGPRs form one unified
  512-entry file per lane; for workgroups of at most 256 threads LLVM puts the
  accumulators of MFMAs in AGPRs (``_agpr_accumulators``): they cost one AGPR each and
  no VGPR, and the AGPR block starts at the VGPR count rounded up to 4. Larger
  workgroups get the VGPR form: accumulators count like any f32 register. The
  ``v_accvgpr_read``/``write`` copies at the loop edges are not counted. The form is
  chosen on the IR, so a K loop of one trip (K = 2 x BK: straight-line in the ISA) keeps
  its accumulators in AGPRs too (hipcc's gfx90a ISA of mlp's 64x64x32 MFMA tile with
  K = 64: 53 VGPRs + 16 AGPRs, every MFMA on ``a[0:15]``). A K of a single tile (no
  loop at all) is still counted in the VGPR form although hipcc uses AGPRs there too
  (bert's 32x64x64 KW2 tile with K = 64: 48 VGPRs + 16 AGPRs): the rest of that
  straight-line estimate comes out about 8 VGPRs high, and the two errors cancel (69 in
  the VGPR form against hipcc's 64, 72 in the AGPR form); making it AGPRs alone moves two
  of the sweep's 32x64x64 points out of check's rule;
- in a loop whose body is one run of LDS fragment reads and MFMAs (a GEMM's K tile),
  every fragment read of the body is live from the body's first LDS read: hipcc issues
  all of a K tile's fragment reads before the first MFMA (seen in its gfx90a/gfx940
  output for every MFMA tile of the schedule space). A body with several such runs (the
  MFMA attention: QK^T, the softmax, PV) keeps the reads where the IR puts them: that
  lowering issues each step's reads one step ahead of its MFMAs, as hipcc schedules them
  there (hoisting them all would count 224 VGPRs where hipcc takes 128, at seq 1024);
- i32 registers that differ only by a constant (``m1 = base + 1``, ``m2 = base + 2``:
  the index rows of a tile) share one register: hipcc keeps the base and folds the
  constants into instruction offsets or recomputes them with one add, so such a family
  is counted as one register live over the union of its members' ranges. "Differ by a
  constant" is decided on the affine form (``_affine``: sums and multiplications by
  constants distributed), except that ``(t * 2^k + c) * n`` with ``c < 2^k`` is kept
  whole: LLVM turns that add into an ``or`` and no longer distributes the multiplication,
  so hipcc gives ``((x*4)+1)*68`` a register of its own (``_or_like``);
- a register assigned a constant holds nothing until its first computed value: LLVM
  propagates the constant into its uses (``fma(a, b, 0)``), so zero-initialised FMA
  accumulators start at their first FMA (MFMA accumulators keep the AGPR rule below);
- a vector load's destination registers are one register tuple (``v[28:31]``), freed
  together when the last of them is read;
- an LDS read inside a loop that stores nothing to its array, at an address that does
  not change in the loop (counting the counters of constant-trip inner loops, which
  hipcc unrolls fully), is hoisted out by LLVM's LICM: its registers (one set per
  unrolled trip) are live over the whole loop (``_hoisted_lds_reads``);
- a loop with one trip is straight-line code in the ISA: nothing is carried through it,
  so the rules above that extend ranges over a loop skip it;
- inside a loop the ISA keeps (``_stays_loop``: not one trip, and not a constant-trip
  loop small enough for hipcc to unroll fully, ``FULL_UNROLL_STATEMENTS``), LICM computes
  every per-lane subexpression the loop does not change (the addresses of a K tile's LDS
  stores, the loop-independent part of its global addresses) once before the loop and
  holds it in a VGPR over the whole loop, one per offset family, reusing a register that
  already holds the value (``_hoisted_invariants``);
- in straight-line code the addresses of a run of LDS stores are computed before the
  run (while the global loads they store wait): each store's own address register is
  live from the run's first store to its own (``_store_address``);
- dead code is removed first, as LLVM does before allocating: an ``If`` whose condition
  interval arithmetic over the hardware ids decides (``m1 < 16`` with ``m1 = tx + 16``:
  a tile row past a 16-row matrix, ``_decided``) keeps only the branch that runs, and a
  register no store, branch or loop bound needs, directly or through other registers,
  is never allocated (``_needed``). hipcc then drops the FMAs and fragment reads of
  such rows: a 64x64 tile over bert's 16 tokens needs 36 VGPRs, not the 92 of a full
  tile;
- a peeled last K tile (straight-line LDS reads and FMAs ending in a barrier) whose
  accumulators are read after the barrier only inside ``If`` s (the M/N guards of the
  epilogue's stores) keeps all its fragment reads live to the barrier: LLVM sinks each
  FMA into the guarded block that uses it, the reads stay above the barrier
  (``_sunk_tile_reads``; hipcc's gfx90a ISA of a 64x64x16 tile of a 3x3 conv with
  M = 196 issues all 32 ``ds_read_b128`` of the last tile, then the FMAs in 4 guarded
  blocks: 168 VGPRs, estimated 115 before this rule, 148 with it, both 3 waves);
- in an FMA K loop that stays a loop, whose next-tile global loads include guarded
  scalar gathers (an ``If`` around a one-element ``Load``: the implicit-GEMM conv's
  padded im2col reads, a 1x1 conv's M guard) while its LDS stores are unguarded, the
  guards end a basic block before the fragment reads, which then share one block with
  the FMAs and the stores; hipcc's scheduler keeps about 3/4 of the tile's fragment
  registers live there (``FRAGMENT_CAP``): a read waits until the tuples the FMAs free
  make room (``_interleaved_loops``, ``_cap_fragment_reads``; hipcc's gfx90a ISA of
  ResNet-50's 16x32x64 KW 8 conv tiles issues 7 of the 12 ``ds_read_b128``, then FMAs,
  then one read per freed tuple: 36 fragment VGPRs with the ``v_pk_fma_f32`` operand
  copies. Estimated 79-82 before this rule, 68-71 with it, hipcc 66-72; the same source
  without the guards compiles to 76 with 10 reads up front, and with
  ``-mllvm -enable-misched=0`` to 76: the machine scheduler makes the difference). A
  guarded *vector* load (``conv_add_relu``'s NHWC 32x32x32 KW 4 tile) is left out: hipcc
  also keeps 12 of its 16 reads up front there, but adds about 16 operand-copy and
  result-pair VGPRs the estimate does not model (106 against 101 without the cap, 87
  with it). The cap is one fraction for every target although LLVM schedules gfx940 with
  its own machine model and issues more reads up front there, by an amount that depends
  on the kernel, not only on the target (``tools/fragment_schedule.py``, reads before the
  loop's first FMA, gfx90a / gfx940): ResNet-50's 22 tiles of this class 7 / 8 (hipcc
  66-72 VGPRs on both) or, the M = 49 1x1 convs, 7 / 10 (68 / 76); ViT-B/16's attention
  output projection (M = 197 guarded, bias and residual in the epilogue) 7 / 12 (78 /
  86); the same GEMM without the residual 7 / 10 (72 / 80), with a residual but no
  transpose view 9 / 12 (82 / 88). So "gfx940 issues all reads up front" holds for
  ViT's projection only; the uncapped estimate (79-82) would break all 22 ResNet tiles
  on gfx940, and the capped 71 stays one wave off ViT's 86 on gfx940 (a pinned gap:
  12 of ViT's dispatches, ``check``'s only disagreements there; 78 on gfx90a agrees).
  It is an occupancy choice of LLVM's scheduler, not a fixed order: the same kernel with
  ``amdgpu_waves_per_eu(6)`` compiles for gfx940 to 78 VGPRs with 10 of 12 reads up
  front, so modelling it means modelling the occupancy target the scheduler sets.
  ``wavefuse export --pin-occupancy`` sets that target instead: each kernel carries
  ``amdgpu_waves_per_eu(W)``, W = ``Occupancy.waves_per_eu`` (the busiest SIMD's share of
  the workgroups the simulator keeps resident: 6 for ViT's projection, whose 512-thread
  workgroups run 3 per CU at 71 VGPRs), and hipcc 5.2 allocates 78 on both targets there
  without spilling, 68 / 70 for ResNet-50's 16x32x32 KW 4 tiles of K = 576 at W = 7
  (82 unpinned on gfx940). The pin is only as good as the estimate is achievable: the
  same tile with K = 64 or 128 (straight-line K) is estimated at 72 (W = 7) where hipcc
  takes 78-80 unpinned and spills 3-7 VGPRs pinned, and the 7x7 stem (76, W = 6, before the
  index-tree rule; 70, W = 7, with it) spills, so the exporter keeps a pin only where hipcc, when installed, compiles it without
  spilling (``codegen_hip.pins``), and the pin is opt-in because an export would
  otherwise depend on whether hipcc is installed (docs/models.md, note f of "Whole models at
  full size"). hipcc's
  ISA of the K = 64 tile holds thread-id values shared by the first tile's and the next
  tile's addresses (``tid / 4``, the LDS store addresses) from the prologue to the second
  tile's stores; a value-numbering rule for straight-line kernels (a per-lane value
  several statements compute held from the first to the last) gives 78 there (hipcc 78)
  and 89 for the stem (85, the same 5 waves), but 65 of the sweep's 90 FMA points
  (bert's 16x32x32 KW 4 tiles of K = 64 come out 76 where hipcc takes 68), so it is
  not adopted.
  A guarded LDS store instead ends the block after the reads and hipcc sinks
  the FMAs below it, keeping every read live (``conv_add_relu``'s 1x1 tiles);
- a straight-line f32 value read only inside one later ``If`` is computed there: LLVM
  sinks it into the block of its uses (``_sunk_values``), so its operands stay live to
  the guard (a split-K reduce kernel's partial sums: all partials live across the
  epilogue's guarded bias loads, as hipcc's ISA shows);
- a straight-line FMA K tile (a run of LDS reads and f32 assignments in the kernel
  body, between barriers, not a sunk tile) is one basic block LLVM's scheduler may
  reorder (so is a run in an arm of one of the body's own ``If`` statements: split-K's
  last-arriving workgroup sums its partials in one, 137 counted as program order against
  hipcc's 75-77 for a 64x64 tile over 8 splits): it targets the occupancy the workgroup
  size, LDS and wave slots allow
  (GCNSchedStrategy's TargetOccupancy) and issues reads into the tuples the FMAs free
  until the region fits that occupancy's VGPR budget. Where the program-order peak of
  such a run exceeds the budget, the run counts at the budget (``_free_tile_points``,
  ``_target_budget``; FMA kernels only). The split-K partial of a 64x64x16 tile with one
  K tile per split: 84 in program order (16 reads before the first FMA), 10 KiB of LDS
  hold it at 6 waves, budget 80; hipcc issues 14 reads up front and takes 75. The rule
  only lowers a count to a budget, never below what the rest of the kernel needs, and
  is not a model of how far below the budget the scheduler gets. A run of global loads
  into f32 registers and sums of them (``_is_sum``) is such a block too (a one-tile
  split-K reduce: its partials, then their sums): 64 partials of Swin's fc2 reduce in
  program order, 70 estimated; hipcc issues 56 loads, starts the sums and reuses their
  registers for the last 8, 61 VGPRs on gfx90a and gfx940 (8 waves, budget 64). It
  showed once the partials' loads took the scalar-base form (``wf_uniform_base`` in
  ``codegen_hip.emit``; before, hipcc 69 / 107 spent the difference on addresses);
- a direct conv's straight-line run of channel loads and FMAs (``acc = fma(x, w,
  acc)``) is such a block as well, once its channel loads take the scalar-base form
  (``codegen_hip.emit``: channel c at ``c * H * W + pixel``, a wave-uniform base past
  the 4 KiB immediate): YOLO's 1x1 conv 104 in program order, hipcc 70 / 68 on gfx90a /
  gfx940, 64 at the budget of 8 waves (2026-12-02 evening);
- a register only ever loaded at a wave-uniform index from a buffer the kernel does not
  write is read with ``s_load`` into SGPRs and costs no VGPR (``_scalar_loads``; VALU
  instructions take an SGPR operand): MobileNetV3's squeeze-excite conv reads its 48
  pooled inputs so, hipcc 52, estimated 100 when they counted;
- plus 1 VGPR for the work-item id (v0) and, for kernels with global accesses, 1 for an
  address offset.

The estimate is a model of what hipcc would allocate, not a register allocator: it is
good for the occupancy cliffs (24 -> 8 waves, 128 -> 4 waves, ...) that schedules cross.
Known gaps, measured by ``tools/vgpr_sweep.py`` (on gfx90a, of 90 sampled contraction
points of mlp, conv_add_relu and bert_2layer.onnx per MMA kind, 70 FMA and 79 MFMA meet
``wavefuse check``'s rule; 61 and 73 before the LICM, constant, tuple and store-address
rules; the tuple rule and the address-offset VGPR were skipped in kernels with a loop
until a shadowed variable was fixed, which added 1 to most loop kernels and 4 to one
attention point): hipcc's scheduler interleaves LDS reads with their FMAs when it chooses to (a
hoisted Q block, many scores per thread; the last reads of a straight-line split-K tile
go into tuples the first FMAs freed: 86 estimated vs 69-76), which this program-order
model does not see, yet hoists all of a K loop's reads to the loop top for some small
tiles (64x64x16: 102 vs 144); a 1024-thread workgroup, capped at 4 waves per SIMD anyway,
gets up to 128 VGPRs (37-58 vs 128); 9 of 13 sampled 64x64x32 tiles of 32x32 MFMAs
(KW 1) and 2 of 24 32x32x64 (KW 4) come out 8-28 VGPRs under hipcc (12-29 before the
one-trip AGPR rule), which keeps the next tile's global loads (clustered with the first
tile's, same base, an immediate offset), the LDS store addresses (the same registers for
every tile's stores) and epilogue address parts computed for the first tile's loads
live across the first tile's MFMAs. A value-numbering rule for that (a per-lane value
the first tile computes and a later statement recomputes held from the first tile on)
was measured: 64x64x32 KW1 8/13, but 32x64x64 KW2 5/8 (over-counted through its kept K
loop, where hipcc sinks the prefetch loads below the fragment reads instead), so it is
not adopted and these tiles stay opt-in in the schedule space
(``compiler.schedule.contraction.MFMA_OPT_IN``, with 32x32x128 KW8 and 32x64x64 KW2).
The unroll threshold misjudges MFMA loops: hipcc keeps encoder_layer's 11-trip K loop of
29 statements (8 MFMAs) of the 32x32x128 KW8 tile (53 estimated vs 65) and the 5-trip
loop of 51 (16 MFMAs) of the 32x64x64 KW2 tile; weighting an MFMA as 4 statements fixes
the first and moves 64x64x32 KW1 to 7/13, but the second then comes out 108 vs 88, the
over-count of that tile's kept loops (also 108 vs 88 at 24 trips), so it is not adopted.
The next tile's loads and the addresses held across the first tile's compute also
undercount ResNet-50's 7x7 stem conv (16x32x32 KW 4, FMA, K = 147: a 4-trip K loop hipcc
unrolls, guarded scalar loads): 76 vs hipcc's 85 (5
waves vs 6), 70 (7 waves) since the index-tree temporaries rule: its im2col index
expressions share subexpressions across statements, which LLVM's CSE keeps in registers
and neither rule sees; computing the loop invariants once for the unrolled copies (LICM's rule
applied to unrolled loops) gives 86 there and 81 of 90 MFMA points, but 66 of 90 FMA
points, so it is not applied; fused attention schedules with Q in LDS over several key blocks
come out one wave or more pessimistic (130 vs 86). tests/test_contraction_vgprs.py and
tests/test_attention_vgprs.py pin agreeing points and these gaps.

Occupancy (waves per SIMD, S9): the minimum of
- wave slots (8 per SIMD on CDNA, 16 on gfx1100),
- VGPR file: vgprs_per_lane // roundup(vgprs, granule),
- LDS: lds_bytes_per_cu // kernel LDS bytes workgroups per CU,
- workgroups per CU: 16 (one hardware barrier per workgroup); single-wave workgroups
  use no barrier and are not bound by it (LLVM's getMaxWorkGroupsPerCU, review D138443),
counted in whole workgroups (a workgroup's waves are resident together).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from gpusim.analysis import (Uniformity, affine_form, expr_children, expr_key, expr_vars, stmt_defs,
                             stmt_exprs)
from gpusim.errors import KernelError
from gpusim.hw import DEFAULT_ARCH, get_arch
from gpusim.program import (
    AtomicAdd, Assign, Barrier, BinOp, Const, Fma, For, If, LdsLoad, LdsStore, Load, Mfma, ScalarRef, Select, Special, Store,
    Var,
    walk,
)


def _temps(e, uni: Uniformity, hoisted=frozenset()) -> int:
    """Temporary VGPRs to evaluate ``e`` below its root. A value (f32) operator node takes
    one each (a simple upper bound; the real compiler reuses some). A per-lane integer
    (index) subtree takes its Sethi-Ullman (Ershov) number (Sethi & Ullman, "The
    Generation of Optimal Code for Arithmetic Expressions", JACM 17(4), 1970: the fewest
    registers that evaluate a tree without spilling, the child with the larger need
    first): counting each of its nodes gave 142 where hipcc takes 11 for the long
    view-index chains of a Swin window gather (``((x / 32 / 8) % 8 ...) * 8 + ...``,
    each level one operator over one subtree and a constant), while the tiles' index
    expressions are small enough that both rules agree. Leaves (registers, constants,
    hardware ids, scalar parameters), uniform i32 nodes (SGPRs) and subtrees LICM
    computes before the loop (``hoisted``, by ``expr_key``) hold no VGPR."""
    def free(x) -> bool:
        return isinstance(x, (Const, Var, Special, ScalarRef)) or bool(
            hoisted and expr_key(x) in hoisted)

    def own(x) -> int:
        return 0 if free(x) else int(not uni.is_uniform(x) or x.dtype == "f32")

    def need(x) -> int:
        """Registers while computing the index subtree ``x``, its result included."""
        return 0 if free(x) else max(own(x), peak(x))

    def peak(x) -> int:
        kids = sorted((need(c) for c in expr_children(x)), reverse=True)
        top = held = 0
        for n in kids:
            top = max(top, held + n)
            held += 1 if n else 0
        return top

    def register_sum(x) -> bool:
        """An f32 sum of registers (a split-K reduce's partials): no operand is computed
        twice, so the sum is evaluated in place, as LLVM does (``v_add_f32 v3, v3, v4``),
        and takes its Sethi-Ullman number (1 for a left-deep chain) like an index tree."""
        return free(x) or (isinstance(x, BinOp) and x.op == "add" and x.dtype == "f32" and
                           register_sum(x.a) and register_sum(x.b))

    if isinstance(e, (int, float)):  # a loop bound given as a Python number: a constant
        return 0
    if (e.dtype == "i32" or register_sum(e)) and not free(e):
        return peak(e)
    n = 0
    stack = list(expr_children(e))
    while stack:
        x = stack.pop()
        if free(x):
            continue
        if x.dtype == "i32":
            n += need(x)
            continue
        n += own(x)
        stack.extend(expr_children(x))
    return n


def _affine(e) -> tuple[dict, int]:
    """``analysis.affine_form`` with LLVM's ``or``-like adds kept whole (``_or_like``)."""
    return affine_form(e, _or_like)


def _or_like(e) -> bool:
    """``t * 2^k + c`` with ``0 < c < 2^k``: LLVM turns that add into an ``or`` (the bits
    are disjoint) and then no longer distributes a multiplication over it, so the
    constant cannot move into an instruction offset (hipcc computes ``((x*4)+1)*68`` in
    a register of its own)."""
    if not (isinstance(e, BinOp) and e.op == "add"):
        return False
    for t, c in ((e.a, e.b), (e.b, e.a)):
        if isinstance(c, Const) and isinstance(c.value, int) and c.value > 0 and \
                isinstance(t, BinOp) and t.op == "mul":
            m = next((x.value for x in (t.a, t.b) if isinstance(x, Const)), None)
            if isinstance(m, int) and m > 0:
                low = m & -m   # the largest power of two dividing t
                return c.value < low
    return False


def _offset_family(e):
    """The non-constant part of an i32 expression in affine form (None when there is
    none): two expressions with the same family differ by a constant."""
    terms, _ = _affine(e)
    return tuple(sorted(terms.items(), key=repr)) or None


def _offset_aliases(body) -> dict:
    """register -> representative, for single-definition i32 registers whose values
    differ only by a constant (see the module docstring)."""
    defs = {}
    for s in walk(body):
        for v in stmt_defs(s):
            defs[v.name] = defs.get(v.name, 0) + 1
    alias, family_rep = {}, {}
    for s in walk(body):
        if isinstance(s, Assign) and s.dst.dtype == "i32" and defs[s.dst.name] == 1:
            fam = _offset_family(s.value)
            if fam is not None:
                alias[s.dst.name] = family_rep.setdefault(fam, s.dst.name)
    return alias


def estimate_vgprs(kernel, arch=DEFAULT_ARCH) -> int:
    """VGPRs per lane the kernel needs, by the live-range rule in the module docstring:
    linearise the pruned body into points, give every register its live range (extended
    across the loops that carry it), apply what hipcc is known to do to them, and count
    the largest number live at one point."""
    uni = Uniformity(kernel.body)
    dtypes = {}
    for s in walk(kernel.body):
        for v in stmt_defs(s):
            dtypes[v.name] = v.dtype
    alias = _offset_aliases(kernel.body)
    decided, env = _decided(kernel)
    body = _prune(kernel.body, decided)
    licm = _hoisted_invariants(body, uni, alias)
    mfma_acc = {v.name for s in walk(body) if isinstance(s, Mfma) for v in s.acc}
    lin = _Linearisation(kernel, env, uni, alias, _needed(body, env, kernel), licm, mfma_acc)
    lin.add(body)
    ranges = _live_ranges(lin.points, lin.loops)
    mfma_loops = _mfma_loops(lin)
    licm_regs = _hipcc_ranges(body, lin, ranges, alias, licm, mfma_loops)
    in_agprs = _agpr_accumulators(kernel, arch, ranges, lin.k_loops)

    in_sgprs = _scalar_loads(kernel)

    def is_vgpr(name):
        name = name.split("#", 1)[0]
        if name in in_sgprs:
            return False
        return name in uni.per_lane or dtypes.get(name) == "f32"

    # registers live at each point: a sweep over the ranges' ends (a difference array),
    # linear in points + ranges rather than their product
    n = len(lin.points)
    delta = [0] * (n + 1)
    for name, (lo, hi) in ranges.items():
        lo, hi = max(lo, 0), min(hi, n - 1)
        if lo <= hi and (is_vgpr(name) or name in licm_regs) and name not in in_agprs:
            delta[lo] += 1
            delta[hi + 1] -= 1
    has_global = any(isinstance(s, (Load, Store)) for s in walk(body))
    extra = 1 + (1 if has_global else 0)
    free = set()
    if not in_agprs:
        for block in [lin.top] + lin.arms:
            free |= _free_tile_points(block, lin.point_of)
    best = best_free = live = 0
    for i, (_, _, temps) in enumerate(lin.points):
        live += delta[i]
        if i in free:
            best_free = max(best_free, live + temps)
        else:
            best = max(best, live + temps)
    if best_free + extra > best + extra:
        # the scheduler reorders a free tile down to its occupancy target's budget
        best_free = max(best, min(best_free, _target_budget(kernel, arch) - extra))
    vgprs = max(best, best_free) + extra
    if not in_agprs:
        return vgprs
    return -(-vgprs // AGPR_ALIGN) * AGPR_ALIGN + len(in_agprs)


def _scalar_loads(kernel) -> set:
    """Registers only ever loaded from global memory at a wave-uniform index of a buffer
    the kernel never writes: LLVM reads them with ``s_load`` into SGPRs (the address is
    uniform and nothing clobbers the memory; ``AMDGPUAnnotateUniformValues``), and a
    VALU instruction takes an SGPR operand directly, so they cost no VGPR, f32 values
    included (a value *computed* from them still takes one: no scalar float ALU). The
    64-thread direct 1x1 conv of MobileNetV3's squeeze-excite reads the pooled 1x1 input
    (48 channels) at constant offsets: estimated 100 with those 48 values in VGPRs,
    hipcc 52 (``s_load_dwordx4`` and ``v_fmac_f32 v, s, v``)."""
    written = {s.buffer for s in walk(kernel.body) if isinstance(s, (Store, AtomicAdd))}
    uni = Uniformity(kernel.body)
    scalar, other = set(), set()
    for s in walk(kernel.body):
        ok = isinstance(s, Load) and s.buffer not in written and uni.is_uniform(s.index)
        for v in stmt_defs(s):
            (scalar if ok else other).add(v.name)
    return scalar - other


class _Linearisation:
    """The body as a sequence of points, one per statement: (registers read, registers
    defined, temporaries), with loops recorded as spans of points."""

    def __init__(self, kernel, env, uni, alias, needed, licm, mfma_acc):
        self.kernel, self.env, self.uni, self.alias, self.needed = kernel, env, uni, alias, needed
        self.points = []
        self.kinds = []      # the statement type of each point
        self.loops = []      # (first, last) point of every loop of more than one trip
        self.k_loops = []    # every For's span, one-trip ones too (the MFMA form is chosen on the IR)
        self.loop_point = {}  # id(For) -> its first point (the hoisting rule names loops)
        self.store_addrs = []  # (first point of a run of LDS stores, this store's point, family)
        self.top = []        # (point, statement) of the kernel body's own statements
        #: the same for the arms of the body's own ``If`` statements (split-K's
        #: last-arriving workgroup sums its partials in one): blocks of their own
        self.arms = []
        self.point_of = {}   # id(statement) -> its point
        self.mfma_acc = mfma_acc  # MFMA accumulators: a constant start still takes registers
        self.licm_keys = {}  # id(For) -> expr_keys of the computations hoisted out of it
        for loop, _, _, key in licm:
            self.licm_keys.setdefault(id(loop), set()).add(key)

    def add(self, body, skip=frozenset(), depth=0, arm=None):
        points, kinds, alias, uni = self.points, self.kinds, self.alias, self.uni
        run = None
        for s in body:
            self.point_of[id(s)] = len(points)
            if depth == 0:
                self.top.append((len(points), s))
            elif arm is not None:
                arm.append((len(points), s))
            run = (len(points) if run is None else run) if isinstance(s, LdsStore) else None
            if run is not None:
                fam = _store_address(s.index, uni, skip)
                if fam is not None:
                    self.store_addrs.append((run, len(points), fam))
            reads = set()
            for e in stmt_exprs(s):
                _reads(e, self.env, self.kernel, reads)
            reads = {alias.get(r, r) for r in reads}
            if stmt_defs(s) and not isinstance(s, For) and \
                    not any(v.name in self.needed for v in stmt_defs(s)):
                points.append((set(), set(), 0))  # dead: LLVM removes it (the point stays
                kinds.append(type(s))              # so statement counts index points)
                continue
            temps = sum(_temps(e, uni, skip) for e in stmt_exprs(s))
            defs = {alias.get(v.name, v.name) for v in stmt_defs(s) if v.name in self.needed}
            if isinstance(s, Assign) and isinstance(s.value, Const) and \
                    s.dst.name not in self.mfma_acc:
                defs = set()  # a constant: propagated into its uses (see the docstring)
            points.append((reads, defs, temps))
            kinds.append(type(s))
            if isinstance(s, For):
                start = len(points) - 1
                self.loop_point[id(s)] = start
                self.add(s.body, skip | self.licm_keys.get(id(s), frozenset()), depth + 1)
                self.k_loops.append((start, len(points) - 1))
                if _trips(s) != 1:   # one trip: straight-line code, nothing carried
                    self.loops.append((start, len(points) - 1))
            elif isinstance(s, If):
                for branch in (s.then, s.orelse):
                    inner = [] if depth == 0 else None
                    self.add(branch, skip, depth + 1, inner)
                    if inner:
                        self.arms.append(inner)

    def loop_span(self, loop) -> tuple:
        return next(span for span in self.loops if span[0] == self.loop_point[id(loop)])


def _live_ranges(points, loops) -> dict:
    """name -> [first point, last point] it is live, from its definitions and reads,
    extended across the loops that read it (live through, or loop-carried) until no
    range moves."""
    first_def, last_use, first_use = {}, {}, {}
    for i, (reads, defs, _) in enumerate(points):
        for r in reads:
            last_use[r] = i
            first_use.setdefault(r, i)
        for d in defs:
            first_def.setdefault(d, i)
            last_use.setdefault(d, i)
    ranges = {}
    for name in set(first_def) | set(last_use):
        lo = first_def.get(name, first_use.get(name, 0))
        hi = max(last_use.get(name, lo), lo)
        ranges[name] = [lo, hi]
    # per loop, the registers read in it: name -> (first read, first definition or None)
    # inside its span (the points never change below, only the ranges)
    inside = []
    for (a, b) in loops:
        first_read, first_write = {}, {}
        for i in range(a, b + 1):
            reads, defs, _ = points[i]
            for r in reads:
                first_read.setdefault(r, i)
            for d in defs:
                first_write.setdefault(d, i)
        inside.append((a, b, [(name, first_read[name], first_write.get(name))
                              for name in first_read if name in ranges]))
    changed = True
    while changed:  # extend ranges across loops until nothing moves
        changed = False
        for a, b, read_here in inside:
            for name, read0, def0 in read_here:
                r = ranges[name]
                lo, hi = r
                if lo < a:                      # defined before, read inside: live through loop
                    hi = max(hi, b)
                if def0 is not None and read0 <= def0:  # loop-carried
                    lo, hi = min(lo, a), max(hi, b)
                if [lo, hi] != r:
                    r[0], r[1] = lo, hi
                    changed = True
    return ranges


def _mfma_loops(lin: _Linearisation) -> list:
    """MFMA K loops: (loop span, first LDS fragment read of its body)."""
    out = []
    for a, b in lin.loops:
        span = range(a + 1, b + 1)
        if any(lin.kinds[i] is Mfma for i in span) and _mfma_runs(lin.kinds, span) == 1:
            first = next((i for i in span if lin.kinds[i] is LdsLoad), None)
            out.append(((a, b), b + 1 if first is None else first))
    return out


def _hipcc_ranges(body, lin: _Linearisation, ranges: dict, alias, licm, mfma_loops) -> set:
    """Adjusts ``ranges`` for what hipcc does beyond the plain live-range rule (vector
    registers freed together, hoisted LDS reads and loop invariants, store addresses
    computed ahead, interleaved and sunk fragment reads, MFMA fragment reads issued
    first); returns the names of the registers that hoisting adds."""
    for s in walk(body):  # a vector load's registers are one tuple: freed together
        if isinstance(s, (Load, LdsLoad)) and len(s.dsts) > 1:
            group = [alias.get(v.name, v.name) for v in s.dsts]
            group = [g for g in group if g in ranges]
            if group:
                hi = max(ranges[g][1] for g in group)
                for g in group:
                    ranges[g][1] = hi
    for name, (loop, copies) in _hoisted_lds_reads(body, alias).items():
        a, b = lin.loop_span(loop)  # LICM'd LDS reads: live over the loop
        for c in range(copies):
            key = name if c == 0 else f"{name}#unrolled{c}"
            lo, hi = ranges.get(name, [a, b])
            ranges[key] = [min(lo, a), max(hi, b)]
    licm_regs = set()
    for run, at, fam in lin.store_addrs:  # a run's store addresses, computed before it
        name = f"st:{run}:{fam}"
        licm_regs.add(name)
        r = ranges.setdefault(name, [run, at])
        r[1] = max(r[1], at)
    for loop, fam, reg, _ in licm:  # LICM'd computations: live over their loop
        a, b = lin.loop_span(loop)
        if reg is None:
            reg = f"licm:{id(loop)}:{fam}"
            licm_regs.add(reg)
        r = ranges.setdefault(reg, [a, b])
        r[0], r[1] = min(r[0], a), max(r[1], b)
    interleaved = _interleaved_loops(body)
    for loop in interleaved:  # hipcc interleaves reads with FMAs
        _cap_fragment_reads(loop, lin.point_of, lin.points, ranges, alias, FRAGMENT_CAP)
    for run, at in _sunk_tile_reads(lin.top):  # FMAs sunk past the barrier: reads live to it
        for s in run:
            for v in s.dsts:
                r = ranges.get(alias.get(v.name, v.name))
                if r is not None:
                    r[1] = max(r[1], at)
    for s, at in _sunk_values(lin.top):  # a value computed only for one guarded block
        r = ranges.get(alias.get(s.dst.name, s.dst.name))
        if r is not None:
            r[0] = max(r[0], min(at, r[1]))
        for e in stmt_exprs(s):
            for v in expr_vars(e):
                r = ranges.get(alias.get(v, v))
                if r is not None:
                    r[1] = max(r[1], at)
    frag_regs = {alias.get(v.name, v.name) for s in walk(body) if isinstance(s, LdsLoad)
                 for v in s.dsts}
    for (a, b), first_frag in mfma_loops:  # hipcc issues a K tile's fragment reads first
        for name, r in ranges.items():
            if a <= r[0] <= b and name in frag_regs and r[0] > first_frag:
                r[0] = first_frag
    for loop in _integer_mac_loops(body):  # integer MACs sunk past the barrier
        if any(loop is x for x in interleaved):
            continue
        a, b = lin.loop_span(loop)
        reads = [alias.get(v.name, v.name) for x in loop.body if isinstance(x, LdsLoad)
                 for v in x.dsts]
        first = min((ranges[r][0] for r in reads if r in ranges), default=None)
        for r in reads:
            if r in ranges and first is not None:
                ranges[r][0] = min(ranges[r][0], first)
                ranges[r][1] = max(ranges[r][1], b)
    return licm_regs


def _integer_macs(stmts) -> bool:
    """Whether ``stmts`` (one level) hold an i32 multiply-accumulate ``acc = acc + a * b``
    (an integer GEMM's K step: ``compiler.lower.contraction``'s ``mac``)."""
    for x in stmts:
        if isinstance(x, Assign) and x.dst.dtype == "i32" and isinstance(x.value, BinOp) \
                and x.value.op == "add":
            parts = (x.value.a, x.value.b)
            if any(isinstance(p, Var) and p.name == x.dst.name for p in parts) and \
                    any(isinstance(p, BinOp) and p.op == "mul" for p in parts):
                return True
    return False


def _integer_mac_loops(body) -> list:
    """Kept K loops of an integer GEMM (i32 multiply-accumulates, LDS fragment reads, no
    MFMA). hipcc issues every fragment read of the K tile before the first multiply and
    sinks the ``v_mul_lo_u32``/``v_add3_u32`` chains past the loop's barrier (its gfx940
    ISA of matmul_integer's 16x64x16 tile: 20 ``ds_read_b128`` up front, the products
    computed before the next tile's LDS stores; 102 VGPRs, 59 estimated by the plain
    live ranges): the reads stay live to the loop's end. A loop ``_interleaved_loops``
    takes (a guarded scalar next-tile load) keeps that rule, as for f32: conv_integer's
    1x16x64 tile issues 14 of 20 reads up front, then the rest between the MACs (87)."""
    out = []
    for s in walk(body):
        if isinstance(s, For) and _stays_loop(s) and _integer_macs(s.body) and \
                not any(isinstance(x, (For, Mfma)) for x in walk(s.body)) and \
                any(isinstance(x, LdsLoad) for x in s.body):
            out.append(s)
    return out


#: the fraction of a K tile's fragment registers hipcc keeps live at once in a K loop it
#: schedules for register pressure (``_interleaved_loops``): 36 of 48 in its gfx90a ISA of
#: ResNet-50's 16x32x64 KW 8 conv tiles (7 of the 12 ``ds_read_b128`` issued up front,
#: then each one into a tuple the FMAs freed, with the ``v_pk_fma_f32`` operand copies)
FRAGMENT_CAP = 0.75


def _interleaved_loops(body) -> list:
    """FMA K loops (kept loops, no MFMA) whose next-tile global loads are guarded (an
    ``If`` holding a ``Load``) while their LDS stores are not: the guards end a basic
    block before the tile's fragment reads, which then share one block with the FMAs and
    the stores, and hipcc's scheduler interleaves reads and FMAs there (see the module
    docstring). A guarded store instead ends the block after the reads and hipcc sinks
    the FMAs below it, keeping every read live (``conv_add_relu``'s 1x1 tiles)."""
    out = []
    for s in walk(body):
        if not isinstance(s, For) or not _stays_loop(s):
            continue
        inner = list(walk(s.body))
        if any(isinstance(x, (For, Mfma)) for x in inner):
            continue
        guarded_load = guarded_store = False
        for x in s.body:
            if isinstance(x, If):
                sub = list(walk(x.then)) + list(walk(x.orelse))
                guarded_load |= any(isinstance(y, Load) and len(y.dsts) == 1 for y in sub)
                guarded_store |= any(isinstance(y, (LdsStore, Store)) for y in sub)
        if guarded_load and not guarded_store and \
                sum(isinstance(x, LdsLoad) for x in s.body) > 1:
            out.append(s)
    return out


def _cap_fragment_reads(loop, point_of, points, ranges, alias, cap) -> None:
    """Delay the loop body's LDS fragment reads, in program order, until the registers of
    the reads still live leave room under ``cap`` x all of them (never past a read's
    first use): the schedule hipcc's ISA shows for ``_interleaved_loops``."""
    reads = []
    for x in loop.body:
        if isinstance(x, LdsLoad):
            regs = [alias.get(v.name, v.name) for v in x.dsts]
            regs = [r for r in regs if r in ranges]
            if regs:
                reads.append((point_of[id(x)], regs))
    total = sum(len(r) for _, r in reads)
    limit = cap * total
    issued = []  # (start, end, registers)
    for at, regs in reads:
        end = max(ranges[r][1] for r in regs)
        use = min((i for i in range(at + 1, end + 1) if set(regs) & points[i][0]),
                  default=at)
        t = at
        while t < use:
            live = sum(n for lo, hi, n in issued if lo <= t <= hi)
            if live + len(regs) <= limit:
                break
            t = min((hi + 1 for lo, hi, n in issued if lo <= t <= hi), default=use)
        t = min(t, use)
        for r in regs:
            ranges[r][0] = max(ranges[r][0], t)
        issued.append((t, end, len(regs)))


def _sunk_tile_reads(top) -> list:
    """(LDS reads of a straight-line K tile, the barrier's point) for each run of LDS
    reads and f32 assignments (a peeled last K tile's fragment reads and FMAs) that the
    kernel body ends with a barrier, when after the barrier its accumulators are read only
    inside ``If`` s (the M/N bounds guards of the epilogue's stores): LLVM sinks each FMA
    into the guarded block that uses it, below the barrier, while the LDS reads must stay
    above it, so every fragment read of the tile is live at the barrier (see the module
    docstring)."""
    out = []
    for j, (at, s) in enumerate(top):
        if not isinstance(s, Barrier):
            continue
        run, accs = [], set()
        for _, t in reversed(top[:j]):
            if isinstance(t, LdsLoad):
                run.append(t)
            elif isinstance(t, Assign) and t.dst.dtype == "f32":
                accs.add(t.dst.name)
            else:
                break
        if not run or not accs:
            continue
        guarded = True
        for _, t in top[j + 1:]:
            if isinstance(t, If):
                continue
            reads = set()
            for e in (x for u in walk((t,)) for x in stmt_exprs(u)):
                reads |= expr_vars(e)
            if reads & accs:
                guarded = False
                break
        if guarded:
            out.append((run, at))
    return out


def _sunk_values(top) -> list:
    """(statement, point of the ``If`` it sinks into) for each straight-line f32
    ``Assign`` of the kernel body whose value is read only inside one later ``If`` (its
    branches, not its condition), directly or through values that sink there too: LLVM
    sinks an instruction whose uses are all in one successor block into that block
    (llvm/lib/Transforms/Scalar/Sink.cpp, and MachineSink), so its operands stay live to
    the guard and the value is computed there. A split-K reduce kernel sums its partials
    in program order before the epilogue's bias loads; hipcc's ISA keeps all 64 partials
    live across the 16 guarded bias loads and adds them inside each guarded store block
    (EfficientNet's 1x1 conv: 89 VGPRs, 71 estimated before this rule)."""
    defs, reads = {}, []
    for _, s in top:
        for u in walk((s,)):  # a constant start is propagated into uses: not a value
            if not (isinstance(u, Assign) and isinstance(u.value, Const)):
                for v in stmt_defs(u):
                    defs[v.name] = defs.get(v.name, 0) + 1
        if isinstance(s, If):
            inner = {v for u in walk(s.then + s.orelse) for e in stmt_exprs(u)
                     for v in expr_vars(e)}
            reads.append((expr_vars(s.cond), inner))
        else:
            reads.append(({v for u in walk((s,)) for e in stmt_exprs(u)
                           for v in expr_vars(e)}, set()))
    home, out = {}, []
    for j in range(len(top) - 1, -1, -1):
        s = top[j][1]
        if not (isinstance(s, Assign) and s.dst.dtype == "f32" and
                defs.get(s.dst.name) == 1 and not isinstance(s.value, Const)):
            continue
        name, where = s.dst.name, set()
        for k in range(j + 1, len(top)):
            direct, inside = reads[k]
            if name in direct:
                where.add(home.get(k, ("at", k)))
            elif name in inside:
                where.add(("in", k))
        if len(where) == 1:
            kind, k = next(iter(where))
            if kind == "in":
                home[j] = ("in", k)
                out.append((s, top[k][0]))
    return out


def _free_tile_points(top, point_of) -> set:
    """Points of the straight-line FMA K tiles LLVM's scheduler may reorder: runs of LDS
    reads (or global loads into f32 registers) and f32 assignments of the kernel body
    (one basic block between barriers, at least two reads), except a peeled tile whose FMAs sink past the barrier
    (``_sunk_tile_reads``: its reads must stay above it)."""
    sunk = {id(s) for run, _ in _sunk_tile_reads(top) for s in run}
    # a sum computed inside a later guarded block (``_sunk_values``) is not in the run's
    # block: its loaded operands stay live to the guard whatever the scheduler does
    # (ViT's fc2 reduce, M = 17: the second row's partials summed under ``m1 < 17``,
    # hipcc 149, estimated 134; counted at the budget it would be 77)
    sunk_sums = {id(s) for s, _ in _sunk_values(top)}
    out, run = set(), []

    def close():
        reads = [s for s in run if isinstance(s, (LdsLoad, Load))]
        glob = any(isinstance(s, Load) for s in reads)
        # the assignments the loads can be interleaved with: those before the last load
        # (a direct conv's epilogue after its bias load, a SiLU, is not)
        last = max((i for i, s in enumerate(run) if isinstance(s, Load)), default=-1)
        if (len(reads) > 1 and len(reads) < len(run) and not any(id(s) in sunk for s in reads)
                and not (glob and any(id(s) in sunk_sums for s in run))
                and not (glob and not all(_is_sum(s.value) for s in run[:last]
                                          if isinstance(s, Assign)))):
            out.update(range(point_of[id(run[0])], point_of[id(run[-1])] + 1))
        run.clear()

    for _, s in top:
        if (isinstance(s, LdsLoad) or (isinstance(s, Assign) and s.dst.dtype == "f32")
                or (isinstance(s, Load) and all(d.dtype == "f32" for d in s.dsts))):
            run.append(s)
        else:
            close()
    close()
    return out


def _is_sum(e) -> bool:
    """A constant, a register, or a sum of them: a reduce's ``((p0 + p1) + p2) + ...``,
    or an FMA of registers (a direct conv's ``acc = fma(x, w, acc)``). The global-load
    rule of ``_free_tile_points`` takes only such runs. A direct conv's run was left out
    while its input loads took an address pair each (MobileNetV3's projection, 48
    channels 1 KiB apart: hipcc 127 / 70 on gfx90a / gfx940, 104 in program order);
    with their bases wave-uniform (``codegen_hip.emit``) hipcc takes 65 / 68, and the
    run counts at the budget (8 waves of 64 threads: 64, estimate 66)."""
    if isinstance(e, (Const, Var)):
        return True
    if isinstance(e, Fma):
        return all(isinstance(x, (Const, Var)) for x in (e.a, e.b, e.c))
    return isinstance(e, BinOp) and e.op == "add" and _is_sum(e.a) and _is_sum(e.b)


def _target_budget(kernel, arch) -> int:
    """The VGPRs LLVM's scheduler allows itself: it targets the occupancy the workgroup
    size, the LDS and the wave slots allow (GCNSchedStrategy's TargetOccupancy, from
    ``AMDGPUSubtarget::getOccupancyWithLocalMemSize``) and reorders a region whose
    register pressure would lower it, down to ``getMaxNumVGPRs`` of that occupancy
    (the register file over the waves, rounded down to the granule)."""
    arch = get_arch(arch)
    wpw = -(-int(kernel.block) // arch.wave_size)
    groups = arch.max_workgroups_per_cu if wpw > 1 else 10 ** 9
    if kernel.lds_bytes:
        groups = min(groups, arch.lds_bytes_per_cu // kernel.lds_bytes)
    waves = max(1, min(arch.wave_slots_per_simd, groups * wpw // arch.simds_per_cu))
    budget = arch.vgprs_per_lane // waves // arch.vgpr_granule * arch.vgpr_granule
    return min(budget, getattr(arch, "arch_vgprs_per_lane", budget))


def _mfma_runs(kinds, body) -> int:
    """Runs of LDS reads and MFMAs in a loop body that hold an MFMA, other statements
    between them ending a run."""
    runs, mfma, inside = 0, False, False
    for i in body:
        if kinds[i] in (LdsLoad, Mfma):
            inside = True
            mfma = mfma or kinds[i] is Mfma
            continue
        runs += inside and mfma
        inside = mfma = False
    return runs + (inside and mfma)


def _interval(e, env, kernel):
    """(lo, hi) bounds of an i32 expression over every thread and workgroup, or None."""
    if isinstance(e, Const):
        return (e.value, e.value) if isinstance(e.value, int) else None
    if isinstance(e, Var):
        return env.get(e.name)
    if isinstance(e, Special):
        # the work-item id below the workgroup size, never the grid: a workgroup id
        # carries no range, so a guard on it is not decided (a split-K reduce kernel's
        # column guards ``block_id * 64 + ty + 32 < 32`` over a grid of one: hipcc kept
        # every partial, 89-195 VGPRs where pruning gave 21-75). LLVM knows less than
        # this: clang gives threadIdx.x the range [0, 1024) whatever __launch_bounds__
        # says (hipcc 5.2 keeps ``tid / 16 < 32`` in a 256-thread kernel, and folds it
        # after ``__builtin_assume(tid < 256)``), so a guard that needs the workgroup
        # size is decided here and kept by hipcc; the split-K reduce resolves its own
        # (``without_decided_code``), other kernels are not changed for it yet
        waves = -(-kernel.block // 32)
        return {"thread_id": (0, kernel.block - 1), "block_id": None,
                "lane": (0, 63), "wave_id": (0, waves - 1), "wave_size": (32, 64)}[e.name]
    if not isinstance(e, BinOp):
        return None
    a, b = _interval(e.a, env, kernel), _interval(e.b, env, kernel)
    if e.op in ("land", "lor") and (a is None or b is None):
        # one side decides the whole (``m1 < 1 && n < 4`` with m1 >= 16 is false
        # whatever the workgroup id makes n), as LLVM folds it
        known = a if b is None else b
        short = (0, 0) if e.op == "land" else (1, 1)
        return short if known == short else None
    if a is None or b is None:
        return None
    op = e.op
    if op == "add":
        return (a[0] + b[0], a[1] + b[1])
    if op == "sub":
        return (a[0] - b[1], a[1] - b[0])
    if op == "mul":
        prods = [x * y for x in a for y in b]
        return (min(prods), max(prods))
    if op in ("floordiv", "div") and b[0] == b[1] and b[0] > 0 and a[0] >= 0:
        return (a[0] // b[0], a[1] // b[0])
    if op == "mod" and b[0] == b[1] and b[0] > 0 and a[0] >= 0:
        return a if a[1] < b[0] else (0, b[0] - 1)
    if op == "min":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if op == "max":
        return (max(a[0], b[0]), max(a[1], b[1]))
    truth = {"lt": (a[1] < b[0], a[0] >= b[1]), "le": (a[1] <= b[0], a[0] > b[1]),
             "gt": (a[0] > b[1], a[1] <= b[0]), "ge": (a[0] >= b[1], a[1] < b[0])}
    if op in truth:
        yes, no = truth[op]
        return (1, 1) if yes else (0, 0) if no else (0, 1)
    if op == "land":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if op == "lor":
        return (max(a[0], b[0]), max(a[1], b[1]))
    return None


def _reads(e, env, kernel, out: set) -> set:
    """The registers an expression reads, skipping the arm of a ``Select`` whose condition
    interval arithmetic decides (a masked key past the sequence end is a constant)."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            out.add(x.name)
        elif isinstance(x, Select):
            r = _interval(x.cond, env, kernel)
            if r is not None and r[0] == r[1]:
                stack.append(x.a if r[0] else x.b)
                continue
        stack.extend(expr_children(x))
    return out


def _decided(kernel) -> tuple[dict, dict]:
    """(id(If) -> True/False for the branches interval arithmetic decides (see the module
    docstring), register -> interval); registers assigned once and loop counters with
    constant-bounded ranges carry their intervals."""
    ndefs = {}
    for s in walk(kernel.body):
        for v in stmt_defs(s):
            ndefs[v.name] = ndefs.get(v.name, 0) + 1
    env, out = {}, {}

    def visit(stmts):
        for s in stmts:
            if isinstance(s, Assign) and s.dst.dtype == "i32" and ndefs[s.dst.name] == 1:
                r = _interval(s.value, env, kernel)
                if r is not None:
                    env[s.dst.name] = r
            elif isinstance(s, For):
                lo, hi = _interval(s.start, env, kernel), _interval(s.stop, env, kernel)
                if lo is not None and hi is not None and ndefs[s.var.name] == 1:
                    env[s.var.name] = (lo[0], max(lo[0], hi[1] - 1))
                visit(s.body)
            elif isinstance(s, If):
                r = _interval(s.cond, env, kernel)
                if r is not None and r[0] == r[1]:
                    out[id(s)] = bool(r[0])
                visit(s.then)
                visit(s.orelse)

    visit(kernel.body)
    return out, env


def _prune(body, decided) -> tuple:
    """The statement tree with every decided ``If`` replaced by the branch that runs."""
    out = []
    for s in body:
        if isinstance(s, If):
            if id(s) in decided:
                out.extend(_prune(s.then if decided[id(s)] else s.orelse, decided))
                continue
            s = replace(s, then=_prune(s.then, decided), orelse=_prune(s.orelse, decided))
        elif isinstance(s, For):
            s = replace(s, body=_prune(s.body, decided))
        out.append(s)
    return tuple(out)


def _needed(body, env, kernel) -> set:
    """Registers something observable depends on: the values and addresses of stores,
    branch conditions, loop bounds, and (transitively) what those registers are computed
    from. Every other register is dead code."""
    needed = set()
    producers: dict = {}  # register -> the read sets of the statements defining it
    for s in walk(body):
        reads = set()
        for e in stmt_exprs(s):
            _reads(e, env, kernel, reads)
        defs = stmt_defs(s)
        if isinstance(s, (Store, LdsStore, If, For)):
            needed |= reads
        if defs and not isinstance(s, For):
            for v in defs:
                producers.setdefault(v.name, []).append(reads)
    # the closure, each register followed once (a worklist: the sweep-until-no-change
    # it replaced was quadratic in the body, a fifth of ranking a split-K space)
    todo = list(needed)
    while todo:
        for reads in producers.get(todo.pop(), ()):
            fresh = reads - needed
            needed |= fresh
            todo.extend(fresh)
    return needed


def without_decided_code(kernel) -> tuple:
    """``kernel``'s body with every ``If`` that interval arithmetic over the hardware ids
    decides (``_decided``: the work-item id below the workgroup size, never the workgroup
    id) replaced by the branch that runs, and every ``Load`` and ``Assign`` whose
    registers nothing observable needs (``_needed``) removed: what this estimate assumes
    LLVM removes, for a lowering to remove itself where LLVM cannot (clang gives the
    work-item id the range [0, 1024) whatever the launch bounds, so hipcc 5.2 keeps
    ``tid / 16 < 32`` in a 256-thread kernel)."""
    decided, env = _decided(kernel)
    body = _prune(kernel.body, decided)
    needed = _needed(body, env, kernel)

    def keep(stmts):
        out = []
        for s in stmts:
            if isinstance(s, (Load, Assign)) and not any(v.name in needed for v in stmt_defs(s)):
                continue
            if isinstance(s, If):
                s = replace(s, then=keep(s.then), orelse=keep(s.orelse))
            elif isinstance(s, For):
                s = replace(s, body=keep(s.body))
            out.append(s)
        return tuple(out)
    return keep(body)


def _trips(loop: For):
    """The trip count of a loop with constant bounds, else None."""
    if isinstance(loop.start, Const) and isinstance(loop.stop, Const) and loop.step > 0:
        return max(0, -(-(int(loop.stop.value) - int(loop.start.value)) // loop.step))
    return None


#: hipcc 5.2 (-O3, gfx90a) fully unrolls a constant-trip K loop when trips x body
#: statements is at most about this many, and keeps it a loop above: measured over the
#: contraction points of ``tools/vgpr_sweep.py`` (3 trips of 131 statements unrolled,
#: 3 x 160 and 7 x 92 kept) and ResNet-50's 7x7 stem conv (4 x 103 unrolled; 400
#: before it); LLVM's own rule weighs its IR instructions against the AMDGPU unroll
#: threshold, which this statement count only approximates.
FULL_UNROLL_STATEMENTS = 440


def _stays_loop(loop: For) -> bool:
    """Whether the ISA keeps ``loop`` a loop (see ``FULL_UNROLL_STATEMENTS``)."""
    trips = _trips(loop)
    if trips is None:
        return True
    # an i32 multiply-accumulate is two LLVM instructions (mul, add) where an f32 FMA is
    # one: matmul_integer's 3-trip 16x64x16 K loop (110 statements, 64 of them MACs) is
    # kept by hipcc (gfx90a and gfx940), unrolled by the plain count (330 < 440)
    size = sum(2 if _integer_macs((x,)) else 1 for x in walk(loop.body))
    return trips > 1 and trips * size > FULL_UNROLL_STATEMENTS


def _hoisted_lds_reads(body, alias) -> dict:
    """LDS reads hipcc hoists out of a loop: register -> (that loop's ``For``, copies).

    LLVM's LICM moves a load out of a loop when nothing in the loop may write what it
    reads: an LDS array with no store inside the loop, read at an address that does not
    change in it, even across ``__syncthreads()`` (hipcc 5.2 / clang 15 hoists the Q reads of the
    attention kernel's ``q_in=lds`` schedules out of the key-block loop: their registers
    stay live over it, so such a schedule costs RM x head dim VGPRs like ``q_in=registers``;
    tests/test_attention_vgprs.py records the counts).
    Inner loops with constant trip counts are fully unrolled first, so a read whose
    address depends only on their counters is hoisted once per trip (``copies``). A loop
    with one trip is no loop in the ISA and hoists nothing."""
    out = {}

    def visit(stmts, enclosing):
        for s in stmts:
            if isinstance(s, For):
                visit(s.body, enclosing + [(s, s)])
            elif isinstance(s, If):
                visit(s.then, enclosing)
                visit(s.orelse, enclosing)
            elif isinstance(s, LdsLoad):
                _hoist_one(s, enclosing)

    def _hoist_one(s, enclosing):
        for depth, (at, loop) in enumerate(enclosing):
            trips = _trips(loop)
            if trips is not None and trips <= 1:
                continue
            inner = enclosing[depth + 1:]
            if any(isinstance(x, LdsStore) and x.array == s.array for x in walk(loop.body)):
                continue
            defined = {v.name for x in walk(loop.body) for v in stmt_defs(x)}
            unrolled = {lp.var.name: _trips(lp) for _, lp in inner}
            used = set()
            expr_vars(s.index, used)
            if any(u in defined and (u not in unrolled or unrolled[u] is None)
                   for u in used if u != loop.var.name) or loop.var.name in used:
                continue
            copies = 1
            for u in used:
                if u in unrolled:
                    copies *= max(1, unrolled[u])
            for v in s.dsts:
                out[alias.get(v.name, v.name)] = (at, copies)
            return

    visit(body, [])
    return out


def _store_address(index, uni, hoisted):
    """The offset family of an LDS store's per-lane address when it takes a register of
    its own (not a register plus a constant, not computed before the loop), else None."""
    if isinstance(index, (Const, Var, Special, ScalarRef)) or uni.is_uniform(index) or \
            expr_key(index) in hoisted:
        return None
    fam = _offset_family(index)
    if fam is None or (len(fam) == 1 and fam[0][1] == 1 and fam[0][0][0] in ("v", "s")):
        return None
    return fam


def _hoisted_invariants(body, uni, alias) -> list:
    """Per-lane computations LLVM's LICM moves out of a loop: (``For``, offset family,
    the register already holding it or None, ``expr_key``) for each occurrence.

    Inside a loop that stays a loop (not one trip), every per-lane operator subtree whose
    registers the loop does not write (the addresses of a K tile's LDS stores, the
    loop-independent part of its global addresses) is computed once before the loop and
    held in a VGPR for the whole loop. Values that differ only by a constant share that
    register (the constant goes into the instruction's offset, as in
    ``_offset_aliases``); a value some register already holds (``tig = tid % 64`` and a
    ``tid % 64`` in an address) is that register (GVN), which then stays live over the
    loop; a register plus a constant is that register. Each subtree is hoisted out of the
    outermost such loop it does not depend on."""
    reps = {}   # offset family -> the register computed as it (single definition)
    ndefs = {}
    for s in walk(body):
        for v in stmt_defs(s):
            ndefs[v.name] = ndefs.get(v.name, 0) + 1
    for s in walk(body):
        if isinstance(s, Assign) and ndefs[s.dst.name] == 1 and s.dst.name in uni.per_lane:
            fam = _offset_family(s.value)
            if fam is not None:
                reps.setdefault(fam, alias.get(s.dst.name, s.dst.name))
    out = []

    def hoist(e, enclosing):
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, (Const, Var, Special, ScalarRef)) or uni.is_uniform(x):
                continue
            used = expr_vars(x)
            loop = next((lp for lp, written in enclosing if not used & written), None)
            if loop is None:
                stack.extend(expr_children(x))
                continue
            fam = _offset_family(x)
            if fam is None:
                continue
            (atom, coef), = fam if len(fam) == 1 else ((None, 0),)
            if coef == 1 and atom[0] in ("v", "s"):   # a register plus a constant
                if atom[0] == "v":
                    out.append((loop, fam, alias.get(atom[1], atom[1]), expr_key(x)))
                continue
            out.append((loop, fam, reps.get(fam), expr_key(x)))

    def visit(stmts, enclosing):
        for s in stmts:
            if enclosing:
                for e in stmt_exprs(s):
                    hoist(e, enclosing)
            if isinstance(s, For):
                inner = enclosing
                if _stays_loop(s):
                    written = {s.var.name} | {v.name for x in walk(s.body)
                                              for v in stmt_defs(x)}
                    inner = enclosing + [(s, written)]
                visit(s.body, inner)
            elif isinstance(s, If):
                visit(s.then, enclosing)
                visit(s.orelse, enclosing)

    visit(body, [])
    return out


#: the AGPR block starts at a multiple of 4 registers after the VGPRs (``accum_offset``
#: of the kernel descriptor, in units of 4; LLVM AMDGPUUsage "amdhsa_accum_offset").
AGPR_ALIGN = 4


def _agpr_accumulators(kernel, arch, ranges, loops) -> set:
    """The MFMA accumulators hipcc keeps in AGPRs (carried through a loop), or none.

    LLVM (SIMachineFunctionInfo.cpp, ``MayNeedAGPRs``) selects the VGPR form of every MFMA
    on gfx90a-class targets when the most VGPRs the workgroup size allows
    (``getMaxNumVGPRs``: 512 / the waves per SIMD a workgroup needs) is at most 256, i.e.
    for workgroups of more than 256 threads. Smaller workgroups get the AGPR form: the
    accumulators live in AGPRs, and because the IR carries them through the K loop in
    ordinary registers, hipcc copies them into ordinary VGPRs only for a moment at the
    loop edges (``v_accvgpr_write`` at the top of each trip, ``v_accvgpr_read`` at its
    end) and loads them straight into AGPRs: an accumulator costs one AGPR and no VGPR
    (one-wave ``microbench.mfma_gemm``: hipcc 15 counts 9 VGPRs + 16 AGPRs for 32x32x2,
    9 + 4 for 16x16x4, as this rule does). ``loops`` are the spans of every ``For``,
    one-trip loops included (see the module docstring)."""
    a = get_arch(arch)
    if not a.mfma_passes or a.vgprs_per_lane <= 256:
        return set()
    waves = -(-kernel.block // a.wave_size)
    simds = getattr(a, "simds_per_cu", 4)
    max_vgprs = a.vgprs_per_lane // max(1, -(-waves // simds))
    if max_vgprs <= 256:
        return set()
    acc = set()
    for s in walk(kernel.body):
        if isinstance(s, Mfma):
            acc |= {v.name for v in s.acc}
    carried = {n for n in acc if any(ranges[n][0] <= lo and hi <= ranges[n][1]
                                     for lo, hi in loops if n in ranges)}
    return carried


@dataclass(frozen=True)
class Occupancy:
    waves_per_simd: float
    workgroups_per_cu: int
    waves_per_workgroup: int
    limiter: str
    vgprs: int
    limits: dict  # limiter name -> waves per SIMD it alone would allow
    simds_per_cu: int = 4

    @property
    def waves_per_eu(self) -> int:
        """Waves the busiest SIMD holds when ``workgroups_per_cu`` workgroups are resident
        (a workgroup's waves go round-robin over the CU's SIMDs): the occupancy a compiler
        must allow for the simulated residency to happen, the ``W`` of clang's
        ``amdgpu_waves_per_eu(W)`` (LLVM then allocates at most 512 / W VGPRs, rounded
        down to the granule). It is this rather than the VGPR-limited count because the
        timing model runs ``workgroups_per_cu`` workgroups: a 512-thread workgroup
        estimated at 7 waves' worth of VGPRs runs 3 workgroups (6 waves per SIMD), so
        asking hipcc for 7 would squeeze registers (and may spill) for no residency the
        simulator assumed; LDS- or barrier-limited kernels likewise ask only for the
        waves they run."""
        return max(1, -(-self.workgroups_per_cu * self.waves_per_workgroup // self.simds_per_cu))


def _roundup(x: int, g: int) -> int:
    return -(-x // g) * g


def occupancy(kernel, arch=DEFAULT_ARCH, vgprs: int | None = None) -> Occupancy:
    """Theoretical occupancy and the resource that limits it (S9)."""
    arch = get_arch(arch)
    v = estimate_vgprs(kernel, arch) if vgprs is None else int(vgprs)
    return residency(kernel.block, kernel.lds_bytes, v, arch, kernel.name)


def residency(block: int, lds_bytes: int, vgprs: int, arch=DEFAULT_ARCH,
              name: str = "kernel") -> Occupancy:
    """``occupancy`` from a kernel's workgroup size, LDS bytes and VGPRs alone (what an
    exported kernel's sidecar records, so ``wavefuse check`` can weigh hipcc's count)."""
    arch = get_arch(arch)
    v = int(vgprs)
    wpw = -(-int(block) // arch.wave_size)
    nsimd = arch.simds_per_cu
    vgpr_waves = arch.vgprs_per_lane // _roundup(max(v, 1), arch.vgpr_granule)
    if vgpr_waves == 0:
        raise KernelError(f"{name}: needs ~{v} VGPRs per lane but {arch.name} has "
                          f"{arch.vgprs_per_lane}; reduce tile sizes or unrolling")
    per_simd = {
        "wave slots": arch.wave_slots_per_simd,
        "VGPRs": min(arch.wave_slots_per_simd, vgpr_waves),
    }
    wg_limits = {name: (w * nsimd) // wpw for name, w in per_simd.items()}
    wg_limits["LDS"] = (arch.lds_bytes_per_cu // lds_bytes) if lds_bytes else 10 ** 9
    # S9 (LLVM getMaxWorkGroupsPerCU, review D138443): single-wave workgroups need no
    # barrier resource, so only the wave slots bound them
    wg_limits["workgroups per CU (barriers)"] = (arch.max_workgroups_per_cu if wpw > 1
                                                 else 10 ** 9)
    order = ["wave slots", "VGPRs", "LDS", "workgroups per CU (barriers)"]
    wgs = min(wg_limits.values())
    if wgs == 0:
        worst = min(order, key=lambda n: wg_limits[n])
        raise KernelError(f"{name}: a workgroup of {wpw} waves does not fit on one CU "
                          f"({worst} limit); use a smaller block or fewer VGPRs/LDS")
    limiter = next(n for n in order if wg_limits[n] == wgs)
    waves = wgs * wpw / nsimd
    limits = {n: min(wg_limits[n], 10 ** 6) * wpw / nsimd for n in order}
    return Occupancy(waves_per_simd=min(waves, float(arch.wave_slots_per_simd)),
                     workgroups_per_cu=wgs, waves_per_workgroup=wpw, limiter=limiter,
                     vgprs=v, limits=limits, simds_per_cu=nsimd)
