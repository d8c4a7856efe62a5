"""Variants for this folder's A/Bs: which earlier occurrence a copy is taken from.

- code: dynaspec as committed (under `adaptive`, the occurrence that agrees furthest back).
- leftmost: transformers' occurrence, the leftmost (dynaspec's choice before this change).

The recorded runs (misses.txt, others.txt, open-ended.txt) were made at 2f2e36a, before
the change, with the names `code` (then the leftmost occurrence) and `best` (a copy of the
longest-agreement search that is now `find_match`'s): read `code` there as `leftmost` here
and `best` as `code`.
"""

import dataclasses

from dynaspec.drafters import prompt_lookup as P

_find = P.find_match
_active = {"name": "code"}


def _find_variant(tokens, config, eos, max_agreement=P.MAX_AGREEMENT):
    if _active["name"] == "leftmost":
        config = dataclasses.replace(config, match="leftmost")
    return _find(tokens, config, eos, max_agreement)


P.find_match = _find_variant


def use(name: str) -> None:
    _active["name"] = name
