"""HIP backend: prints gpusim kernels as HIP C++, exports runnable projects, checks the ISA.

- ``emit_kernel``: one IR kernel -> readable HIP source (what gpusim simulated, verbatim).
- ``write_project``: kernels + dispatch order + data -> a directory with .hip files, a host
  harness, CMakeLists.txt, README and .npy data, written atomically; with
  ``pin_occupancy`` each kernel carries the simulated occupancy where hipcc fits it
  (``pins.verify_pins``).
- ``check_dir`` / ``compare`` / ``render_check`` / ``to_json``: compile with hipcc and list
  where the compiler's ISA disagrees with the simulator's assumptions.

Imports ``gpusim`` only, never ``compiler``.
"""
from .check import check_dir, compare, parse_asm, render_check, to_json
from .emit import emit_kernel, kernel_prototype
from .export import ExportError, write_project
from .names import Namer, c_identifier
from .simfacts import sim_info, vgpr_occupancy

__all__ = ["emit_kernel", "kernel_prototype", "write_project", "ExportError", "check_dir",
           "compare", "parse_asm", "render_check", "to_json", "sim_info", "vgpr_occupancy",
           "Namer", "c_identifier"]
