"""One helper the hipcc tests share: lowered kernels written as an export project and
compared with hipcc's ISA by ``wavefuse check`` (codegen_hip.check_dir)."""
from codegen_hip import check_dir, write_project


def check_kernels(kernels, tmp_path, arches=("gfx90a", "gfx940")) -> dict:
    """``check``'s report for ``kernels`` (each buffer under its own name), compiled for
    ``arches``."""
    ks = list(kernels)
    out = write_project(tmp_path / "export", ks,
                        [(k, {b.name: b.name for b in k.buffers}) for k in ks], {})
    return check_dir(out, arches)


def assert_clean(report: dict) -> None:
    """Every kernel compiled, none spills to scratch, and ``check`` agrees on all."""
    from codegen_hip import to_json
    for e in report["kernels"]:
        assert e["rc"] == 0, e.get("stderr")
        assert not e["scratch_bytes"], f"{e['kernel']} spills to scratch"
    assert report["disagreements"] == [], to_json(report["disagreements"])
