"""The training state of a checkpoint as one safetensors file: tensors as tensors, the rest as typed JSON.

A checkpoint must be as safe to load as a safetensors file, so the training
state is never pickled. :func:`save_state` writes a tree of values into a
safetensors file: every tensor of the tree becomes one of the file's tensors,
named by where it sits in the tree, its keys and list positions joined by dots
(``store._extra_state.tensors.zeta/a``, ``optimizer.state.0.exp_avg``; files
written before named them ``0``, ``1``, ... in the order met, and still load:
the tree names its tensors), and the tree itself, with each
tensor replaced by a reference, is JSON text stored under ``structure`` in
the file's header metadata (with ``format`` and ``version``).
:func:`load_state` rebuilds the tree; reading it runs no code from the file,
whatever the file holds.

The tree may hold exactly these types, encoded in JSON as follows:

==========================  ====================================================
value                       JSON
==========================  ====================================================
``None``, bool, int, str    itself
finite float                itself (``1.0`` stays a float)
``nan``, ``inf``, ``-inf``  ``{"float": "nan"}``, ``{"float": "inf"}``, ...
list                        a JSON array of the encoded items
tuple (``torch.Size``)      ``{"tuple": [items]}``; read back as a tuple
dict, keys all str          ``{"dict": {key: value}}``
dict, keys str or int       ``{"items": [[key, value], ...]}`` (an optimizer's
                            state, keyed by parameter index)
tensor                      ``{"tensor": "NAME"}``, NAME a tensor of the file
==========================  ====================================================

Anything else (an arbitrary object, a NumPy array, a NumPy integer) is
refused with :class:`TypeError` naming where it sits in the tree: whoever
puts a new kind of value into the state gives it an explicit encoding into
these types first (as :mod:`uncurated.train.random_state` does for the random
generators). Subclasses are read back as their base type: an
``OrderedDict`` as a dict, a ``torch.Size`` as a tuple.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

#: The header metadata that identifies a training-state file, and the version of the encoding above.
FORMAT = "uncurated-training-state"
VERSION = "1"

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class StateFormatError(ValueError):
    """A training-state file that is not a safetensors file of this format, or whose structure is invalid."""


def save_state(state: dict[str, Any], path: Path, *, label: dict[str, str] | None = None) -> None:
    """Write the tree ``state`` into the safetensors file ``path`` (see the module for what it may hold), with
    ``label``'s entries added to the file's header metadata (what the file belongs to; never read back here)."""
    tensors: dict[str, torch.Tensor] = {}
    structure = json.dumps(_encode(state, tensors, "state", ""), allow_nan=False, separators=(",", ":"))
    save_file(tensors, path, metadata={**(label or {}), "format": FORMAT, "version": VERSION, "structure": structure})


def load_state(path: Path) -> dict[str, Any]:
    """The tree saved by :func:`save_state` in ``path``, its tensors on the CPU.

    Raises :class:`StateFormatError` when the file is not a safetensors file
    of this format and version, or its structure is not a valid encoding.
    """
    try:
        with safe_open(path, framework="pt", device="cpu") as file:
            metadata = file.metadata() or {}
            tensors = {name: file.get_tensor(name) for name in file.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        raise StateFormatError(f"{path} is not a safetensors file ({error})") from None
    if metadata.get("format") != FORMAT or metadata.get("version") != VERSION:
        raise StateFormatError(
            f"{path} is not a training-state file of version {VERSION}: its header says format "
            f"{metadata.get('format')!r}, version {metadata.get('version')!r}"
        )
    try:
        used: set[str] = set()
        state = _decode(json.loads(metadata.get("structure", "")), tensors, used)
    except (ValueError, RecursionError) as error:  # json.JSONDecodeError is a ValueError
        raise StateFormatError(f"{path} has an invalid structure: {error}") from None
    if not isinstance(state, dict):
        raise StateFormatError(f"{path} has an invalid structure: it holds a {type(state).__name__}, not a dict")
    if used != set(tensors):
        raise StateFormatError(f"{path} has tensors its structure does not use: {sorted(set(tensors) - used)}")
    return state


def _encode(value: Any, tensors: dict[str, torch.Tensor], where: str, path: str) -> Any:
    """The JSON form of ``value``, its tensors moved into ``tensors`` under names from ``path`` (its place in the
    tree, dotted); ``where`` names it in errors."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.Tensor):
        name = _unique(path or "tensor", tensors)
        tensors[name] = value.detach().cpu().contiguous()
        return {"tensor": name}

    def inner(item: Any, key: Any) -> Any:
        return _encode(item, tensors, f"{where}[{key!r}]", f"{path}.{key}" if path else str(key))

    if isinstance(value, list):
        return [inner(item, number) for number, item in enumerate(value)]
    if isinstance(value, tuple):
        return {"tuple": [inner(item, number) for number, item in enumerate(value)]}
    if isinstance(value, dict):
        if all(isinstance(key, str) for key in value):
            return {"dict": {key: inner(item, key) for key, item in value.items()}}
        if all(isinstance(key, str | int) and not isinstance(key, bool) for key in value):
            return {"items": [[key, inner(item, key)] for key, item in value.items()]}
        keys = sorted({type(key).__name__ for key in value})
        raise TypeError(f"{where} is a dict with keys of type {', '.join(keys)}; a checkpoint takes str and int keys")
    raise TypeError(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which a checkpoint cannot hold: "
        "give it an encoding into tensors, numbers, strings, lists, tuples and dicts"
    )


def _unique(name: str, taken: dict[str, torch.Tensor]) -> str:
    """``name``, or ``name#2``, ``name#3``, ... where a key holding a dot made two places spell the same path."""
    number, unique = 1, name
    while unique in taken:
        number += 1
        unique = f"{name}#{number}"
    return unique


def _decode(node: Any, tensors: dict[str, torch.Tensor], used: set[str]) -> Any:
    """The value whose JSON form is ``node``; raises ``ValueError`` on anything :func:`_encode` never writes."""
    if node is None or isinstance(node, bool | int | float | str):
        return node
    if isinstance(node, list):
        return [_decode(item, tensors, used) for item in node]
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError(f"expected a value or a one-key object, got {_show(node)}")
    ((tag, content),) = node.items()
    if tag == "float" and content in _NON_FINITE:
        return _NON_FINITE[content]
    if tag == "tensor" and isinstance(content, str) and content in tensors and content not in used:
        used.add(content)
        return tensors[content]
    if tag == "tuple" and isinstance(content, list):
        return tuple(_decode(item, tensors, used) for item in content)
    if tag == "dict" and isinstance(content, dict):
        return {key: _decode(item, tensors, used) for key, item in content.items()}
    if tag == "items" and isinstance(content, list) and all(_is_item(item) for item in content):
        return {key: _decode(item, tensors, used) for key, item in content}
    raise ValueError(f"invalid or repeated entry {_show(node)}")


def _is_item(item: Any) -> bool:
    """Whether ``item`` is a ``[key, value]`` pair of an ``items`` dict (its key a str or an int)."""
    return (
        isinstance(item, list) and len(item) == 2 and isinstance(item[0], str | int) and not isinstance(item[0], bool)
    )


def _show(node: Any) -> str:
    text = json.dumps(node)
    return text if len(text) <= 80 else text[:77] + "..."
