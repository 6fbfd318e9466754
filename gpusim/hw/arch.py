"""The description of one GPU as frozen data: what the simulator reads, never how it runs.

Every number carries its source, an S-number of ``gpusim/hw/SOURCES.md`` (S1 = ROCm GPU arch
specs, S4/S5/S6/S7 = rocprofiler-compute docs, S9 = LLVM AMDGPUBaseInfo, S10/S11 = the
nod-ai kernel optimization guide and its empirical LDS measurements, S12 = composable_kernel
LDS notes, S13 = GPUOpen coalescing article, S15 = ROCm MI300X tuning guide, S17 = LLVM
SISchedule.td). Where no number is published the field's source says ``ASSUMPTION`` and
why the value was picked; those are the knobs a reader should distrust first.

Phase groups (``lds_read_groups`` / ``lds_write_groups``) map an LDS access width in bytes
per lane (4, 8, 16) to a tuple of lane groups; lanes conflict on a bank only inside one
group, and each group takes one LDS "index" cycle plus its conflict cycles. Each access also holds its SIMD
pair's LDS port (``lds_port_bytes_per_clk``, S4) for its addresses and data.
"""
from __future__ import annotations

from dataclasses import dataclass, field


def contiguous_groups(wave_size: int, group: int) -> tuple:
    """Lane groups 0..group-1, group..2*group-1, ... (b32/b64 reads, b128 writes)."""
    return tuple(tuple(range(g, g + group)) for g in range(0, wave_size, group))


def _quads(*starts) -> tuple:
    return tuple(l for s in starts for l in range(s, s + 4))


#: ds_read_b128 phase groups measured on MI300X (S10, S11): eight groups of 8 lanes,
#: non-contiguous.
CDNA_READ_B128_GROUPS = (
    _quads(0, 20), _quads(32, 52), _quads(4, 16), _quads(36, 48),
    _quads(8, 28), _quads(40, 60), _quads(12, 24), _quads(44, 56),
)
#: gfx1100 ds_read_b128 in wave32: four groups of 8 (S11).
RDNA3_READ_B128_GROUPS = (_quads(0, 20), _quads(4, 16), _quads(8, 28), _quads(12, 24))


