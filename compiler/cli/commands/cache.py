"""`wavefuse cache info|clear`: the tuning database, and the options every tuning command
takes to choose it (``--cache PATH``, ``--no-cache``)."""
from __future__ import annotations

from contextlib import contextmanager

from compiler.tuning import tunedb
from compiler.cli.commands import common


def add_cache_options(p) -> None:
    p.add_argument("--cache", metavar="PATH", default=None,
                   help=f"tuning database file (default ${tunedb.ENV_VAR}, else "
                        f"$XDG_CACHE_HOME/wavefuse/{tunedb.FILE_NAME})")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the tuning database")


@contextmanager
def store_of(args):
    """The store for a command's arguments, closed when the command ends."""
    store = tunedb.open_store(getattr(args, "cache", None), getattr(args, "no_cache", False))
    try:
        yield store
    finally:
        store.close()


def register(sub) -> None:
    p = sub.add_parser("cache", help="show or clear the tuning database",
                       description="Tuned scores are remembered in an SQLite file, keyed by "
                                   "dispatch, arch, schedule and the version of the timing "
                                   "model; `info` shows it, `clear` removes it.")
    p.add_argument("action", choices=("info", "clear"), help="info: where it is and what it "
                   "holds; clear: delete it")
    p.add_argument("--cache", metavar="PATH", default=None,
                   help=f"the database file (default ${tunedb.ENV_VAR}, else "
                        f"$XDG_CACHE_HOME/wavefuse/{tunedb.FILE_NAME})")
    common.add_json(p)
    p.set_defaults(func=run)


def run(args) -> int:
    path = tunedb.resolve(args.cache) if args.cache else tunedb.default_path()
    if args.action == "clear":
        removed = tunedb.clear(path)
        if args.json:
            common.emit_json({"path": str(path), "removed": [str(p) for p in removed]})
        else:
            common.console().print(f"removed {path}" if removed else
                                   f"nothing to remove: {path} does not exist")
        return 0
    if not path.exists():
        info = {"path": str(path), "exists": False, "model_version": tunedb.model_version()}
    else:
        db = tunedb.TuneDB(path)
        try:
            info = {"exists": True, **db.info()}
        finally:
            db.close()
    if args.json:
        common.emit_json(info)
        return 0
    con = common.console()
    con.print(f"tuning cache: {info['path']}")
    con.print(f"model version: {info['model_version']} (a hash of gpusim's timing sources "
              f"and the lowerings; it changes whenever they do)")
    if not info["exists"]:
        con.print("empty: no file yet (the first `wavefuse tune` creates it)")
        return 0
    con.print(f"size: {info['bytes'] / 1024:,.0f} KiB")
    for t in tunedb.TABLES:
        r = info[t]
        con.print(f"{t}: {r['rows']} rows, {r['current']} for this model version, "
                  f"{r['stale']} from older versions (never used; `wavefuse cache clear` "
                  f"removes them)")
    return 0
