"""Screenshots of the explorer's panes and of the HTML report for docs/explore.md, and the
start-up times it quotes.

``shots`` drives ``wavefuse explore`` headless (Textual's pilot, 80x24 unless --size) and
writes one SVG per pane with ``App.export_screenshot`` (web-font rules stripped, so the
files open offline), then writes the report of the model and screenshots it in headless
Chromium (PNG) when chromium is on PATH. ``startup`` times, in fresh processes, how long
``wavefuse explore MODEL`` takes from the interpreter's start to the first dispatch's panes
on screen, with the tuning database warm (every score cached) and cold (``--no-cache``),
and prints the medians.

    python tools/explore_shots.py shots docs/img [--model layernorm:rows=64]
    python tools/explore_shots.py startup [--model layernorm] [--runs 5]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PANES = (("1", "decisions"), ("2", "candidates"), ("3", "timeline"), ("4", "memory"),
         ("5", "source"))


async def _until(pilot, pred, timeout=600.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise TimeoutError("the explorer did not show its panes")
        await pilot.pause(0.05)


def _session(model: str, mode: str, no_cache: bool):
    from compiler.cli.explore.session import Session
    from compiler.ir.models import load_model
    return Session(load_model(model), model, mode=mode, no_cache=no_cache)


async def _shots(out: Path, model: str, mode: str, size) -> list:
    from compiler.cli.explore.app import ExploreApp
    from compiler.cli.explore.report import offline_svg
    app = ExploreApp(_session(model, mode, no_cache=False))
    written = []
    async with app.run_test(size=size) as pilot:
        await _until(pilot, lambda: app.panes is not None)
        for key, name in PANES:
            await pilot.press(key)
            await pilot.pause(0.2)
            path = out / f"explore_{name}.svg"
            path.write_text(offline_svg(app.export_screenshot(title=f"wavefuse explore {model}")))
            written.append(path)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        path = out / "explore_help.svg"
        path.write_text(offline_svg(app.export_screenshot(title=f"wavefuse explore {model}")))
        written.append(path)
    return written


def shots(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for p in asyncio.run(_shots(out, args.model, args.mode, tuple(args.size))):
        print(f"wrote {p}")
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        subprocess.run([sys.executable, "-m", "compiler.cli", "report", args.model, "-o",
                        str(html), "--mode", args.mode], check=True, cwd=ROOT)
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            print("no chromium on PATH: no report screenshot")
            return
        png = out / "report.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={tmp}/profile", f"--screenshot={png}",
                        "--window-size=1200,1800", html.as_uri()], check=True,
                       capture_output=True)
        print(f"wrote {png}")


# ----------------------------------------------------------------------------- start-up
def child(model: str, mode: str, no_cache: bool, t0: float) -> None:
    """In a fresh process: imports, the model, the app, until the first panes show."""
    from compiler.cli.explore.app import ExploreApp

    async def run():
        app = ExploreApp(_session(model, mode, no_cache))
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: app.panes is not None)
            print(f"{time.time() - t0:.3f}")
    asyncio.run(run())


def startup(args) -> None:
    def once(no_cache):
        t0 = time.time()
        r = subprocess.run([sys.executable, __file__, "_child", args.model, args.mode,
                            "1" if no_cache else "0", repr(t0)], capture_output=True,
                           text=True, cwd=ROOT, check=True)
        return float(r.stdout.strip().splitlines()[-1])

    once(False)   # fills the tuning database (and numba's cache) for the warm runs
    for label, no_cache in (("warm tuning database", False), ("--no-cache", True)):
        times = [once(no_cache) for _ in range(args.runs)]
        print(f"explore {args.model} ({args.mode}), {label}: median {statistics.median(times):.2f} s "
              f"to the first panes over {args.runs} runs (min {min(times):.2f}, max "
              f"{max(times):.2f})")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        model, mode, no_cache, t0 = sys.argv[2:6]
        child(model, mode, no_cache == "1", float(t0))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("shots")
    s.add_argument("out")
    s.add_argument("--model", default="layernorm")
    s.add_argument("--mode", default="conservative")
    s.add_argument("--size", type=int, nargs=2, default=[80, 24])
    s.set_defaults(func=shots)
    s = sub.add_parser("startup")
    s.add_argument("--model", default="layernorm")
    s.add_argument("--mode", default="conservative")
    s.add_argument("--runs", type=int, default=5)
    s.set_defaults(func=startup)
    args = p.parse_args()
    os.chdir(ROOT)
    args.func(args)


if __name__ == "__main__":
    main()
