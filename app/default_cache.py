"""The start-up cache: the embedded default's capture kept between launches, so a second launch reads
it instead of importing transformers and capturing the 8B forward again.

An entry is a folder `default-<key digest>` in the cache dir ($XDG_CACHE_HOME/torchlens-explore, else
~/.cache/torchlens-explore) holding `trace/`, the capture as `tracer`'s store writes it (JSON; never
pickle), and `entry.json`: the key it was made under and the trace's structure digest. The key is what
the capture depends on: this package's version and a digest of the tracer's sources (the store's
schema among them), the Python, torch and transformers versions, the config's path and content digest, the input
shape. `read` trusts nothing: the key, the store's own digests and checks, the versions and config the
trace records and its structure digest must all agree, or it answers the reason and the caller
captures afresh (`open_default`), replacing the entry. The meta model the Doctor and Compare need is
built on first use (`CachedDefault.model`), not at start-up.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tracer.bounded_io import read_capped
from tracer.errors import TracerError

from .sources import DEFAULT_CONFIG, Loaded, open_config, resolve_config, token_shape

FORMAT = "torchlens-explore/default-cache/1"
ENTRY_FILE = "entry.json"
TRACE_DIR = "trace"
ENTRY_CAP = 64 * 1024  # entry.json is a few hundred bytes
KEPT_ENTRIES = 4  # entries of other keys (another checkout, the versions before an upgrade) kept, newest first
STALE_WRITE_S = 3600.0  # a half-written entry this old was left by a launch that was killed
Step = Callable[[str], None]


def cache_dir() -> Path:
    """Where entries live: $XDG_CACHE_HOME/torchlens-explore, else ~/.cache/torchlens-explore."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"  # XDG: a relative value is ignored
    return root / "torchlens-explore"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _sources_digest() -> str:
    """SHA-256 over the tracer package's sources (names and bytes): a changed capture is a new key."""
    import tracer

    root = Path(tracer.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".c", ".h") and p.is_file()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def entry_key(config: str | Path = DEFAULT_CONFIG, input_shape: tuple[int, ...] = (1, 8)) -> dict[str, Any]:
    """What a cached capture of `config` on `input_shape` depends on (no torch import: installed versions)."""
    import tracer  # the package only (PEP 562): no torch; the store's schema is in the sources digest

    path = resolve_config(config)  # as app.sources.open_config records it in the trace's config_source
    return {"format": FORMAT, "package": tracer.__version__, "tracer_sources": _sources_digest(),
            "python": platform.python_version(), "torch": _version("torch"),
            "transformers": _version("transformers"), "config_path": str(path),
            "config_sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "input_shape": list(input_shape)}


def entry_folder(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir() / f"default-{digest}"


@dataclass(frozen=True)
class Lookup:
    """What `read` found: the trace when the entry holds, else why not (`reason`: None when there is no entry)."""

    folder: Path
    trace: Any = None
    reason: str | None = None
    captured_at: str | None = None


def read(key: dict[str, Any]) -> Lookup:
    """The entry for `key`, checked fail-closed; any mismatch answers its reason instead of a trace."""
    folder = entry_folder(key)
    if not folder.exists() and not folder.is_symlink():
        return Lookup(folder)
    try:
        if folder.is_symlink() or not folder.is_dir():
            return Lookup(folder, reason="the entry is not a plain folder")
        entry = json.loads(bytes(read_capped(folder / ENTRY_FILE, ENTRY_CAP)).decode("utf-8"))
    except (TracerError, ValueError, OSError) as exc:
        return Lookup(folder, reason=f"its {ENTRY_FILE} is unreadable ({getattr(exc, 'code', type(exc).__name__)})")
    if not isinstance(entry, dict) or entry.get("key") != key:
        return Lookup(folder, reason=f"its {ENTRY_FILE} names another key")
    import tracer

    try:
        trace = tracer.load(str(folder / TRACE_DIR))
    except TracerError as exc:
        return Lookup(folder, reason=f"the saved trace is refused ({exc.code})")
    reason = _mismatch(trace, key, entry)
    return Lookup(folder, reason=reason) if reason else Lookup(folder, trace, captured_at=trace.provenance.captured_at)


def _mismatch(trace: Any, key: dict[str, Any], entry: dict[str, Any]) -> str | None:
    """Why the loaded trace is not the capture `key` names (None: it is)."""
    import torch

    from tracer.claims.seal import structure_digest

    prov = trace.provenance
    versions = prov.versions or {}
    if versions.get("torch") != torch.__version__ or torch.__version__ != key["torch"]:
        return f"it was captured under torch {versions.get('torch')}, this is torch {torch.__version__}"
    if versions.get("transformers") != key["transformers"]:
        return f"it was captured under transformers {versions.get('transformers')}, this is {key['transformers']}"
    if prov.config_source != key["config_path"] or not prov.structure_only:
        return "it is not a structure-only capture of this config"
    if structure_digest(trace, fresh=True) != entry.get("structure_digest"):
        return "its structure digest differs from the one recorded when it was made"
    return None


def write(key: dict[str, Any], trace: Any) -> Path:
    """Store `trace` as `key`'s entry (a stale entry is replaced); written aside, then renamed into place."""
    from tracer.claims.seal import structure_digest

    folder = entry_folder(key)
    folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        trace.save(tmp / TRACE_DIR)
        entry = {"key": key, "structure_digest": structure_digest(trace, fresh=True)}
        (tmp / ENTRY_FILE).write_text(json.dumps(entry, sort_keys=True, indent=1), encoding="utf-8")
        remove(folder)
        os.rename(tmp, folder)  # another launch that wrote it first keeps its (equal) entry
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    prune(keep=folder)
    return folder


def prune(keep: Path, entries: int = KEPT_ENTRIES) -> None:
    """Drop all but the `entries` newest entries (`keep` among them) and writes left by a killed launch."""
    now = time.time()
    found = []
    for path in keep.parent.iterdir():
        try:
            if path.name.startswith(".default-") and now - path.lstat().st_mtime > STALE_WRITE_S:
                remove(path)
            elif path.name.startswith("default-") and path != keep:
                found.append((path.lstat().st_mtime, path))
        except OSError:
            continue
    for _, path in sorted(found, reverse=True)[entries - 1:]:
        try:
            remove(path)
        except OSError:
            continue


def remove(folder: Path) -> None:
    """Delete an entry (a link is unlinked, never followed)."""
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    elif folder.exists():
        shutil.rmtree(folder)


class CachedDefault(Loaded):
    """A `Loaded` read from the start-up cache. Its meta model (and input ids) are built from the config on
    first use, on whichever thread asks first (`warm()` asks on a background thread once the page is up)."""

    def __init__(self, trace: Any, title: str, config_path: Path, input_shape: tuple[int, ...]) -> None:
        self._lock = threading.Lock()
        self._built: tuple[Any, tuple] | None = None
        super().__init__(trace, title, "config", str(config_path), config_path=config_path, input_shape=input_shape)

    def _build(self) -> tuple[Any, tuple]:
        with self._lock:
            if self._built is None:
                from tracer.bridges.transformers import build_meta_model, load_config, meta_input_ids

                from .config_check import build_checked

                path = self.config_path
                config = build_checked(path, "reading the config with transformers", lambda: load_config(str(path)))
                model = build_checked(path, "building the model on the meta device", lambda: build_meta_model(config))
                self._built = (model, (meta_input_ids(self.input_shape),))
            return self._built

    @property  # type: ignore[override]
    def model(self) -> Any:
        return self._build()[0]

    @model.setter
    def model(self, value: Any) -> None:
        if value is not None:
            raise AttributeError("a cached default's model is built from its config")

    @property  # type: ignore[override]
    def inputs(self) -> tuple:
        return self._build()[1]

    @inputs.setter
    def inputs(self, value: tuple) -> None:
        if value:
            raise AttributeError("a cached default's inputs are built from its config")

    def warm(self) -> None:
        """Build the model now (a failure is left for the Doctor or Compare to report when asked)."""
        try:
            self._build()
        except TracerError:
            pass

    def __repr__(self) -> str:
        return f"<CachedDefault {self.title!r}>"


def cached_title(trace: Any, config_path: Path, captured_at: str | None) -> str:
    """The page's title for a cached default: it says where the trace came from."""
    when = f", made {captured_at.replace('T', ' ').rstrip('Z')} UTC" if captured_at else ""
    return (f"{trace.model_class} from {config_path.name} (weights-free; read from the start-up cache: "
            f"the same capture{when})")


@dataclass(frozen=True)
class Opened:
    """The default as opened: the record to explore and one sentence on the cache (for the command to print)."""

    loaded: Loaded
    note: str


def open_default(input_shape: tuple[int, ...], step: Step, *, fresh: bool = False) -> Opened:
    """The embedded default: from the cache when a valid entry holds (and not `fresh`), else captured
    (`app.sources.open_config`) and stored for the next launch. A cache that cannot be written is noted, not fatal."""
    token_shape(input_shape)
    key = entry_key(DEFAULT_CONFIG, input_shape)
    path = Path(key["config_path"])
    found = Lookup(entry_folder(key))
    if not fresh and (found.folder.exists() or found.folder.is_symlink()):
        step("import-tracer")
        import tracer.store  # noqa: F401  (torch and the tracer: what reading the entry needs)

        step("cache")
        found = read(key)
        if found.trace is not None:
            loaded = CachedDefault(found.trace, cached_title(found.trace, path, found.captured_at), path, input_shape)
            return Opened(loaded, f"read the default from the start-up cache {found.folder} "
                                  f"(captured {found.captured_at}; torchlens-explore --fresh captures it again)")
    loaded = open_config(DEFAULT_CONFIG, input_shape, step=step)
    why = ("--fresh" if fresh else f"the cached entry was not used: {found.reason}" if found.reason
           else "no cached entry yet")
    try:
        folder = write(key, loaded.trace)
    except (OSError, TracerError) as exc:
        return Opened(loaded, f"captured the default ({why}); the start-up cache could not be written "
                              f"({getattr(exc, 'strerror', None) or exc})")
    return Opened(loaded, f"captured the default ({why}); stored in the start-up cache {folder}")


def present(input_shape: tuple[int, ...]) -> bool:
    """Whether an entry for the default on `input_shape` exists (not yet checked: `read` does that)."""
    try:
        return (entry_folder(entry_key(DEFAULT_CONFIG, input_shape)) / ENTRY_FILE).is_file()
    except (OSError, TracerError):
        return False
