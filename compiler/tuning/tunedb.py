"""The tuning database: scored candidates remembered between runs (SQLite, standard library).

A candidate's score is a pure function of what is lowered and how it is simulated, so it is
stored under a key made of

- the dispatch's *fingerprint*: its ops (kinds, attributes, the values of constants), shapes,
  dtypes and layouts, with tensor names replaced by positions, so that the twelve identical
  attention dispatches of a twelve-layer model share one key;
- the arch and the schedule (the knobs);
- the *model version*: a hash of the source files the score depends on, found by following
  the imports of ``gpusim.sim`` (engine, compiler, occupancy, the hardware tables) and of the
  lowering and schedule packages. Any edit to the timing model or to a lowering changes it,
  so nobody has to remember to bump a number, and an old score is never served for a new
  model (it stays in the file, unused, until ``wavefuse cache clear``).

The functional check of a chosen kernel is stored too, under the same key plus a hash of
the exact input bytes it was run on and the check's extent (sampled tiles or everything).

The file lives in the user's cache folder (``$XDG_CACHE_HOME/wavefuse/tune.sqlite3``,
``~/.cache/...`` without it), or where ``WAVEFUSE_CACHE`` or ``--cache PATH`` say. It is
opened in WAL mode with a busy timeout, so several tuning processes can read and write it at
once. Every row carries a digest of its key and value; a file that is not a wavefuse tuning
database, is corrupt, or has a row whose digest does not match is a ``CacheError`` naming the
file and the way out (``wavefuse cache clear``, or ``--no-cache``), never a wrong answer.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import time
from pathlib import Path

import numpy as np

from gpusim.hw import Arch

from compiler.ir.graph import FLOAT_DTYPES, GraphError
from compiler.ir.attention_pattern import is_causal_constant

ENV_VAR = "WAVEFUSE_CACHE"
FILE_NAME = "tune.sqlite3"
APPLICATION_ID = 0x57465553  # "WFUS": PRAGMA application_id marks the file as ours
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0


class CacheError(GraphError):
    """The tuning database cannot be used as it is; the message names the file and the fix."""


def default_path() -> Path:
    """``$WAVEFUSE_CACHE``, else the XDG cache folder's ``wavefuse/tune.sqlite3``."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return resolve(env)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(
        os.path.expanduser("~"), ".cache")
    return Path(base) / "wavefuse" / FILE_NAME


def resolve(path) -> Path:
    """A database path as given; an existing folder means ``FOLDER/tune.sqlite3``."""
    p = Path(os.path.expanduser(str(path)))
    return p / FILE_NAME if p.is_dir() else p


def _fix(path: Path) -> str:
    return (f"remove it with `wavefuse cache clear --cache {path}` or run with --no-cache")


# ----------------------------------------------------------------------------- model version
_ROOT = Path(__file__).resolve().parents[2]
_VERSION: dict = {}


def _module_file(name: str) -> Path | None:
    base = _ROOT.joinpath(*name.split("."))
    for p in (base.with_suffix(".py"), base / "__init__.py"):
        if p.is_file():
            return p
    return None


_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)",
                   re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n]+)", re.MULTILINE)


def _names(text: str) -> list[str]:
    text = re.sub(r"#[^\n]*", "", text).replace("(", " ").replace(")", " ").replace("\\", " ")
    return [part.split()[0] for part in text.split(",") if part.split()]


def _imports(path: Path, package: str) -> set:
    """Modules of ``gpusim`` or ``compiler`` that ``path`` imports, anywhere in the file
    (function-level imports included: ``gpusim.sim`` loads the JIT engine lazily). A
    textual scan, not a parse: an import named in a string only adds a file to the hash."""
    out = set()
    text = path.read_text(encoding="utf-8")
    for dots, module, names in _FROM.findall(text):
        if dots:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - len(dots) + 1])
            mod = f"{base}.{module}" if module else base
        else:
            mod = module
        out.add(mod)
        out.update(f"{mod}.{n}" for n in _names(names))
    for names in _IMPORT.findall(text):
        out.update(_names(names))
    return {m for m in out if m.split(".")[0] in ("gpusim", "compiler")}


def source_closure(roots) -> list[Path]:
    """Every source file reachable from the ``roots`` modules through imports."""
    seen: dict = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is None or path in seen.values():
            continue
        seen[name] = path
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(_imports(path, package))
        parent = name.rpartition(".")[0]
        if parent:
            todo.append(parent)  # importing a.b runs a/__init__.py
    return sorted(set(seen.values()))


