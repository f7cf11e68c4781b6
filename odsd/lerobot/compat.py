"""The one place that knows which LeRobot line is installed.

odsd supports two LeRobot lines with the same dataset format (v3.0):

- **0.5 / 0.6** (Python >= 3.12, the default): dataset code behind the ``lerobot[dataset]`` extra,
  feature helpers in ``lerobot.datasets.feature_utils``, file writers in
  ``lerobot.datasets.io_utils``, ``meta/info.json`` parsed into a typed ``DatasetInfo`` that
  warns about (and drops) any key it does not know;
- **0.4.4** (Python 3.11): everything in ``lerobot.datasets.utils``, ``info.json`` as a plain dict.

Everything else in odsd calls the functions here, never ``lerobot.datasets.*`` directly::

    from odsd.lerobot import compat

    compat.require()                   # ConfigError naming the extra when LeRobot is missing
    features = compat.hf_features(meta.features)
    compat.write_info(info_dict, root)

Functions are looked up on this module at call time, so a test can monkeypatch one of them
(``monkeypatch.setattr(compat, "write_stats", boom)``) on either line.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from odsd.errors import ConfigError

INSTALL_HINT = (
    "pip install 'odsd[lerobot]': lerobot[dataset] 0.6 on Python >= 3.12, or lerobot 0.4.4 on Python 3.11"
)
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"


def version() -> str | None:
    """The installed LeRobot version, or None when LeRobot is not installed."""
    try:
        return importlib.metadata.version("lerobot")
    except importlib.metadata.PackageNotFoundError:
        return None


def typed_info() -> bool:
    """True on the lines (>= 0.5) whose ``meta.info`` is a ``DatasetInfo`` dataclass."""
    return _module("lerobot.datasets.utils", "DatasetInfo") is not None


@cache
def _module(name: str, attribute: str) -> ModuleType | None:
    """``name`` if it imports and has ``attribute``, else None."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    return module if hasattr(module, attribute) else None


def _find(attribute: str, *modules: str) -> Any:
    for name in modules:
        module = _module(name, attribute)
        if module is not None:
            return getattr(module, attribute)
    require()
    raise ConfigError(f"lerobot {version()} has no {attribute} in {' or '.join(modules)}; {INSTALL_HINT}")


def require() -> None:
    """Raise a one-line ConfigError unless LeRobot's dataset code can be imported."""
    try:
        importlib.import_module("lerobot.datasets.lerobot_dataset")
    except ImportError as exc:
        installed = version()
        what = f"lerobot {installed} without its dataset code ({exc})" if installed else "lerobot is missing"
        raise ConfigError(f"this needs LeRobot's dataset code, but {what}; {INSTALL_HINT}") from exc


def hf_features(features: dict[str, dict]) -> Any:
    """``datasets.Features`` for LeRobot ``features`` (shapes as tuples), as LeRobot's writer makes them."""
    convert = _find(
        "get_hf_features_from_features", "lerobot.datasets.feature_utils", "lerobot.datasets.utils"
    )
    return convert({k: {**v, "shape": tuple(v["shape"])} for k, v in features.items()})


def write_info(info: dict[str, Any], root: Path) -> None:
    """Write ``meta/info.json``; on the typed lines ``info`` must hold only ``DatasetInfo`` fields."""
    writer = _find("write_info", "lerobot.datasets.io_utils", "lerobot.datasets.utils")
    if typed_info():
        dataset_info = _find("DatasetInfo", "lerobot.datasets.utils")
        unknown = sorted(set(info) - set(dataset_info.__dataclass_fields__))
        if unknown:
            raise ValueError(f"info.json fields LeRobot {version()} would drop: {unknown}")
        writer(dataset_info.from_dict(info), root)
    else:
        writer(info, root)


def write_stats(stats: Any, root: Path) -> None:
    """Write ``meta/stats.json`` with LeRobot's serializer."""
    _find("write_stats", "lerobot.datasets.io_utils", "lerobot.datasets.utils")(stats, root)


def write_tasks(tasks: Any, root: Path) -> None:
    """Write ``meta/tasks.parquet`` (a DataFrame indexed by task with a ``task_index`` column)."""
    _find("write_tasks", "lerobot.datasets.io_utils", "lerobot.datasets.utils")(tasks, root)


def info_dict(info: Any) -> dict[str, Any]:
    """A loaded dataset's ``meta.info`` as the JSON it was read from, whichever line loaded it."""
    plain = info.to_dict() if hasattr(info, "to_dict") else dict(info)
    return json.loads(json.dumps(plain))  # shapes: tuples on load, lists in info.json


def policy_features(features: dict[str, dict]) -> Any:
    """LeRobot's ``dataset_to_policy_features``: dataset features → policy features (cameras VISUAL)."""
    convert = _find(
        "dataset_to_policy_features",
        "lerobot.utils.feature_utils",
        "lerobot.datasets.feature_utils",
        "lerobot.datasets.utils",
    )
    return convert(features)


def video_backend() -> str:
    """The video decoder ``LeRobotDataset`` uses here: ``torchcodec`` when it loads, else ``pyav``.

    LeRobot 0.6 makes that choice itself (``get_safe_default_video_backend``); 0.4.4 picks
    torchcodec whenever it is installed, even when its FFmpeg libraries are missing and it cannot
    load, so pass this as ``video_backend=`` there.
    """
    pick = _find_optional("get_safe_default_video_backend", "lerobot.utils.import_utils")
    if pick is not None:
        return pick()
    try:
        importlib.import_module("torchcodec")
    except (ImportError, OSError, RuntimeError):
        return "pyav"
    return "torchcodec"


def _find_optional(attribute: str, *modules: str) -> Any:
    for name in modules:
        module = _module(name, attribute)
        if module is not None:
            return getattr(module, attribute)
    return None
