"""The schedule kinds' typed knobs: they declare every knob their spaces use, and a pin
of a knob no kind declares is one clear error."""
import dataclasses

import pytest

from gpusim.hw import GFX942
from compiler import cli
from compiler.lower import dispatch_kind, lower
from compiler.ir.models import load_model
from compiler.fusion import fuse
from compiler.schedule import KINDS, check_pins, knob_names, schedule_space

SMALL = ["softmax", "layernorm", "mlp:tokens=32,hidden=32,ffn=64", "transpose_add:rows=64,cols=64",
         "attention:heads=2,seq=32,dim=16", "conv_add_relu:c=64,k=32"]
#: which schedule kinds a dispatch of each lowering kind may get
FAMILY = {"contraction": ("contraction",), "reduction": ("rows", "generic"),
          "elementwise": ("elementwise", "transpose"), "attention": ("attention",)}


@pytest.mark.parametrize("spec", SMALL)
def test_every_candidate_uses_the_knobs_of_one_kind(spec):
    g = load_model(spec)
    for d in fuse(g).dispatches:
        kinds = FAMILY[dispatch_kind(g, d)]
        for c in schedule_space(g, d, GFX942):
            if not c.knobs:
                continue   # a dispatch the kind cannot lower at all: one reason, no knobs
            assert any(set(c.knobs) <= set(knob_names(KINDS[k])) for k in kinds), c.knobs


def test_every_knob_has_a_default_and_a_meaning():
    for name, mod in KINDS.items():
        assert mod.NAME == name
        for f in dataclasses.fields(mod.Knobs):
            assert f.default is not dataclasses.MISSING and f.metadata["meaning"], (name, f.name)
        mod.Knobs()   # every default given


@pytest.mark.parametrize("spec", ["softmax", "mlp:tokens=32,hidden=32,ffn=64",
                                  "transpose_add:rows=64,cols=64"])
def test_knob_defaults_are_what_the_lowering_assumes(spec):
    """A schedule that leaves every knob out lowers to the kernel of its kind's ``Knobs()``:
    the defaults are written once, in the lowering, and the Knobs read them."""
    g = load_model(spec)
    for d in fuse(g).dispatches:
        kind = {"reduction": "rows", "contraction": "contraction"}.get(dispatch_kind(g, d),
                                                                      "elementwise")
        implicit = lower(g, d, {}, GFX942)
        explicit = lower(g, d, dataclasses.asdict(KINDS[kind].Knobs()), GFX942)
        assert (repr(implicit.body), implicit.grid, implicit.block) == \
            (repr(explicit.body), explicit.grid, explicit.block), (spec, d.name)


def test_unknown_pin_is_rejected_with_the_kinds_knobs():
    check_pins({"vector": 4, "swizzle": "none"})
    with pytest.raises(Exception, match="no dispatch kind has a knob 'nosuchknob'.*rows: mapping"):
        check_pins({"nosuchknob": 1})


def test_cli_unknown_pin_is_one_line_exit_2(capsys):
    assert cli.main(["tune", "softmax", "--fix", "nosuchknob=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nosuchknob" in err[0] and "contraction: mma" in err[0]