def timing_sources() -> list[Path]:
    """The files a simulated time depends on: gpusim's timing path and hardware tables."""
    return source_closure(["gpusim.sim", "gpusim.hw"])


def lowering_sources() -> list[Path]:
    """The files a lowered kernel depends on (lowerings, schedule spaces, what they use)."""
    names = ["compiler.lower", "compiler.schedule"]
    for pkg in ("lower", "schedule"):
        names += [f"compiler.{pkg}.{p.stem}" for p in (_ROOT / "compiler" / pkg).glob("*.py")]
    return [p for p in source_closure(names) if "gpusim" not in p.parts]


def _digest(paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p.relative_to(_ROOT)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


#: how the search simulates a candidate (``compiler.tuning.search.score``): part of the timing
#: model, so its options enter the model version with gpusim's sources
SCORE_SIMULATE = {"functional": False, "extrapolate_loops": True}


def model_version() -> str:
    """``timing:<hash>/lowering:<hash>``: changes whenever either side's sources change
    (the timing side also hashes ``SCORE_SIMULATE``)."""
    if "v" not in _VERSION:
        timing = hashlib.sha256((_digest(timing_sources()) + json.dumps(
            SCORE_SIMULATE, sort_keys=True)).encode()).hexdigest()[:16]
        _VERSION["v"] = f"timing:{timing}/lowering:{_digest(lowering_sources())}"
    return _VERSION["v"]


# ----------------------------------------------------------------------------- fingerprints
def _bytes_hash(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).view(np.uint8).reshape(-1)).hexdigest()[:24]


def _canon(value, hashes: dict | None = None):
    """Attributes as JSON-able data; arrays become (shape, dtype, hash of their bytes),
    the hash taken from ``hashes`` (by ``id``) where it was computed beforehand."""
    if isinstance(value, np.ndarray):
        digest = (hashes or {}).get(id(value)) or _bytes_hash(value)
        return ["ndarray", list(value.shape), str(value.dtype), digest]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _canon(v, hashes)
                for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canon(v, hashes) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _type(t) -> list:
    return [list(t.shape), t.dtype, list(t.order), list(t.strides)]


def _outside(graph, name) -> list:
    """A tensor an op reads that the dispatch does not list: described, not named."""
    op = graph.op(name)
    return ["outside", op.kind, _type(op.type)]


def _program_constant(op) -> bool:
    """A constant whose values the lowering or the timing can depend on: a scalar (inlined
    as an immediate), an integer or bool tensor (indices and masks decide addresses). A
    float tensor of more elements (a weight, a bias, a mask added to scores) is data the
    kernel loads like an input: its bytes change neither the program nor its timing, with
    one exception the fingerprint records instead of the bytes: a causal mask, which the
    attention lowering recognises by its values and answers by skipping key blocks."""
    return op.type.size == 1 or op.type.dtype not in FLOAT_DTYPES


def dispatch_fingerprint(graph, dispatch) -> str:
    """A hash of everything a dispatch's lowering reads, with names replaced by positions.
    Float weights enter by shape, dtype and layout only (``_program_constant``), so the
    identical layers of a model (BERT-base's 12) share one fingerprint and are tuned
    once; the values a kernel computes are checked per graph (``check_key``)."""
    ref = {}
    body = {"inputs": [], "ops": [], "outputs": []}
    for t in dispatch.inputs:
        op = graph.op(t)
        ref[t] = f"in{len(ref)}"
        entry = [op.kind, _type(op.type)] + ([graph.byte_storage(t)] if
                                             graph.byte_storage(t) else [])
        if op.kind == "constant" and _program_constant(op):
            entry.append(_canon(op.attrs.get("value")))
        elif op.kind == "constant" and is_causal_constant(op):
            entry.append("causal")
        body["inputs"].append(entry)
    for n in dispatch.ops:
        op = graph.op(n)
        ref.setdefault(n, f"op{len(ref)}")
        attrs = dict(op.attrs)
        body["ops"].append([ref[n], op.kind, [ref.get(i) or _outside(graph, i)
                                              for i in op.inputs],
                            _type(op.type), _canon(attrs)]
                           + ([graph.byte_storage(n)] if graph.byte_storage(n) else []))
    body["outputs"] = [ref.get(t, "?") for t in dispatch.outputs]
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def knobs_text(knobs: dict) -> str:
    return json.dumps({str(k): knobs[k] for k in sorted(knobs, key=str)}, sort_keys=True,
                      separators=(",", ":"), default=str)


