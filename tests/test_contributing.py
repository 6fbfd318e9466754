"""CONTRIBUTING.md stays true: every file it names exists, every registry it names is
where it says."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "CONTRIBUTING.md").read_text()


def test_every_named_file_exists():
    paths = set(re.findall(r"`((?:compiler|gpusim|codegen_hip|tests|tools)/[\w/.]+)`", TEXT))
    assert len(paths) > 15
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"CONTRIBUTING.md names files that do not exist: {missing}"


def test_every_named_registry_is_in_its_file():
    pairs = [("compiler/ir/ops.py", ("OPS",)),
             ("compiler/ir/graph.py", ("UNARY", "BINARY", "infer_type")),
             ("compiler/ir/reference.py", ("UNARY_FUNCS", "VIEW_FUNCS", "_eval_injective")),
             ("compiler/ir/errorbound.py", ("RULES", "_UNARY_ROUNDING", "_derivative",
                                            "_binary", "_reduce")),
             ("compiler/lower/elementwise.py", ("DEFAULTS", "with_defaults", "check_schedule")),
             ("compiler/lower/reduction.py", ("ROW_DEFAULTS", "GENERIC_DEFAULTS",
                                             "check_generic_schedule")),
             ("compiler/lower/emitter.py", ("UNARY_IR", "BINARY_IR")),
             ("gpusim/program.py", ("IR_UNARY", "IR_BINARY")),
             ("gpusim/engine.py", ("fun", "fbin")),
             ("gpusim/compile.py", ("UN", "FBIN")),
             ("compiler/frontends/onnx.py", ("_UNARY", "_BINARY", "_VARIADIC", "_REDUCE",
                                             "CONVERTERS")),
             ("compiler/fusion/__init__.py", ("RULES", "CONDITIONS", "SPACE_CONDITIONS")),
             ("compiler/schedule/__init__.py", ("check_pins", "KINDS")),
             ("gpusim/hw/__init__.py", ("ARCHES", "ALIASES", "DEFAULT_ARCH")),
             ("codegen_hip/simfacts.py", ("TARGET_ARCH",)),
             ("tests/test_op_tables.py", ("NOT_FROM_ONNX",))]
    for path, names in pairs:
        src = (ROOT / path).read_text()
        for name in names:
            assert name in TEXT, f"{name} is not in CONTRIBUTING.md"
            assert re.search(rf"^{name}\b|^def {name}\b|^    {name}\b", src, re.M) or \
                f"def {name}(" in src, f"{name} is not defined in {path}"


def test_every_kinds_lowering_has_its_check_schedule():
    """CONTRIBUTING: a rule on a knob's value goes in the lowering's check_schedule, which
    the space calls too; every schedule kind has one."""
    import importlib
    from compiler.schedule import KINDS
    checks = {"elementwise": ("compiler.lower.elementwise", "check_schedule"),
              "transpose": ("compiler.lower.transpose", "check_schedule"),
              "rows": ("compiler.lower.reduction", "check_schedule"),
              "generic": ("compiler.lower.reduction", "check_generic_schedule"),
              "contraction": ("compiler.lower.contraction", "check_schedule"),
              "attention": ("compiler.lower.attention", "check_schedule")}
    assert set(checks) == set(KINDS)
    for kind, (module, name) in checks.items():
        assert callable(getattr(importlib.import_module(module), name)), kind
        space_src = (ROOT / f"compiler/schedule/{kind}.py").read_text()
        assert f"{name}(" in space_src, f"the {kind} space does not call {name}"