@dataclass(frozen=True)
class Arch:
    """One GPU (or one GCD of a multi-die GPU) as the simulator sees it.

    ``sources`` maps each field name to where its value comes from.
    """
    name: str
    marketing_name: str
    num_cus: int
    clock_ghz: float
    simds_per_cu: int
    simd_width: int
    wave_size: int
    wave_slots_per_simd: int
    vgprs_per_lane: int
    vgpr_granule: int
    #: VGPRs one thread can address (the 8-bit register operand): the most a kernel's
    #: VALU code may use, whatever the size of the register file above
    arch_vgprs_per_lane: int
    max_workgroups_per_cu: int
    max_block_threads: int
    lds_bytes_per_cu: int
    lds_bytes_per_workgroup: int
    lds_banks: int
    lds_bank_bytes: int
    lds_read_groups: dict
    lds_write_groups: dict
    lds_latency_cycles: int
    l1_bytes: int
    l1_line_bytes: int
    l1_ways: int
    l1_bytes_per_clk_per_cu: int
    l1_hit_latency_cycles: int
    l2_bytes: int
    l2_line_bytes: int
    l2_ways: int
    l2_channels: int
    l2_instances: int
    l2_bytes_per_clk_per_channel: int
    l2_hit_latency_cycles: int
    hbm_bytes_per_s: float
    hbm_latency_cycles: int
    issue_period_cycles: int
    transcendental_rate_divisor: int
    barrier_cycles: int
    wave_launch_cycles: int
    launch_overhead_us: float
    peak_fp32_flops_per_clk_per_cu: int
    #: Achievable (measured) bandwidths, whole GPU, bytes/s; 0 = not measured, the peak
    #: above stands in. HBM: a stream past every cache; L2: re-reads (re-writes) of data
    #: the L2s hold. The simulator and the roofline use these, not the datasheet peaks.
    hbm_read_bytes_per_s: float = 0.0
    hbm_write_bytes_per_s: float = 0.0
    l2_read_bytes_per_s: float = 0.0
    l2_write_bytes_per_s: float = 0.0
    #: LDS ports (S4): the SIMDs reach the LDS in pairs, one port per pair that moves
    #: ``lds_port_bytes_per_clk`` each way per cycle; an access holds its pair's port for
    #: its addresses (``lds_address_bytes`` per lane) plus its data (``gpusim.engine``)
    lds_port_bytes_per_clk: int = 64
    lds_address_bytes: int = 4
    #: Memory-side last-level cache (MI300X's 256 MB MALL, RDNA3's Infinity Cache); 0 =
    #: none. Modelled by footprint: a kernel whose buffers all fit is served from it
    #: (latency and bandwidth below instead of HBM's), as in repeated benchmark runs.
    mall_bytes: int = 0
    mall_read_bytes_per_s: float = 0.0
    mall_write_bytes_per_s: float = 0.0
    mall_latency_cycles: int = 0
    #: HIP graph launch (the host submits the whole captured sequence once): a fixed cost
    #: per ``hipGraphLaunch`` plus a cost per kernel node, in place of
    #: ``launch_overhead_us`` per dispatch; 0 = not modelled (see ``launch_cost_us``)
    graph_launch_us: float = 0.0
    graph_node_us: float = 0.0
    #: MFMA shape -> passes (one pass = 4 cycles of the SIMD's matrix core); empty: no
    #: matrix cores (MFMA rejected by the validator).
    mfma_passes: dict = field(default_factory=dict, compare=False, hash=False)
    sources: dict = field(default_factory=dict, compare=False, hash=False)

    # derived quantities --------------------------------------------------------------
    def launch_cost_us(self, kernels: int, launch: str = "stream") -> float:
        """Host launch cost of ``kernels`` dispatches run in order: ``stream``, each
        launched on its own (``launch_overhead_us`` each, what every simulated kernel time
        already includes); ``graph``, captured once into a HIP graph and replayed with one
        ``hipGraphLaunch`` (``graph_launch_us`` once plus ``graph_node_us`` per kernel)."""
        if launch == "stream":
            return kernels * self.launch_overhead_us
        if launch == "graph":
            return (self.graph_launch_us if kernels else 0.0) + kernels * self.graph_node_us
        raise ValueError(f"launch={launch!r}; use stream or graph")

    @property
    def valu_cycles(self) -> int:
        """Cycles one wave's VALU op occupies its SIMD: 64 lanes / SIMD16 = 4 (S13)."""
        return max(1, self.wave_size // self.simd_width)

    @property
    def peak_fp32_tflops(self) -> float:
        return self.peak_fp32_flops_per_clk_per_cu * self.num_cus * self.clock_ghz / 1e3

    @property
    def hbm_bytes_per_clk(self) -> float:
        return self.hbm_bytes_per_s / (self.clock_ghz * 1e9)

    @property
    def l2_bytes_per_clk(self) -> float:
        """All L2 instances together, peak."""
        return self.l2_bytes_per_clk_per_channel * self.l2_channels * self.l2_instances

    def _per_clk(self, bytes_per_s: float) -> float:
        return bytes_per_s / (self.clock_ghz * 1e9)

    @property
    def l2_read_bytes_per_clk(self) -> float:
        """Achievable L2 read bandwidth (all instances), bytes per cycle."""
        return self._per_clk(self.l2_read_bytes_per_s) if self.l2_read_bytes_per_s else self.l2_bytes_per_clk

    @property
    def l2_write_bytes_per_clk(self) -> float:
        """Achievable L2 write bandwidth (all instances), bytes per cycle."""
        return self._per_clk(self.l2_write_bytes_per_s) if self.l2_write_bytes_per_s else self.l2_bytes_per_clk

    def memory_level(self, footprint_bytes: int) -> str:
        """"mall" when a kernel's buffers all fit the memory-side cache, else "hbm"."""
        return "mall" if self.mall_bytes and footprint_bytes <= self.mall_bytes else "hbm"

    def memory_bytes_per_s(self, level: str, write: bool = False) -> float:
        """Achievable bandwidth of the level behind the L2 (reads, or writes)."""
        if level == "mall":
            return self.mall_write_bytes_per_s if write else self.mall_read_bytes_per_s
        bw = self.hbm_write_bytes_per_s if write else self.hbm_read_bytes_per_s
        return bw or self.hbm_bytes_per_s

    def memory_latency_cycles(self, level: str) -> int:
        return self.mall_latency_cycles if level == "mall" else self.hbm_latency_cycles

    def stream_bytes_per_s(self, footprint_bytes: int) -> float:
        """Achievable rate of a copy (as many bytes read as written): what the roofline
        divides minimal bytes by."""
        level = self.memory_level(footprint_bytes)
        r, w = self.memory_bytes_per_s(level), self.memory_bytes_per_s(level, True)
        return 2.0 / (1.0 / r + 1.0 / w)

    #: cycles per MFMA pass (S17: SISchedule.td's WriteNPassMAI latencies are 4 * N).
    MFMA_CYCLES_PER_PASS = 4

    def mfma_cycles(self, shape: str) -> int:
        """Cycles one MFMA of ``shape`` keeps its SIMD's matrix core busy."""
        return self.mfma_passes[shape] * self.MFMA_CYCLES_PER_PASS

    def source(self, field_name: str) -> str:
        return self.sources.get(field_name, "")

    def lds_groups(self, bytes_per_lane: int, write: bool) -> tuple:
        """Phase groups for an LDS access moving ``bytes_per_lane`` bytes per lane."""
        key = 4 if bytes_per_lane <= 4 else (8 if bytes_per_lane <= 8 else 16)
        table = self.lds_write_groups if write else self.lds_read_groups
        return table[key]