def score_key(fingerprint: str, arch: Arch, knobs: dict, version: str) -> str:
    return hashlib.sha256(f"score|{fingerprint}|{arch.name}|{knobs_text(knobs)}|{version}"
                          .encode()).hexdigest()


def space_key(fingerprint: str, arch: Arch, version: str) -> str:
    return hashlib.sha256(f"space|{fingerprint}|{arch.name}|{version}".encode()).hexdigest()


def graph_fingerprint(graph) -> str:
    """The whole graph, names included (constants by the hash of their bytes): with the
    seed it fixes every value the reference computes."""
    hashes, _held = _large_array_hashes(graph)
    body = [[op.name, op.kind, list(op.inputs), _type(op.type), _canon(dict(op.attrs), hashes)]
            for op in graph.ops]
    text = json.dumps([body, list(graph.outputs)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _large_array_hashes(graph) -> tuple:
    """The hashes of a graph's large constants (BERT-base: 435 MB, 0.4 s of one core),
    taken on threads: hashlib lets go of the GIL while it hashes a large buffer, so the
    cores share the work. Keyed by ``id``; the arrays are returned too, to be held alive
    (and their ids unique) while the keys are used."""
    from concurrent.futures import ThreadPoolExecutor
    arrays = [v for op in graph.ops for v in op.attrs.values()
              if isinstance(v, np.ndarray) and v.nbytes >= 1 << 16]
    arrays = list({id(a): a for a in arrays}.values())
    if not arrays:
        return {}, arrays
    with ThreadPoolExecutor(max_workers=min(len(arrays), os.cpu_count() or 1)) as pool:
        digests = list(pool.map(_bytes_hash, arrays))
    return {id(a): h for a, h in zip(arrays, digests)}, arrays


def reference_version() -> str:
    """A hash of the numpy reference and the comparison (what a check compares with)."""
    if "ref" not in _VERSION:
        _VERSION["ref"] = _digest([_ROOT / "compiler" / "ir" / "reference.py",
                                   _ROOT / "compiler" / "ir" / "numerics.py",
                                   _ROOT / "compiler" / "tuning" / "sampling.py"])
    return _VERSION["ref"]


def check_key(kernel: str, arch: Arch, version: str, data: str, extent: str) -> str:
    """Key of a functional check: the kernel (dispatch fingerprint and knobs), the arch,
    the model version, what the data is (graph fingerprint, seed, the dispatch's tensors),
    the check's extent and the reference's version."""
    return hashlib.sha256(f"check|{kernel}|{arch.name}|{version}|{reference_version()}|{data}|"
                          f"{extent}".encode()).hexdigest()


# ----------------------------------------------------------------------------- stores
class MemoryStore:
    """Results of this run only: identical dispatches inside a model are scored once."""

    path = None

    def __init__(self):
        self._rows: dict = {}

    def get_many(self, table: str, keys) -> dict:
        rows = self._rows.get(table, {})
        return {k: rows[k] for k in keys if k in rows}

    def put_many(self, table: str, items: dict, version: str = "") -> None:
        self._rows.setdefault(table, {}).update(items)

    def close(self) -> None:
        pass


TABLES = ("scores", "checks", "spaces")


def _row_digest(key: str, value: str) -> str:
    return hashlib.sha256(f"{key}\0{value}".encode()).hexdigest()[:16]


class TuneDB(MemoryStore):
    """The SQLite store; every value is JSON, checked against its digest when read."""

    def __init__(self, path):
        super().__init__()
        self.path = resolve(path)
        if self.path.is_dir():
            raise CacheError(f"tuning cache {self.path} is a folder; give a file path")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"tuning cache {self.path}: cannot create its folder "
                             f"({exc.strerror or exc}); pass --cache PATH or --no-cache") from None
        self._conn = None
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S,
                                         isolation_level=None, check_same_thread=False)
            self._setup()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise self._error(exc) from None

    def _error(self, exc) -> CacheError:
        text = str(exc)
        if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
            return CacheError(f"tuning cache {self.path} stayed locked by another process for "
                              f"{BUSY_TIMEOUT_S:.0f} s; retry, or run with --no-cache")
        if isinstance(exc, sqlite3.OperationalError) and ("readonly" in text or
                                                          "unable to open" in text):
            return CacheError(f"tuning cache {self.path}: {text}; pass a writable --cache PATH "
                              f"or --no-cache")
        return CacheError(f"tuning cache {self.path} is corrupt or not a wavefuse tuning "
                          f"database ({text}); {_fix(self.path)}")

    def _setup(self) -> None:
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        app = c.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if app == 0 and not tables:
            c.execute("BEGIN IMMEDIATE")
            try:
                # another process may have created it between our look and our lock
                tables = {r[0] for r in c.execute(
                    "SELECT name FROM sqlite_master WHERE type='table'")}
                if not tables:
                    for t in TABLES:
                        c.execute(f"CREATE TABLE IF NOT EXISTS {t} (key TEXT PRIMARY KEY, "
                                  "value TEXT NOT NULL, digest TEXT NOT NULL, "
                                  "version TEXT NOT NULL, created REAL NOT NULL)")
                    c.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        # read again: the first look may predate another process's committed creation
        # (its tables seen, its application id not yet), which is no foreign file
        app = c.execute("PRAGMA application_id").fetchone()[0]
        if app != APPLICATION_ID or not set(TABLES) <= {
                r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}:
            raise CacheError(f"tuning cache {self.path} is not a wavefuse tuning database "
                             f"(another program's SQLite file?); {_fix(self.path)}")
        schema = c.execute("PRAGMA user_version").fetchone()[0]
        if schema != SCHEMA_VERSION:
            raise CacheError(f"tuning cache {self.path} has schema {schema}, this wavefuse "
                             f"uses {SCHEMA_VERSION}; {_fix(self.path)}")
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise CacheError(f"tuning cache {self.path}: SQLite could not switch it to WAL "
                             f"mode (got {mode}); put it on a local disk with --cache PATH")

    def get_many(self, table: str, keys) -> dict:
        keys = list(dict.fromkeys(keys))
        out = super().get_many(table, keys)
        missing = [k for k in keys if k not in out]
        try:
            for i in range(0, len(missing), 500):
                part = missing[i:i + 500]
                q = f"SELECT key, value, digest FROM {table} WHERE key IN ({','.join('?' * len(part))})"
                for key, value, digest in self._conn.execute(q, part):
                    if digest != _row_digest(key, value):
                        raise CacheError(f"tuning cache {self.path} has a damaged row (its "
                                         f"digest does not match); {_fix(self.path)}")
                    try:
                        out[key] = json.loads(value)
                    except ValueError:
                        raise CacheError(f"tuning cache {self.path} has an unreadable row; "
                                         f"{_fix(self.path)}") from None
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None
        return out

    def put_many(self, table: str, items: dict, version: str = "") -> None:
        if not items:
            return
        super().put_many(table, items)
        now = time.time()
        rows = []
        for k, v in items.items():
            text = json.dumps(v, allow_nan=True)  # key order kept: same output bytes
            rows.append((k, text, _row_digest(k, text), version, now))
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany(f"INSERT OR REPLACE INTO {table} (key, value, digest, "
                                       "version, created) VALUES (?, ?, ?, ?, ?)", rows)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None

    def info(self) -> dict:
        """Row counts per table, split into the current model version and older ones."""
        version = model_version()
        out = {"path": str(self.path), "model_version": version,
               "bytes": sum(p.stat().st_size for p in _files(self.path) if p.exists())}
        try:
            for t in TABLES:
                total, current = self._conn.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(version = ?), 0) FROM {t}",
                    (version,)).fetchone()
                out[t] = {"rows": int(total), "current": int(current),
                          "stale": int(total) - int(current)}
        except sqlite3.DatabaseError as exc:
            raise self._error(exc) from None
        return out

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _files(path: Path) -> list[Path]:
    return [path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")]


def clear(path) -> list[Path]:
    """Removes the database and its WAL/shared-memory files without opening it (so a
    corrupt one can be cleared too); returns the files removed."""
    path = resolve(path)
    if path.is_dir():
        raise CacheError(f"tuning cache {path} is a folder; give the database file")
    removed = []
    for p in _files(path):
        if p.exists():
            p.unlink()
            removed.append(p)
    return removed


def open_store(cache=None, no_cache: bool = False):
    """The store a command uses: memory only with ``no_cache``, else the database at
    ``cache`` (or the default path)."""
    if no_cache:
        return MemoryStore()
    return TuneDB(cache if cache else default_path())


__all__ = ["CacheError", "MemoryStore", "TuneDB", "check_key", "clear", "default_path",
           "dispatch_fingerprint", "model_version", "open_store", "score_key"]
